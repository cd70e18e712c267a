package core

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/loopers/commerce-pipeline/pkg/pcon/internal/engine"
	"github.com/loopers/commerce-pipeline/pkg/pcon/internal/offsets"
)

var (
	tp0 = engine.TP{Topic: "t", Partition: 0}
	tp1 = engine.TP{Topic: "t", Partition: 1}
)

// harness drives a Core by hand: the engine only records submissions, and
// timers fire when the test says so.
type harness struct {
	t      *testing.T
	c      *Core
	mu     sync.Mutex
	tasks  []engine.Task
	pauses []bool
	timers []func()
	dlt    chan error // answers for dead-letter publishes
	dlted  chan int64 // offsets published
}

func newHarness(t *testing.T, cfg Config) *harness {
	h := &harness{t: t, dlt: make(chan error, 16), dlted: make(chan int64, 16)}
	if cfg.Backoff == nil {
		cfg.Backoff = func(int) time.Duration { return time.Millisecond }
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = 3
	}
	h.c = New(cfg, Deps{
		Submit: func(tks ...engine.Task) error {
			h.mu.Lock()
			h.tasks = append(h.tasks, tks...)
			h.mu.Unlock()
			return nil
		},
		SetPaused: func(p bool) { h.pauses = append(h.pauses, p) },
		DeadLetter: func(ctx context.Context, payload any, cause error, attempts int) error {
			select {
			case err := <-h.dlt:
				if err == nil {
					h.dlted <- payload.(int64)
				}
				return err
			case <-ctx.Done():
				return ctx.Err()
			}
		},
		Permanent: func(err error) bool { return errors.Is(err, errPermanent) },
		AfterFunc: func(_ time.Duration, f func()) {
			h.mu.Lock()
			h.timers = append(h.timers, f)
			h.mu.Unlock()
		},
	})
	t.Cleanup(h.c.Close)
	return h
}

var errPermanent = errors.New("permanent")

func (h *harness) add(tp engine.TP, epoch uint64, keyed map[int64]string, offs ...int64) {
	items := make([]Item, len(offs))
	for i, o := range offs {
		items[i] = Item{Offset: o, Key: keyed[o], Size: 1, Payload: o}
	}
	h.c.Add(tp, epoch, items, offs[len(offs)-1]+1)
}

// addRaw is add with the keys given as bytes, nil for no key, as a record
// key is.
func (h *harness) addRaw(tp engine.TP, epoch uint64, keyed map[int64]string, offs ...int64) {
	items := make([]Item, len(offs))
	for i, o := range offs {
		items[i] = Item{Offset: o, Size: 1, Payload: o}
		if k := keyed[o]; k != "" {
			items[i].RawKey = []byte(k)
		}
	}
	h.c.Add(tp, epoch, items, offs[len(offs)-1]+1)
}

// take returns and forgets the tasks submitted so far, as offsets.
func (h *harness) take() []engine.Task {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.tasks
	h.tasks = nil
	return out
}

func offsetsOf(ts []engine.Task) []int64 {
	out := make([]int64, len(ts))
	for i, tk := range ts {
		out[i] = offsetOf(tk)
	}
	return out
}

// offsetOf and tpOf say which record a task runs.
func offsetOf(tk engine.Task) int64 { return tk.Payload.(*item).off }
func tpOf(tk engine.Task) engine.TP { return tk.Payload.(*item).p.tp }

func (h *harness) complete(tk engine.Task, err error) {
	h.c.Complete([]engine.Completion{{Task: tk, Err: err}})
}

func (h *harness) fireTimers() {
	h.mu.Lock()
	fs := h.timers
	h.timers = nil
	h.mu.Unlock()
	for _, f := range fs {
		f()
	}
}

func (h *harness) stats(tp engine.TP) PartitionStats {
	for _, ps := range h.c.Stats().Partitions {
		if ps.TP == tp {
			return ps
		}
	}
	h.t.Fatalf("no stats for %v", tp)
	return PartitionStats{}
}

func keys(pairs ...any) map[int64]string {
	m := map[int64]string{}
	for i := 0; i < len(pairs); i += 2 {
		m[int64(pairs[i].(int))] = pairs[i+1].(string)
	}
	return m
}

func TestOrderingModes(t *testing.T) {
	t.Parallel()
	// offsets 0..5 with keys a a b b "" ""
	ks := keys(0, "a", 1, "a", 2, "b", 3, "b")
	tests := []struct {
		name      string
		cfg       Config
		first     []int64 // dispatched at once
		afterDone []int64 // dispatched after completing the first wave
	}{
		{name: "key", cfg: Config{Ordering: ByKey}, first: []int64{0, 2, 4, 5}, afterDone: []int64{1, 3}},
		{name: "key with empty keys ordered", cfg: Config{Ordering: ByKey, OrderEmptyKeys: true}, first: []int64{0, 2, 4}, afterDone: []int64{1, 3, 5}},
		{name: "partition", cfg: Config{Ordering: ByPartition}, first: []int64{0}, afterDone: []int64{1}},
		{name: "unordered", cfg: Config{Ordering: None}, first: []int64{0, 1, 2, 3, 4, 5}, afterDone: []int64{}},
	}
	for _, tt := range tests {
		for _, keyed := range []struct {
			name string
			add  func(h *harness, tp engine.TP, epoch uint64, keyed map[int64]string, offs ...int64)
		}{
			{"string keys", (*harness).add},
			{"raw keys", (*harness).addRaw},
		} {
			t.Run(tt.name+"/"+keyed.name, func(t *testing.T) {
				t.Parallel()
				cfg := tt.cfg
				cfg.MaxInFlight = 100
				h := newHarness(t, cfg)
				ep := h.c.Assign(tp0, 0, "")
				keyed.add(h, tp0, ep, ks, 0, 1, 2, 3, 4, 5)
				first := h.take()
				if diff := cmp.Diff(tt.first, offsetsOf(first)); diff != "" {
					t.Fatalf("first wave (-want +got):\n%s", diff)
				}
				for _, tk := range first {
					h.complete(tk, nil)
				}
				if diff := cmp.Diff(tt.afterDone, offsetsOf(h.take())); diff != "" {
					t.Fatalf("second wave (-want +got):\n%s", diff)
				}
			})
		}
	}
}

func TestBlockingOffsetFirst(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{MaxInFlight: 2, Ordering: ByKey})
	e1 := h.c.Assign(tp1, 0, "")
	e0 := h.c.Assign(tp0, 0, "")
	h.add(tp0, e0, keys(0, "x"), 0)
	h.complete(h.take()[0], errors.New("transient")) // tp0@0 waits for a retry
	h.add(tp1, e1, keys(0, "a", 1, "b", 2, "c", 3, "d"), 0, 1, 2, 3)
	ts := h.take() // tp1@0 and tp1@1 fill the capacity
	h.fireTimers()
	h.complete(ts[1], nil)
	// tp1@2 is older in arrival and ready, but tp0@0 holds tp0's commit.
	got := h.take()
	if len(got) != 1 || tpOf(got[0]) != tp0 || offsetOf(got[0]) != 0 {
		t.Fatalf("dispatched %+v, want tp0@0", got)
	}
}

func TestPartitionsTakeTurns(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{MaxInFlight: 1, Ordering: None})
	e0 := h.c.Assign(tp0, 0, "")
	e1 := h.c.Assign(tp1, 0, "")
	h.add(tp0, e0, nil, 0, 1, 2, 3, 4, 5, 6, 7)
	h.add(tp1, e1, nil, 0, 1, 2)
	var got []int32
	for range 6 {
		ts := h.take()
		if len(ts) != 1 {
			t.Fatalf("dispatched %d tasks with capacity 1", len(ts))
		}
		got = append(got, tpOf(ts[0]).Partition)
		h.complete(ts[0], nil)
	}
	if diff := cmp.Diff([]int32{0, 1, 0, 1, 0, 1}, got); diff != "" {
		t.Errorf("partition turns (-want +got):\n%s", diff)
	}
}

func TestHotKeyDoesNotStarveOthers(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{MaxInFlight: 2, Ordering: ByKey})
	ep := h.c.Assign(tp0, 0, "")
	ks := map[int64]string{}
	for o := int64(0); o < 50; o++ {
		ks[o] = "hot"
	}
	ks[50] = "cold"
	offs := make([]int64, 51)
	for i := range offs {
		offs[i] = int64(i)
	}
	h.add(tp0, ep, ks, offs...)
	if diff := cmp.Diff([]int64{0, 50}, offsetsOf(h.take())); diff != "" {
		t.Fatalf("cold key waits behind hot key (-want +got):\n%s", diff)
	}
}

func TestHysteresis(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{MaxInFlight: 10, Ordering: None})
	ep := h.c.Assign(tp0, 0, "")
	for o := range int64(10) {
		h.add(tp0, ep, nil, o)
	}
	tasks := h.take()
	steps := []struct {
		name     string
		complete int
		paused   bool
	}{
		{name: "load at capacity pauses", complete: 0, paused: true},
		{name: "80 percent stays paused", complete: 2, paused: true},
		{name: "70 percent resumes", complete: 1, paused: false},
		{name: "lower stays resumed", complete: 3, paused: false},
	}
	for _, st := range steps {
		for range st.complete {
			h.complete(tasks[0], nil)
			tasks = tasks[1:]
		}
		if got := h.c.Paused(); got != st.paused {
			t.Fatalf("%s: paused = %v", st.name, got)
		}
	}
	if diff := cmp.Diff([]bool{true, false}, h.pauses); diff != "" {
		t.Errorf("pause calls (-want +got):\n%s", diff)
	}
}

func TestEpochFencing(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{MaxInFlight: 10, Ordering: ByKey})
	ep := h.c.Assign(tp0, 0, "")
	h.add(tp0, ep, keys(0, "a", 1, "b"), 0, 1)
	old := h.take()
	h.complete(old[1], nil)
	// Revoke with no grace while offset 0 is still running.
	cm, ok := h.c.Revoke(tp0, ep, 0)
	if !ok || cm.Offset != 0 {
		t.Fatalf("revoke commit = %+v %v, want offset 0", cm, ok)
	}
	ep2 := h.c.Assign(tp0, cm.Offset, cm.Metadata)
	if ep2 == ep {
		t.Fatal("epoch did not change")
	}
	h.add(tp0, ep2, keys(0, "a", 1, "b"), 0, 1)
	if got := h.take(); len(got) != 0 {
		t.Fatalf("dispatched %v while the old epoch still runs", offsetsOf(got))
	}
	h.complete(old[0], nil) // late completion from the old epoch
	ps := h.stats(tp0)
	if ps.Counters.StaleDropped != 1 || ps.Committable != 0 {
		t.Fatalf("stale completion applied: %+v", ps)
	}
	// Offset 1 was recorded complete in the metadata, so only 0 runs again.
	if diff := cmp.Diff([]int64{0}, offsetsOf(h.take())); diff != "" {
		t.Fatalf("new epoch dispatch (-want +got):\n%s", diff)
	}
	if ps.Counters.Skipped != 1 {
		t.Errorf("skipped = %d, want 1", ps.Counters.Skipped)
	}
}

func TestForeignMetadataIgnored(t *testing.T) {
	t.Parallel()
	for name, meta := range map[string]string{
		"other tool":     "some-tool-state",
		"another offset": mustEncode(t, 5, []int64{7}),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, Config{MaxInFlight: 10, Ordering: None})
			var logs bytes.Buffer
			h.c.log = slog.New(slog.NewTextHandler(&logs, nil))
			ep := h.c.Assign(tp0, 0, meta)
			h.add(tp0, ep, nil, 0, 1, 2, 3, 4, 5, 6, 7)
			if got := len(h.take()); got != 8 {
				t.Fatalf("dispatched %d, want all 8", got)
			}
			if !strings.Contains(logs.String(), "ignoring commit metadata") {
				t.Errorf("no log line for ignored metadata; logs: %q", logs.String())
			}
		})
	}
}

func mustEncode(t *testing.T, base int64, done []int64) string {
	m, kept := offsets.Encode(base, done, offsets.MaxMetadata)
	if kept != len(done) {
		t.Fatal("truncated")
	}
	return m
}

func TestRetryThenDeadLetter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		err      error
		failures int // handler failures before the dead letter
		retried  uint64
	}{
		{name: "transient error uses all attempts", err: errors.New("x"), failures: 3, retried: 2},
		{name: "permanent error skips retries", err: errPermanent, failures: 1, retried: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, Config{MaxInFlight: 10, MaxAttempts: 3, Ordering: ByKey})
			ep := h.c.Assign(tp0, 0, "")
			h.add(tp0, ep, keys(0, "k", 1, "k", 2, "other"), 0, 1, 2)
			ts := h.take()
			h.complete(ts[1], nil) // "other" flows while "k" fails
			for i := range tt.failures {
				if i > 0 {
					h.fireTimers()
					ts = h.take()
					if diff := cmp.Diff([]int64{0}, offsetsOf(ts)); diff != "" {
						t.Fatalf("retry %d (-want +got):\n%s", i, diff)
					}
				}
				h.complete(ts[0], tt.err)
			}
			if got := h.take(); len(got) != 0 {
				t.Fatalf("key k's next record ran before the failed one settled: %v", offsetsOf(got))
			}
			h.dlt <- errors.New("broker down") // first publish fails
			h.dlt <- nil
			if got := <-h.dlted; got != 0 {
				t.Fatalf("dead-lettered offset %d", got)
			}
			waitFor(t, func() bool { return len(h.take()) == 1 })
			ps := h.stats(tp0)
			want := Counters{Processed: 1, Retried: tt.retried, DeadLettered: 1, DLTFailures: 1}
			if diff := cmp.Diff(want, ps.Counters); diff != "" {
				t.Errorf("counters (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFailedDeadLetterNeverCommits(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{MaxInFlight: 10, MaxAttempts: 1, Ordering: ByKey})
	ep := h.c.Assign(tp0, 0, "")
	h.add(tp0, ep, keys(0, "k", 1, "j"), 0, 1)
	ts := h.take()
	h.complete(ts[0], errPermanent)
	h.complete(ts[1], nil)
	h.dlt <- errors.New("down")
	waitFor(t, func() bool { return h.stats(tp0).Counters.DLTFailures == 1 })
	cm, ok := h.c.Revoke(tp0, ep, 0)
	if !ok || cm.Offset != 0 {
		t.Fatalf("commit %+v, want offset 0 (the undelivered dead letter)", cm)
	}
	_, done, err := offsets.Decode(cm.Metadata)
	if err != nil || !cmp.Equal(done, []int64{1}) {
		t.Fatalf("metadata %v %v, want [1]", done, err)
	}
}

func TestRevokeWaitsForInFlight(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{MaxInFlight: 10, Ordering: None})
	ep := h.c.Assign(tp0, 0, "")
	h.add(tp0, ep, nil, 0, 1)
	ts := h.take()
	done := make(chan Commit)
	go func() {
		cm, _ := h.c.Revoke(tp0, ep, time.Minute)
		done <- cm
	}()
	h.complete(ts[0], nil)
	h.complete(ts[1], nil)
	if cm := <-done; cm.Offset != 2 {
		t.Fatalf("commit after grace = %d, want 2", cm.Offset)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestIdleLanesAreSwept(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{MaxInFlight: 100_000, Ordering: ByKey})
	ep := h.c.Assign(tp0, 0, "")
	const n = 5 * idleLanes
	ks := map[int64]string{}
	offs := make([]int64, n)
	for i := range offs {
		offs[i] = int64(i)
		ks[int64(i)] = "key-" + strconv.Itoa(i) // every record its own key
	}
	h.add(tp0, ep, ks, offs...)
	for _, tk := range h.take() {
		h.complete(tk, nil)
	}
	h.c.Commits()
	h.c.mu.Lock()
	left := len(h.c.parts[tp0].lanes)
	h.c.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d idle lanes kept after a sweep", left)
	}
}

// TestLowerMetadataLimit: once the limit comes down, the next commit is
// encoded again within it, though neither its offset nor its gap changed,
// and keeps the highest completed offsets; a higher limit changes nothing.
func TestLowerMetadataLimit(t *testing.T) {
	t.Parallel()
	h := newHarness(t, Config{MaxInFlight: 10_000, Ordering: None})
	ep := h.c.Assign(tp0, 0, "")
	offs := make([]int64, 4000)
	for i := range offs {
		offs[i] = int64(i)
	}
	h.add(tp0, ep, nil, offs...)
	for _, tk := range h.take() {
		if offsetOf(tk)%3 != 0 { // 0 stays incomplete: everything above is metadata
			h.complete(tk, nil)
		}
	}
	commitOf := func() Commit {
		for _, cm := range h.c.Commits() {
			if cm.TP == tp0 {
				return cm
			}
		}
		t.Fatal("no commit of tp0")
		return Commit{}
	}
	before := commitOf()
	_, all, err := offsets.Decode(before.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	limit := len(before.Metadata) / 2
	lowered := map[string]bool{
		"to a higher limit": h.c.LowerMetadataLimit(offsets.MaxMetadata + 1),
		"to half":           h.c.LowerMetadataLimit(limit),
		"to half again":     h.c.LowerMetadataLimit(limit),
	}
	if diff := cmp.Diff(map[string]bool{"to a higher limit": false, "to half": true, "to half again": false}, lowered); diff != "" {
		t.Errorf("LowerMetadataLimit (-want +got):\n%s", diff)
	}
	after := commitOf()
	_, kept, err := offsets.Decode(after.Metadata)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]any{
		"offset":           after.Offset,
		"within limit":     len(after.Metadata) <= limit,
		"truncated":        len(kept) < len(all),
		"kept the highest": cmp.Equal(kept, all[len(all)-len(kept):]),
	}
	want := map[string]any{"offset": int64(0), "within limit": true, "truncated": true, "kept the highest": true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("commit after the limit came down (-want +got):\n%s", diff)
	}
}
