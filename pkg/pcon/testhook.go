package pcon

import (
	"github.com/loopers/commerce-pipeline/pkg/pcon/internal/engine"
	"github.com/loopers/commerce-pipeline/pkg/pcon/internal/testhook"
)

// The tests in another module reach the Consumer through testhook: they
// cannot see this package's unexported names, and an exported lever would
// be API.
func init() {
	testhook.ShareWorkers = func(c any) {
		c.(*Consumer).engine.(*engine.PerRecord).SetMode(engine.Shared)
	}
}
