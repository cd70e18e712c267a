package relay

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/loopers/commerce-pipeline/internal/outboxops"
)

// TestRedrivenRowKeepsEventIDAndSequence: an event moved to outbox_failed and
// re-driven is published under a new outbox id with its event id and its
// first sequence, after events written later, so consumers treat it as a late
// redelivery.
func TestRedrivenRowKeepsEventIDAndSequence(t *testing.T) {
	env, n := leader(t)
	bad := insertCommitted(t, env, likes(5, "first")...)[0]
	produceFault(env, "like-events", kerr.MessageTooLarge, 1)
	passUntil(t, n, env, bad.ID)
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
