package telemetry_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/loopers/commerce-pipeline/internal/telemetry"
	"github.com/loopers/commerce-pipeline/internal/telemetry/telemetrytest"
)

func lookup(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

// TestSetup sets up tracing the way every binary does: first without an
// endpoint (nothing installed), then exporting over OTLP/HTTP to a receiver
// in this process, which reads the spans back. Setup installs the global
// tracer provider, so the steps run in order, and alone, from tracing off
// (telemetry.Off), and the provider goes when the test ends.
//
//nolint:paralleltest // Setup changes the process's global tracer provider.
func TestSetup(t *testing.T) {
	telemetry.Off(t)
	ctx := context.Background()
	for _, vars := range []map[string]string{
		{},
		{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"},
	} {
		shutdown, err := telemetry.Setup(ctx, "svc", lookup(vars))
		if err != nil {
			t.Fatalf("Setup(%v): %v", vars, err)
		}
		if telemetry.Enabled() {
			t.Fatalf("Setup(%v) enabled tracing", vars)
		}
		_, span := telemetry.Tracer().Start(ctx, "off")
		if span.IsRecording() || span.SpanContext().IsValid() {
			t.Errorf("Setup(%v): a span records or has a context: %+v", vars, span.SpanContext())
		}
		if err := shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	}
	if _, err := telemetry.Setup(ctx, "svc", lookup(map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json",
	})); err == nil {
		t.Error("Setup took an unsupported protocol")
	}

	rcv := telemetrytest.NewReceiver(t)
	shutdown, err := telemetry.Setup(ctx, "svc", lookup(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": rcv.URL}))
	if err != nil {
		t.Fatalf("Setup: %v", err)
	}
	if !telemetry.Enabled() {
		t.Fatal("an endpoint did not enable tracing")
	}
	pctx, parent := telemetry.Tracer().Start(ctx, "request")
	_, child := telemetry.StartCreate(pctx, "like-events", "e1", "42")
	child.End()
	parent.End()
	if err := shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	// Shutdown flushed the spans: they have arrived.
	got := map[string][]string{}
	for _, s := range rcv.Spans() {
		got[s.Service] = append(got[s.Service], s.Name)
	}
	if diff := cmp.Diff(map[string][]string{"svc": {"create like-events", "request"}}, got); diff != "" {
		t.Errorf("spans received (-want +got):\n%s", diff)
	}
}
