package events_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/cloudevents/sdk-go/protocol/kafka_sarama/v2"
	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/google/go-cmp/cmp"

	"github.com/loopers/commerce-pipeline/pkg/events"
)

func TestTopicOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, typ, want string
		wantErr         bool
	}{
		{name: "order", typ: "loopers.order.paid.v1", want: "order-events"},
		{name: "product", typ: "loopers.product.viewed.v12", want: "product-events"},
		{name: "other company", typ: "acme.order.paid.v1", wantErr: true},
		{name: "no version", typ: "loopers.order.paid", wantErr: true},
		{name: "bad version", typ: "loopers.order.paid.vx", wantErr: true},
		{name: "empty domain", typ: "loopers..paid.v1", wantErr: true},
		{name: "too many parts", typ: "loopers.a.b.c.v1", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := events.TopicOf(tc.typ)
			if tc.wantErr {
				if !errors.Is(err, events.ErrUnprocessable) {
					t.Fatalf("TopicOf(%q) error = %v, want a permanent error", tc.typ, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("TopicOf(%q) = %q, %v; want %q", tc.typ, got, err, tc.want)
			}
		})
	}
}

func TestTopics(t *testing.T) {
	t.Parallel()
	reg := events.NewRegistry()
	want := []string{"like-events", "order-events", "product-events", "stock-events"}
	if diff := cmp.Diff(want, reg.Topics()); diff != "" {
		t.Errorf("Topics() mismatch (-want +got):\n%s", diff)
	}
	wantAll := []string{
		"like-events", "like-events.DLT", "like-events.PARKED", "order-events", "order-events.DLT", "order-events.PARKED",
		"product-events", "product-events.DLT", "product-events.PARKED", "stock-events", "stock-events.DLT", "stock-events.PARKED",
	}
	if diff := cmp.Diff(wantAll, reg.AllTopics()); diff != "" {
		t.Errorf("AllTopics() mismatch (-want +got):\n%s", diff)
	}
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	reg := events.NewRegistry()
	tests := []struct {
		name          string
		ev            any
		wantType      string
		wantAggregate string
		wantID        string
	}{
		{"order paid", events.OrderPaidV1{OrderID: 9, PaymentID: 3, Amount: 3000,
			Items: []events.OrderItem{{ProductID: 1, Quantity: 2, UnitPrice: 1500}}},
			"loopers.order.paid.v1", events.AggregateOrder, "9"},
		{"like created", events.LikeCreatedV1{UserID: "u1", ProductID: 7}, "loopers.like.created.v1", events.AggregateProduct, "7"},
		{"like canceled", events.LikeCanceledV1{UserID: "u1", ProductID: 7}, "loopers.like.canceled.v1", events.AggregateProduct, "7"},
		{"viewed anonymously", events.ProductViewedV1{ProductID: 5}, "loopers.product.viewed.v1", events.AggregateProduct, "5"},
		{"stock depleted", events.StockDepletedV1{ProductID: 4}, "loopers.stock.depleted.v1", events.AggregateProduct, "4"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec, err := reg.Marshal(tc.ev)
			if err != nil {
				t.Fatal(err)
			}
			if rec.Type != tc.wantType || rec.AggregateType != tc.wantAggregate || rec.AggregateID != tc.wantID {
				t.Fatalf("Marshal = %+v; want type %s aggregate %s/%s", rec, tc.wantType, tc.wantAggregate, tc.wantID)
			}
			at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			env := events.Envelope{ID: "0b7c2b4e-9a0f-4d7e-8f1a-4f3f1d2c5e6a", Source: "commerce-api", Time: at, Sequence: 42, Record: rec}
			ce, err := reg.ToCloudEvent(env)
			if err != nil {
				t.Fatal(err)
			}
			cm := throughKafka(t, ce)
			if !hasHeader(cm.Headers, "ce_aggregateid") {
				t.Fatal("binary mode must carry the aggregateid extension as a ce_ header")
			}
			msg := kafka_sarama.NewMessageFromConsumerMessage(cm)
			if msg.ReadEncoding() != binding.EncodingBinary {
				t.Fatalf("encoding = %v, want binary", msg.ReadEncoding())
			}
			back, err := binding.ToEvent(context.Background(), msg)
			if err != nil {
				t.Fatal(err)
			}
			got, err := reg.FromCloudEvent(*back)
			if err != nil {
				t.Fatal(err)
			}
			want := events.Message{ID: env.ID, Type: tc.wantType, Source: "commerce-api", Time: at,
				AggregateType: tc.wantAggregate, AggregateID: tc.wantID, Sequence: 42, Event: tc.ev}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("round trip mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMarshalUnknown(t *testing.T) {
	t.Parallel()
	type notAnEvent struct{ X int }
	if _, err := events.NewRegistry().Marshal(notAnEvent{}); !errors.Is(err, events.ErrUnknownType) {
		t.Fatalf("Marshal(unknown) error = %v, want ErrUnknownType", err)
	}
}

func TestUnmarshalErrors(t *testing.T) {
	t.Parallel()
	reg := events.NewRegistry()
	tests := []struct {
		name, typ, data string
		want            error
	}{
		{"unknown type", "loopers.order.refunded.v1", `{}`, events.ErrUnknownType},
		{"not json", "loopers.like.created.v1", `{`, events.ErrBadData},
		{"wrong field type", "loopers.like.created.v1", `{"userId":1,"productId":2}`, events.ErrBadData},
		{"missing product", "loopers.like.created.v1", `{"userId":"u"}`, events.ErrBadData},
		{"missing user", "loopers.like.canceled.v1", `{"productId":3}`, events.ErrBadData},
		{"order without items", "loopers.order.paid.v1", `{"orderId":1,"paymentId":1,"amount":0}`, events.ErrBadData},
		{"order with bad item", "loopers.order.paid.v1", `{"orderId":1,"paymentId":1,"amount":0,"items":[{"productId":1,"quantity":0}]}`, events.ErrBadData},
		{"trailing data", "loopers.stock.depleted.v1", `{"productId":3} {}`, events.ErrBadData},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := reg.Unmarshal(tc.typ, []byte(tc.data))
			if !errors.Is(err, tc.want) || !errors.Is(err, events.ErrUnprocessable) {
				t.Fatalf("Unmarshal error = %v, want %v (permanent)", err, tc.want)
			}
		})
	}
}

func TestFromCloudEventMissingExtensions(t *testing.T) {
	t.Parallel()
	reg := events.NewRegistry()
	rec, err := reg.Marshal(events.StockDepletedV1{ProductID: 1})
	if err != nil {
		t.Fatal(err)
	}
	good, err := reg.ToCloudEvent(events.Envelope{ID: "0b7c2b4e-9a0f-4d7e-8f1a-4f3f1d2c5e6a", Source: "s", Time: time.Now(), Sequence: 1, Record: rec})
	if err != nil {
		t.Fatal(err)
	}
	for _, ext := range []string{events.ExtAggregateType, events.ExtAggregateID, events.ExtSequence} {
		t.Run("without "+ext, func(t *testing.T) {
			t.Parallel()
			ce := good.Clone()
			ce.SetExtension(ext, nil)
			if _, err := reg.FromCloudEvent(ce); !errors.Is(err, events.ErrBadData) {
				t.Fatalf("FromCloudEvent error = %v, want ErrBadData", err)
			}
		})
	}
}

func FuzzUnmarshal(f *testing.F) {
	reg := events.NewRegistry()
	for _, w := range wire {
		rec, err := reg.Marshal(w.ev)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(rec.Type, []byte(w.current))
		f.Add(rec.Type, []byte(w.older))
	}
	f.Add("loopers.x.y.v1", []byte(`null`))
	f.Fuzz(func(t *testing.T, typ string, data []byte) {
		ev, err := reg.Unmarshal(typ, data)
		if err != nil {
			if !errors.Is(err, events.ErrUnprocessable) {
				t.Fatalf("decode error %v is not permanent", err)
			}
			return
		}
		// Whatever decodes must encode again to the same type.
		rec, err := reg.Marshal(ev)
		if err != nil || rec.Type != typ {
			t.Fatalf("re-marshal of %T = %+v, %v; want type %s", ev, rec, err, typ)
		}
	})
}

// throughKafka writes ce through the Kafka binding in binary mode, as the
// relay does, and returns the record a consumer reads.
func throughKafka(t *testing.T, ce cloudevents.Event) *sarama.ConsumerMessage {
	t.Helper()
	pm := &sarama.ProducerMessage{Topic: "x"}
	if err := kafka_sarama.WriteProducerMessage(context.Background(), binding.ToMessage(&ce), pm); err != nil {
		t.Fatal(err)
	}
	cm := &sarama.ConsumerMessage{Topic: "x", Value: mustEncode(t, pm.Value)}
	for _, h := range pm.Headers {
		cm.Headers = append(cm.Headers, &sarama.RecordHeader{Key: h.Key, Value: h.Value})
	}
	return cm
}

func mustEncode(t *testing.T, enc sarama.Encoder) []byte {
	t.Helper()
	if enc == nil {
		return nil
	}
	b, err := enc.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func hasHeader(hs []*sarama.RecordHeader, key string) bool {
	for _, h := range hs {
		if string(h.Key) == key {
			return true
		}
	}
	return false
}
