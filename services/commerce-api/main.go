// Command commerce-api serves the commerce REST API: catalog, likes, orders
// and payments, writing every state change together with its outbox events.
package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if err := run(ctx, logger); err != nil {
		logger.Error("commerce-api failed", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, logger *slog.Logger) error {
	cfg, err := app.LoadConfig(os.LookupEnv)
	if err != nil {
		return err
	}
	return app.Run(ctx, cfg, logger, nil)
}
