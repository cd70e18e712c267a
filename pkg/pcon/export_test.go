package pcon

import "github.com/loopers/commerce-pipeline/pkg/pcon/internal/engine"

// ShareWorkers makes c's RecordHandler engine share workers among records,
// as it does on its own for fast handlers, so that tests hold that mode to
// pcon's guarantees whatever their handlers take.
func ShareWorkers(c *Consumer) {
	c.engine.(*engine.PerRecord).SetMode(engine.Shared)
}
