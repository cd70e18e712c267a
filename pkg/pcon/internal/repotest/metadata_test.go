package pcon_test

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/loopers/commerce-pipeline/internal/kafkabroker"
	"github.com/loopers/commerce-pipeline/internal/testenv"
	"github.com/loopers/commerce-pipeline/pkg/pcon"
	"github.com/loopers/commerce-pipeline/pkg/pcon/internal/offsets"
)

// holdEvery makes every holdEvery-th record of partition 0 wait: the
// records completed around them leave one gap per holdEvery offsets, the
// pattern whose commit metadata grows fastest with the span (run-length
// and bitset encodings cost the same, 2 bytes per 16 offsets).
const holdEvery = 16

// holder is a handler that completes every record at once except those of
// partition 0 at a multiple of holdEvery, which wait until released (or
// until their context ends, as on shutdown).
type holder struct {
	done  []atomic.Bool // by offset of partition 0
	count atomic.Int64

	mu      sync.Mutex
	below   int64         // held records below it may complete
	changed chan struct{} // closed when below grows
}

func newHolder(n int) *holder {
	return &holder{done: make([]atomic.Bool, n), changed: make(chan struct{})}
}

func held(off int64) bool { return off%holdEvery == 0 }

func (h *holder) handle(ctx context.Context, r *pcon.Record) error {
	for r.Partition == 0 && held(r.Offset) {
		h.mu.Lock()
		free, changed := r.Offset < h.below, h.changed
		h.mu.Unlock()
		if free {
			break
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if r.Partition == 0 && !h.done[r.Offset].Swap(true) {
		h.count.Add(1)
	}
	return nil
}

// release lets the held records below off complete.
func (h *holder) release(off int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.below = off
	close(h.changed)
	h.changed = make(chan struct{})
}

// completedFrom lists the completed offsets at or above from, ascending.
func (h *holder) completedFrom(from int64) []int64 {
	var out []int64
	for o := from; o < int64(len(h.done)); o++ {
		if h.done[o].Load() {
			out = append(out, o)
		}
	}
	return out
}

// notHeldBelow counts the records below off that are not held.
func notHeldBelow(off int64) int64 { return off - (off+holdEvery-1)/holdEvery }

// produceToFirst writes n records to partition 0, each with a key of its
// own, so that no record waits for another's key.
func (e *env) produceToFirst(n int) []produced {
	e.t.Helper()
	rs := make([]*kgo.Record, n)
	for i := range rs {
		rs[i] = rec(0, "k"+strconv.Itoa(i), "v")
	}
	return e.partitionProducer().send(rs...)
}

// waitUntil polls cond until it holds, failing the test with what's
// message after waitLong.
func waitUntil(t *testing.T, cond func() bool, what func() string) {
	t.Helper()
	deadline := time.Now().Add(waitLong)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(what())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// metadataUpTo reports whether c's metadata is pcon's, written for c's
// offset, and names last as its highest completed offset.
func metadataUpTo(c committedOffset, last int64) bool {
	base, done, err := offsets.Decode(c.Metadata)
	return err == nil && base == c.Offset && len(done) > 0 && done[len(done)-1] == last
}

// checkHydration starts a new owner of group after the previous one
// stopped at snapshot (partition 0's commit): it must skip exactly the
// records the metadata lists as complete and handle every other record
// from the committed offset on, then commit to the end.
func checkHydration(t *testing.T, e *env, cfg pcon.Config, n int, snapshot committedOffset) {
	t.Helper()
	_, skip, err := offsets.Decode(snapshot.Metadata)
	if err != nil {
		t.Fatalf("committed metadata %q: %v", snapshot.Metadata, err)
	}
	var mu sync.Mutex
	handled := map[int64]bool{}
	cfg.Logger = testLogger()
	cfg.CommitInterval = e.config(cfg.Group).CommitInterval
	c, stop := start(t, cfg, pcon.RecordHandler(func(_ context.Context, r *pcon.Record) error {
		mu.Lock()
		defer mu.Unlock()
		if r.Partition == 0 {
			handled[r.Offset] = true
		}
		return nil
	}))
	e.waitCommitted(cfg.Group, map[int32]int64{0: int64(n)})
	stats := c.Stats()
	stop()

	skipped := map[int64]bool{}
	for _, o := range skip {
		skipped[o] = true
	}
	var missing, extra []int64 // handled wrongly, to 10 each
	for o := range int64(n) {
		want := o >= snapshot.Offset && !skipped[o]
		mu.Lock()
		got := handled[o]
		mu.Unlock()
		switch {
		case want && !got && len(missing) < 10:
			missing = append(missing, o)
		case !want && got && len(extra) < 10:
			extra = append(extra, o)
		}
	}
	if len(missing) > 0 {
		t.Errorf("the new owner never handled %v (committed %d, %d offsets in the metadata)", missing, snapshot.Offset, len(skip))
	}
	if len(extra) > 0 {
		t.Errorf("the new owner handled %v, recorded complete (committed %d, %d offsets in the metadata)", extra, snapshot.Offset, len(skip))
	}
	if got := sumStats(stats, func(p pcon.PartitionStats) uint64 { return p.Skipped }); got != uint64(len(skip)) {
		t.Errorf("the new owner skipped %d records, want the metadata's %d", got, len(skip))
	}
}

// TestHydrationAfterTruncation drives partition 0 into the worst case for
// commit metadata on Apache Kafka with its default limit
// (offset.metadata.max.bytes 4096): tens of thousands of completed records
// above a held one, one gap every 16 offsets, whose encoding exceeds
// offsets.MaxMetadata. pcon truncates it, dropping the lowest; the broker
// accepts every commit; a new owner skips exactly the completed records
// the truncated metadata kept and handles all the others again.
func TestHydrationAfterTruncation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 32_000
	e.produceToFirst(n)
	group := e.group("truncated")
	h := newHolder(n)
	logs := newLogCapture(msgRefusal, msgMetadataRefused, msgGroupError)
	cfg := e.config(group)
	cfg.MaxInFlight = 4000                   // room for the held records and more
	cfg.RevokeGrace = 200 * time.Millisecond // the held records never finish
	cfg.Logger = logs.logger()
	a, stopA := start(t, cfg, pcon.RecordHandler(h.handle))
	waitUntil(t, func() bool { return h.count.Load() == notHeldBelow(n) }, func() string {
		return fmt.Sprintf("%d of %d records not held completed: %+v", h.count.Load(), notHeldBelow(n), a.Stats())
	})
	waitUntil(t, func() bool { return metadataUpTo(e.committed(group)[0], n-1) }, func() string {
		return fmt.Sprintf("no commit of partition 0 records its last record: %+v", e.committed(group))
	})
	stopA()
	snapshot := e.committed(group)[0]

	completed := h.completedFrom(snapshot.Offset)
	untruncated, _ := offsets.Encode(snapshot.Offset, completed, math.MaxInt)
	base, kept, err := offsets.Decode(snapshot.Metadata)
	if err != nil {
		t.Fatalf("committed metadata: %v", err)
	}
	got := map[string]any{
		"committed offset":          snapshot.Offset,
		"metadata base":             base,
		"metadata within the limit": len(snapshot.Metadata) <= offsets.MaxMetadata,
		"untruncated exceeds it":    len(untruncated) > offsets.MaxMetadata,
		"truncated":                 len(kept) < len(completed),
		"kept the highest":          slices.Equal(kept, completed[len(completed)-len(kept):]),
		"refusals":                  len(logs.records(msgRefusal)) + len(logs.records(msgMetadataRefused)),
		"group errors":              len(logs.records(msgGroupError)),
	}
	want := map[string]any{
		"committed offset":          int64(0),
		"metadata base":             int64(0),
		"metadata within the limit": true,
		"untruncated exceeds it":    true,
		"truncated":                 true,
		"kept the highest":          true,
		"refusals":                  0,
		"group errors":              0,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("final commit (-want +got):\n%s\nmetadata %d bytes, untruncated %d, keeps %d of %d completed; group errors %v",
			diff, len(snapshot.Metadata), len(untruncated), len(kept), len(completed), logs.records(msgGroupError))
	}
	checkHydration(t, e, cfg, n, snapshot)
}

// Messages the tests watch for.
const (
	msgRefusal         = "pcon: commit metadata refused as too large" // each OFFSET_METADATA_TOO_LARGE, at Debug
	msgMetadataRefused = "pcon: commit metadata refused as too large; committing less of it"
	msgGroupError      = "pcon: consumer group error"
)

// TestMetadataRefusedByBroker runs pcon against a broker that takes at
// most 1024 bytes of commit metadata (offset.metadata.max.bytes) while a
// partition's completed records above a held one need about 2.7 KB: the
// broker answers OFFSET_METADATA_TOO_LARGE. The commit must land anyway,
// with metadata the broker accepts, and keep landing as the offset moves;
// a new owner then skips exactly what that metadata lists.
func TestMetadataRefusedByBroker(t *testing.T) {
	t.Parallel()
	const limit = 1024
	cluster := testenv.KafkaCluster(t, kafkabroker.Options{Props: map[string]string{
		"offset.metadata.max.bytes": strconv.Itoa(limit),
		// One partition is enough and makes the first join quick.
		"offsets.topic.num.partitions": "1",
	}})
	const n = 16_000
	tests := []struct {
		name string
		// commitInterval of an hour leaves the final commit, on shutdown,
		// the only one: the refusal must be handled on the way out.
		commitInterval time.Duration
	}{
		{name: "periodic commits", commitInterval: 50 * time.Millisecond},
		{name: "final commit only", commitInterval: time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnvOn(t, cluster)
			e.produceToFirst(n)
			group := e.group("refused")
			h := newHolder(n)
			logs := newLogCapture(msgMetadataRefused, msgGroupError)
			cfg := e.config(group)
			cfg.MaxInFlight = 4000
			cfg.RevokeGrace = 200 * time.Millisecond
			cfg.CommitInterval = tt.commitInterval
			cfg.Logger = logs.logger()
			a, stopA := start(t, cfg, pcon.RecordHandler(h.handle))
			waitUntil(t, func() bool { return h.count.Load() == notHeldBelow(n) }, func() string {
				return fmt.Sprintf("%d of %d records not held completed: %+v", h.count.Load(), notHeldBelow(n), a.Stats())
			})
			if untruncated, _ := offsets.Encode(0, h.completedFrom(0), offsets.MaxMetadata); len(untruncated) <= limit {
				t.Fatalf("metadata of %d bytes fits the broker's limit: the test shows nothing", len(untruncated))
			}
			periodic := tt.commitInterval < time.Hour
			if periodic {
				waitUntil(t, func() bool { return metadataUpTo(e.committed(group)[0], n-1) }, func() string {
					return fmt.Sprintf("no commit of partition 0 records its last record: %+v", e.committed(group))
				})
			}
			// The offset moves: the held records of the first half go.
			h.release(n / 2)
			if periodic {
				waitUntil(t, func() bool {
					c := e.committed(group)[0]
					return c.Offset == n/2 && metadataUpTo(c, n-1)
				}, func() string {
					return fmt.Sprintf("partition 0 never committed offset %d with metadata: %+v", n/2, e.committed(group))
				})
			} else {
				waitUntil(t, func() bool { return h.count.Load() == notHeldBelow(n)+n/2/holdEvery }, func() string {
					return fmt.Sprintf("released records did not complete: %d", h.count.Load())
				})
			}
			stopA()
			snapshot := e.committed(group)[0]
			refusals := logs.records(msgMetadataRefused)
			warnings := 0
			for _, r := range refusals {
				if r.Level == slog.LevelWarn {
					warnings++
				}
			}
			got := map[string]any{
				"committed offset":       snapshot.Offset,
				"metadata up to the end": metadataUpTo(snapshot, n-1),
				"metadata accepted size": len(snapshot.Metadata) <= limit,
				"refusals seen":          len(refusals) > 0,
				"warnings":               warnings,
			}
			want := map[string]any{
				"committed offset":       int64(n / 2),
				"metadata up to the end": true,
				"metadata accepted size": true,
				"refusals seen":          true,
				"warnings":               1,
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("after the refusals (-want +got):\n%s\ncommitted metadata %d bytes; refusals logged %+v; group errors %+v",
					diff, len(snapshot.Metadata), refusals, logs.records(msgGroupError))
			}
			checkHydration(t, e, cfg, n, snapshot)
		})
	}
}
