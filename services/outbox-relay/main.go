// Command outbox-relay publishes the outbox table to Kafka as CloudEvents, in
// order and without loss, while it holds the relay's leader lease. See
// internal/app for what it runs and internal/app/config.go for its
// environment.
package main

import (
	"context"
	"log/slog"

	"github.com/loopers/commerce-pipeline/internal/service"
	"github.com/loopers/commerce-pipeline/services/outbox-relay/internal/app"
)

func main() {
	service.Main("outbox-relay", app.Load, func(ctx context.Context, cfg app.Config, logger *slog.Logger) error {
		return app.Run(ctx, cfg, logger, nil)
	})
}
