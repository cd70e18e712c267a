package telemetry_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/loopers/commerce-pipeline/internal/telemetry"
)

// receiver is an OTLP/HTTP trace receiver: it decodes every export request
// and hands the span names, by service, to spans.
func receiver(t *testing.T, spans chan<- map[string][]string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "want a protobuf POST to /v1/traces", http.StatusBadRequest)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var req collectortrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		got := map[string][]string{}
		for _, rs := range req.GetResourceSpans() {
			service := ""
			for _, a := range rs.GetResource().GetAttributes() {
				if a.GetKey() == "service.name" {
					service = a.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					got[service] = append(got[service], s.GetName())
				}
			}
		}
		resp, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(resp)
		spans <- got
	}))
	t.Cleanup(srv.Close)
	return srv
}

func lookup(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

// TestSetup sets up tracing the way every binary does: first without an
// endpoint (nothing installed), then exporting over OTLP/HTTP to a receiver
// in this process, which reads the spans back. Setup installs the global
// tracer provider, so the steps run in order, and alone.
//
//nolint:paralleltest // Setup changes the process's global tracer provider.
func TestSetup(t *testing.T) {
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

	spans := make(chan map[string][]string, 10)
	srv := receiver(t, spans)
	shutdown, err := telemetry.Setup(ctx, "svc", lookup(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL}))
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
	got := <-spans
	if diff := cmp.Diff(map[string][]string{"svc": {"create like-events", "request"}}, got); diff != "" {
		t.Errorf("spans received (-want +got):\n%s", diff)
	}
}
