package app_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/google/uuid"

	"github.com/loopers/commerce-pipeline/internal/reclaim"
	"github.com/loopers/commerce-pipeline/internal/testenv"
	"github.com/loopers/commerce-pipeline/pkg/events"
)

// TestIdempotencyHorizon: order and view events older than the retention of
// their idempotency records (minus the margin) are skipped and counted, not
// applied a second time after a replay; likes are not subject to it.
func TestIdempotencyHorizon(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	event := f.event(t)
	old := time.Now().Add(-90 * time.Minute) // past a 2h retention minus a 1h margin
	paid := func(id int64) events.Record {
		return event(events.OrderPaidV1{OrderID: id, PaymentID: id, Amount: 100, Items: []events.OrderItem{{ProductID: 1, Quantity: 1, UnitPrice: 100}}})
	}
	msgs := []*sarama.ProducerMessage{
		f.messageAt(t, "order-events", paid(1), uuid.NewString(), old),
		f.message(t, "order-events", paid(2), uuid.NewString()),
		f.messageAt(t, "product-events", event(events.ProductViewedV1{ProductID: 1}), uuid.NewString(), old),
		f.message(t, "product-events", event(events.ProductViewedV1{ProductID: 1}), uuid.NewString()),
		f.messageAt(t, "like-events", event(events.LikeCreatedV1{UserID: "u1", ProductID: 1}), uuid.NewString(), old),
		f.messageAt(t, "stock-events", event(events.StockDepletedV1{ProductID: 1}), uuid.NewString(), old),
	}
	if err := f.producer.SendMessages(msgs); err != nil {
		t.Fatal(err)
	}
	admin, done, stop := f.start(t, map[string]string{"PRODUCT_CONSUMERS_HANDLED_RETENTION": "2h", "PRODUCT_CONSUMERS_HORIZON_MARGIN": "1h"})
	conn := f.conn(t)
	type m struct{ Likes, Sales, Views int64 }
	want := m{Likes: 1, Sales: 1, Views: 1}
	var got m
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		_ = conn.QueryRow(ctx, `SELECT like_count, sales_count, view_count FROM product_metrics WHERE product_id = 1`).Scan(&got.Likes, &got.Sales, &got.Views)
		if got == want {
			break
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("product 1 (-want +got):\n%s", diff)
	}
	resp := testenv.Get(t, "http://"+admin+"/metrics")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, series := range []string{
		`product_consumer_events_total{consumer="order",outcome="expired"} 1`,
		`product_consumer_events_total{consumer="view",outcome="expired"} 1`,
	} {
		if !strings.Contains(string(body), series) {
			t.Errorf("/metrics lacks %s", series)
		}
	}
	// The re-drivers park what the consumers would skip: their list of
	// topics with a horizon must be exactly the consumers' that skip.
	topicOf := map[string]string{"order": "order-events", "view": "product-events", "like": "like-events", "stock": "stock-events"}
	var skipping []string
	for name, topic := range topicOf {
		if strings.Contains(string(body), `product_consumer_events_total{consumer="`+name+`",outcome="expired"}`) {
			skipping = append(skipping, topic)
		}
	}
	if diff := cmp.Diff(reclaim.HorizonTopics, skipping, cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" {
		t.Errorf("reclaim.HorizonTopics differs from the topics whose consumers skip old events (-reclaim +consumers):\n%s", diff)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
