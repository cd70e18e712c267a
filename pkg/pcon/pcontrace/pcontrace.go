// Package pcontrace traces a pcon.Consumer with OpenTelemetry, outside pcon
// itself, so that pcon's core depends on no tracing library: it wraps the
// handler given to pcon.New and supplies pcon.Config.OnDeadLetter.
//
// Every handler call is a consumer span "process <topic>" following the
// OpenTelemetry messaging conventions (semconv v1.43.0), linked to the
// creation context each record carries in its traceparent and tracestate
// headers (or the CloudEvents ce_traceparent and ce_tracestate): one link
// per record, so a micro-batch of a hot key links every record it handled.
// A RecordHandler's span may instead be the child of its record's context
// (Options.Parent). Each dead-letter publish is a producer span
// "send <topic>.DLT" linked to the record's context; the dead-lettered
// record keeps its headers, so a re-driven record's processing links to the
// original creation context again. A record's wait between its fetch and
// its handler's start (behind its key, on a hot key) is a span "wait
// <topic>", a child of its creation context, when that is sampled
// (wait.go). Each offset commit is a client span
// "commit <topic>" (Commit, for pcon.Config.OnCommit) with an event per
// partition committed.
//
// The older attribute names (semantic conventions up to v1.25) are added
// when OTEL_SEMCONV_STABILITY_OPT_IN contains messaging/dup.
package pcontrace

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/loopers/commerce-pipeline/pkg/pcon"
)

// ScopeName is the instrumentation scope of the spans.
const ScopeName = "github.com/loopers/commerce-pipeline/pkg/pcon/pcontrace"

// Options configure the tracing of one consumer.
type Options struct {
	// Group is the consumer group, an attribute of every span.
	Group string
	// Parent makes a RecordHandler's span the child of its record's
	// creation context instead of linking to it, so that the processing
	// shows in the producer's trace. Batch spans always link.
	Parent bool
	// TracerProvider defaults to the global one.
	TracerProvider trace.TracerProvider
	// Propagator reads the records' context; default W3C Trace Context.
	Propagator propagation.TextMapPropagator
	// NoWait leaves out the wait spans: a span "wait <topic>" per record
	// with a sampled creation context, its child, from the record's fetch
	// to its handler's start (the wait behind its key), made by default.
	NoWait bool
}

// tracer is what the wrappers share.
type tracer struct {
	o      Options
	tr     trace.Tracer
	common []attribute.KeyValue // system and group
	dup    bool                 // OTEL_SEMCONV_STABILITY_OPT_IN has messaging/dup
	waited waited               // the failed records whose wait span was emitted
}

func newTracer(o Options) *tracer {
	if o.TracerProvider == nil {
		o.TracerProvider = otel.GetTracerProvider()
	}
	if o.Propagator == nil {
		o.Propagator = propagation.TraceContext{}
	}
	t := &tracer{o: o, tr: o.TracerProvider.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL)), dup: dupOptIn(os.Getenv("OTEL_SEMCONV_STABILITY_OPT_IN"))}
	t.common = []attribute.KeyValue{semconv.MessagingSystemKafka}
	if o.Group != "" {
		t.common = append(t.common, semconv.MessagingConsumerGroupName(o.Group))
		if t.dup {
			t.common = append(t.common, attribute.String("messaging.kafka.consumer.group", o.Group))
		}
	}
	return t
}

func dupOptIn(v string) bool {
	for item := range strings.SplitSeq(v, ",") {
		if strings.TrimSpace(item) == "messaging/dup" {
			return true
		}
	}
	return false
}

// carrier reads a record's headers for a propagator: the W3C names, and
// the CloudEvents extension's "ce_" ones when those are missing.
type carrier []pcon.Header

func (c carrier) Get(key string) string {
	var ce string
	for _, h := range c {
		switch string(h.Key) {
		case key:
			return string(h.Value)
		case "ce_" + key:
			ce = string(h.Value)
		}
	}
	return ce
}

func (carrier) Set(string, string) {}

func (c carrier) Keys() []string {
	keys := make([]string, len(c))
	for i, h := range c {
		keys[i] = string(h.Key)
	}
	return keys
}

// Context returns the creation context r carries; invalid when it carries
// none.
func (t *tracer) context(r *pcon.Record) trace.SpanContext {
	return trace.SpanContextFromContext(t.o.Propagator.Extract(context.Background(), carrier(r.Headers)))
}

// RecordContext returns the creation context r carries in its W3C
// traceparent and tracestate headers (or the CloudEvents ce_traceparent and
// ce_tracestate), as the wrappers read it with the default propagator;
// invalid when it carries none. A record without the headers costs a scan
// of its header keys. For what is not a span: a metric's exemplar, a log
// line's trace id.
func RecordContext(r *pcon.Record) trace.SpanContext {
	if len(r.Headers) == 0 {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), carrier(r.Headers)))
}

// recordAttrs are the attributes that place r in its log.
func (t *tracer) recordAttrs(r *pcon.Record) []attribute.KeyValue {
	p := strconv.Itoa(int(r.Partition))
	kv := []attribute.KeyValue{semconv.MessagingDestinationPartitionID(p), semconv.MessagingKafkaOffset(int(r.Offset))}
	if len(r.Key) > 0 {
		kv = append(kv, semconv.MessagingKafkaMessageKey(string(r.Key)))
	}
	if t.dup {
		kv = append(kv, attribute.Int("messaging.kafka.destination.partition", int(r.Partition)),
			attribute.Int64("messaging.kafka.message.offset", r.Offset))
	}
	return kv
}

// operation returns the attributes of operation on topic.
func (t *tracer) operation(op, topic string) []attribute.KeyValue {
	kv := append([]attribute.KeyValue{semconv.MessagingOperationName(op), semconv.MessagingOperationTypeKey.String(op),
		semconv.MessagingDestinationName(topic)}, t.common...)
	if t.dup {
		old := op
		if op == "send" {
			old = "publish"
		}
		kv = append(kv, attribute.String("messaging.operation", old))
	}
	return kv
}

// end ends span with err.
func end(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// RecordHandler returns h traced: a span "process <topic>" per call, linked
// to (with Options.Parent, the child of) the record's creation context.
func RecordHandler(h pcon.RecordHandler, o Options) pcon.RecordHandler {
	t := newTracer(o)
	return func(ctx context.Context, r *pcon.Record) error {
		start := time.Now()
		opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(append(t.operation("process", r.Topic), t.recordAttrs(r)...)...)}
		waited := false
		if sc := t.context(r); sc.IsValid() {
			waited = t.wait(sc, r, start)
			if t.o.Parent {
				ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
			} else {
				opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
			}
		}
		ctx, span := t.tr.Start(ctx, "process "+r.Topic, opts...)
		err := h(ctx, r)
		end(span, err)
		if err != nil && waited {
			t.waited.failed(r)
		}
		return err
	}
}

// BatchHandler returns h traced: a span "process <topic>" per call with one
// link per record that carries a creation context, the link holding the
// record's partition, offset and key. A failure of some records (a
// *pcon.BatchError) is an event per failed record.
func BatchHandler(h pcon.BatchHandler, o Options) pcon.BatchHandler {
	t := newTracer(o)
	return func(ctx context.Context, rs []*pcon.Record) error {
		start := time.Now()
		links := make([]trace.Link, 0, len(rs))
		var waited []*pcon.Record
		topic := ""
		for i, r := range rs {
			if i == 0 {
				topic = r.Topic
			} else if r.Topic != topic {
				topic = "" // a batch of several topics names none
			}
			if sc := t.context(r); sc.IsValid() {
				links = append(links, trace.Link{SpanContext: sc, Attributes: t.recordAttrs(r)})
				if t.wait(sc, r, start) {
					waited = append(waited, r)
				}
			}
		}
		name := "process"
		attrs := append(t.operation("process", topic), semconv.MessagingBatchMessageCount(len(rs)))
		if topic != "" {
			name += " " + topic
		}
		ctx, span := t.tr.Start(ctx, name, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithLinks(links...), trace.WithAttributes(attrs...))
		err := h(ctx, rs)
		var be *pcon.BatchError
		if errors.As(err, &be) {
			for i, e := range be.Failed {
				if i >= 0 && i < len(rs) {
					span.AddEvent("record failed", trace.WithAttributes(append(t.recordAttrs(rs[i]), semconv.ExceptionMessage(e.Error()))...))
				}
			}
		}
		end(span, err)
		if err != nil {
			// Which records come again is pcon's to decide (a failed one
			// and its key's later ones): note them all.
			t.waited.failed(waited...)
		}
		return err
	}
}

// Attributes of the commit span's partition events that the conventions do
// not name: the offset committed is the next one to read, not a record's.
const (
	attrCommittedOffset = attribute.Key("messaging.kafka.commit.offset")
	attrEpoch           = attribute.Key("pcon.assignment.epoch")
	attrPartitions      = attribute.Key("pcon.commit.partitions")
)

// Commit returns the pcon.Config.OnCommit hook: a client span per offset
// commit, "commit <topic>" ("commit" when it spans several topics), with
// the conventions' settle operation, the number of partitions it commits
// (pcon.commit.partitions) and an event "partition committed" per partition (its id, the offset
// committed, the assignment epoch), ended when the coordinator answered,
// with an error if pcon learned it refused the commit. A commit belongs to
// no record's trace (it settles many, often of many traces), so its span
// is a root: parent-based sampling samples it as it samples new requests.
func Commit(o Options) func(group string, offsets []pcon.PartitionEvent) func(error) {
	t := newTracer(o)
	return func(_ string, offsets []pcon.PartitionEvent) func(error) {
		topic := ""
		for i, p := range offsets {
			if i == 0 {
				topic = p.Topic
			} else if p.Topic != topic {
				topic = ""
				break
			}
		}
		name := "commit"
		if topic != "" {
			name += " " + topic
		}
		attrs := append([]attribute.KeyValue{semconv.MessagingOperationName("commit"), semconv.MessagingOperationTypeSettle,
			attrPartitions.Int(len(offsets))}, t.common...)
		if topic != "" {
			attrs = append(attrs, semconv.MessagingDestinationName(topic))
		}
		_, span := t.tr.Start(context.Background(), name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
		if span.IsRecording() {
			for _, p := range offsets {
				span.AddEvent("partition committed", trace.WithAttributes(semconv.MessagingDestinationName(p.Topic),
					semconv.MessagingDestinationPartitionID(strconv.Itoa(int(p.Partition))), attrCommittedOffset.Int64(p.Offset),
					attrEpoch.Int64(int64(p.Epoch)))) //nolint:gosec // an assignment epoch counts rebalances, far below 2^63
			}
		}
		return func(err error) { end(span, err) }
	}
}

// DeadLetter returns the pcon.Config.OnDeadLetter hook: a producer span
// "send <dlt>" per dead-letter publish, linked to the record's creation
// context, ended with the publish's outcome.
func DeadLetter(o Options) func(r *pcon.Record, dlt string) func(error) {
	t := newTracer(o)
	return func(r *pcon.Record, dlt string) func(error) {
		opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithAttributes(append(t.operation("send", dlt), t.recordAttrs(r)...)...)}
		if sc := t.context(r); sc.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
		}
		_, span := t.tr.Start(context.Background(), "send "+dlt, opts...)
		return func(err error) { end(span, err) }
	}
}
