// Command pipelinectl is the operators' tool for what the pipeline parks:
// dead-lettered records (`dlt list`, `dlt redrive`), events the relay gave up
// on (`outbox failed list`, `outbox failed redrive`), the relay's state
// (`outbox status`), and the cluster view (`cluster`). It reads DATABASE_URL and KAFKA_BROKERS like the
// services, and the standard OTEL_* variables: with an endpoint set, each
// command is a trace of its own. Run `pipelinectl help` for the commands;
// exit codes are in cli.go.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/loopers/commerce-pipeline/internal/telemetry"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// Tracing is the operator's aid, never a reason to refuse a command.
	shutdown, err := telemetry.Setup(ctx, "pipelinectl", os.LookupEnv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pipelinectl: tracing off:", err)
		shutdown = func(context.Context) error { return nil }
	}
	ctx, span := telemetry.Tracer().Start(ctx, "pipelinectl "+spanName(os.Args[1:]))
	code := run(ctx, os.Args[1:], env{lookup: os.LookupEnv, stdout: os.Stdout, stderr: os.Stderr})
	span.End()
	flush, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	if err := shutdown(flush); err != nil {
		fmt.Fprintln(os.Stderr, "pipelinectl: spans lost:", err)
	}
	cancel()
	stop()
	os.Exit(code)
}

// spanName is the command words of args, up to the first flag or at most
// three words: the span's name, without the flags' values.
func spanName(args []string) string {
	var words []string
	for _, a := range args {
		if strings.HasPrefix(a, "-") || len(words) == 3 {
			break
		}
		words = append(words, a)
	}
	return strings.Join(words, " ")
}
