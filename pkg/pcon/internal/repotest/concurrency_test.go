package pcon_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/loopers/commerce-pipeline/pkg/pcon"
	"github.com/loopers/commerce-pipeline/pkg/pcon/internal/testhook"
)

// TestMaxConcurrency consumes with a concurrency cap well below the records
// held (MaxInFlight at its default, ten times the cap) and a handler that
// counts its calls running at once. With a thousand keys there is always a
// record of an idle key buffered, so the calls must reach the cap; they must
// never exceed it, and key order and commits hold as ever. With workers
// shared among records, as for handlers that only compute, a sleeping call
// holds up the records of its worker's chunk until the watchdog hands them
// on, so there the cap is only checked as a bound.
func TestMaxConcurrency(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		mode  func(*pcon.Consumer)
		reach bool // the calls must reach the cap, not only stay within it
	}{
		{name: "adaptive", mode: func(*pcon.Consumer) {}, reach: true},
		{name: "shared workers", mode: func(c *pcon.Consumer) { testhook.ShareWorkers(c) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			testMaxConcurrency(t, tt.mode, tt.reach)
		})
	}
}

func testMaxConcurrency(t *testing.T, mode func(*pcon.Consumer), reach bool) {
	const limit = 50
	e := newEnv(t)
	recs := e.produce(5_000, keyMod(1000))
	chk := newOrderChecker(recs)
	group := e.group("max-concurrency")
	cfg := e.config(group)
	cfg.MaxInFlight = 0 // the default for the cap: 1000
	cfg.MaxConcurrency = limit
	var (
		mu            sync.Mutex
		running, peak int
	)
	c, stop := start(t, cfg, pcon.RecordHandler(func(ctx context.Context, r *pcon.Record) error {
		chk.begin(r)
		mu.Lock()
		running++
		peak = max(peak, running)
		mu.Unlock()
		// Long enough for the calls to overlap, and slow enough to be
		// handled with shared workers too: their watchdog gives a blocked
		// call's followers workers of their own.
		time.Sleep(2 * time.Millisecond)
		mu.Lock()
		running--
		mu.Unlock()
		chk.end(r)
		return nil
	}), mode)
	e.waitCommitted(group, endOffsets(recs))
	if st := c.Stats(); st.Concurrency != limit || st.Capacity != 1000 {
		t.Errorf("Stats: Concurrency %d, Capacity %d; want %d, 1000", st.Concurrency, st.Capacity, limit)
	}
	stop()
	checkClean(t, chk)
	mu.Lock()
	defer mu.Unlock()
	if peak > limit || (reach && peak != limit) {
		t.Errorf("most handler calls at once = %d, want MaxConcurrency, %d", peak, limit)
	}
}
