package pcontrace

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/loopers/commerce-pipeline/pkg/pcon"
)

// The wait spans. A record's time between its fetch (pcon.Record.Received)
// and its handler's start is where a hot key shows: the record queued
// behind the running records of its key (or, less often, behind a full
// MaxInFlight). It is a span of its own, "wait <topic>", a child of the
// record's creation context, so that it shows in the producer's trace
// between the send and the processing, as the relay's "outbox wait" does
// for the outbox. It is made only for a record whose creation context is
// sampled; a record without one, or not sampled, costs a flag test.
//
// Why a span per record rather than an attribute on the process span's
// link: BenchmarkWaitPerRecord (pkg/pcon/internal/repotest/pcontrace)
// measured, on the development machine, about 1.3 µs and 9 allocations per
// sampled record for the span, 0.05 µs for a link attribute, beside about
// 4 µs per record for the process span every traced record pays already.
// Against a handler that commits a database transaction (a millisecond or
// more) the span is about 0.1 %, and only sampled records pay it; a link
// attribute would cost less but show only on the consumer's span, in
// another trace than the request's, where nobody following a slow like
// looks.

// maxWaited bounds the records remembered by waited.
const maxWaited = 4096

// recordID names a record in its log.
type recordID struct {
	topic     string
	partition int32
	offset    int64
}

// waited remembers the records whose wait span was emitted and whose call
// then failed: a retry keeps the record's Received, so its wait span would
// cover the earlier attempts again. Bounded: past maxWaited records it
// starts over, showing a retry's wait twice at worst.
type waited struct {
	n  atomic.Int32 // records held: the lock is skipped while there are none
	mu sync.Mutex
	m  map[recordID]struct{}
}

// shownBefore reports whether r's wait was emitted by an earlier, failed,
// call, and forgets it: a retry that fails again is noted again.
func (w *waited) shownBefore(r *pcon.Record) bool {
	if w.n.Load() == 0 {
		return false
	}
	id := recordID{r.Topic, r.Partition, r.Offset}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.m[id]; !ok {
		return false
	}
	delete(w.m, id)
	w.n.Store(int32(len(w.m))) //nolint:gosec // at most maxWaited
	return true
}

// failed notes the records of a failed call whose wait was emitted.
func (w *waited) failed(rs ...*pcon.Record) {
	if len(rs) == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil || len(w.m)+len(rs) > maxWaited {
		w.m = make(map[recordID]struct{}, len(rs))
	}
	for _, r := range rs {
		w.m[recordID{r.Topic, r.Partition, r.Offset}] = struct{}{}
	}
	w.n.Store(int32(len(w.m))) //nolint:gosec // at most maxWaited
}

// wait emits r's wait span, from its fetch to start (its handler's start),
// under sc, its creation context, when sc is sampled, the wait spans are
// on and this is not a retry whose wait was shown. It reports whether it
// emitted one.
func (t *tracer) wait(sc trace.SpanContext, r *pcon.Record, start time.Time) bool {
	if t.o.NoWait || !sc.IsSampled() || r.Received.IsZero() || t.waited.shownBefore(r) {
		return false
	}
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), sc)
	_, span := t.tr.Start(ctx, "wait "+r.Topic, trace.WithTimestamp(r.Received),
		// messaging.operation.name is the system's own word; the
		// operation types the conventions list have none for a wait.
		trace.WithAttributes(append(append([]attribute.KeyValue{semconv.MessagingOperationName("wait"),
			semconv.MessagingDestinationName(r.Topic)}, t.common...), t.recordAttrs(r)...)...))
	span.End(trace.WithTimestamp(start))
	return true
}
