package consumer

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/loopers/commerce-pipeline/internal/telemetry"
	"github.com/loopers/commerce-pipeline/pkg/pcon"
	"github.com/loopers/commerce-pipeline/pkg/pcon/pcontrace"
)

// Attributes of the consumers' spans that the conventions do not name.
const (
	attrConsumer   = attribute.Key("product_consumer.name")
	attrApplied    = attribute.Key("product_consumer.applied")
	attrDuplicates = attribute.Key("product_consumer.duplicates")
	attrProducts   = attribute.Key("product_consumer.products")
	attrEvents     = attribute.Key("product_consumer.events")
)

// child starts a span name under the handler's span (pcontrace's process
// span) when tracing is on; end it with the work's error. With tracing off
// it costs nothing: ctx is returned as it is.
func child(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, func(error)) {
	if !telemetry.Enabled() {
		return ctx, func(error) {}
	}
	ctx, span := telemetry.Tracer().Start(ctx, name, trace.WithAttributes(attrs...))
	return ctx, func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

// markOutcome sets on the handler's span how many events applied and how
// many were duplicates, and adds an event when some were skipped as
// already handled, so that a skip shows in the trace instead of passing in
// silence.
func markOutcome(ctx context.Context, consumer string, applied, duplicates int) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attrConsumer.String(consumer), attrApplied.Int(applied), attrDuplicates.Int(duplicates))
	if duplicates > 0 {
		span.AddEvent("duplicate skipped", trace.WithAttributes(attrDuplicates.Int(duplicates)))
	}
}

// TracedCommit returns the commit hook of group (a span per offset commit)
// when tracing is on, nil otherwise.
func TracedCommit(group string) func(string, []pcon.PartitionEvent) func(error) {
	if !telemetry.Enabled() {
		return nil
	}
	return pcontrace.Commit(pcontrace.Options{Group: group})
}

// Traced returns spec's handler traced by pcontrace (a process span per
// call, linked to each record's creation context) and the dead-letter hook
// of group (a send span per dead-lettered record), when tracing is on;
// spec's handler and no hook otherwise.
func Traced(spec Spec, group string) (pcon.Handler, func(*pcon.Record, string) func(error)) {
	if !telemetry.Enabled() {
		return spec.Handler, nil
	}
	o := pcontrace.Options{Group: group}
	switch h := spec.Handler.(type) {
	case pcon.RecordHandler:
		return pcontrace.RecordHandler(h, o), pcontrace.DeadLetter(o)
	case pcon.BatchHandler:
		return pcontrace.BatchHandler(h, o), pcontrace.DeadLetter(o)
	}
	return spec.Handler, pcontrace.DeadLetter(o)
}
