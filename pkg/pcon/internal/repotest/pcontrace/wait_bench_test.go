package pcontrace_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/loopers/commerce-pipeline/pkg/pcon"
	"github.com/loopers/commerce-pipeline/pkg/pcon/pcontrace"
)

// BenchmarkWaitPerRecord weighs the two ways to show how long a record
// waited between its fetch and its handler's start, per sampled record,
// with the SDK batching spans to an exporter that drops them:
//
//   - span: a span of its own, a child of the record's creation context
//     (so it shows in the producer's trace), backdated to the fetch;
//   - link attribute: an attribute on the process span's link to the
//     record (shows only on the consumer's span, in another trace);
//   - process span: the cost of one traced handler call of one record,
//     which every record pays already, for scale.
func BenchmarkWaitPerRecord(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tr := tp.Tracer("bench")
	_, created := tr.Start(context.Background(), "create")
	created.End()
	sc := created.SpanContext()
	received := time.Now().Add(-time.Millisecond)
	b.Run("span", func(b *testing.B) {
		b.ReportAllocs()
		ctx := trace.ContextWithRemoteSpanContext(context.Background(), sc)
		for b.Loop() {
			_, s := tr.Start(ctx, "wait t", trace.WithTimestamp(received),
				trace.WithAttributes(attribute.String("messaging.destination.partition.id", "1"), attribute.Int64("messaging.kafka.offset", 42)))
			s.End()
		}
	})
	b.Run("link attribute", func(b *testing.B) {
		b.ReportAllocs()
		var links []trace.Link
		for b.Loop() {
			links = append(links[:0], trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{
				attribute.Int64("pcon.wait_ns", time.Since(received).Nanoseconds())}})
		}
		_ = links
	})
	b.Run("process span", func(b *testing.B) {
		b.ReportAllocs()
		h := pcontrace.RecordHandler(func(context.Context, *pcon.Record) error { return nil }, pcontrace.Options{Group: "g", TracerProvider: tp})
		r := &pcon.Record{Topic: "t", Partition: 1, Offset: 42, Key: []byte("k"), Received: received,
			Headers: []pcon.Header{{Key: []byte("traceparent"), Value: []byte("00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01")}}}
		for b.Loop() {
			_ = h(context.Background(), r)
		}
	})
}
