package relay

import (
	"testing"
	"time"

	"github.com/loopers/commerce-pipeline/internal/stages"
	"github.com/loopers/commerce-pipeline/pkg/events"
)

// TestStagesTimed: a pass times each published row's wait in the outbox (from
// its insert, on the database clock) and its publication (read to
// acknowledgement); a row that fails permanently is not timed.
func TestStagesTimed(t *testing.T) {
	t.Parallel()
	env, n := leader(t)
	const waited = 200 * time.Millisecond
	for i := range 3 {
		rec, err := env.Reg.Marshal(events.ProductViewedV1{ProductID: int64(i + 1), UserID: "u1"})
		if err != nil {
			t.Fatal(err)
		}
		env.InsertRecord(t, env.Pool, rec, time.Now().Add(-waited))
	}
	env.InsertRecord(t, env.Pool, events.Record{Type: "LikeCreated", AggregateType: "Product", AggregateID: "4", Data: []byte(`{}`)}, time.Time{})
	began := time.Now()
	if res := n.pass(t); res.Published != 3 || res.Failed != 1 {
		t.Fatalf("pass: %+v, want 3 published and 1 failed", res)
	}
	took := time.Since(began).Seconds()

	got := map[string]stages.Window{}
	for _, w := range n.svc.relay.metrics.StageWindows() {
		got[w.Stage] = w
	}
	if len(got) != 2 {
		t.Fatalf("stages timed: %+v, want outbox and publish", got)
	}
	ob, pb := got[stages.Outbox], got[stages.Publish]
	if ob.Count != 3 || ob.Sum/3 < waited.Seconds() || ob.Max > waited.Seconds()+took+1 {
		t.Errorf("outbox stage: %d rows, mean %.3fs, max %.3fs; want 3 rows that waited about %s", ob.Count, ob.Sum/3, ob.Max, waited)
	}
	if pb.Count != 3 || pb.Max <= 0 || pb.Max > took {
		t.Errorf("publish stage: %d rows, max %.4fs; want 3 rows within the pass's %.4fs", pb.Count, pb.Max, took)
	}
}
