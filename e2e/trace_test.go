package e2e

import (
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/loopers/commerce-pipeline/internal/eventcontract"
	"github.com/loopers/commerce-pipeline/internal/telemetry/telemetrytest"
	"github.com/loopers/commerce-pipeline/internal/testenv"
)

// TestTraceOfALike runs the three services with OTLP export to a receiver in
// this process, likes a product, and reads the trace back: the request's
// server span, its one create span, whose context the like's record
// carried to the like consumer, whose process span links to it, with the
// aggregate's transaction under that. The relay's outbox wait and the
// consumer's wait between fetch and handler are under the create span. The
// record's traceparent and ce_traceparent are the stored column's, the
// create span's. It logs the trace with its durations.
func TestTraceOfALike(t *testing.T) {
	t.Parallel()
	rcv := telemetrytest.NewReceiver(t)
	otel := exportingTo(rcv)
	s := newSystemOn(t, kafkaSetup{ServiceEnv: map[string]map[string]string{
		"commerce-api": otel, "outbox-relay": otel, "product-consumers": otel,
	}})
	s.startRelay("relay-a")
	s.startConsumers()
	var p struct{ ID int64 }
	if st := s.call("POST", "/products", "", map[string]any{"name": "p", "price": 100, "stock": 5}, &p); st != http.StatusCreated {
		t.Fatalf("create product: %d", st)
	}
	s.expect(s.call("POST", "/products/"+strconv.FormatInt(p.ID, 10)+"/likes", "alice", nil, nil), http.StatusOK)

	const route = "POST /api/v1/products/{id}/likes"
	var (
		request, create telemetrytest.Span
		process         []telemetrytest.Span
		spans           []telemetrytest.Span
	)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		spans = rcv.Spans()
		for _, sp := range spans {
			if sp.Name == route {
				request = sp
			}
		}
		var creates []telemetrytest.Span
		process = nil
		for _, sp := range spans {
			if sp.TraceID == request.TraceID && sp.Name == "create like-events" {
				creates = append(creates, sp)
			}
		}
		if len(creates) == 1 {
			create = creates[0]
			for _, sp := range spans {
				if sp.Service == "product-consumers" && slices.Contains(sp.Links, create.SpanID) {
					process = append(process, sp)
				}
			}
		}
		if len(process) > 0 && len(children(spans, process[0])) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the like's trace did not arrive: request %+v, create %+v, %d spans", request, create, len(spans))
		}
	}
	if request.Service != "commerce-api" || request.ParentID != "" || create.ParentID != request.SpanID {
		t.Errorf("request %+v, create %+v: want commerce-api's root server span with the create span under it", request, create)
	}
	if len(process) != 1 || process[0].Name != "process "+s.topic("like-events") || len(process[0].Links) != 1 {
		t.Errorf("process spans linked to the create span: %+v, want one, of the like topic, with its one link", process)
	}
	if got := children(spans, process[0]); !slices.ContainsFunc(got, func(c telemetrytest.Span) bool { return c.Name == "aggregate likes" }) {
		t.Errorf("the process span's children %+v lack the aggregate's transaction", got)
	}
	// The like's wait between its fetch and its handler is in the request's
	// trace, under the create span, beside the relay's outbox wait.
	var under []string
	for _, c := range children(spans, create) {
		if c.Service != "commerce-api" { // its statement, WITH
			under = append(under, c.Service+": "+c.Name)
		}
	}
	slices.Sort(under)
	if want := []string{"outbox-relay: outbox wait like-events", "product-consumers: wait " + s.topic("like-events")}; !cmp.Equal(want, under) {
		t.Errorf("spans under the create span: %v, want %v", under, want)
	}
	// The record carries the stored context unchanged, in both header
	// forms, and is still what the contract says.
	stored := telemetrytest.StoredTraceParent(t, s.dbURL, "loopers.like.created.v1")
	h := testenv.Headers(testenv.ReadTopic(t, s.kafka.Brokers, s.topic("like-events"), 1, 30*time.Second)[0])
	created := "00-" + create.TraceID + "-" + create.SpanID + "-01"
	if diff := cmp.Diff([]string{created, created, created}, []string{stored, h["traceparent"], h["ce_traceparent"]}); diff != "" {
		t.Errorf("create span's context, stored, traceparent, ce_traceparent (-want +got):\n%s", diff)
	}
	c, err := eventcontract.Default()
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := c.Message("loopers.like.created.v1")
	if err := msg.CheckHeaders(h); err != nil {
		t.Error(err)
	}
	// The trace of one like, as an operator sees it.
	logTree(t, spans, request, "")
	t.Logf("linked from %s:", create.Name)
	for _, pr := range process {
		logTree(t, spans, pr, "  ")
	}
}

// exportingTo is the environment of a service that traces to rcv, every
// 100 ms instead of every 5 s, with extra.
func exportingTo(rcv *telemetrytest.Receiver, extra ...string) map[string]string {
	env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": rcv.URL, "OTEL_BSP_SCHEDULE_DELAY": "100"}
	for i := 0; i+1 < len(extra); i += 2 {
		env[extra[i]] = extra[i+1]
	}
	return env
}

// children returns the spans whose parent is p.
func children(spans []telemetrytest.Span, p telemetrytest.Span) []telemetrytest.Span {
	var out []telemetrytest.Span
	for _, s := range spans {
		if s.ParentID == p.SpanID && s.TraceID == p.TraceID {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b telemetrytest.Span) int { return a.Start.Compare(b.Start) })
	return out
}

// logTree logs s and its descendants with their services and durations.
func logTree(t *testing.T, spans []telemetrytest.Span, s telemetrytest.Span, indent string) {
	t.Helper()
	t.Logf("%s%s [%s] %s", indent, s.Name, s.Service, s.End.Sub(s.Start))
	for _, c := range children(spans, s) {
		logTree(t, spans, c, indent+"  ")
	}
}
