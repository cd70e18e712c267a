package pcon_test

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/loopers/commerce-pipeline/pkg/pcon"
	"github.com/loopers/commerce-pipeline/pkg/pcon/internal/offsets"
)

func keyMod(n int) func(int) string {
	return func(i int) string { return "k" + strconv.Itoa(i%n) }
}

// jitter sleeps a random few microseconds, often not at all, so that
// completions come back out of order.
func jitter() {
	if d := rand.N(60 * time.Microsecond); d > 30*time.Microsecond {
		time.Sleep(d)
	}
}

func checkClean(t *testing.T, chk *orderChecker) {
	t.Helper()
	for _, v := range chk.report() {
		t.Error(v)
	}
	if m := chk.missing(); len(m) > 0 {
		t.Errorf("records never handled: %v", m)
	}
}

func TestKeyOrder100k(t *testing.T) {
	t.Parallel()
	forEachEngineMode(t, testKeyOrder100k)
}

func testKeyOrder100k(t *testing.T, mode func(*pcon.Consumer)) {
	e := newEnv(t)
	recs := e.produce(100_000, keyMod(1000))
	chk := newOrderChecker(recs)
	group := e.group("key-order")
	cfg := e.config(group)
	cfg.MaxInFlight = 1000
	_, stop := start(t, cfg, pcon.RecordHandler(func(ctx context.Context, r *pcon.Record) error {
		chk.begin(r)
		jitter()
		chk.end(r)
		return nil
	}), mode)
	e.waitCommitted(group, endOffsets(recs))
	stop()
	checkClean(t, chk)
}

// TestHardStopRestart stops a consumer whose final commit cannot reach the
// broker, so the restart starts from the last periodic commit and its
// metadata. (TestHydrationAfterTruncation hydrates from a final commit on
// Apache Kafka.)
func TestHardStopRestart(t *testing.T) {
	t.Parallel()
	forEachEngineMode(t, testHardStopRestart)
}

func testHardStopRestart(t *testing.T, mode func(*pcon.Consumer)) {
	e := newFakeEnv(t, "fails every OffsetCommit of a live member (kfake Fault) so that its final commit is lost as in a crash; Apache Kafka refuses none on demand")
	recs := e.produce(20_000, keyMod(200))
	chk := newOrderChecker(recs)
	group := e.group("hard-stop")
	// The first record of key k0 in each partition blocks, so everything
	// after it completes into the metadata rather than the offset.
	blocker := map[int32]int64{}
	for _, r := range recs {
		if _, ok := blocker[r.Partition]; !ok && r.Key == "k0" {
			blocker[r.Partition] = r.Offset
		}
	}
	release := make(chan struct{})
	var firstRun [partitions][]bool
	for p := range firstRun {
		firstRun[p] = make([]bool, len(chk.done[p]))
	}
	cfg := e.config(group)
	cfg.RevokeGrace = 200 * time.Millisecond
	a, stopA := start(t, cfg, pcon.RecordHandler(func(ctx context.Context, r *pcon.Record) error {
		if blocker[r.Partition] == r.Offset {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return ctx.Err()
		}
		chk.begin(r)
		jitter()
		chk.end(r)
		return nil
	}), mode)
	// Wait until every partition committed metadata recording work beyond
	// its blocked offset.
	deadline := time.Now().Add(waitLong)
	for {
		got := e.committed(group)
		ready := len(got) == partitions
		for _, c := range got {
			if _, done, err := offsets.Decode(c.Metadata); err != nil || len(done) < 100 {
				ready = false
			}
		}
		if ready {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("metadata never recorded progress: %+v", a.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	fault := e.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Group: group, Count: -1, Err: kerr.UnknownServerError})
	stopA()
	fault.Remove()
	close(release)

	snapshot := e.committed(group)
	skip := map[int32]map[int64]bool{}
	for p, c := range snapshot {
		_, done, err := offsets.Decode(c.Metadata)
		if err != nil {
			t.Fatalf("p%d metadata: %v", p, err)
		}
		skip[p] = map[int64]bool{}
		for _, o := range done {
			skip[p][o] = true
		}
	}
	_, stopB := start(t, e.config(group), pcon.RecordHandler(func(ctx context.Context, r *pcon.Record) error {
		if skip[r.Partition][r.Offset] || r.Offset < snapshot[r.Partition].Offset {
			chk.violate("restart handled p%d@%d, recorded as complete", r.Partition, r.Offset)
		}
		chk.begin(r)
		chk.end(r)
		return nil
	}), mode)
	e.waitCommitted(group, endOffsets(recs))
	stopB()
	checkClean(t, chk)
}

// TestOrderingModesEndToEnd checks the other two orderings against the
// broker: PartitionOrder never overlaps records of a partition and handles
// them in offset order; Unordered handles everything.
func TestOrderingModesEndToEnd(t *testing.T) {
	t.Parallel()
	forEachEngineMode(t, testOrderingModesEndToEnd)
}

func testOrderingModesEndToEnd(t *testing.T, mode func(*pcon.Consumer)) {
	tests := []struct {
		name     string
		ordering pcon.Ordering
	}{
		{name: "partition", ordering: pcon.PartitionOrder},
		{name: "unordered", ordering: pcon.Unordered},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			recs := e.produce(5000, keyMod(100))
			chk := newOrderChecker(recs)
			var active [partitions]atomic.Int32
			var last [partitions]atomic.Int64
			for p := range last {
				last[p].Store(-1)
			}
			group := e.group("mode-" + tt.name)
			cfg := e.config(group)
			cfg.Ordering = tt.ordering
			_, stop := start(t, cfg, pcon.RecordHandler(func(ctx context.Context, r *pcon.Record) error {
				if tt.ordering == pcon.PartitionOrder {
					chk.begin(r) // partition order implies key order
					if active[r.Partition].Add(1) != 1 {
						chk.violate("p%d: two records at once", r.Partition)
					}
					if prev := last[r.Partition].Swap(r.Offset); prev >= r.Offset {
						chk.violate("p%d: offset %d after %d", r.Partition, r.Offset, prev)
					}
					jitter()
					active[r.Partition].Add(-1)
				}
				chk.end(r)
				return nil
			}), mode)
			e.waitCommitted(group, endOffsets(recs))
			stop()
			checkClean(t, chk)
		})
	}
}
