package main

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/loopers/commerce-pipeline/internal/config"
	"github.com/loopers/commerce-pipeline/internal/service"
	"github.com/loopers/commerce-pipeline/services/outbox-relay/internal/relay"
)

// TestRunRefusesBadConfiguration: the process stops before touching anything
// and the error names the variable.
func TestRunRefusesBadConfiguration(t *testing.T) {
	env := map[string]string{
		"DATABASE_URL":            "postgres://localhost:1/none",
		"KAFKA_BROKERS":           "localhost:1",
		"OUTBOX_RELAY_BATCH_SIZE": "-3",
	}
	var stderr strings.Builder
	code := service.Run(context.Background(), "outbox-relay", nil, config.FromMap(env), io.Discard, &stderr, relay.Load, run)
	if code == 0 || !strings.Contains(stderr.String(), "OUTBOX_RELAY_BATCH_SIZE") {
		t.Fatalf("exit %d, log %q; want a failure naming OUTBOX_RELAY_BATCH_SIZE", code, stderr.String())
	}
}
