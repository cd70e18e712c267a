package relay

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/loopers/commerce-pipeline/internal/httpserver"
	"github.com/loopers/commerce-pipeline/internal/outbox"
	"github.com/loopers/commerce-pipeline/internal/telemetry"
	"github.com/loopers/commerce-pipeline/internal/telemetry/telemetrytest"
	"github.com/loopers/commerce-pipeline/pkg/events"
	"github.com/loopers/commerce-pipeline/services/outbox-relay/internal/store"
)

// traceparent is the W3C header of sc.
func traceparent(sc trace.SpanContext) string {
	return fmt.Sprintf("00-%s-%s-%s", sc.TraceID(), sc.SpanID(), sc.TraceFlags())
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	out := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		out[kv.Key] = kv.Value
	}
	return out
}

// TestTraceThroughTheRelay follows two likes written under one request's
// span through a pass on Apache Kafka: each outbox row has exactly one
// create span in the request's trace, its stored traceparent is that span's,
// and the record carries it unchanged as traceparent and ce_traceparent. A
// row written without a context is published without trace headers.
func TestTraceThroughTheRelay(t *testing.T) {
	t.Parallel()
	telemetrytest.Recorder()
	env, n := leader(t)
	ctx, request := telemetry.Tracer().Start(context.Background(), "request")
	ids := map[string]bool{}
	for _, ev := range []any{events.LikeCreatedV1{UserID: "u1", ProductID: 7}, events.LikeCreatedV1{UserID: "u2", ProductID: 7}} {
		rec, err := env.Reg.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		id := uuid.NewString()
		if _, err := outbox.Insert(ctx, env.Pool.QueryRow, outbox.Entry{EventID: id, Source: "commerce-api", Record: rec}); err != nil {
			t.Fatal(err)
		}
		ids[id] = true
	}
	request.End()
	// A row without a context: written by hand, as by a writer that traces
	// nothing.
	plain := uuid.NewString()
	if _, err := env.Pool.Exec(context.Background(), `INSERT INTO outbox (event_id, event_type, source, aggregate_type, aggregate_id, payload)
		VALUES ($1, 'loopers.like.created.v1', 'commerce-api', 'product', '7', '{"userId":"u3","productId":7}')`, plain); err != nil {
		t.Fatal(err)
	}
	n.pass(t)

	creates := map[string]string{} // event id → the create span's traceparent
	for _, s := range telemetrytest.Ended(telemetrytest.InTrace(request.SpanContext().TraceID())) {
		if s.Name() != "create like-events" {
			continue
		}
		id := attrs(s)["messaging.message.id"].AsString()
		if _, dup := creates[id]; dup {
			t.Errorf("event %s has two create spans", id)
		}
		creates[id] = traceparent(s.SpanContext())
		if s.Parent().SpanID() != request.SpanContext().SpanID() || s.SpanKind() != trace.SpanKindProducer {
			t.Errorf("create span of %s: parent %s kind %s, want a producer under the request", id, s.Parent().SpanID(), s.SpanKind())
		}
	}
	stored := map[string]string{}
	rows, err := env.Pool.Query(context.Background(), `SELECT event_id::text, COALESCE(traceparent, '') FROM outbox`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, tp string
		if err := rows.Scan(&id, &tp); err != nil {
			t.Fatal(err)
		}
		stored[id] = tp
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	published := map[string][2]string{}
	for _, r := range env.Records(t, 3, 30*time.Second) {
		published[r.EventID] = [2]string{r.Headers["traceparent"], r.Headers["ce_traceparent"]}
	}
	want := map[string][2]string{plain: {"", ""}}
	for id := range ids {
		want[id] = [2]string{creates[id], creates[id]}
		if creates[id] == "" || stored[id] != creates[id] {
			t.Errorf("event %s: stored traceparent %q, its create span's %q", id, stored[id], creates[id])
		}
	}
	if diff := cmp.Diff(want, published); diff != "" {
		t.Errorf("published traceparent, ce_traceparent by event (-want +got):\n%s", diff)
	}
	if stored[plain] != "" {
		t.Errorf("the row written without a context stored %q", stored[plain])
	}
	// The pass hung its spans on the stored contexts: an outbox wait span
	// under each create span, and one send span linked to both records (the
	// row without a context has no link).
	waits := map[string]string{} // event id → its wait span's parent
	for _, s := range telemetrytest.Ended(telemetrytest.InTrace(request.SpanContext().TraceID())) {
		if s.Name() == "outbox wait like-events" {
			waits[attrs(s)["messaging.message.id"].AsString()] = traceparentOf(request.SpanContext().TraceID(), s.Parent().SpanID())
		}
	}
	wantWaits := map[string]string{}
	for id := range ids {
		wantWaits[id] = creates[id]
	}
	if diff := cmp.Diff(wantWaits, waits); diff != "" {
		t.Errorf("outbox wait spans' parents by event (-want +got):\n%s", diff)
	}
	sends := telemetrytest.Ended(telemetrytest.LinkedTo(request.SpanContext().TraceID()))
	var links []string
	for _, s := range sends {
		if s.Name() != "send like-events" {
			continue
		}
		for _, l := range s.Links() {
			links = append(links, traceparent(l.SpanContext))
		}
	}
	slices.Sort(links)
	var wantLinks []string
	for id := range ids {
		wantLinks = append(wantLinks, creates[id])
	}
	slices.Sort(wantLinks)
	if diff := cmp.Diff(wantLinks, links); diff != "" {
		t.Errorf("the pass's send span links (-want +got):\n%s", diff)
	}
	// The outbox and publish stages of the two traced rows are exemplars
	// with the request's trace id (the plain row, published in the same
	// pass, is no exemplar: a bucket holding it and a traced row shows the
	// trace, whichever came last, since Prometheus keeps one per bucket).
	mux := http.NewServeMux()
	httpserver.Ops(mux, n.reg, nil)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	got := map[string]string{}
	for bucket, id := range telemetrytest.Exemplars(t, srv.URL+"/metrics") {
		stage, _, _ := strings.Cut(bucket, " ")
		if id == request.SpanContext().TraceID().String() {
			got[stage] = id
		} else {
			t.Errorf("exemplar of %s: trace %s, not the request's", bucket, id)
		}
	}
	wantEx := map[string]string{"outbox": request.SpanContext().TraceID().String(), "publish": request.SpanContext().TraceID().String()}
	if diff := cmp.Diff(wantEx, got); diff != "" {
		t.Errorf("the stages with the request's trace as an exemplar (-want +got):\n%s", diff)
	}
}

// traceparentOf is the traceparent of span in trace, sampled.
func traceparentOf(tid trace.TraceID, sid trace.SpanID) string {
	return "00-" + tid.String() + "-" + sid.String() + "-01"
}

// TestRelaySpans: for rows read from the outbox, the outbox wait spans are
// children of each row's stored context, backdated from its insert to the
// read, with how the relay was woken; the send span of the batch has
// exactly one link per record with a context, and a failed record is an
// event on it, not a new context.
func TestRelaySpans(t *testing.T) {
	t.Parallel()
	telemetrytest.Recorder()
	env, n := leader(t)
	ctx, request := telemetry.Tracer().Start(context.Background(), "request")
	for _, ev := range []any{events.LikeCreatedV1{UserID: "u1", ProductID: 8}, events.ProductViewedV1{ProductID: 8}, events.LikeCreatedV1{UserID: "u2", ProductID: 8}} {
		rec, err := env.Reg.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := outbox.Insert(ctx, env.Pool.QueryRow, outbox.Entry{EventID: uuid.NewString(), Source: "commerce-api", Record: rec}); err != nil {
			t.Fatal(err)
		}
	}
	request.End()
	b, err := n.svc.relay.store.ReadBatch(context.Background(), 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Rows) != 3 {
		t.Fatalf("read %d rows, want 3", len(b.Rows))
	}
	began := time.Now()
	recordOutboxWait(b, b.Rows, WokenByNotification)
	pctx, pass := startPass(context.Background(), began, WokenByNotification)
	s := startSends(pctx, b.Rows)
	endSends(s, []error{nil, nil, errors.New("broker away")})
	endPass(pass, PassResult{Published: 2, Failed: 0, Cursor: b.Rows[1].ID}, nil)

	trace := request.SpanContext().TraceID()
	for _, row := range b.Rows {
		parent := rowContext(row)
		var waits []sdktrace.ReadOnlySpan
		for _, s := range telemetrytest.Ended(telemetrytest.InTrace(trace)) {
			if s.Parent().SpanID() == parent.SpanID() && s.Name() == "outbox wait "+topicOf(row) {
				waits = append(waits, s)
			}
		}
		if len(waits) != 1 {
			t.Fatalf("row %d: %d outbox wait spans under its context, want 1", row.ID, len(waits))
		}
		w := waits[0]
		if !w.StartTime().Equal(row.CreatedAt) || !w.EndTime().Equal(b.Now) {
			t.Errorf("row %d: outbox wait from %v to %v, want %v to %v", row.ID, w.StartTime(), w.EndTime(), row.CreatedAt, b.Now)
		}
		if got := attrs(w)[attrWokenBy].AsString(); got != string(WokenByNotification) {
			t.Errorf("row %d: woken by %q", row.ID, got)
		}
	}
	sends := telemetrytest.Ended(telemetrytest.LinkedTo(trace))
	got := map[string][]int64{} // span name → linked outbox ids
	for _, s := range sends {
		if s.Parent().SpanID() != pass.SpanContext().SpanID() {
			t.Errorf("%s is not a child of the pass", s.Name())
		}
		for _, l := range s.Links() {
			got[s.Name()] = append(got[s.Name()], attrsOf(l.Attributes)[attrOutboxID].AsInt64())
			if !l.SpanContext.Equal(rowContext(rowByID(t, b.Rows, attrsOf(l.Attributes)[attrOutboxID].AsInt64()))) {
				t.Errorf("%s links to %v, not its row's context", s.Name(), l.SpanContext)
			}
		}
		if s.Name() == "send like-events" {
			if len(s.Events()) != 1 || s.Events()[0].Name != "send failed" || s.Status().Code != codes.Error {
				t.Errorf("send like-events: events %v status %v, want the failed record's event", s.Events(), s.Status())
			}
		}
	}
	want := map[string][]int64{"send like-events": {b.Rows[0].ID, b.Rows[2].ID}, "send product-events": {b.Rows[1].ID}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("send spans' links (-want +got):\n%s", diff)
	}
}

func attrsOf(kvs []attribute.KeyValue) map[attribute.Key]attribute.Value {
	out := map[attribute.Key]attribute.Value{}
	for _, kv := range kvs {
		out[kv.Key] = kv.Value
	}
	return out
}

func rowByID(t *testing.T, rows []store.Row, id int64) store.Row {
	t.Helper()
	for _, r := range rows {
		if r.ID == id {
			return r
		}
	}
	t.Fatalf("no row %d", id)
	return store.Row{}
}
