// Command product-consumers runs the product aggregation consumer groups.
// See internal/app for what it does and internal/app/config.go for its
// environment.
package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/loopers/commerce-pipeline/services/product-consumers/internal/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewJSONHandler(os.Stdout, nil))
	if err := run(ctx, logger); err != nil {
		logger.Error("product-consumers failed", "err", err)
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
