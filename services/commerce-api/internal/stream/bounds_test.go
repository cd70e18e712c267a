package stream_test

import (
	"context"
	"database/sql"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loopers/commerce-pipeline/internal/pg"
	"github.com/loopers/commerce-pipeline/internal/testenv"
	"github.com/loopers/commerce-pipeline/pkg/events"
	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/store"
	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/stream"
)

// counting is a Source that counts the hub's reads.
type counting struct {
	stream.Source
	changes, top, summary atomic.Int64
}

func (c *counting) ChangesSince(ctx context.Context, since uint64, limit int) (store.Changes, error) {
	c.changes.Add(1)
	return c.Source.ChangesSince(ctx, since, limit)
}

func (c *counting) TopProducts(ctx context.Context, n int) (store.Snapshot, error) {
	c.top.Add(1)
	return c.Source.TopProducts(ctx, n)
}

func (c *counting) PipelineStats(ctx context.Context) (store.Pipeline, error) {
	c.summary.Add(1)
	return c.Source.PipelineStats(ctx)
}

func (c *counting) reads() [3]int64 {
	return [3]int64{c.changes.Load(), c.top.Load(), c.summary.Load()}
}

// runHub runs a hub over src until the test ends.
func runHub(t *testing.T, src stream.Source, cfg stream.Config) *stream.Hub {
	t.Helper()
	hub := stream.New(src, nil, cfg, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- hub.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("hub.Run: %v", err)
		}
	})
	return hub
}

func openStore(t *testing.T, url string) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), url, pg.Options{MaxConns: 4}, events.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestIdleHubReadsNothing: with no stream open the hub reads neither
// changes nor the summary; while one is, it reads both; once the last one
// closes, it stops again.
func TestIdleHubReadsNothing(t *testing.T) {
	t.Parallel()
	src := &counting{Source: openStore(t, testenv.DatabaseURL(t))}
	hub := runHub(t, src, stream.Config{Coalesce: 10 * time.Millisecond, SummaryEvery: 20 * time.Millisecond})

	time.Sleep(300 * time.Millisecond)
	if got := src.reads(); got != [3]int64{} {
		t.Fatalf("reads (changes, top, summary) with no stream ever open: %v, want none", got)
	}
	s, err := hub.Subscribe(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for r := src.reads(); r[0] < 5 || r[2] < 5; r = src.reads() {
		if time.Now().After(deadline) {
			t.Fatalf("reads while a stream is open: %v, want changes and summaries every few ms", r)
		}
		time.Sleep(10 * time.Millisecond)
	}
	hub.Unsubscribe(s)
	time.Sleep(100 * time.Millisecond) // a read under way may finish
	before := src.reads()
	time.Sleep(300 * time.Millisecond)
	if after := src.reads(); after != before {
		t.Errorf("reads after the last stream closed went from %v to %v, want no more", before, after)
	}
}

// TestMemoryBounded: however many products change, the hub remembers the
// last state of only those a read can still return.
func TestMemoryBounded(t *testing.T) {
	t.Parallel()
	url := testenv.DatabaseURL(t)
	// A limit above the catalogue: another test's transaction on the same
	// server can hold the watermark below the products' creation, and then
	// a read returns them all.
	hub := runHub(t, openStore(t, url), stream.Config{Coalesce: 10 * time.Millisecond, SummaryEvery: time.Hour, ClientBuffer: 10_000, ResumeLimit: 10_000})
	db := openDB(t, url)
	const products = 3000
	exec(t, db, `INSERT INTO products (name, price, stock) SELECT 'p' || i, 1000, 10 FROM generate_series(1, $1::int) i`, products)
	s, err := hub.Subscribe(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer hub.Unsubscribe(s)
	seen := map[int64]bool{}
	for from := 1; from <= products; from += 100 {
		exec(t, db, `INSERT INTO product_likes AS m (product_id, like_count)
			SELECT id, 1 FROM products WHERE id BETWEEN $1 AND $1 + 99
			ON CONFLICT (product_id) DO UPDATE SET like_count = m.like_count + 1`, from)
		for len(seen) < from+99 {
			for _, p := range next(t, s).Products {
				seen[p.ID] = true
			}
		}
	}
	// Once the watermark passes the writes, nothing is remembered. The
	// watermark is the cluster's oldest running transaction, so a long
	// transaction of another test (another database on the same server)
	// holds it back as long as it runs: first wait for that, then the
	// hub's next reads must forget.
	var after uint64
	if err := db.QueryRowContext(t.Context(), `SELECT pg_current_xact_id()::text::bigint`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(3 * time.Minute); hub.Cursor() <= after; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the hub's watermark %d did not pass transaction %d in 3 minutes", hub.Cursor(), after)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for n := hub.Remembered(); n > 100; n = hub.Remembered() {
		if time.Now().After(deadline) {
			t.Fatalf("the hub remembers %d products after %d changed and its watermark passed them, want at most 100", n, products)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestBulkChangeIsReset: more changes in one read than ResumeLimit (a bulk
// update) reach the clients as one reset, not as every product.
func TestBulkChangeIsReset(t *testing.T) {
	t.Parallel()
	url := testenv.DatabaseURL(t)
	hub := runHub(t, openStore(t, url), stream.Config{Coalesce: 10 * time.Millisecond, SummaryEvery: time.Hour, ResumeLimit: 20, ResetTop: 5})
	db := openDB(t, url)
	exec(t, db, `INSERT INTO products (name, price, stock) SELECT 'p' || i, 1000, 10 FROM generate_series(1, 100) i`)
	s, err := hub.Subscribe(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer hub.Unsubscribe(s)
	next(t, s) // ready
	exec(t, db, `WITH l AS (UPDATE product_likes SET like_count = product_id)
		UPDATE product_views SET view_count = 100 - product_id`)
	// The products' creation may come first as changes or as a reset of
	// zeros (another test's transaction can hold the watermark below it);
	// the update is the reset that holds product 1's views.
	var ev event
	for !slices.ContainsFunc(ev.Products, func(p store.ProductChange) bool { return p.ID == 1 && p.ViewCount == 99 }) {
		ev = next(t, s)
		if ev.Name == stream.ChangesEvent && len(ev.Products) > 20 {
			t.Fatalf("a changes event of %d products, above the limit of 20", len(ev.Products))
		}
	}
	if ev.Name != stream.ResetEvent {
		t.Fatalf("after 100 changes with a limit of 20: event %q, want %q", ev.Name, stream.ResetEvent)
	}
	got := map[int64]bool{}
	for _, p := range ev.Products {
		got[p.ID] = true
	}
	// The top 5 by likes (100..96), by views (1..5; id 1 has 99 views), and
	// by sales (all zero: the newest five, 100..96 again).
	for _, id := range []int64{100, 99, 98, 97, 96, 1, 2, 3, 4, 5} {
		if !got[id] {
			t.Errorf("product %d missing from the reset %v", id, got)
		}
	}
	if len(got) != 10 {
		t.Errorf("the reset holds %d products, want 10", len(got))
	}
}

// aggregateTables are the tables a product's aggregates live in, one per
// aggregate (one writer each).
var aggregateTables = []string{"product_likes", "product_sales", "product_views"}

func openDB(t *testing.T, url string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func exec(t *testing.T, db *sql.DB, query string, args ...any) {
	t.Helper()
	if _, err := db.ExecContext(t.Context(), query, args...); err != nil {
		t.Fatal(err)
	}
}

// TestResumeCostIsBounded: on a 200,000-product catalogue where every
// product has aggregates, a resume from id 1 gets a reset of at most 256 KiB
// and costs the database a bounded number of rows (read from its own
// statistics), and fifty clients resuming at once cost about what one does.
func TestResumeCostIsBounded(t *testing.T) {
	t.Parallel()
	url := testenv.DatabaseURL(t)
	db := openDB(t, url)
	const catalogue = 200_000
	exec(t, db, `INSERT INTO products (name, price, stock) SELECT 'product number ' || i, 1000 + i, 100 FROM generate_series(1, $1::int) i`, catalogue)
	exec(t, db, `UPDATE product_likes SET like_count = 1 + product_id * 7919 % 1000`)
	exec(t, db, `UPDATE product_sales SET sales_count = 1 + product_id * 104729 % 500, sales_amount = product_id % 500 * 1000`)
	exec(t, db, `UPDATE product_views SET view_count = 1 + product_id * 31 % 10000`)
	exec(t, db, `ANALYZE products, product_likes, product_sales, product_views`)
	cfg := stream.DefaultConfig()
	cfg.SummaryEvery = time.Hour

	resume := func(clients int) (rows int64, maxBytes int) {
		t.Helper()
		base := tableReads(t, db)
		// A store of its own, closed before the count: a backend reports
		// its statistics when it exits.
		st, err := store.Open(context.Background(), url, pg.Options{MaxConns: 4}, events.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		hub := stream.New(st, nil, cfg, slog.New(slog.DiscardHandler))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- hub.Run(ctx) }()
		var (
			wg sync.WaitGroup
			mu sync.Mutex
		)
		for range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s, err := hub.Subscribe(context.Background(), 1)
				if err != nil {
					t.Error(err)
					return
				}
				f := <-s.Frames()
				hub.Unsubscribe(s)
				ev := parse(t, f)
				if ev.Name != stream.ResetEvent || len(ev.Products) == 0 || len(ev.Products) > 3*cfg.ResetTop {
					t.Errorf("resume from 1: %q with %d products, want a reset of 1 to %d", ev.Name, len(ev.Products), 3*cfg.ResetTop)
				}
				mu.Lock()
				maxBytes = max(maxBytes, len(f))
				mu.Unlock()
			}()
		}
		wg.Wait()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		st.Close()
		return tableReads(t, db) - base, maxBytes
	}
	oneRows, oneBytes := resume(1)
	manyRows, manyBytes := resume(50)
	t.Logf("catalogue of %d products: a resume from id 1 sent %d bytes and read %d rows; 50 at once read %d rows (largest frame %d bytes)",
		catalogue, oneBytes, oneRows, manyRows, manyBytes)
	if oneBytes > 256<<10 || manyBytes > 256<<10 {
		t.Errorf("a resume sent %d bytes, want at most 256 KiB", max(oneBytes, manyBytes))
	}
	// A resume reads at most ResumeLimit+1 entries of each aggregate's
	// change index; the reset reads, per product of each top list, its
	// entry of the sort's index, its row in each aggregate's table and its
	// products row; the statistics also count a few index entries read
	// past a LIMIT.
	bound := int64(len(aggregateTables)*(cfg.ResumeLimit+1)+3*cfg.ResetTop*(2+len(aggregateTables))) * 11 / 10
	if oneRows > bound {
		t.Errorf("one resume read %d rows, want at most %d (whatever the catalogue)", oneRows, bound)
	}
	if manyRows > 3*max(oneRows, 1) {
		t.Errorf("50 concurrent resumes read %d rows, one reads %d: want them to share the work (at most 3×)", manyRows, oneRows)
	}
}

// tableReads returns the rows PostgreSQL has read from products and the
// aggregates' tables (sequential and index fetches) as its statistics say,
// once they have settled: backends report on exit, asynchronously.
func tableReads(t *testing.T, db *sql.DB) int64 {
	t.Helper()
	read := func() int64 {
		var n int64
		err := db.QueryRowContext(t.Context(), `SELECT COALESCE(sum(seq_tup_read + COALESCE(idx_tup_fetch, 0)), 0)::bigint
			FROM pg_stat_user_tables WHERE relname IN ('products', 'product_likes', 'product_sales', 'product_views')`).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// This connection's own statistics are flushed when it is idle, at most
	// once a second; closing the pool's idle connections flushes them too.
	db.SetMaxIdleConns(0)
	defer db.SetMaxIdleConns(2)
	last, stable := read(), time.Now()
	for time.Since(stable) < 1500*time.Millisecond {
		time.Sleep(100 * time.Millisecond)
		if n := read(); n != last {
			last, stable = n, time.Now()
		}
	}
	return last
}
