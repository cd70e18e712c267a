package app_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/loopers/commerce-pipeline/internal/telemetry"
	"github.com/loopers/commerce-pipeline/internal/telemetry/telemetrytest"
	"github.com/loopers/commerce-pipeline/pkg/events"
)

// TestTraceOfEvents follows events created under one request's trace
// through the consumers on Apache Kafka: an order's processing links to its
// creation context and has the aggregate's transaction (with its
// statements) and the cache invalidation as children; the same event again
// is marked as a skipped duplicate; a forged like is dead-lettered with its
// context and a send span to the dead-letter topic linked to it.
func TestTraceOfEvents(t *testing.T) {
	t.Parallel()
	telemetrytest.Recorder()
	f := newFixture(t)
	event := f.event(t)
	ctx, request := telemetry.Tracer().Start(context.Background(), "request")
	// traced adds to pm the context of a create span of its own, as the
	// relay publishes it, and returns that context.
	traced := func(pm *sarama.ProducerMessage) trace.SpanContext {
		cctx, span := telemetry.StartCreate(ctx, pm.Topic, "", "")
		span.End()
		c := propagation.MapCarrier{}
		propagation.TraceContext{}.Inject(cctx, c)
		for _, k := range []string{"traceparent", "ce_traceparent"} {
			pm.Headers = append(pm.Headers, sarama.RecordHeader{Key: []byte(k), Value: []byte(c["traceparent"])})
		}
		if _, _, err := f.producer.SendMessage(pm); err != nil {
			t.Fatal(err)
		}
		return span.SpanContext()
	}
	orderTopic, likeTopic := f.kafka.Topic("order-events"), f.kafka.Topic("like-events")
	id := uuid.NewString()
	paid := event(events.OrderPaidV1{OrderID: 1, PaymentID: 1, Amount: 200, Items: []events.OrderItem{{ProductID: 1, Quantity: 1, UnitPrice: 200}}})
	first := traced(f.message(t, "order-events", paid, id))
	again := traced(f.message(t, "order-events", paid, id))
	f.seq = 50 * fixtureIssued // beyond any outbox id issued: refused permanently
	forged := traced(f.message(t, "like-events", event(events.LikeCreatedV1{UserID: "u", ProductID: 1}), uuid.NewString()))
	request.End()

	admin, done, stop := f.start(t, map[string]string{"PRODUCT_CONSUMERS_GROUPS": "like,order"})
	linkedTo := func(sc trace.SpanContext, name string) []sdktrace.ReadOnlySpan {
		return telemetrytest.Ended(func(s sdktrace.ReadOnlySpan) bool {
			return s.Name() == name && slices.ContainsFunc(s.Links(), func(l sdktrace.Link) bool { return l.SpanContext.WithRemote(false).Equal(sc) })
		})
	}
	for deadline := time.Now().Add(60 * time.Second); len(linkedTo(again, "process "+orderTopic)) == 0 || len(linkedTo(forged, "send "+likeTopic+".DLT")) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the events' spans did not all end in time")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The order's stages are exemplars with its trace id, the request's,
	// on the admin listener's /metrics; no exemplar names another trace.
	stagesWithTrace := map[string]bool{}
	for bucket, id := range telemetrytest.Exemplars(t, "http://"+admin+"/metrics") {
		if id != request.SpanContext().TraceID().String() {
			t.Errorf("exemplar of %s: trace %s, not the request's", bucket, id)
		}
		stage, rest, _ := strings.Cut(bucket, " ")
		if typ, _, _ := strings.Cut(rest, " "); typ == paid.Type {
			stagesWithTrace[stage] = true
		}
	}
	if !stagesWithTrace["apply"] {
		t.Errorf("the order's apply stage has no exemplar of its trace; stages with one: %v", stagesWithTrace)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The order group's offset commits are spans of their own, the last
	// one (on the way out) at least.
	if n := len(telemetrytest.Ended(telemetrytest.Named("commit " + orderTopic))); n == 0 {
		t.Error("no commit span of the order topic")
	}

	// shape is a process span's children's names and its events' names.
	type shape struct{ Children, Events []string }
	shapeOf := func(sc trace.SpanContext, name string) []shape {
		var out []shape
		for _, p := range linkedTo(sc, name) {
			var s shape
			for _, c := range telemetrytest.Ended(telemetrytest.InTrace(p.SpanContext().TraceID())) {
				if c.Parent().SpanID() == p.SpanContext().SpanID() && c.Name() != "BEGIN" && c.Name() != "COMMIT" {
					s.Children = append(s.Children, c.Name())
				}
			}
			for _, e := range p.Events() {
				s.Events = append(s.Events, e.Name)
			}
			slices.Sort(s.Children)
			out = append(out, s)
		}
		return out
	}
	got := map[string][]shape{
		"first":  shapeOf(first, "process "+orderTopic),
		"again":  shapeOf(again, "process "+orderTopic),
		"forged": shapeOf(forged, "process "+likeTopic),
	}
	want := map[string][]shape{
		"first": {{Children: []string{"aggregate sales", "cache invalidate"}}},
		"again": {{Children: []string{"aggregate sales"}, Events: []string{"duplicate skipped"}}},
		// The check of the highest outbox id issued, and the refusal.
		"forged": {{Children: []string{"SELECT"}, Events: []string{"record failed", "exception"}}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("process spans by event (-want +got):\n%s", diff)
	}
	if n := len(linkedTo(forged, "send "+likeTopic+".DLT")); n != 1 {
		t.Errorf("%d dead-letter send spans linked to the forged like, want 1", n)
	}
	// The aggregate's transaction holds its statements.
	for _, p := range linkedTo(first, "process "+orderTopic) {
		for _, c := range telemetrytest.Ended(telemetrytest.InTrace(p.SpanContext().TraceID())) {
			if c.Name() == "aggregate sales" && c.Parent().SpanID() == p.SpanContext().SpanID() {
				stmts := telemetrytest.Ended(func(s sdktrace.ReadOnlySpan) bool { return s.Parent().SpanID() == c.SpanContext().SpanID() })
				if len(stmts) == 0 {
					t.Error("the aggregate's transaction has no statement spans")
				}
			}
		}
	}
}
