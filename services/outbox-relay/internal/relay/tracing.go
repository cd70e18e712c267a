package relay

// The relay's spans, for the pass to call (see each function for where).
// Every event carries the trace context its writer stored with the row
// (internal/outbox.StartCreate): the relay never starts a new creation
// context, it publishes the stored one unchanged (messageOf) and hangs its
// own spans on it: the time the row waited in the outbox, as a child of the
// row's context, and the send, linked to every record it produced. With
// tracing off (internal/telemetry) every function here returns at once.

import (
	"context"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/loopers/commerce-pipeline/internal/outbox"
	"github.com/loopers/commerce-pipeline/internal/telemetry"
	"github.com/loopers/commerce-pipeline/pkg/events"
	"github.com/loopers/commerce-pipeline/services/outbox-relay/internal/publisher"
	"github.com/loopers/commerce-pipeline/services/outbox-relay/internal/store"
)

// messageOf maps an outbox row to the message that publishes it, with the
// row's stored trace context, which the record carries unchanged.
func messageOf(row store.Row) publisher.Message {
	return publisher.Message{
		Sequence: row.Sequence, EventID: row.EventID, Type: row.EventType, Source: row.Source,
		AggregateType: row.AggregateType, AggregateID: row.AggregateID, Data: row.Payload, Time: row.CreatedAt,
		TraceParent: row.TraceParent, TraceState: row.TraceState,
	}
}

// Wake says what started the read of a batch.
type Wake string

// How a read was started: a commit's notification, or the poll interval
// (or a pass's own drain, which reads again without waiting).
const (
	WokenByNotification Wake = "notification"
	WokenByPoll         Wake = "poll"
)

// Attributes of the relay's spans that the conventions do not name.
const (
	attrOutboxID = attribute.Key("outbox.id")
	attrWokenBy  = attribute.Key("outbox.relay.woken_by")
	attrRetry    = attribute.Key("outbox.relay.retriable")
)

// rowContext returns the span context row's writer stored; invalid when it
// stored none (tracing off at the writer, a writer without tracing) or a
// malformed one.
func rowContext(row store.Row) trace.SpanContext {
	if row.TraceParent == "" {
		return trace.SpanContext{}
	}
	c := propagation.MapCarrier{outbox.TraceParentHeader: row.TraceParent}
	if row.TraceState != "" {
		c[outbox.TraceStateHeader] = row.TraceState
	}
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), c))
}

// topicOf is the topic a row's event goes to, as its spans name it: the
// event type's topic (without KAFKA_PREFIX), or the type itself when none
// derives (the publisher refuses such a row).
func topicOf(row store.Row) string {
	if t, err := events.TopicOf(row.EventType); err == nil {
		return t
	}
	return row.EventType
}

// recordOutboxWait emits, for each row of rows (read in b) that carries a
// trace context, the span "outbox wait <topic>": a child of the row's
// context, backdated from the row's insert (created_at, the writer's commit
// to within its transaction's tail) to the read (b.Now), both on the
// database's clock, with how the read was woken. Call it once per batch
// read, with the rows the pass takes from it (sendable), before preparing
// them: in relay.go, at the top of prepare.
func recordOutboxWait(b store.Batch, rows []store.Row, woken Wake) {
	if !telemetry.Enabled() {
		return
	}
	tr := telemetry.Tracer()
	for _, row := range rows {
		sc := rowContext(row)
		if !sc.IsValid() {
			continue
		}
		topic := topicOf(row)
		ctx := trace.ContextWithRemoteSpanContext(context.Background(), sc)
		_, span := tr.Start(ctx, "outbox wait "+topic, trace.WithTimestamp(row.CreatedAt),
			trace.WithAttributes(semconv.MessagingDestinationName(topic), semconv.MessagingMessageID(row.EventID),
				attrOutboxID.Int64(row.ID), attrWokenBy.String(string(woken))))
		span.End(trace.WithTimestamp(b.Now))
	}
}

// startPass starts the span of a pass that found rows to send, backdated to
// began, the pass's start. A pass that finds nothing emits no span, so an
// idle relay polling every interval sends no trace. Call it when the first
// batch with rows is read, end it (endPass) when the pass returns, and give
// its context to startSends.
func startPass(ctx context.Context, began time.Time, woken Wake) (context.Context, trace.Span) {
	if !telemetry.Enabled() {
		return ctx, noop.Span{}
	}
	return telemetry.Tracer().Start(ctx, "outbox relay pass", trace.WithTimestamp(began),
		trace.WithAttributes(attrWokenBy.String(string(woken))))
}

// endPass ends a pass's span with the pass's result.
func endPass(span trace.Span, res PassResult, err error) {
	span.SetAttributes(attribute.Int("outbox.relay.published", res.Published), attribute.Int("outbox.relay.failed", res.Failed),
		attribute.Int64("outbox.relay.cursor", res.Cursor))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// sends are the "send <topic>" spans of one produced batch: one per topic
// among its rows, each linked to the stored context of every record of
// that topic, exactly once.
type sends struct {
	rows  []store.Row
	spans map[string]trace.Span
}

// startSends starts the send spans of rows, a batch about to be fed to the
// producer, as children of ctx (the pass's span). Call it in prepare, just
// before Prepare/Feed, and endSends with the batch's outcomes once Wait
// returned.
func startSends(ctx context.Context, rows []store.Row) *sends {
	if !telemetry.Enabled() || len(rows) == 0 {
		return nil
	}
	links := map[string][]trace.Link{}
	counts := map[string]int{}
	for _, row := range rows {
		topic := topicOf(row)
		counts[topic]++
		if sc := rowContext(row); sc.IsValid() {
			links[topic] = append(links[topic], trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{
				semconv.MessagingMessageID(row.EventID), attrOutboxID.Int64(row.ID)}})
		}
	}
	s := &sends{rows: rows, spans: make(map[string]trace.Span, len(counts))}
	tr := telemetry.Tracer()
	for topic, n := range counts {
		attrs := append(telemetry.Messaging("send", topic), semconv.MessagingBatchMessageCount(n))
		_, s.spans[topic] = tr.Start(ctx, "send "+topic, trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithLinks(links[topic]...), trace.WithAttributes(attrs...))
	}
	return s
}

// endSends ends the send spans with the outcome of each row (errs in row
// order, nil for a success). A failed record is an event on its topic's
// span, with whether it will be retried: a retry publishes the same stored
// context again, under the next pass's send span, never a new one.
func endSends(s *sends, errs []error) {
	if s == nil {
		return
	}
	failed := map[string]int{}
	for i, err := range errs {
		if err == nil || i >= len(s.rows) {
			continue
		}
		row := s.rows[i]
		topic := topicOf(row)
		failed[topic]++
		s.spans[topic].AddEvent("send failed", trace.WithAttributes(attrOutboxID.Int64(row.ID),
			semconv.MessagingMessageID(row.EventID), attrRetry.Bool(!publisher.Unpublishable(err)),
			semconv.ExceptionMessage(err.Error())))
	}
	for topic, span := range s.spans {
		if n := failed[topic]; n > 0 {
			span.SetStatus(codes.Error, strconv.Itoa(n)+" records failed")
		}
		span.End()
	}
}
