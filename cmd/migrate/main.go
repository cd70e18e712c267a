// Command migrate applies the embedded schema migrations to DATABASE_URL.
//
// It waits for the database first: on a fresh volume, and in a pod starting
// next to its database, the server refuses connections (or answers "the
// database system is starting up") for a while, and a migration that gave
// up at once would stop the whole stack. Concurrent runs (one init container
// per pod) serialize on a PostgreSQL advisory lock.
package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/loopers/commerce-pipeline/db/migrations"
	"github.com/loopers/commerce-pipeline/internal/config"
)

// Config is migrate's configuration, read from the environment.
type Config struct {
	DatabaseURL string // DATABASE_URL, required
	// ConnectTimeout (MIGRATE_CONNECT_TIMEOUT, default 60s) is how long to
	// keep retrying the first connection.
	ConnectTimeout time.Duration
}

// LoadConfig reads and validates the configuration; the error names every
// variable that is wrong.
func LoadConfig(lookup func(string) (string, bool)) (Config, error) {
	l := config.New(lookup)
	c := Config{
		DatabaseURL:    l.URL("DATABASE_URL", "postgres", "postgresql"),
		ConnectTimeout: l.Duration("MIGRATE_CONNECT_TIMEOUT", 60*time.Second),
	}
	return c, l.Err()
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if err := run(ctx, logger); err != nil {
		logger.Error("migrate failed", "err", err)
		os.Exit(1)
	}
	logger.Info("migrations applied")
}

func run(ctx context.Context, logger *slog.Logger) error {
	cfg, err := LoadConfig(os.LookupEnv)
	if err != nil {
		return err
	}
	if err := migrations.WaitReady(ctx, cfg.DatabaseURL, cfg.ConnectTimeout, func(attempt int, err error) {
		logger.Warn("database not ready; retrying", "attempt", attempt, "err", err)
	}); err != nil {
		return err
	}
	return migrations.Up(ctx, cfg.DatabaseURL)
}
