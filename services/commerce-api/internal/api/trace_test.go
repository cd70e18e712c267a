package api_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/loopers/commerce-pipeline/internal/telemetry"
	"github.com/loopers/commerce-pipeline/internal/telemetry/telemetrytest"
)

// TestTraceOfALike: a like sent with a caller's traceparent is a server
// span named by its route template, in the caller's trace; its outbox row
// has exactly one create span under it, whose context the row stores, and
// the statement writing the row is a database span under that. The
// response's traceresponse header names the server span.
func TestTraceOfALike(t *testing.T) {
	t.Parallel()
	telemetrytest.Recorder()
	e := newEnv(t)
	p := e.createProduct(t, "mug", 9000, 3)
	// As commerce-api serves it with tracing on (app.Run).
	e.srv = httptest.NewServer(telemetry.HTTPHandler(e.srv.Config.Handler))
	t.Cleanup(e.srv.Close)

	_, caller := telemetry.Tracer().Start(context.Background(), "caller")
	caller.End()
	sc := caller.SpanContext()
	h := jsonHeaders(http.MethodPost, "alice", "")
	h.Set("traceparent", fmt.Sprintf("00-%s-%s-01", sc.TraceID(), sc.SpanID()))
	resp := e.send(t, http.MethodPost, fmt.Sprintf("/api/v1/products/%d/likes", p), h, "")
	decode[likeBody](t, resp, http.StatusOK)

	spans := telemetrytest.Ended(telemetrytest.InTrace(sc.TraceID()))
	byParent := map[trace.SpanID][]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byParent[s.Parent().SpanID()] = append(byParent[s.Parent().SpanID()], s)
	}
	servers := byParent[sc.SpanID()]
	if len(servers) != 1 {
		t.Fatalf("%d spans under the caller's, want the server span", len(servers))
	}
	server := servers[0]
	route := ""
	for _, kv := range server.Attributes() {
		if kv.Key == "http.route" {
			route = kv.Value.AsString()
		}
	}
	var creates []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == "create like-events" {
			creates = append(creates, s)
		}
	}
	if len(creates) != 1 {
		t.Fatalf("%d create spans in the request's trace, want 1", len(creates))
	}
	create := creates[0]
	stored := telemetrytest.StoredTraceParent(t, e.url, "loopers.like.created.v1")
	got := map[string]any{
		"server":          []any{server.Name(), server.SpanKind().String(), route},
		"create parent":   create.Parent().SpanID() == server.SpanContext().SpanID(),
		"create kind":     create.SpanKind().String(),
		"stored":          stored,
		"statement spans": len(byParent[create.SpanContext().SpanID()]),
		"traceresponse":   resp.Header.Get("traceresponse"),
	}
	want := map[string]any{
		"server":          []any{"POST /api/v1/products/{id}/likes", "server", "/api/v1/products/{id}/likes"},
		"create parent":   true,
		"create kind":     "producer",
		"stored":          fmt.Sprintf("00-%s-%s-01", create.SpanContext().TraceID(), create.SpanContext().SpanID()),
		"statement spans": 1,
		// The response names the server span, for the live page's link.
		"traceresponse": fmt.Sprintf("00-%s-%s-01", server.SpanContext().TraceID(), server.SpanContext().SpanID()),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the like's trace (-want +got):\n%s", diff)
	}
	for _, s := range byParent[create.SpanContext().SpanID()] {
		if v, _ := attrValue(s.Attributes(), "db.system.name"); v != "postgresql" {
			t.Errorf("statement span %q has db.system.name %q", s.Name(), v)
		}
	}
}

func attrValue(kvs []attribute.KeyValue, key attribute.Key) (string, bool) {
	for _, kv := range kvs {
		if kv.Key == key {
			return kv.Value.String(), true
		}
	}
	return "", false
}
