// Command product-consumers runs the product aggregation consumer groups.
// See internal/app for what it does and internal/app/config.go for its
// environment.
package main

import (
	"context"
	"log/slog"

	"github.com/loopers/commerce-pipeline/internal/service"
	"github.com/loopers/commerce-pipeline/services/product-consumers/internal/app"
)

func main() {
	service.Main("product-consumers", app.Load, func(ctx context.Context, cfg app.Config, logger *slog.Logger) error {
		return app.Run(ctx, cfg, logger, nil)
	})
}
