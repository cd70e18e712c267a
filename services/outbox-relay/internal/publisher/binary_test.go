package publisher

import (
	"bytes"
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/cloudevents/sdk-go/protocol/kafka_sarama/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/loopers/commerce-pipeline/pkg/events"
)

// sdkRecord maps m the way the relay did before it wrote records itself:
// the registry's CloudEvent through the SDK's Kafka binding in binary mode.
func sdkRecord(reg *events.Registry, m Message) (*sarama.ProducerMessage, error) {
	topic, err := events.TopicOf(m.Type)
	if err != nil {
		return nil, err
	}
	ce, err := reg.ToCloudEvent(events.Envelope{ID: m.EventID, Source: m.Source, Time: m.Time, Sequence: m.Sequence,
		Record: events.Record{Type: m.Type, AggregateType: m.AggregateType, AggregateID: m.AggregateID, Data: m.Data}})
	if err != nil {
		return nil, err
	}
	pm := &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(m.AggregateID)}
	ctx := binding.WithForceBinary(kafka_sarama.WithSkipKeyMapping(context.Background()))
	return pm, kafka_sarama.WriteProducerMessage(ctx, binding.ToMessage(&ce), pm)
}

// record is a ProducerMessage as it goes on the wire.
type record struct {
	Topic      string
	Key, Value []byte
	Headers    []sarama.RecordHeader
}

func wire(t *testing.T, pm *sarama.ProducerMessage) record {
	t.Helper()
	r := record{Topic: pm.Topic, Headers: pm.Headers}
	for dst, e := range map[*[]byte]sarama.Encoder{&r.Key: pm.Key, &r.Value: pm.Value} {
		if e == nil {
			continue
		}
		b, err := e.Encode()
		if err != nil {
			t.Fatal(err)
		}
		*dst = b
	}
	return r
}

// wireRecord is wire for a record the relay wrote.
func wireRecord(r *kgo.Record) record {
	out := record{Topic: r.Topic, Key: r.Key, Value: r.Value, Headers: make([]sarama.RecordHeader, len(r.Headers))}
	for i, h := range r.Headers {
		out.Headers[i] = sarama.RecordHeader{Key: []byte(h.Key), Value: h.Value}
	}
	return out
}

// sortedHeaders orders headers by key: the SDK writes extensions in map
// order, which varies from call to call.
func sortedHeaders(hs []sarama.RecordHeader) []sarama.RecordHeader {
	out := slices.Clone(hs)
	slices.SortFunc(out, func(a, b sarama.RecordHeader) int { return bytes.Compare(a.Key, b.Key) })
	return out
}

// messages covers every event type of the registry and the edges of each
// attribute: times in other zones, with and without fractions, and zero;
// ids with spaces around; sources the SDK rewrites; odd aggregate ids,
// sequences, and empty data; a type this build does not know.
func messages(t *testing.T, reg *events.Registry) map[string]Message {
	t.Helper()
	at := time.Date(2026, 3, 4, 5, 6, 7, 891_234_567, time.UTC)
	evs := map[string]any{
		"order paid":     events.OrderPaidV1{OrderID: 7, PaymentID: 8, Amount: 12000, Items: []events.OrderItem{{ProductID: 3, Quantity: 2, UnitPrice: 6000}}},
		"like created":   events.LikeCreatedV1{UserID: "user-1", ProductID: 3},
		"like canceled":  events.LikeCanceledV1{UserID: "user-1", ProductID: 3},
		"product viewed": events.ProductViewedV1{ProductID: 3, UserID: "user-2"},
		"stock depleted": events.StockDepletedV1{ProductID: 3},
	}
	out := map[string]Message{}
	for name, ev := range evs {
		rec, err := reg.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = Message{Sequence: 42, EventID: "0b7c2b4e-9a0f-4d7e-8f1a-4f3f1d2c5e6a", Type: rec.Type, Source: "commerce-api",
			AggregateType: rec.AggregateType, AggregateID: rec.AggregateID, Data: rec.Data, Time: at}
	}
	if len(out) != len(reg.Types()) {
		t.Fatalf("%d sample events for %d registered types", len(out), len(reg.Types()))
	}
	base := out["order paid"]
	vary := func(name string, f func(m *Message)) {
		m := base
		f(&m)
		out[name] = m
	}
	seoul := time.FixedZone("KST", 9*3600)
	vary("time in another zone", func(m *Message) { m.Time = at.In(seoul) })
	vary("time without a fraction", func(m *Message) { m.Time = time.Date(2026, 3, 4, 5, 6, 7, 0, seoul) })
	vary("time with a millisecond fraction", func(m *Message) { m.Time = time.Date(2026, 3, 4, 5, 6, 7, 120_000_000, time.UTC) })
	vary("zero time", func(m *Message) { m.Time = time.Time{} })
	vary("id with spaces around", func(m *Message) { m.EventID = "  " + m.EventID + "\t" })
	vary("blank id", func(m *Message) { m.EventID = "   " })
	vary("source the SDK escapes", func(m *Message) { m.Source = "commerce api/ü" })
	vary("absolute source", func(m *Message) { m.Source = "https://api.example.com/commerce?x=1#f" })
	vary("source that is no URI", func(m *Message) { m.Source = "%zz" })
	vary("empty source", func(m *Message) { m.Source = "" })
	vary("unicode aggregate id", func(m *Message) { m.AggregateID = "주문-7" })
	vary("empty aggregate id", func(m *Message) { m.AggregateID = "" })
	vary("empty aggregate type", func(m *Message) { m.AggregateType = "" })
	vary("largest sequence", func(m *Message) { m.Sequence = events.MaxSequence })
	vary("negative sequence", func(m *Message) { m.Sequence = -1 })
	vary("empty data", func(m *Message) { m.Data = nil })
	vary("type unknown to this build", func(m *Message) { m.Type, m.Data = "loopers.order.refunded.v2", []byte(`{"orderId":7}`) })
	vary("type with no topic", func(m *Message) { m.Type = "order.paid" })
	return out
}

// TestRecordsAreTheSDKs: every record the relay writes is the record the
// SDK's Kafka binding writes for the same event: the same topic, key and
// value, the same headers with the same bytes (attributes in the SDK's
// order), and an error exactly where the SDK refuses the event.
func TestRecordsAreTheSDKs(t *testing.T) {
	t.Parallel()
	reg := events.NewRegistry()
	w := &recordWriter{reg: reg}
	for name, m := range messages(t, reg) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			want, wantErr := sdkRecord(reg, m)
			for pass := range 2 { // the first maps the shape, the second uses it
				got, err := w.write(context.Background(), m)
				if (err != nil) != (wantErr != nil) {
					t.Fatalf("pass %d: error %v, the SDK's %v", pass, err, wantErr)
				}
				if err != nil {
					if !Unpublishable(err) {
						t.Errorf("error %v is not unpublishable", err)
					}
					continue
				}
				g, wnt := wireRecord(got), wire(t, want)
				if len(g.Headers) != len(wnt.Headers) {
					t.Fatalf("pass %d: %d headers, the SDK's %d", pass, len(g.Headers), len(wnt.Headers))
				}
				// Attributes come first, in the SDK's order; it writes the
				// three extensions after them, in map order.
				if diff := cmp.Diff(wnt.Headers[:len(g.Headers)-3], g.Headers[:len(g.Headers)-3]); diff != "" {
					t.Errorf("pass %d: attributes (-sdk +relay):\n%s", pass, diff)
				}
				g.Headers, wnt.Headers = sortedHeaders(g.Headers), sortedHeaders(wnt.Headers)
				if diff := cmp.Diff(wnt, g); diff != "" {
					t.Errorf("pass %d: record (-sdk +relay):\n%s", pass, diff)
				}
			}
		})
	}
}

// TestSDKReadsTheRecords: the SDK's Kafka binding, as consumers use it,
// reads every attribute of a written record back as it was given.
func TestSDKReadsTheRecords(t *testing.T) {
	t.Parallel()
	reg := events.NewRegistry()
	w := &recordWriter{reg: reg}
	for name, m := range messages(t, reg) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pm, err := w.write(context.Background(), m)
			if err != nil {
				return // TestRecordsAreTheSDKs holds the errors to the SDK's
			}
			r := wireRecord(pm)
			cm := &sarama.ConsumerMessage{Topic: r.Topic, Key: r.Key, Value: r.Value}
			for _, h := range r.Headers {
				cm.Headers = append(cm.Headers, &sarama.RecordHeader{Key: h.Key, Value: h.Value})
			}
			msg := kafka_sarama.NewMessageFromConsumerMessage(cm)
			if enc := msg.ReadEncoding(); enc != binding.EncodingBinary {
				t.Fatalf("encoding %v, want binary", enc)
			}
			ce, err := binding.ToEvent(context.Background(), msg)
			if err != nil {
				t.Fatal(err)
			}
			type attrs struct {
				ID, Type, Source, DataContentType string
				Time                              time.Time
				Extensions                        map[string]any
				Data                              []byte
			}
			ref, err := sdkRecord(reg, m)
			if err != nil {
				t.Fatal(err)
			}
			source := string(headerValue(ref.Headers, headerSource)) // as the SDK writes the source
			want := attrs{ID: strings.TrimSpace(m.EventID), Type: m.Type, Source: source, DataContentType: "application/json",
				Time: m.Time, Data: m.Data, Extensions: map[string]any{
					events.ExtAggregateType: m.AggregateType, events.ExtAggregateID: m.AggregateID,
					events.ExtSequence: strconv.FormatInt(m.Sequence, 10),
				}}
			got := attrs{ID: ce.ID(), Type: ce.Type(), Source: ce.Source(), DataContentType: ce.DataContentType(),
				Time: ce.Time(), Extensions: ce.Extensions(), Data: ce.Data()}
			// The reader adds where the record was read from.
			for k := range got.Extensions {
				if strings.HasPrefix(k, "kafka") {
					delete(got.Extensions, k)
				}
			}
			if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
				t.Errorf("attributes read back (-given +read):\n%s", diff)
			}
			if key := string(cm.Key); key != m.AggregateID {
				t.Errorf("key %q, want the aggregate id %q", key, m.AggregateID)
			}
		})
	}
}

func headerValue(hs []sarama.RecordHeader, key string) []byte {
	for _, h := range hs {
		if string(h.Key) == key {
			return h.Value
		}
	}
	return nil
}

// TestShapesBounded: past maxShapes shapes, events of new shapes are still
// written exactly as the SDK writes them, and the remembered shapes stay
// at the bound.
func TestShapesBounded(t *testing.T) {
	t.Parallel()
	reg := events.NewRegistry()
	w := &recordWriter{reg: reg}
	m := messages(t, reg)["order paid"]
	for i := range maxShapes + 10 {
		m.Source = "commerce-api-" + strconv.Itoa(i)
		got, err := w.write(context.Background(), m)
		if err != nil {
			t.Fatal(err)
		}
		if i < maxShapes-5 {
			continue
		}
		want, err := sdkRecord(reg, m)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(sortedHeaders(want.Headers), sortedHeaders(wireRecord(got).Headers)); diff != "" {
			t.Fatalf("shape %d: headers (-sdk +relay):\n%s", i, diff)
		}
	}
	if n := w.n.Load(); n != maxShapes {
		t.Errorf("%d shapes remembered, want %d", n, maxShapes)
	}
}

// TestWriteConcurrently maps events of several shapes from many goroutines
// at once, as Prepare does, for the race detector.
func TestWriteConcurrently(t *testing.T) {
	t.Parallel()
	reg := events.NewRegistry()
	w := &recordWriter{reg: reg}
	ms := messages(t, reg)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20 {
				for _, m := range ms {
					_, err := w.write(context.Background(), m)
					_, wantErr := sdkRecord(reg, m)
					if (err != nil) != (wantErr != nil) {
						t.Errorf("%s: error %v, the SDK's %v", m.Type, err, wantErr)
					}
				}
			}
		})
	}
	wg.Wait()
}
