package app_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/loopers/commerce-pipeline/pkg/events"
)

// TestHotProductRuns: a flash sale's backlog on one product (thousands of
// views, and likes and cancels by many users) is applied exactly, in runs:
// far fewer transactions than events.
func TestHotProductRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	event := f.event(t)
	const views, users = 3000, 100
	var msgs []*sarama.ProducerMessage
	for range views {
		msgs = append(msgs, f.message(t, "product-events", event(events.ProductViewedV1{ProductID: 1, UserID: "u"}), uuid.NewString()))
	}
	msgs = append(msgs, f.message(t, "product-events", event(events.ProductViewedV1{ProductID: 2}), uuid.NewString()))
	// Every user likes, cancels and likes again; even users then cancel.
	for round := range 4 {
		for u := range users {
			user := fmt.Sprintf("user%d", u)
			switch {
			case round%2 == 0:
				msgs = append(msgs, f.message(t, "like-events", event(events.LikeCreatedV1{UserID: user, ProductID: 1}), uuid.NewString()))
			case round == 1 || u%2 == 0:
				msgs = append(msgs, f.message(t, "like-events", event(events.LikeCanceledV1{UserID: user, ProductID: 1}), uuid.NewString()))
			}
		}
	}
	for len(msgs) > 0 {
		n := min(len(msgs), 500)
		if err := f.producer.SendMessages(msgs[:n]); err != nil {
			t.Fatal(err)
		}
		msgs = msgs[n:]
	}

	_, done, stop := f.start(t, map[string]string{"PRODUCT_CONSUMERS_GROUPS": "like,view"})
	conn := f.conn(t)
	type m struct{ Likes, Views int64 }
	want := map[int64]m{1: {Likes: users / 2, Views: views}, 2: {Views: 1}}
	var got map[int64]m
	for deadline := time.Now().Add(60 * time.Second); ; {
		got = map[int64]m{}
		rows, err := conn.Query(ctx, `SELECT product_id, like_count, view_count FROM product_metrics`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id int64
			var v m
			if err := rows.Scan(&id, &v.Likes, &v.Views); err != nil {
				t.Fatal(err)
			}
			got[id] = v
		}
		if cmp.Equal(want, got) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("product_metrics (-want +got):\n%s", diff)
	}
	// The rows one transaction inserts share its start time, so distinct
	// created_at values count the view consumer's transactions.
	var txs int
	if err := conn.QueryRow(ctx, `SELECT count(DISTINCT created_at) FROM event_handled
		WHERE idempotency_key LIKE 'product-view-consumer:%'`).Scan(&txs); err != nil {
		t.Fatal(err)
	}
	if txs > views/10 {
		t.Errorf("the view consumer used %d transactions for %d views of one product, want at most %d: the hot key was not batched", txs, views, views/10)
	}
	t.Logf("%d views of one product applied in %d transactions", views, txs)
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
