package outbox

import (
	"context"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/loopers/commerce-pipeline/internal/telemetry"
	"github.com/loopers/commerce-pipeline/pkg/events"
)

// noSpan is the span of an entry written with tracing off; held as the
// interface, so that returning it allocates nothing.
var noSpan trace.Span = noop.Span{}

// StartCreate starts the producer span "create <topic>" of e, a child of
// ctx's span, and returns e carrying that span's W3C trace context, to be
// stored with the row in the same statement. The relay publishes the
// context unchanged, so every later span of the event (the outbox wait, the
// send, the consumers' processing) belongs to the request's trace. End the
// span with EndCreate once the statement ran.
//
// With tracing off (internal/telemetry) it does nothing: e stays without a
// context and the span is a no-op.
func StartCreate(ctx context.Context, e Entry) (context.Context, Entry, trace.Span) {
	if !telemetry.Enabled() {
		return ctx, e, noSpan
	}
	topic, err := events.TopicOf(e.Type)
	if err != nil {
		topic = e.Type // the relay will refuse it; the span still says what was written
	}
	ctx, span := telemetry.StartCreate(ctx, topic, e.EventID, e.AggregateID)
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	e.TraceParent, e.TraceState = c[TraceParentHeader], c[TraceStateHeader]
	return ctx, e, span
}

// EndCreate ends a span of StartCreate with the outcome of the statement
// that wrote its row.
func EndCreate(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// The W3C Trace Context names of the stored context, which are also the
// Kafka header names the relay writes them under (the CloudEvents
// distributed-tracing extension adds them again with the "ce_" prefix).
const (
	TraceParentHeader = "traceparent"
	TraceStateHeader  = "tracestate"
)
