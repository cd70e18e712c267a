package publisher

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/loopers/commerce-pipeline/pkg/events"
)

// BenchmarkProducerMessage maps one event to a record as the relay does,
// and through the SDK's Kafka binding for comparison.
func BenchmarkProducerMessage(b *testing.B) {
	reg := events.NewRegistry()
	rec, err := reg.Marshal(events.OrderPaidV1{OrderID: 1, PaymentID: 2, Amount: 12000,
		Items: []events.OrderItem{{ProductID: 3, Quantity: 2, UnitPrice: 6000}}})
	if err != nil {
		b.Fatal(err)
	}
	w := &recordWriter{reg: reg}
	m := Message{Sequence: 12345, EventID: uuid.NewString(), Type: rec.Type, Source: "commerce-api",
		AggregateType: rec.AggregateType, AggregateID: rec.AggregateID, Data: rec.Data, Time: time.Now()}
	for _, bm := range []struct {
		name  string
		write func(context.Context, Message) error
	}{
		{"relay", func(ctx context.Context, m Message) error { _, err := w.write(ctx, m); return err }},
		// The same event with its stored trace context: four headers more.
		{"relay with trace context", func(ctx context.Context, m Message) error {
			m.TraceParent, m.TraceState = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "vendor=opaque"
			_, err := w.write(ctx, m)
			return err
		}},
		{"sdk binding", func(ctx context.Context, m Message) error { _, err := w.viaSDK(ctx, m); return err }},
	} {
		b.Run(bm.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := bm.write(context.Background(), m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
