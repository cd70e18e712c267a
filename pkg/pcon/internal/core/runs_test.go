package core

import (
	"errors"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/loopers/commerce-pipeline/pkg/pcon/internal/engine"
)

// dispatched describes a submitted task: its offset and whether it is tied
// to the task before it.
type dispatched struct {
	Off     int64
	Follows bool
}

func describe(ts []engine.Task) []dispatched {
	out := make([]dispatched, len(ts))
	for i, t := range ts {
		out[i] = dispatched{offsetOf(t), t.Follows}
	}
	return out
}

func sameKey(key string, offs ...int64) map[int64]string {
	m := map[int64]string{}
	for _, o := range offs {
		m[o] = key
	}
	return m
}

func TestRuns(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		cfg      Config
		keys     map[int64]string
		offs     []int64
		want     []dispatched // first dispatch
		thenWant []dispatched // after completing the first dispatch
	}{
		{
			name: "a key's ready records go as one run",
			cfg:  Config{MaxInFlight: 100, Ordering: ByKey, MaxRun: 3},
			keys: sameKey("k", 0, 1, 2, 3, 4),
			offs: []int64{0, 1, 2, 3, 4},
			// Records added together are all queued before anything is
			// dispatched, so the head takes its followers at once.
			want:     []dispatched{{0, false}, {1, true}, {2, true}},
			thenWant: []dispatched{{3, false}, {4, true}},
		},
		{
			name:     "without runs a key goes one record at a time",
			cfg:      Config{MaxInFlight: 100, Ordering: ByKey},
			keys:     sameKey("k", 0, 1, 2),
			offs:     []int64{0, 1, 2},
			want:     []dispatched{{0, false}},
			thenWant: []dispatched{{1, false}},
		},
		{
			name:     "a run stops at its byte limit",
			cfg:      Config{MaxInFlight: 100, Ordering: ByKey, MaxRun: 10, MaxRunBytes: 2},
			keys:     sameKey("k", 0, 1, 2, 3),
			offs:     []int64{0, 1, 2, 3},
			want:     []dispatched{{0, false}, {1, true}},
			thenWant: []dispatched{{2, false}, {3, true}},
		},
		{
			name:     "a run stops at the in-flight budget",
			cfg:      Config{MaxInFlight: 2, Ordering: ByKey, MaxRun: 10},
			keys:     sameKey("k", 0, 1, 2, 3),
			offs:     []int64{0, 1, 2, 3},
			want:     []dispatched{{0, false}, {1, true}},
			thenWant: []dispatched{{2, false}, {3, true}},
		},
		{
			name:     "keys run side by side, each in its own run",
			cfg:      Config{MaxInFlight: 100, Ordering: ByKey, MaxRun: 10},
			keys:     keys(0, "a", 1, "b", 2, "a", 3, "b"),
			offs:     []int64{0, 1, 2, 3},
			want:     []dispatched{{0, false}, {2, true}, {1, false}, {3, true}},
			thenWant: []dispatched{},
		},
		{
			name:     "partition order runs the partition's records",
			cfg:      Config{MaxInFlight: 100, Ordering: ByPartition, MaxRun: 2},
			keys:     keys(0, "a", 1, "b", 2, "c"),
			offs:     []int64{0, 1, 2},
			want:     []dispatched{{0, false}, {1, true}},
			thenWant: []dispatched{{2, false}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, tt.cfg)
			ep := h.c.Assign(tp0, 0, "")
			h.add(tp0, ep, tt.keys, tt.offs...)
			first := h.take()
			if diff := cmp.Diff(tt.want, describe(first)); diff != "" {
				t.Fatalf("first dispatch (-want +got):\n%s", diff)
			}
			h.c.Complete(completions(first, nil))
			if diff := cmp.Diff(tt.thenWant, describe(h.take()), cmpopts.EquateEmpty()); diff != "" {
				t.Fatalf("second dispatch (-want +got):\n%s", diff)
			}
		})
	}
}

// completions reports every task at once, failing those in errs.
func completions(ts []engine.Task, errs map[int64]error) []engine.Completion {
	cs := make([]engine.Completion, len(ts))
	for i, t := range ts {
		cs[i] = engine.Completion{Task: t, Err: errs[offsetOf(t)]}
	}
	return cs
}

// TestRunPartialFailure: a run 0..4 of key k where 2 fails. 0 and 1
// complete; 2 is retried alone; 3 and 4 are not complete, whatever they
// returned, and run again after 2, in order. Key j is not held up.
func TestRunPartialFailure(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{MaxInFlight: 100, Ordering: ByKey, MaxRun: 10, MaxAttempts: 3})
	ep := h.c.Assign(tp0, 0, "")
	ks := sameKey("k", 0, 1, 2, 3, 4)
	ks[5] = "j"
	h.add(tp0, ep, ks, 0, 1, 2, 3, 4, 5)
	first := h.take()
	if diff := cmp.Diff([]dispatched{{0, false}, {1, true}, {2, true}, {3, true}, {4, true}, {5, false}}, describe(first)); diff != "" {
		t.Fatalf("first dispatch (-want +got):\n%s", diff)
	}
	run, j := first[:5], first[5]
	h.c.Complete(completions(run, map[int64]error{2: errors.New("boom")}))
	if got := h.take(); len(got) != 0 {
		t.Fatalf("dispatched %v while 2 waits for its retry", offsetsOf(got))
	}
	st := h.stats(tp0)
	if st.Committable != 2 || st.Counters.Retried != 1 || st.Counters.Processed != 2 {
		t.Fatalf("committable %d retried %d processed %d, want 2, 1, 2 (0 and 1 complete, 3 and 4 not)",
			st.Committable, st.Counters.Retried, st.Counters.Processed)
	}
	h.complete(j, nil) // key j is not held up by k's failure
	h.fireTimers()
	retry := h.take()
	if diff := cmp.Diff([]dispatched{{2, false}}, describe(retry)); diff != "" {
		t.Fatalf("retry runs alone (-want +got):\n%s", diff)
	}
	if !retry[0].Alone || first[0].Alone {
		t.Fatalf("a retry must ask for a batch of its own (Alone %v), a first attempt must not (%v)", retry[0].Alone, first[0].Alone)
	}
	h.c.Complete(completions(retry, nil))
	again := h.take()
	if diff := cmp.Diff([]dispatched{{3, false}, {4, true}}, describe(again)); diff != "" {
		t.Fatalf("followers run again after the retry (-want +got):\n%s", diff)
	}
	h.c.Complete(completions(again, nil))
	st = h.stats(tp0)
	if st.Committable != 6 || st.Counters.Processed != 6 || st.Counters.Retried != 1 {
		t.Fatalf("committable %d processed %d retried %d, want 6, 6, 1", st.Committable, st.Counters.Processed, st.Counters.Retried)
	}
}

// TestRunDeadLetterReleasesFollowers: when a run's failed record is
// dead-lettered, the records behind it run next, in order.
func TestRunDeadLetterReleasesFollowers(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{MaxInFlight: 100, Ordering: ByKey, MaxRun: 10, MaxAttempts: 1})
	ep := h.c.Assign(tp0, 0, "")
	h.add(tp0, ep, sameKey("k", 0, 1, 2), 0, 1, 2)
	h.c.Complete(completions(h.take(), map[int64]error{0: errPermanent}))
	h.dlt <- nil
	if got := <-h.dlted; got != 0 {
		t.Fatalf("dead-lettered %d, want 0", got)
	}
	var next []engine.Task
	waitFor(t, func() bool { next = append(next, h.take()...); return len(next) >= 2 })
	if diff := cmp.Diff([]dispatched{{1, false}, {2, true}}, describe(next)); diff != "" {
		t.Fatalf("after the dead letter (-want +got):\n%s", diff)
	}
}

func TestKeyQueueOverflow(t *testing.T) {
	t.Parallel()
	hot := sameKey("k", 0, 1, 2, 3, 4, 5)
	tests := []struct {
		name     string
		policy   Overflow
		accepted int     // items Add takes before it blocks
		queued   int     // records the key holds queued
		dlt      []int64 // dead-lettered offsets
		want     Counters
	}{
		{name: "block stops the partition", policy: OverflowBlock, accepted: 3, queued: 2, want: Counters{KeyBlocks: 1}},
		{name: "drop oldest completes the oldest queued", policy: OverflowDropOldest, accepted: 6, queued: 2, want: Counters{Dropped: 3}},
		{name: "dead letter refuses the arriving record", policy: OverflowDeadLetter, accepted: 6, queued: 2, dlt: []int64{3, 4, 5}, want: Counters{Overflowed: 3, DeadLettered: 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, Config{MaxInFlight: 100, Ordering: ByKey, KeyQueueCapacity: 2, Overflow: tt.policy})
			ep := h.c.Assign(tp0, 0, "")
			items := make([]Item, 0, 6)
			for o := int64(0); o < 6; o++ {
				items = append(items, Item{Offset: o, Key: hot[o], Size: 1, Payload: o})
			}
			n, wait := h.c.Add(tp0, ep, items, 6)
			if n != tt.accepted || (wait != nil) != (tt.policy == OverflowBlock) {
				t.Fatalf("Add took %d (wait %v), want %d", n, wait != nil, tt.accepted)
			}
			for range tt.dlt {
				h.dlt <- nil
			}
			var dlted []int64
			for range tt.dlt {
				dlted = append(dlted, <-h.dlted)
			}
			waitFor(t, func() bool { return h.stats(tp0).InFlight == 1 })
			st := h.stats(tp0)
			if diff := cmp.Diff(tt.want, st.Counters); diff != "" {
				t.Errorf("counters (-want +got):\n%s", diff)
			}
			if st.LongestKey != tt.queued || st.ActiveKeys != 1 || st.BlockedOnKey != (tt.policy == OverflowBlock) {
				t.Errorf("longest key queue %d, active keys %d, blocked %v", st.LongestKey, st.ActiveKeys, st.BlockedOnKey)
			}
			if len(tt.dlt) > 0 {
				slicesSort(dlted)
				if diff := cmp.Diff(tt.dlt, dlted); diff != "" {
					t.Errorf("dead-lettered (-want +got):\n%s", diff)
				}
			}
			// Finishing the running record lets the queue drain; a blocked
			// partition is released once the queue is at 70 % or less.
			h.complete(h.take()[0], nil)
			if wait != nil {
				select {
				case <-wait:
				default:
					t.Fatal("partition still blocked after its key's queue drained")
				}
				// One more fits before the queue is full again.
				if n2, w2 := h.c.Add(tp0, ep, items[n:], 6); n2 != 1 || w2 == nil {
					t.Fatalf("re-Add took %d (blocked %v), want 1 and blocked again", n2, w2 != nil)
				}
			}
		})
	}
}

func TestRevokeReleasesBlockedFeeder(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{MaxInFlight: 100, Ordering: ByKey, KeyQueueCapacity: 1})
	ep := h.c.Assign(tp0, 0, "")
	_, wait := h.c.Add(tp0, ep, []Item{{Offset: 0, Key: "k"}, {Offset: 1, Key: "k"}, {Offset: 2, Key: "k"}}, 3)
	if wait == nil {
		t.Fatal("Add did not block")
	}
	h.complete(h.take()[0], nil)
	h.c.Revoke(tp0, ep, 0)
	select {
	case <-wait:
	default:
		t.Fatal("a revoked partition's feeder is still blocked")
	}
}

func slicesSort(s []int64) { sort.Slice(s, func(i, j int) bool { return s[i] < s[j] }) }
