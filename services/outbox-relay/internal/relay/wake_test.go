package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/loopers/commerce-pipeline/internal/outbox"
	"github.com/loopers/commerce-pipeline/pkg/events"
	"github.com/loopers/commerce-pipeline/services/outbox-relay/internal/relaytest"
	"github.com/loopers/commerce-pipeline/services/outbox-relay/internal/store"
)

// TestCommitDuringConfirmationGoesOutInTheSamePass: a pass that has caught up
// reads a commit notified while its last batch awaits Kafka's
// acknowledgement at once, instead of after the acknowledgement, the
// cursor's advance and another pass; both go out in order.
//
//nolint:paralleltest // timing: the relay must read the notified commit in the 50 ms the broker holds the first batch
func TestCommitDuringConfirmationGoesOutInTheSamePass(t *testing.T) {
	env, n := leaderOn(t, relaytest.NewFake(t, "holds the first produce request until a later commit is notified: a hook into the broker only kfake has"))
	first := insertCommitted(t, env, likes(5, "a")...)[0]
	var (
		once  sync.Once
		later []int64
	)
	// The first produce request waits until a second event is committed
	// and notified: the relay learns of it before the first is acknowledged.
	env.Cluster.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		once.Do(func() {
			later = append(later, insertCommitted(t, env, likes(5, "b")...)[0].ID)
			n.svc.relay.Notify()
			time.Sleep(50 * time.Millisecond) // the relay reads meanwhile
		})
		return nil, nil, false
	})
	res := n.pass(t)
	if res.Published != 2 || res.Cursor != later[0] {
		t.Fatalf("pass: %+v; want both events (ids %d and %d) published by it", res, first.ID, later[0])
	}
	recs := env.Records(t, 2, 10*time.Second)
	if got := sequences(recs); len(got) != 2 || got[0] != first.ID || got[1] != later[0] {
		t.Errorf("records in order %v, want [%d %d]", got, first.ID, later[0])
	}
}

// TestCursorMovedBackIsFollowed: a pass starts where the previous pass of
// the same lease term left the cursor, without reading it; a cursor that
// moved back meanwhile (PostgreSQL lost an asynchronous advance in a crash)
// fails the next advance, and the pass after it starts from the stored
// cursor and publishes the rows behind it again.
func TestCursorMovedBackIsFollowed(t *testing.T) {
	t.Parallel()
	env, n := leader(t)
	ctx := context.Background()
	a := insertCommitted(t, env, likes(6, "a")...)[0]
	if res := n.pass(t); res.Cursor != a.ID {
		t.Fatalf("first pass: %+v", res)
	}
	if _, err := env.Pool.Exec(ctx, `UPDATE outbox_cursor SET last_processed_id = 0 WHERE id = 1`); err != nil {
		t.Fatal(err)
	}
	b := insertCommitted(t, env, likes(6, "b")...)[0]
	if _, err := n.svc.relay.Pass(ctx); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("a pass from the remembered cursor: %v, want ErrFenced from its advance", err)
	}
	if res := n.pass(t); res.Cursor != b.ID || res.Published != 2 {
		t.Fatalf("the pass after: %+v, want a and b published again up to %d", res, b.ID)
	}
	recs := env.Records(t, 4, 10*time.Second)
	if diff := cmp.Diff([]int64{a.ID, b.ID, a.ID, b.ID}, sequences(recs)); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
}

// TestCommitDuringAdvanceGoesOutInTheSamePass: a commit notified while the
// pass advances the cursor past its last batch is read by the same pass.
func TestCommitDuringAdvanceGoesOutInTheSamePass(t *testing.T) {
	t.Parallel()
	env := relaytest.New(t)
	cfg := testConfig(env, "node-a")
	// A pass re-reads for a notified commit only within the poll interval:
	// a long one keeps a slow machine from ending the pass first.
	cfg.Interval, cfg.LeaseTTL = 10*time.Second, time.Minute
	n := newNode(t, env, cfg)
	n.lead(t)
	first := insertCommitted(t, env, likes(7, "a")...)[0]
	var later int64
	n.beforeAdvance(func() {
		if later == 0 {
			later = insertCommitted(t, env, likes(7, "b")...)[0].ID
			n.svc.relay.Notify()
		}
	})
	if res := n.pass(t); res.Published != 2 || res.Cursor != later {
		t.Fatalf("pass: %+v; want both events (ids %d and %d) published by it", res, first.ID, later)
	}
}

// TestCommitWithoutWakeUpIsPolled: a commit whose wake-up never comes (its
// writer died between the commit and the notification, or the notification
// failed) is published by the next poll.
func TestCommitWithoutWakeUpIsPolled(t *testing.T) {
	t.Parallel()
	env := relaytest.New(t)
	cfg := testConfig(env, "node-a")
	cfg.Interval, cfg.LeaseTTL = 300*time.Millisecond, time.Minute
	n := newNode(t, env, cfg)
	n.lead(t)
	n.start(t, true)
	rec, err := env.Reg.Marshal(events.LikeCreatedV1{UserID: "quiet", ProductID: 9})
	if err != nil {
		t.Fatal(err)
	}
	// outbox.Insert alone: a commit and no notification.
	id, err := outbox.Insert(context.Background(), env.Pool.QueryRow, outbox.Entry{EventID: uuid.NewString(), Source: "commerce-api", Record: rec})
	if err != nil {
		t.Fatal(err)
	}
	if got := sequences(env.Records(t, 1, 10*time.Second)); len(got) != 1 || got[0] != id {
		t.Fatalf("published %v, want [%d]", got, id)
	}
	if sent, _ := env.Wake.Stats(); sent != 0 {
		t.Fatalf("%d wake-ups were sent; the test needs none", sent)
	}
}

// TestAdvancesAreSpaced: commits notified from several writers at once are
// each published at once, but the cursor is written at most once per
// advanceEvery (a transaction per few outcomes cost PostgreSQL a third of
// the relay's CPU), and still ends at the last row.
func TestAdvancesAreSpaced(t *testing.T) {
	t.Parallel()
	env := relaytest.New(t)
	cfg := testConfig(env, "node-a")
	cfg.LeaseTTL = time.Minute
	n := newNode(t, env, cfg)
	n.lead(t)
	var (
		mu     sync.Mutex
		writes []time.Time
	)
	n.beforeAdvance(func() {
		mu.Lock()
		defer mu.Unlock()
		writes = append(writes, time.Now())
	})
	n.start(t, true)
	// Running and connected: one commit through, before the writers start.
	first := insertCommitted(t, env, likes(9, "first")...)[0].ID
	n.svc.relay.Notify()
	eventually(t, 20*time.Second, "the first commit's advance", func() bool { return env.Cursor(t) == first })
	mu.Lock()
	writes = nil
	mu.Unlock()
	// Four writers, each committing and notifying as fast as it can for
	// 300 ms: outcomes arrive far more often than advanceEvery.
	var (
		wg      sync.WaitGroup
		commits atomic.Int64
	)
	begin := time.Now()
	for w := range 4 {
		wg.Go(func() {
			for i := 0; time.Since(begin) < 300*time.Millisecond; i++ {
				insertCommitted(t, env, likes(int64(w+1), fmt.Sprintf("w%d-%d", w, i))...)
				commits.Add(1)
				n.svc.relay.Notify()
			}
		})
	}
	wg.Wait()
	var last int64
	if err := env.Pool.QueryRow(context.Background(), `SELECT max(id) FROM outbox`).Scan(&last); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the cursor to reach the last row", func() bool { return env.Cursor(t) == last })
	if got, want := len(env.Records(t, int(commits.Load())+1, 10*time.Second)), int(commits.Load())+1; got != want {
		t.Fatalf("%d records, want %d", got, want)
	}
	mu.Lock()
	defer mu.Unlock()
	// The write's goroutine calls the hook, whose time may lag the decision
	// to write by a scheduling delay: the first advances may look closer
	// than they were, so the count has room for a few.
	span := writes[len(writes)-1].Sub(writes[0])
	if most := int(span/advanceEvery) + 5; len(writes) > most {
		t.Errorf("%d advances in %s for %d commits, want at most %d (one per %s)", len(writes), span.Round(time.Millisecond), commits.Load(), most, advanceEvery)
	}
	t.Logf("%d advances in %s for %d commits", len(writes), span.Round(time.Millisecond), commits.Load())
}
