package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/loopers/commerce-pipeline/internal/pg"
	"github.com/loopers/commerce-pipeline/internal/testenv"
	"github.com/loopers/commerce-pipeline/services/product-consumers/internal/store"
)

type metrics struct {
	Likes, Sales, Amount, Views int64
}

func open(t *testing.T) (*store.Store, *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	url := testenv.DatabaseURL(t)
	s, err := store.Open(ctx, url, pg.Options{MaxConns: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return s, conn
}

func readMetrics(t *testing.T, conn *pgx.Conn) map[int64]metrics {
	t.Helper()
	rows, err := conn.Query(context.Background(), `SELECT product_id, like_count, sales_count, sales_amount, view_count FROM product_metrics`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64]metrics{}
	for rows.Next() {
		var id int64
		var m metrics
		if err := rows.Scan(&id, &m.Likes, &m.Sales, &m.Amount, &m.Views); err != nil {
			t.Fatal(err)
		}
		out[id] = m
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestApplyOrderPaidOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, conn := open(t)
	sales := []store.Sale{{ProductID: 1, Quantity: 2, Amount: 200}, {ProductID: 2, Quantity: 1, Amount: 50}, {ProductID: 1, Quantity: 1, Amount: 100}}
	// Redeliveries race each other: exactly one may apply.
	var wg sync.WaitGroup
	var mu sync.Mutex
	applied := 0
	for range 20 {
		wg.Go(func() {
			ok, err := s.ApplyOrderPaid(ctx, "g:e1", sales)
			if err != nil {
				t.Error(err)
			}
			if ok {
				mu.Lock()
				applied++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if applied != 1 {
		t.Fatalf("applied %d times, want 1", applied)
	}
	if _, err := s.ApplyOrderPaid(ctx, "other-group:e1", sales[:1]); err != nil {
		t.Fatal(err)
	}
	want := map[int64]metrics{1: {Sales: 5, Amount: 500}, 2: {Sales: 1, Amount: 50}}
	if diff := cmp.Diff(want, readMetrics(t, conn)); diff != "" {
		t.Errorf("metrics mismatch (-want +got):\n%s", diff)
	}
}

func TestApplyViewsCountsOnlyNewEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, conn := open(t)
	n, err := s.ApplyViews(ctx, []store.View{{"g:a", 1}, {"g:b", 1}, {"g:c", 2}, {"g:a", 1}})
	if err != nil || n != 3 {
		t.Fatalf("first batch applied %d, %v; want 3", n, err)
	}
	n, err = s.ApplyViews(ctx, []store.View{{"g:c", 2}, {"g:d", 2}, {"g:b", 1}})
	if err != nil || n != 1 {
		t.Fatalf("redelivered batch applied %d, %v; want 1", n, err)
	}
	want := map[int64]metrics{1: {Views: 2}, 2: {Views: 2}}
	if diff := cmp.Diff(want, readMetrics(t, conn)); diff != "" {
		t.Errorf("metrics mismatch (-want +got):\n%s", diff)
	}
}

func TestApplyLikes(t *testing.T) {
	t.Parallel()
	type step struct {
		batch     []store.LikeChange
		wantDelta map[int64]int64
	}
	like := func(u string, p, seq int64) store.LikeChange {
		return store.LikeChange{UserID: u, ProductID: p, Liked: true, Sequence: seq}
	}
	cancel := func(u string, p, seq int64) store.LikeChange {
		return store.LikeChange{UserID: u, ProductID: p, Liked: false, Sequence: seq}
	}
	tests := []struct {
		name      string
		steps     []step
		wantLikes map[int64]int64
	}{
		{"like then redelivery", []step{
			{[]store.LikeChange{like("u", 1, 1)}, map[int64]int64{1: 1}},
			{[]store.LikeChange{like("u", 1, 1)}, map[int64]int64{}},
		}, map[int64]int64{1: 1}},
		{"last change in a batch wins", []step{
			{[]store.LikeChange{like("u", 1, 1), cancel("u", 1, 2), like("u", 1, 3), like("v", 1, 4), cancel("v", 1, 5)}, map[int64]int64{1: 1}},
		}, map[int64]int64{1: 1}},
		{"batch order does not matter", []step{
			{[]store.LikeChange{like("u", 1, 3), cancel("u", 1, 2), like("u", 1, 1)}, map[int64]int64{1: 1}},
		}, map[int64]int64{1: 1}},
		{"stale cancel after a newer like is ignored", []step{
			{[]store.LikeChange{like("u", 1, 5)}, map[int64]int64{1: 1}},
			{[]store.LikeChange{cancel("u", 1, 4)}, map[int64]int64{}},
		}, map[int64]int64{1: 1}},
		{"cancel counts down", []step{
			{[]store.LikeChange{like("u", 1, 1), like("v", 2, 2)}, map[int64]int64{1: 1, 2: 1}},
			{[]store.LikeChange{cancel("u", 1, 3)}, map[int64]int64{1: -1}},
		}, map[int64]int64{1: 0, 2: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s, conn := open(t)
			const issued = 4242
			if _, err := conn.Exec(ctx, `SELECT setval('outbox_id_seq', $1)`, issued); err != nil {
				t.Fatal(err)
			}
			for i, st := range tc.steps {
				res, err := s.ApplyLikes(ctx, st.batch)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(st.wantDelta, res.Delta); diff != "" {
					t.Errorf("step %d delta mismatch (-want +got):\n%s", i, diff)
				}
				if res.Issued != issued {
					t.Errorf("step %d: the outbox's last issued id read as %d, want %d", i, res.Issued, issued)
				}
			}
			got := map[int64]int64{}
			for id, m := range readMetrics(t, conn) {
				got[id] = m.Likes
			}
			if diff := cmp.Diff(tc.wantLikes, got); diff != "" {
				t.Errorf("like counts mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// Many members applying overlapping, duplicated and reordered batches of one
// event stream at once (as during a rebalance) must end in the state of the
// last event per (user, product), and like_count must equal the liked states.
func TestApplyLikesConvergesUnderRacingRedelivery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, conn := open(t)
	rng := rand.New(rand.NewPCG(1, 2))
	type userProduct struct {
		user    string
		product int64
	}
	var stream []store.LikeChange
	lastLiked := map[userProduct]bool{}
	for seq := int64(1); seq <= 3000; seq++ {
		k := userProduct{fmt.Sprintf("u%d", rng.IntN(30)), int64(1 + rng.IntN(5))}
		lastLiked[k] = !lastLiked[k]
		stream = append(stream, store.LikeChange{UserID: k.user, ProductID: k.product, Liked: lastLiked[k], Sequence: seq})
	}
	want := map[int64]int64{}
	for k, liked := range lastLiked {
		want[k.product] += map[bool]int64{true: 1}[liked]
	}
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 9))
			for i := 0; i < len(stream); {
				n := 1 + r.IntN(60)
				end := min(i+n, len(stream))
				batch := append([]store.LikeChange(nil), stream[i:end]...)
				r.Shuffle(len(batch), func(a, b int) { batch[a], batch[b] = batch[b], batch[a] })
				if _, err := s.ApplyLikes(ctx, batch); err != nil {
					t.Error(err)
					return
				}
				// Sometimes step back, redelivering what was seen.
				if r.IntN(4) == 0 {
					i = max(0, i-r.IntN(100))
				} else {
					i = end
				}
			}
		})
	}
	wg.Wait()
	got := map[int64]int64{}
	for id, m := range readMetrics(t, conn) {
		got[id] = m.Likes
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("like counts mismatch (-want +got):\n%s", diff)
	}
	var liked int64
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM product_like_state WHERE liked`).Scan(&liked); err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, n := range want {
		sum += n
	}
	if liked != sum {
		t.Errorf("liked states %d, want %d", liked, sum)
	}
}

func TestPurgeHandled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, conn := open(t)
	if _, err := conn.Exec(ctx, `
		INSERT INTO event_handled (idempotency_key, created_at)
		SELECT 'old:' || i, now() - interval '8 days' FROM generate_series(1, 2500) i;
		INSERT INTO event_handled (idempotency_key) SELECT 'new:' || i FROM generate_series(1, 10) i`); err != nil {
		t.Fatal(err)
	}
	n, err := s.PurgeHandled(ctx, 7*24*time.Hour, 1000)
	if err != nil || n != 2500 {
		t.Fatalf("purged %d, %v; want 2500", n, err)
	}
	var left int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM event_handled`).Scan(&left); err != nil || left != 10 {
		t.Fatalf("%d rows left, %v; want the 10 recent ones", left, err)
	}
}

// TestAggregateWritesDoNotNotify: no trigger on the tables an aggregate
// commit writes may NOTIFY. A notifying transaction holds PostgreSQL's
// database-wide notify lock from pre-commit until its commit record is
// flushed, so every consumer commit would queue behind every other one.
func TestAggregateWritesDoNotNotify(t *testing.T) {
	t.Parallel()
	_, conn := open(t)
	rows, err := conn.Query(context.Background(), `
		SELECT t.tgrelid::regclass::text || '.' || t.tgname
		FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid
		WHERE t.tgrelid IN ('product_likes'::regclass, 'product_sales'::regclass, 'product_views'::regclass,
			'event_handled'::regclass, 'product_like_state'::regclass)
		  AND p.prosrc ILIKE '%notify%'`)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(names) > 0 {
		t.Errorf("triggers that NOTIFY on the aggregate write path: %v", names)
	}
}
