// Package telemetrytest records the spans of a test process in memory: the
// shape tests of the relay, pcon and the consumers read them back.
package telemetrytest

import (
	"slices"
	"sync"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/loopers/commerce-pipeline/internal/telemetry"
)

var (
	once     sync.Once
	recorder *tracetest.SpanRecorder
)

// Recorder installs, once per process, a tracer provider sampling every
// span into an in-memory recorder (telemetry.Install), and returns the
// recorder. Tests running in parallel share it: each reads its own spans
// back by trace id (InTrace) or attribute.
func Recorder() *tracetest.SpanRecorder {
	once.Do(func() {
		recorder = tracetest.NewSpanRecorder()
		telemetry.Install(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder), sdktrace.WithSampler(sdktrace.AlwaysSample())))
	})
	return recorder
}

// Ended returns the ended spans for which keep is true, in the order they
// ended.
func Ended(keep func(sdktrace.ReadOnlySpan) bool) []sdktrace.ReadOnlySpan {
	return slices.DeleteFunc(Recorder().Ended(), func(s sdktrace.ReadOnlySpan) bool { return !keep(s) })
}

// InTrace keeps the spans of trace id.
func InTrace(id trace.TraceID) func(sdktrace.ReadOnlySpan) bool {
	return func(s sdktrace.ReadOnlySpan) bool { return s.SpanContext().TraceID() == id }
}

// Named keeps the spans called name.
func Named(name string) func(sdktrace.ReadOnlySpan) bool {
	return func(s sdktrace.ReadOnlySpan) bool { return s.Name() == name }
}

// LinkedTo keeps the spans with a link to a span of trace id.
func LinkedTo(id trace.TraceID) func(sdktrace.ReadOnlySpan) bool {
	return func(s sdktrace.ReadOnlySpan) bool {
		return slices.ContainsFunc(s.Links(), func(l sdktrace.Link) bool { return l.SpanContext.TraceID() == id })
	}
}
