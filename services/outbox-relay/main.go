// Command outbox-relay publishes the outbox table to Kafka as CloudEvents, in
// order and without loss, while it holds the relay's leader lease. See
// internal/app for what it runs and internal/relay/config.go for its
// environment.
package main

import (
	"context"
	"log/slog"

	"github.com/loopers/commerce-pipeline/internal/service"
	"github.com/loopers/commerce-pipeline/services/outbox-relay/internal/app"
	"github.com/loopers/commerce-pipeline/services/outbox-relay/internal/relay"
)

func main() { service.Main("outbox-relay", relay.Load, run) }

func run(ctx context.Context, cfg relay.Config, logger *slog.Logger) error {
	return app.Run(ctx, cfg, logger, nil)
}
