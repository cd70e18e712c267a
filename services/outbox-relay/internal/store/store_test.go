package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/loopers/commerce-pipeline/internal/pg"
	"github.com/loopers/commerce-pipeline/pkg/events"
	"github.com/loopers/commerce-pipeline/services/outbox-relay/internal/relaytest"
	"github.com/loopers/commerce-pipeline/services/outbox-relay/internal/store"
)

// newStore returns a test environment and a Store on its database.
func newStore(tb testing.TB) (*relaytest.Env, *store.Store) {
	tb.Helper()
	env := relaytest.New(tb)
	st, err := store.Open(context.Background(), env.URL, pg.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(st.Close)
	return env, st
}

// viewRecord returns a product view event's record.
func viewRecord(t *testing.T, env *relaytest.Env) events.Record {
	t.Helper()
	rec, err := env.Reg.Marshal(events.ProductViewedV1{ProductID: 1, UserID: "u"})
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// TestPurgeDeletesOnlyOldPublishedRows: rows after the cursor are kept
// however old, rows at or below it only once older than the retention; the
// chunk size does not limit the total.
func TestPurgeDeletesOnlyOldPublishedRows(t *testing.T) {
	t.Parallel()
	env, st := newStore(t)
	ctx := context.Background()
	rec := viewRecord(t, env)
	old := time.Now().Add(-8 * 24 * time.Hour)
	var published, kept []int64
	for range 7 {
		published = append(published, env.InsertRecord(t, env.Pool, rec, old).ID)
	}
	kept = append(kept, env.InsertRecord(t, env.Pool, rec, old).ID) // passed by the cursor but held: not published
	if _, err := env.Pool.Exec(ctx, `INSERT INTO outbox_held (outbox_id) VALUES ($1)`, kept[0]); err != nil {
		t.Fatal(err)
	}
	kept = append(kept, env.InsertRecord(t, env.Pool, rec, time.Time{}).ID) // published but recent
	cursor := kept[1]
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
	if diff := cmp.Diff(kept, left); diff != "" {
		t.Errorf("rows left (-want +got):\n%s", diff)
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
	if err := st.Advance(ctx, f, store.Advance{From: 0, To: 5}); err != nil {
		t.Fatal(err)
	}
	if err := st.Advance(ctx, f, store.Advance{From: 0, To: 9}); !errors.Is(err, store.ErrFenced) {
		t.Errorf("advance from a stale position: %v, want ErrFenced", err)
	}
	if c := env.Cursor(t); c != 5 {
		t.Errorf("cursor %d, want 5", c)
	}
	if v, err := st.Setting(ctx, "synchronous_commit"); err != nil || v != "on" {
		t.Errorf("synchronous_commit after Advance on its connection: %q (%v), want on", v, err)
	}
}

// TestAdvanceHoldsAndSettles: the rows an advance passes unpublished are
// held, read back in id order, and forgotten once settled; a failed held
// row moves to outbox_failed and is no longer held; a fenced-out advance
// holds nothing.
func TestAdvanceHoldsAndSettles(t *testing.T) {
	t.Parallel()
	env, st := newStore(t)
	ctx := context.Background()
	rec := viewRecord(t, env)
	var ids []int64
	for range 4 {
		ids = append(ids, env.InsertRecord(t, env.Pool, rec, time.Time{}).ID)
	}
	token, ok, err := st.AcquireLease(ctx, "outbox-relay", "n1", time.Minute)
	if err != nil || !ok {
		t.Fatalf("lease: %v %v", ok, err)
	}
	f := store.Fence{Lease: "outbox-relay", Owner: "n1", Token: token}
	heldIDs := func() []int64 {
		t.Helper()
		rows, err := st.Held(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := []int64{}
		for _, r := range rows {
			out = append(out, r.ID)
		}
		return out
	}
	stale := store.Fence{Lease: f.Lease, Owner: f.Owner, Token: token + 1}
	if err := st.Advance(ctx, stale, store.Advance{From: 0, To: ids[3], Held: []int64{ids[0]}}); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("fenced-out advance: %v, want ErrFenced", err)
	}
	if diff := cmp.Diff([]int64{}, heldIDs()); diff != "" {
		t.Fatalf("held after a fenced-out advance (-want +got):\n%s", diff)
	}
	if err := st.Advance(ctx, f, store.Advance{From: 0, To: ids[3], Held: []int64{ids[2], ids[0], ids[3]}}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int64{ids[0], ids[2], ids[3]}, heldIDs()); diff != "" {
		t.Errorf("held (-want +got):\n%s", diff)
	}
	// The cursor stays; one held row published, one failed.
	if err := st.Advance(ctx, f, store.Advance{From: ids[3], To: ids[3], Settled: []int64{ids[0]},
		Failed: []store.Failure{{ID: ids[2], Error: "refused"}}}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int64{ids[3]}, heldIDs()); diff != "" {
		t.Errorf("held after settling (-want +got):\n%s", diff)
	}
	if _, ok := env.FailedIDs(t)[ids[2]]; !ok {
		t.Errorf("the failed held row %d is not in outbox_failed: %v", ids[2], env.FailedIDs(t))
	}
	state, err := st.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if state.Backlog != 1 {
		t.Errorf("backlog %d, want the one held row", state.Backlog)
	}
}
