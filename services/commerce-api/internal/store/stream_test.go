package store

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/store/storetest"
)

// TestPipelineStats: backlog after the relay's cursor, the live lease's
// owner, the relay's failures, and the rate and lag of applied events
// matched to their outbox rows (a key that is not a UUID is ignored).
//
//nolint:paralleltest // timing: the applied event must still be in the 2 s window when the stats are read
func TestPipelineStats(t *testing.T) {
	url, s := openTest(t)
	db := storetest.Open(t, url)
	for i, age := range []string{"10 seconds", "3 seconds", "1 second"} {
		db.Exec(t, `INSERT INTO outbox (event_id, event_type, source, aggregate_type, aggregate_id, payload, created_at)
			VALUES (gen_random_uuid(), 'ProductLiked', 'test', 'product', '1', '{}', now() - $1::interval)`, age)
		if i == 0 { // the relay has published the first row
			db.Exec(t, `UPDATE outbox_cursor SET last_processed_id = (SELECT min(id) FROM outbox)`)
		}
	}
	// The first event was applied 400 ms after its commit, just now: both
	// times from one reading of the clock, so that the lag is exact however
	// slow the machine.
	db.Exec(t, `WITH c AS (SELECT clock_timestamp() AS now),
		first AS (
			UPDATE outbox SET created_at = (SELECT now FROM c) - interval '500 ms'
			WHERE id = (SELECT min(id) FROM outbox) RETURNING event_id)
		INSERT INTO event_handled (idempotency_key, created_at)
		SELECT 'product-like-consumer:' || event_id, (SELECT now FROM c) - interval '100 ms' FROM first`)
	db.Exec(t, `INSERT INTO event_handled (idempotency_key) VALUES ('product-view-consumer:not-a-uuid')`)
	db.Exec(t, `INSERT INTO event_handled (idempotency_key, created_at) VALUES ('old:x', now() - interval '1 hour')`)
	db.Exec(t, `INSERT INTO relay_lease (name, owner, token, lease_until, acquired_at) VALUES ('outbox-relay', 'relay-a', 3, now() + interval '1 minute', now())`)
	db.Exec(t, `INSERT INTO outbox_failed (outbox_id, event_id, event_type, source, aggregate_type, aggregate_id, payload, created_at, error_message)
		VALUES (999, gen_random_uuid(), 'X', 'test', 'product', '1', '{}', now(), 'refused')`)

	p, err := s.PipelineStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if p.E2ELagAvg == nil || p.E2ELagMax == nil {
		t.Fatal("no end-to-end lag although an event was applied")
	}
	if lag := *p.E2ELagMax; lag < 300*time.Millisecond || lag > 700*time.Millisecond {
		t.Errorf("end-to-end lag %v, want about 400ms", lag)
	}
	if p.OldestUnpublished < 2*time.Second || p.OldestUnpublished > 10*time.Second {
		t.Errorf("oldest unpublished %v, want about 3s", p.OldestUnpublished)
	}
	got := Pipeline{OutboxBacklog: p.OutboxBacklog, OutboxFailed: p.OutboxFailed, Leader: p.Leader, LeaderToken: p.LeaderToken, AppliedPerSec: p.AppliedPerSec}
	want := Pipeline{OutboxBacklog: 2, OutboxFailed: 1, Leader: "relay-a", LeaderToken: 3, AppliedPerSec: 2 / PipelineWindow.Seconds()}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pipeline stats (-want +got):\n%s", diff)
	}

	// An expired lease names no leader.
	db.Exec(t, `UPDATE relay_lease SET lease_until = now() - interval '1 second'`)
	if p, err = s.PipelineStats(context.Background()); err != nil || p.Leader != "" {
		t.Errorf("expired lease: leader %q, err %v; want none", p.Leader, err)
	}
}
