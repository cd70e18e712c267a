package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/loopers/commerce-pipeline/internal/config"
)

// TestRunRefusesBadConfiguration: the process stops before touching anything
// and the error names the variable.
func TestRunRefusesBadConfiguration(t *testing.T) {
	env := map[string]string{
		"DATABASE_URL":            "postgres://localhost:1/none",
		"KAFKA_BROKERS":           "localhost:1",
		"OUTBOX_RELAY_BATCH_SIZE": "-3",
	}
	err := run(context.Background(), slog.New(slog.NewJSONHandler(io.Discard, nil)), config.FromMap(env))
	if err == nil || !strings.Contains(err.Error(), "OUTBOX_RELAY_BATCH_SIZE") {
		t.Fatalf("run: %v, want an error naming OUTBOX_RELAY_BATCH_SIZE", err)
	}
}
