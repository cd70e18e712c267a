package store_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/loopers/commerce-pipeline/internal/outbox"
	"github.com/loopers/commerce-pipeline/pkg/events"
)

// BenchmarkReadBatch reads batches of 1,000 rows, as the relay does while
// it drains a backlog.
func BenchmarkReadBatch(b *testing.B) {
	env, st := newStore(b)
	ctx := context.Background()
	rec, err := env.Reg.Marshal(events.OrderPaidV1{OrderID: 7, PaymentID: 8, Amount: 12000,
		Items: []events.OrderItem{{ProductID: 3, Quantity: 2, UnitPrice: 6000}}})
	if err != nil {
		b.Fatal(err)
	}
	const rows, batch = 10_000, 1000
	_, err = env.Pool.CopyFrom(ctx, pgx.Identifier{"outbox"}, outbox.Columns, pgx.CopyFromSlice(rows, func(int) ([]any, error) {
		return outbox.Entry{EventID: uuid.NewString(), Source: "commerce-api", Record: rec}.Values(), nil
	}))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	after := int64(0)
	for b.Loop() {
		got, err := st.ReadBatch(ctx, after, batch)
		if err != nil {
			b.Fatal(err)
		}
		after = 0
		if len(got.Rows) == batch {
			after = got.Rows[len(got.Rows)-1].ID
		}
	}
}
