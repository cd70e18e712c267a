package core

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/loopers/commerce-pipeline/pkg/pcon/internal/engine"
)

// TestMaxRunningBoundsDispatchNotBuffer checks that the records held beyond
// MaxRunning stay buffered, dispatched one per completion, while
// backpressure still counts them against MaxInFlight.
func TestMaxRunningBoundsDispatchNotBuffer(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name        string
		cfg         Config
		add         int
		wantFirst   int
		wantPauses  []bool
		wantPerDone int // dispatched per completion while records are buffered
	}{
		{
			name: "cap below the buffer", cfg: Config{MaxInFlight: 10, MaxRunning: 3, Ordering: ByKey},
			add: 8, wantFirst: 3, wantPauses: nil, wantPerDone: 1,
		},
		{
			name: "buffer full pauses", cfg: Config{MaxInFlight: 10, MaxRunning: 3, Ordering: ByKey},
			add: 10, wantFirst: 3, wantPauses: []bool{true}, wantPerDone: 1,
		},
		{
			name: "zero cap is MaxInFlight", cfg: Config{MaxInFlight: 4, Ordering: None},
			add: 6, wantFirst: 4, wantPauses: []bool{true}, wantPerDone: 1,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, tt.cfg)
			ep := h.c.Assign(tp0, 0, "")
			ks := map[int64]string{}
			offs := make([]int64, tt.add)
			for i := range offs {
				offs[i] = int64(i)
				ks[int64(i)] = fmt.Sprint("k", i) // every record a key of its own
			}
			h.add(tp0, ep, ks, offs...)
			first := h.take()
			if len(first) != tt.wantFirst {
				t.Fatalf("dispatched %d records at once, want %d", len(first), tt.wantFirst)
			}
			if diff := cmp.Diff(tt.wantPauses, h.pauses); diff != "" {
				t.Errorf("pauses (-want +got):\n%s", diff)
			}
			st := h.c.Stats()
			wantStats := [3]int{tt.wantFirst, tt.wantFirst, tt.cfg.MaxInFlight} // in flight, its bound, records held
			if diff := cmp.Diff(wantStats, [3]int{st.InFlight, st.Running, st.Capacity}); diff != "" {
				t.Errorf("stats: in flight, running bound, capacity (-want +got):\n%s", diff)
			}
			h.complete(first[0], nil)
			if got := len(h.take()); got != tt.wantPerDone {
				t.Errorf("dispatched %d records after one completion, want %d", got, tt.wantPerDone)
			}
		})
	}
}

// TestRunningHandlersReachTheCap runs records through the real per-record
// engine with handlers that sleep and records the most calls running at
// once, overall and per key. With more ready keys than the cap, the cap
// must be reached and never exceeded; with fewer, key order is the bound.
func TestRunningHandlersReachTheCap(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name        string
		maxInFlight int
		maxRunning  int
		keys        int
		wantPeak    int
	}{
		{name: "cap below the buffer", maxInFlight: 400, maxRunning: 40, keys: 200, wantPeak: 40},
		{name: "one budget", maxInFlight: 40, keys: 200, wantPeak: 40},
		{name: "fewer keys than the cap", maxInFlight: 400, maxRunning: 40, keys: 25, wantPeak: 25},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			const records = 400
			var (
				mu      sync.Mutex
				running int
				peak    int
				perKey  = map[string]int{}
				keyPeak int
				done    = make(chan struct{})
				handled int
			)
			run := func(_ context.Context, ts []engine.Task) []error {
				k := Payload(ts[0]).(string)
				mu.Lock()
				running++
				perKey[k]++
				peak, keyPeak = max(peak, running), max(keyPeak, perKey[k])
				mu.Unlock()
				// Long enough that the calls of one dispatch overlap on a
				// loaded machine.
				time.Sleep(20 * time.Millisecond)
				mu.Lock()
				running--
				perKey[k]--
				if handled++; handled == records {
					close(done)
				}
				mu.Unlock()
				return nil
			}
			var e *engine.PerRecord
			c := New(Config{MaxInFlight: tt.maxInFlight, MaxRunning: tt.maxRunning, Ordering: ByKey, MaxAttempts: 1,
				Backoff: func(int) time.Duration { return 0 }},
				Deps{Submit: func(ts ...engine.Task) error { return e.Submit(ts...) }, SetPaused: func(bool) {}})
			limit := tt.maxRunning
			if limit == 0 {
				limit = tt.maxInFlight
			}
			e = engine.NewPerRecord(run, c.Complete, limit, 0)
			e.SetMode(engine.Dedicated)
			t.Cleanup(func() {
				c.Close()
				if err := e.Close(context.Background()); err != nil {
					t.Errorf("close engine: %v", err)
				}
			})
			ep := c.Assign(tp0, 0, "")
			items := make([]Item, records)
			for i := range items {
				k := fmt.Sprint("k", i%tt.keys)
				items[i] = Item{Offset: int64(i), Key: k, Size: 1, Payload: k}
			}
			// Fed in slices, as a partition feeder does.
			for i := 0; i < records; i += 50 {
				c.Add(tp0, ep, items[i:i+50], records)
			}
			select {
			case <-done:
			case <-time.After(time.Minute):
				t.Fatalf("handled %d of %d records in a minute", handled, records)
			}
			mu.Lock()
			defer mu.Unlock()
			if peak != tt.wantPeak {
				t.Errorf("most handler calls at once = %d, want %d", peak, tt.wantPeak)
			}
			if keyPeak != 1 {
				t.Errorf("most calls of one key at once = %d, want 1", keyPeak)
			}
		})
	}
}
