package lease

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/loopers/commerce-pipeline/internal/cluster"
	"github.com/loopers/commerce-pipeline/internal/outbox"
	"github.com/loopers/commerce-pipeline/internal/pg"
	"github.com/loopers/commerce-pipeline/internal/testenv"
	"github.com/loopers/commerce-pipeline/services/outbox-relay/internal/store"
)

// TestLeaderHistory: the trigger on relay_lease records each term the
// electors go through — acquired, released, expired — and the cluster view
// shows the live holder with its token.
//
//nolint:paralleltest // lease timing: a 200 ms lease must not lapse between two renewals; under parallel load it did
func TestLeaderHistory(t *testing.T) {
	ctx := context.Background()
	url := testenv.DatabaseURL(t)
	st, err := store.Open(ctx, url, pg.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	cl, err := cluster.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	logger := slog.New(slog.DiscardHandler)
	const ttl = 200 * time.Millisecond
	elector := func(owner string) *Elector {
		e, err := New(st, outbox.RelayLease, owner, ttl, logger, nil)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	acquire := func(e *Elector) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			if ok, err := e.TryAcquire(ctx); err != nil {
				t.Fatal(err)
			} else if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("lease never acquired")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	a, b := elector("a"), elector("b")
	acquire(a)
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	acquire(b) // at once: a released
	acquire(b) // a renewal is no change
	acquire(a) // after b's lease lapsed

	v, err := cl.View(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, h := range v.LeaderHistory {
		got = append(got, fmt.Sprintf("%s %d %s", h.NodeID, h.Token, h.Reason))
	}
	want := []string{"a 3 acquired", "b 2 expired", "b 2 acquired", "a 1 released", "a 1 acquired"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("leader history, newest first (-want +got):\n%s", diff)
	}
	if v.Leader == nil || v.Leader.NodeID != "a" || v.Leader.Token != 3 {
		t.Errorf("leader = %+v, want a with token 3", v.Leader)
	}
}
