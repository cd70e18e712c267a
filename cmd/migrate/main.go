// Command migrate applies the embedded schema migrations to DATABASE_URL.
package main

import (
	"context"
	"log/slog"

	"github.com/loopers/commerce-pipeline/db/migrations"
	"github.com/loopers/commerce-pipeline/internal/config"
	"github.com/loopers/commerce-pipeline/internal/service"
)

func main() {
	service.Main("migrate", load, func(ctx context.Context, databaseURL string, logger *slog.Logger) error {
		if err := migrations.Up(ctx, databaseURL); err != nil {
			return err
		}
		logger.Info("migrations applied")
		return nil
	})
}

// load reads DATABASE_URL, the database to migrate.
func load(l *config.Loader) string { return l.URL("DATABASE_URL", "postgres", "postgresql") }
