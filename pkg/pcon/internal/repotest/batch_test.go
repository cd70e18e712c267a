package pcon_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/loopers/commerce-pipeline/pkg/pcon"
)

// TestBatchHandler runs the micro-batch engine end to end: key runs in a
// batch in offset order, key order across batches, per-record failures
// through BatchError (a key's later records of the batch run again after
// the failed one), a permanent failure to the dead-letter topic, and
// everything committed.
func TestBatchHandler(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	recs := e.produce(20_000, keyMod(300))
	chk := newOrderChecker(recs)
	group := e.group("batch")
	flaky := map[[2]int64]bool{}  // fail once
	doomed := map[[2]int64]bool{} // fail permanently
	for i, idx := range []int{7, 700, 7000, 17000} {
		k := [2]int64{int64(recs[idx].Partition), recs[idx].Offset}
		if i == 3 {
			doomed[k] = true
		} else {
			flaky[k] = true
		}
	}
	var mu sync.Mutex
	failedOnce := map[[2]int64]bool{}
	var biggest, longestRun atomic.Int64
	cfg := e.config(group)
	cfg.Batch = pcon.BatchConfig{MaxRecords: 64, Concurrency: 4}
	c, stop := start(t, cfg, pcon.BatchHandler(func(ctx context.Context, rs []*pcon.Record) error {
		if n := int64(len(rs)); n > biggest.Load() {
			biggest.Store(n)
		}
		last := map[[2]string]int64{} // key -> offset of its previous record in this batch
		run := map[[2]string]int64{}
		broken := map[[2]string]bool{} // keys with a failed record in this batch
		failed := map[int]error{}
		for i, r := range rs {
			k := [2]string{string(rune('0' + r.Partition)), string(r.Key)}
			if prev, ok := last[k]; ok && chk.prev[r.Partition][r.Offset] != prev {
				chk.violate("batch holds p%d@%d of key %q after p%d@%d, not right after its previous record", r.Partition, r.Offset, r.Key, r.Partition, prev)
			}
			last[k] = r.Offset
			if run[k]++; run[k] > longestRun.Load() {
				longestRun.Store(run[k])
			}
			if broken[k] {
				// What follows a failure of its key is not complete
				// whatever this returns; a handler may skip it.
				continue
			}
			chk.begin(r)
			id := [2]int64{int64(r.Partition), r.Offset}
			mu.Lock()
			switch {
			case doomed[id]:
				failed[i] = pcon.Permanent(errors.New("doomed"))
				broken[k] = true
				chk.end(r)
			case flaky[id] && !failedOnce[id]:
				failedOnce[id] = true
				failed[i] = errors.New("flaky")
				broken[k] = true
			default:
				chk.end(r)
			}
			mu.Unlock()
		}
		if len(failed) > 0 {
			return &pcon.BatchError{Failed: failed}
		}
		return nil
	}))
	e.waitCommitted(group, endOffsets(recs))
	stats := c.Stats()
	stop()
	checkClean(t, chk)
	if biggest.Load() < 2 {
		t.Errorf("largest batch %d: records were never batched", biggest.Load())
	}
	if longestRun.Load() < 2 {
		t.Errorf("longest run of one key in a batch %d: key runs were never batched", longestRun.Load())
	}
	var processed, retried, dead uint64
	for _, p := range stats.Partitions {
		processed += p.Processed
		retried += p.Retried
		dead += p.DeadLettered
	}
	if processed != uint64(len(recs)-1) || retried != 3 || dead != 1 {
		t.Errorf("processed %d retried %d dead-lettered %d, want %d, 3, 1", processed, retried, dead, len(recs)-1)
	}
	if d := e.dltRecords(1); len(d) != 1 {
		t.Errorf("dead letters: %d", len(d))
	}
}

// TestPoisonIsolatedFromBatchMates: a handler that can only say "this batch
// failed, permanently" (one transaction, one bad row) costs its batch-mates
// one attempt: they are retried alone and succeed, and only the poison
// record reaches the dead-letter topic.
func TestPoisonIsolatedFromBatchMates(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	recs := e.produce(3000, keyMod(50))
	poison := recs[1234]
	group := e.group("poison-isolation")
	var handled sync.Map
	cfg := e.config(group)
	cfg.MaxAttempts = 2
	c, stop := start(t, cfg, pcon.BatchHandler(func(ctx context.Context, rs []*pcon.Record) error {
		for _, r := range rs {
			if r.Partition == poison.Partition && r.Offset == poison.Offset {
				return pcon.Permanent(errors.New("bad row"))
			}
		}
		for _, r := range rs {
			handled.Store([2]int64{int64(r.Partition), r.Offset}, true)
		}
		return nil
	}))
	e.waitCommitted(group, endOffsets(recs))
	stats := c.Stats()
	stop()
	var dead uint64
	for _, p := range stats.Partitions {
		dead += p.DeadLettered
	}
	if dead != 1 {
		t.Errorf("dead-lettered %d records, want only the poison one", dead)
	}
	for _, r := range recs {
		_, ok := handled.Load([2]int64{int64(r.Partition), r.Offset})
		if isPoison := r == poison; ok == isPoison {
			t.Errorf("p%d@%d handled %v, poison %v", r.Partition, r.Offset, ok, isPoison)
		}
	}
	d := e.dltRecords(1)
	if len(d) != 1 {
		t.Fatalf("%d dead letters, want the poison record alone", len(d))
	}
	h := headerMap(d[0])
	if got, want := h[pcon.HeaderOriginalPartition]+"@"+h[pcon.HeaderOriginalOffset], fmt.Sprintf("%d@%d", poison.Partition, poison.Offset); got != want {
		t.Errorf("dead letter is p%s, want the poison record p%s", got, want)
	}
}
