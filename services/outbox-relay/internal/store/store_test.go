package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/loopers/commerce-pipeline/internal/pg"
	"github.com/loopers/commerce-pipeline/pkg/events"
	"github.com/loopers/commerce-pipeline/services/outbox-relay/internal/relaytest"
	"github.com/loopers/commerce-pipeline/services/outbox-relay/internal/store"
)

// TestPurgeDeletesOnlyOldPublishedRows: rows after the cursor are kept
// however old, rows at or below it only once older than the retention; the
// chunk size does not limit the total.
func TestPurgeDeletesOnlyOldPublishedRows(t *testing.T) {
	t.Parallel()
	env := relaytest.New(t)
	ctx := context.Background()
	st, err := store.Open(ctx, env.URL, pg.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	rec, err := env.Reg.Marshal(events.ProductViewedV1{ProductID: 1, UserID: "u"})
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-8 * 24 * time.Hour)
	var published, kept []int64
	for range 7 {
		published = append(published, env.InsertRecord(t, env.Pool, rec, old).ID)
	}
	kept = append(kept, env.InsertRecord(t, env.Pool, rec, time.Time{}).ID) // published but recent
	cursor := kept[0]
	kept = append(kept, env.InsertRecord(t, env.Pool, rec, old).ID) // old but not yet published
	if _, err := env.Pool.Exec(ctx, `UPDATE outbox_cursor SET last_processed_id = $1`, cursor); err != nil {
		t.Fatal(err)
	}

	n, err := st.Purge(ctx, 7*24*time.Hour, 3)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(len(published)) {
		t.Errorf("purged %d rows, want %d", n, len(published))
	}
	var left []int64
	rows, err := env.Pool.Query(ctx, `SELECT id FROM outbox ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		left = append(left, id)
	}
	if len(left) != len(kept) || left[0] != kept[0] || left[1] != kept[1] {
		t.Errorf("rows left %v, want %v", left, kept)
	}
}

// TestAdvanceCommitsAsynchronouslyAlone: Advance moves the cursor (or, from
// the wrong position, nothing), and its asynchronous commit setting ends
// with its transaction: the lease and retry writes that follow on the same
// connection commit synchronously.
func TestAdvanceCommitsAsynchronouslyAlone(t *testing.T) {
	t.Parallel()
	env := relaytest.New(t)
	ctx := context.Background()
	st, err := store.Open(ctx, env.URL, pg.Options{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	token, ok, err := st.AcquireLease(ctx, "outbox-relay", "n1", time.Minute)
	if err != nil || !ok {
		t.Fatalf("lease: %v %v", ok, err)
	}
	f := store.Fence{Lease: "outbox-relay", Owner: "n1", Token: token}
	if err := st.Advance(ctx, f, 0, 5, nil); err != nil {
		t.Fatal(err)
	}
	if err := st.Advance(ctx, f, 0, 9, nil); !errors.Is(err, store.ErrFenced) {
		t.Errorf("advance from a stale position: %v, want ErrFenced", err)
	}
	if c := env.Cursor(t); c != 5 {
		t.Errorf("cursor %d, want 5", c)
	}
	if v, err := st.Setting(ctx, "synchronous_commit"); err != nil || v != "on" {
		t.Errorf("synchronous_commit after Advance on its connection: %q (%v), want on", v, err)
	}
}
