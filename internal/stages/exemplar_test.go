package stages_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/loopers/commerce-pipeline/internal/httpserver"
	"github.com/loopers/commerce-pipeline/internal/stages"
	"github.com/loopers/commerce-pipeline/internal/telemetry/telemetrytest"
)

// TestExemplars: an observation inside a sampled span is its bucket's
// exemplar, with the span's trace id, on the admin listener's /metrics in
// OpenMetrics; one of an unsampled span, or without a span, has none.
func TestExemplars(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	rec, err := stages.NewRecorder(reg, []string{"loopers.like.created.v1"}, stages.Broker, stages.Apply)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	httpserver.Ops(mux, reg, nil)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	sampled := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	unsampled := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
	t.Cleanup(func() { _ = sampled.Shutdown(context.Background()); _ = unsampled.Shutdown(context.Background()) })
	_, in := sampled.Tracer("test").Start(context.Background(), "request")
	in.End()
	_, out := unsampled.Tracer("test").Start(context.Background(), "request")
	out.End()
	if !out.SpanContext().IsValid() || out.SpanContext().IsSampled() {
		t.Fatalf("the unsampled span's context: %v", out.SpanContext())
	}

	const like = "loopers.like.created.v1"
	rec.ObserveTraced(stages.Apply, like, 1200*time.Microsecond, in.SpanContext())  // le 0.0015
	rec.ObserveTraced(stages.Apply, like, 7*time.Millisecond, out.SpanContext())    // le 0.008: no exemplar
	rec.ObserveTraced(stages.Broker, like, 3*time.Millisecond, trace.SpanContext{}) // le 0.003: none
	rec.Observe(stages.Broker, like, 20*time.Millisecond)                           // le 0.02: none

	want := map[string]string{"apply " + like + " 0.0015": in.SpanContext().TraceID().String()}
	if diff := cmp.Diff(want, telemetrytest.Exemplars(t, srv.URL+"/metrics")); diff != "" {
		t.Errorf("exemplars by bucket (-want +got):\n%s", diff)
	}
}
