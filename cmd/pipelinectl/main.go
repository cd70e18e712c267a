// Command pipelinectl is the operators' tool for what the pipeline parks:
// dead-lettered records (`dlt list`, `dlt redrive`), events the relay gave up
// on (`outbox failed list`, `outbox failed redrive`), and the relay's state
// (`outbox status`). It reads DATABASE_URL and KAFKA_BROKERS like the
// services. Run `pipelinectl help` for the commands; exit codes are in
// cli.go.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], env{lookup: os.LookupEnv, stdout: os.Stdout, stderr: os.Stderr})
	stop()
	os.Exit(code)
}
