// Command kafkajars resolves the jars of the Apache Kafka broker that the
// tests, the benchmarks, `make kafka` and `make dev KAFKA=real` run
// (internal/kafkabroker) into their cache, and prints the classpath.
// scripts/testenv.sh runs it so that the download (once per pinned release)
// happens before the tests, not under a test's timeout. Runs that overlap,
// here or in test binaries, wait for one resolution (a file lock).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/loopers/commerce-pipeline/internal/kafkabroker"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "kafkajars:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dir, err := kafkabroker.CacheDir()
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, "libs")); err != nil {
		// The one slow run: say what the wait is.
		fmt.Fprintf(os.Stderr, "kafkajars: resolving Apache Kafka %s from Maven Central into %s (once)\n", kafkabroker.Version, dir)
	}
	cp, err := kafkabroker.Classpath(ctx)
	if err != nil {
		return err
	}
	fmt.Println(cp)
	return nil
}
