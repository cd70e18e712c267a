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
	"time"

	"github.com/loopers/commerce-pipeline/db/migrations"
	"github.com/loopers/commerce-pipeline/internal/config"
	"github.com/loopers/commerce-pipeline/internal/logkey"
	"github.com/loopers/commerce-pipeline/internal/service"
)

// Config is migrate's configuration, read from the environment.
type Config struct {
	DatabaseURL string // DATABASE_URL, required
	// ConnectTimeout (MIGRATE_CONNECT_TIMEOUT, default 60s) is how long to
	// keep retrying the first connection.
	ConnectTimeout time.Duration
}

func load(l *config.Loader) Config {
	return Config{
		DatabaseURL:    l.URL("DATABASE_URL", "postgres", "postgresql"),
		ConnectTimeout: l.Duration("MIGRATE_CONNECT_TIMEOUT", 60*time.Second),
	}
}

func main() {
	service.Main("migrate", load, func(ctx context.Context, cfg Config, logger *slog.Logger) error {
		if err := migrations.WaitReady(ctx, cfg.DatabaseURL, cfg.ConnectTimeout, func(attempt int, err error) {
			logger.Warn("database not ready; retrying", "attempt", attempt, logkey.Err, err)
		}); err != nil {
			return err
		}
		if err := migrations.Up(ctx, cfg.DatabaseURL); err != nil {
			return err
		}
		logger.Info("migrations applied")
		return nil
	})
}
