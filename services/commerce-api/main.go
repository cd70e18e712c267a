// Command commerce-api serves the commerce REST API: catalog, likes, orders
// and payments, writing every state change together with its outbox events.
package main

import (
	"context"
	"log/slog"

	"github.com/loopers/commerce-pipeline/internal/service"
	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/app"
)

func main() {
	service.Main("commerce-api", app.Load, func(ctx context.Context, cfg app.Config, logger *slog.Logger) error {
		return app.Run(ctx, cfg, logger, nil)
	})
}
