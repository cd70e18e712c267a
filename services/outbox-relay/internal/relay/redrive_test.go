package relay

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/loopers/commerce-pipeline/internal/outboxops"
)

// TestRedrivenRowKeepsEventIDAndSequence: an event moved to outbox_failed and
// re-driven is published under a new outbox id with its event id and its
// first sequence, after events written later, so consumers treat it as a late
// redelivery.
func TestRedrivenRowKeepsEventIDAndSequence(t *testing.T) {
	t.Parallel()
	env, n := leader(t)
	bad := insertCommitted(t, env, likes(5, "first")...)[0]
	heal := tooLarge(t, env, "like-events")
	passUntil(t, n, env, bad.ID)
	heal()
	later := insertCommitted(t, env, likes(5, "later")...)[0]
	passUntil(t, n, env, later.ID)

	ops, err := outboxops.Open(context.Background(), env.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer ops.Close()
	moved, err := ops.Redrive(context.Background(), outboxops.Selection{All: true}, "test", false)
	if err != nil {
		t.Fatal(err)
	}
	if len(moved) != 1 || moved[0].NewOutboxID <= later.ID {
		t.Fatalf("re-drive %+v, want one row after outbox id %d", moved, later.ID)
	}
	passUntil(t, n, env, moved[0].NewOutboxID)
	type rec struct {
		EventID  string
		Sequence int64
	}
	var got []rec
	for _, r := range env.Records(t, 2, 10*time.Second) {
		got = append(got, rec{r.EventID, r.Sequence})
	}
	if diff := cmp.Diff([]rec{{later.EventID, later.ID}, {bad.EventID, bad.ID}}, got); diff != "" {
		t.Errorf("published records in log order (-want +got):\n%s", diff)
	}
}

// TestChunkedRedriveKeepsRelayPublishing: while `outbox failed redrive --all`
// moves 20,000 rows back, the relay publishes an event written meanwhile
// (and the chunks already moved) before the re-drive is done: no chunk holds
// the relay's gap rule for longer than its own short transaction.
//
//nolint:paralleltest // timing: the new event must be published while the 20,000-row re-drive still runs
func TestChunkedRedriveKeepsRelayPublishing(t *testing.T) {
	env, n := leader(t)
	ctx := context.Background()
	const failed = 20_000
	if _, err := env.Pool.Exec(ctx, `WITH o AS (
			INSERT INTO outbox (event_id, event_type, source, aggregate_type, aggregate_id, payload)
			SELECT gen_random_uuid(), 'loopers.like.created.v1', 'test', 'Product', '1', '{"UserID":"u","ProductID":1}'
			FROM generate_series(1, $1::int) RETURNING *)
		INSERT INTO outbox_failed (outbox_id, event_id, event_type, source, aggregate_type, aggregate_id, payload, created_at, error_message)
		SELECT id, event_id, event_type, source, aggregate_type, aggregate_id, payload, created_at, 'refused' FROM o`, failed); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Pool.Exec(ctx, `UPDATE outbox_cursor SET last_processed_id = (SELECT max(id) FROM outbox) WHERE id = 1`); err != nil {
		t.Fatal(err)
	}
	ops, err := outboxops.Open(ctx, env.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer ops.Close()
	firstChunk := make(chan struct{})
	var once sync.Once
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		moved, err := ops.Redrive(ctx, outboxops.Selection{All: true, Progress: func(int) { once.Do(func() { close(firstChunk) }) }}, "test", false)
		if err == nil && len(moved) != failed {
			err = fmt.Errorf("moved %d of %d", len(moved), failed)
		}
		done <- err
	}()
	select {
	case <-firstChunk:
	case err := <-done:
		t.Fatalf("the re-drive ended before its first chunk was reported: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no chunk of the re-drive committed within 30 s")
	}
	fresh := insertCommitted(t, env, likes(2, "meanwhile")...)[0]
	passUntil(t, n, env, fresh.ID)
	published := time.Since(start)
	select {
	case err := <-done:
		t.Errorf("the re-drive was over (%v) before the new event was published; the test proves nothing", err)
	default:
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	t.Logf("an event written during the re-drive of %d rows was published %v after it began; the re-drive took %v",
		failed, published.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}
