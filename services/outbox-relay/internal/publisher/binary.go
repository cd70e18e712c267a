package publisher

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/cloudevents/sdk-go/protocol/kafka_sarama/v2"
	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/loopers/commerce-pipeline/pkg/events"
)

// Kafka header names of the CloudEvents binary content mode as the SDK's
// Kafka binding writes them: "ce_" and the attribute name, and the data
// content type as "content-type".
const (
	headerID            = "ce_id"
	headerSource        = "ce_source"
	headerSpecVersion   = "ce_specversion"
	headerType          = "ce_type"
	headerContentType   = "content-type"
	headerTime          = "ce_time"
	headerAggregateType = "ce_" + events.ExtAggregateType
	headerAggregateID   = "ce_" + events.ExtAggregateID
	headerSequence      = "ce_" + events.ExtSequence
)

// Positions in shape.template, which holds the headers in the order the
// binding writes them: attributes, then extensions.
const (
	atID = iota
	atSource
	atSpecVersion
	atType
	atContentType
	atTime
	atAggregateType
	atAggregateID
	atSequence
	headerCount
)

// maxShapes bounds the shapes a recordWriter remembers. An outbox has a
// few dozen; past the bound, events of new shapes go through the SDK's
// binding.
const maxShapes = 1024

// recordWriter maps messages to Kafka records in CloudEvents binary content
// mode exactly as the SDK's Kafka binding does (a test holds it to that,
// header for header and byte for byte), at a fraction of the cost. What
// depends only on an event's type, source and aggregate type (its shape:
// the topic, whether such events are valid, and the values of the other
// attributes) is worked out once per shape by mapping a probe event of
// that shape with the SDK itself. Per event only the id, time, aggregate
// id and sequence are written.
type recordWriter struct {
	reg    *events.Registry
	prefix string   // KAFKA_PREFIX, before every topic name
	shapes sync.Map // shapeKey -> *shape
	n      atomic.Int32
}

type shapeKey struct{ typ, source, aggregateType string }

// shape is what the records of one shapeKey share.
type shape struct {
	topic string
	err   error // mapping fails for every event of the shape
	// sdk: the binding wrote headers other than those of template, so each
	// event of the shape goes through it.
	sdk bool
	// template holds every header key, and the values that depend only on
	// the shape; records copy it and fill in their own values. Records
	// share the keys and the shape's values: the producer only reads them.
	template [headerCount]kgo.RecordHeader
}

// write maps m to a record.
func (w *recordWriter) write(ctx context.Context, m Message) (*kgo.Record, error) {
	sh := w.shape(shapeKey{m.Type, m.Source, m.AggregateType})
	switch {
	case sh.err != nil:
		return nil, fmt.Errorf("event %s: %w", m.EventID, sh.err)
	case sh.sdk:
		return w.viaSDK(ctx, m)
	}
	// The SDK trims the id and refuses it empty; the other values written
	// here it takes as they are.
	id := strings.TrimSpace(m.EventID)
	if id == "" {
		return nil, fmt.Errorf("%w: event %q: id: MUST be a non-empty string", ErrUnpublishable, m.EventID)
	}
	// One allocation holds every value written per event.
	buf := make([]byte, 0, len(id)+len(m.AggregateID)+20+len(time.RFC3339Nano))
	buf = append(buf, id...)
	n1 := len(buf)
	buf = append(buf, m.AggregateID...)
	n2 := len(buf)
	buf = strconv.AppendInt(buf, m.Sequence, 10)
	n3 := len(buf)
	hs := make([]kgo.RecordHeader, headerCount, headerCount+traceHeaders(m))
	copy(hs, sh.template[:])
	hs[atID].Value = buf[:n1:n1]
	aggID := buf[n1:n2:n2]
	hs[atAggregateID].Value = aggID
	hs[atSequence].Value = buf[n2:n3:n3]
	if m.Time.IsZero() { // the SDK writes no time for a zero time
		hs = append(hs[:atTime], hs[atTime+1:]...)
	} else {
		buf = m.Time.UTC().AppendFormat(buf, time.RFC3339Nano)
		hs[atTime].Value = buf[n3:len(buf):len(buf)]
	}
	r := &kgo.Record{Topic: sh.topic, Key: aggID, Headers: appendTrace(hs, m)}
	if len(m.Data) > 0 { // nor a value for empty data
		r.Value = m.Data
	}
	return r, nil
}

// shape returns the shape of k, working it out on first sight.
func (w *recordWriter) shape(k shapeKey) *shape {
	if sh, ok := w.shapes.Load(k); ok {
		return sh.(*shape)
	}
	sh := w.probe(k)
	if w.n.Load() < maxShapes {
		if _, loaded := w.shapes.LoadOrStore(k, sh); !loaded {
			w.n.Add(1)
		}
	}
	return sh
}

// probe maps an event of shape k with the SDK and keeps the headers that
// depend only on k.
func (w *recordWriter) probe(k shapeKey) *shape {
	topic, err := events.TopicOf(k.typ)
	if err != nil {
		return &shape{err: err}
	}
	topic = w.prefix + topic
	sh := &shape{topic: topic}
	keys := [headerCount]string{headerID, headerSource, headerSpecVersion, headerType, headerContentType,
		headerTime, headerAggregateType, headerAggregateID, headerSequence}
	for i, key := range keys {
		sh.template[i].Key = key
	}
	// The probe's own values are valid, so an error is the shape's. Its
	// zero time writes no time header.
	ce, err := w.reg.ToCloudEvent(events.Envelope{ID: "probe", Source: k.source, Sequence: 1,
		Record: events.Record{Type: k.typ, AggregateType: k.aggregateType, AggregateID: "probe"}})
	if err != nil {
		cause := errors.Unwrap(err) // without the probe's id
		if cause == nil {
			cause = err
		}
		sh.err = fmt.Errorf("%w: type %q, source %q, aggregate type %q: %w", ErrUnpublishable, k.typ, k.source, k.aggregateType, cause)
		return sh
	}
	pm, err := binaryRecord(context.Background(), &ce, topic, "probe")
	if err != nil {
		sh.err = err
		return sh
	}
	written := map[string][]byte{}
	for _, h := range pm.Headers {
		written[h.Key] = h.Value
	}
	sh.sdk = len(written) != len(pm.Headers) || len(written) != headerCount-1
	for _, at := range []int{atID, atSource, atSpecVersion, atType, atContentType, atAggregateType, atAggregateID, atSequence} {
		v, ok := written[keys[at]]
		sh.sdk = sh.sdk || !ok
		sh.template[at].Value = v
	}
	return sh
}

// viaSDK maps m with the SDK's Kafka binding.
func (w *recordWriter) viaSDK(ctx context.Context, m Message) (*kgo.Record, error) {
	topic, err := events.TopicOf(m.Type)
	if err != nil {
		return nil, fmt.Errorf("event %s: %w", m.EventID, err)
	}
	topic = w.prefix + topic
	ce, err := w.reg.ToCloudEvent(events.Envelope{
		ID: m.EventID, Source: m.Source, Time: m.Time, Sequence: m.Sequence,
		Record: events.Record{Type: m.Type, AggregateType: m.AggregateType, AggregateID: m.AggregateID, Data: m.Data},
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnpublishable, err)
	}
	r, err := binaryRecord(ctx, &ce, topic, m.AggregateID)
	if err != nil {
		return nil, err
	}
	r.Headers = appendTrace(r.Headers, m)
	return r, nil
}

// The headers of the trace context. The CloudEvents distributed-tracing
// extension's attributes are traceparent and tracestate, which the Kafka
// binding writes with its "ce_" prefix; the plain W3C names are what
// OpenTelemetry's Kafka propagation reads. Both carry the stored values,
// unchanged.
const (
	headerTraceParent   = "traceparent"
	headerTraceState    = "tracestate"
	headerCETraceParent = "ce_" + headerTraceParent
	headerCETraceState  = "ce_" + headerTraceState
)

// traceHeaders returns how many trace headers m's record carries.
func traceHeaders(m Message) int {
	if m.TraceParent == "" {
		return 0
	}
	n := 2
	if m.TraceState != "" {
		n += 2
	}
	return n
}

// appendTrace appends m's trace context headers to hs. A trace state
// without a parent means nothing (W3C Trace Context) and is not written.
func appendTrace(hs []kgo.RecordHeader, m Message) []kgo.RecordHeader {
	if m.TraceParent == "" {
		return hs
	}
	// One allocation holds both values; each is shared by its two headers
	// (the producer only reads them).
	buf := make([]byte, 0, len(m.TraceParent)+len(m.TraceState))
	buf = append(buf, m.TraceParent...)
	tp := buf[:len(buf):len(buf)]
	hs = append(hs, kgo.RecordHeader{Key: headerTraceParent, Value: tp}, kgo.RecordHeader{Key: headerCETraceParent, Value: tp})
	if m.TraceState != "" {
		buf = append(buf, m.TraceState...)
		ts := buf[len(tp):]
		hs = append(hs, kgo.RecordHeader{Key: headerTraceState, Value: ts}, kgo.RecordHeader{Key: headerCETraceState, Value: ts})
	}
	return hs
}

// binaryRecord writes ce to a record of topic keyed by key, with the SDK's
// Kafka binding in binary content mode. The binding writes sarama's message
// type; the record carries the same bytes.
func binaryRecord(ctx context.Context, ce *cloudevents.Event, topic, key string) (*kgo.Record, error) {
	pm := &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(key)}
	ctx = binding.WithForceBinary(kafka_sarama.WithSkipKeyMapping(ctx))
	if err := kafka_sarama.WriteProducerMessage(ctx, binding.ToMessage(ce), pm); err != nil {
		return nil, fmt.Errorf("%w: encode event %s: %w", ErrUnpublishable, ce.ID(), err)
	}
	r := &kgo.Record{Topic: topic, Key: []byte(key), Headers: make([]kgo.RecordHeader, len(pm.Headers))}
	for i, h := range pm.Headers {
		r.Headers[i] = kgo.RecordHeader{Key: string(h.Key), Value: h.Value}
	}
	if pm.Value != nil {
		v, err := pm.Value.Encode()
		if err != nil {
			return nil, fmt.Errorf("%w: encode event %s: %w", ErrUnpublishable, ce.ID(), err)
		}
		r.Value = v
	}
	return r, nil
}
