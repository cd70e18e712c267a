// Command outbox-relay publishes the outbox table to Kafka as CloudEvents, in
// order and without loss, while it holds the relay's leader lease.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/loopers/commerce-pipeline/internal/httpserver"
	"github.com/loopers/commerce-pipeline/pkg/events"
	"github.com/loopers/commerce-pipeline/services/outbox-relay/internal/publisher"
	"github.com/loopers/commerce-pipeline/services/outbox-relay/internal/relay"
	"github.com/loopers/commerce-pipeline/services/outbox-relay/internal/store"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewJSONHandler(os.Stdout, nil))
	if _, set := os.LookupEnv("GOGC"); !set {
		// The CloudEvents mapping allocates a lot per record while the live
		// heap stays small (a few batches): collecting less often buys
		// drain throughput for a few MB of memory.
		debug.SetGCPercent(400)
	}
	if err := run(ctx, logger, os.LookupEnv); err != nil {
		logger.Error("outbox-relay stopped", "error", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, logger *slog.Logger, lookup func(string) (string, bool)) error {
	cfg, err := relay.LoadConfig(lookup)
	if err != nil {
		return err
	}
	st, err := store.Open(ctx, cfg.DatabaseURL, cfg.DB)
	if err != nil {
		return err
	}
	defer st.Close()
	pub, err := publisher.New(cfg.Brokers, cfg.SendTimeout, events.NewRegistry(), logger)
	if err != nil {
		return err
	}
	defer func() {
		if err := pub.Close(); err != nil {
			logger.Warn("close Kafka producer", "error", err)
		}
	}()
	svc, err := relay.NewService(cfg, logger, st, pub)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	httpErr := make(chan error, 1)
	go func() {
		err := httpserver.Serve(ctx, logger, httpserver.New(cfg.AdminAddr, svc.Handler()), nil)
		cancel() // without its admin endpoint the node is not operable: stop it
		httpErr <- err
	}()
	runErr := svc.Run(ctx)
	cancel()
	if err := <-httpErr; err != nil {
		runErr = errors.Join(runErr, fmt.Errorf("admin server: %w", err))
	}
	return runErr
}
