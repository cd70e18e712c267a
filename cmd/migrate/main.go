// Command migrate applies the embedded schema migrations to DATABASE_URL.
package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/loopers/commerce-pipeline/db/migrations"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if err := run(ctx); err != nil {
		logger.Error("migrate failed", "err", err)
		os.Exit(1)
	}
	logger.Info("migrations applied")
}

func run(ctx context.Context) error {
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		return errors.New("DATABASE_URL is required")
	}
	return migrations.Up(ctx, url)
}
