package pcon_test

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/loopers/commerce-pipeline/pkg/pcon"
)

// orderChecker checks per-key order in the only form at-least-once delivery
// allows: a record of a key may start only after the key's previous record
// has completed at least once, by any member. It also counts handling.
type orderChecker struct {
	prev    [partitions][]int64 // previous offset of the same key, -1 if none
	done    [partitions][]atomic.Bool
	handled [partitions][]atomic.Int32

	mu         sync.Mutex
	violations []string
	contiguous [partitions]int64 // every offset below is done
}

func newOrderChecker(recs []produced) *orderChecker {
	o := &orderChecker{}
	ends := endOffsets(recs)
	for p := range int32(partitions) {
		o.prev[p] = make([]int64, ends[p])
		o.done[p] = make([]atomic.Bool, ends[p])
		o.handled[p] = make([]atomic.Int32, ends[p])
	}
	last := map[[2]string]int64{}
	// recs are in production order, which per partition is offset order.
	byPart := [partitions][]produced{}
	for _, r := range recs {
		byPart[r.Partition] = append(byPart[r.Partition], r)
	}
	for p, rs := range byPart {
		for _, r := range rs {
			k := [2]string{fmt.Sprint(p), r.Key}
			prev, ok := last[k]
			if !ok {
				prev = -1
			}
			o.prev[p][r.Offset] = prev
			last[k] = r.Offset
		}
	}
	return o
}

func (o *orderChecker) violate(format string, args ...any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.violations) < 20 {
		o.violations = append(o.violations, fmt.Sprintf(format, args...))
	}
}

func (o *orderChecker) begin(r *pcon.Record) {
	o.handled[r.Partition][r.Offset].Add(1)
	if prev := o.prev[r.Partition][r.Offset]; prev >= 0 && !o.done[r.Partition][prev].Load() {
		o.violate("p%d@%d started before p%d@%d (same key %q) completed", r.Partition, r.Offset, r.Partition, prev, r.Key)
	}
}

func (o *orderChecker) end(r *pcon.Record) { o.done[r.Partition][r.Offset].Store(true) }

// checkCommit reports a commit of offset off on partition p that passes a
// record never completed.
func (o *orderChecker) checkCommit(p int32, off int64) {
	o.mu.Lock()
	c := o.contiguous[p]
	for c < int64(len(o.done[p])) && o.done[p][c].Load() {
		c++
	}
	o.contiguous[p] = c
	o.mu.Unlock()
	if off > c {
		o.violate("commit of p%d@%d passes incomplete offset %d", p, off, c)
	}
}

// missing lists records never handled (to at most 10).
func (o *orderChecker) missing() []string {
	var out []string
	for p := range o.done {
		for off := range o.done[p] {
			if !o.done[p][off].Load() && len(out) < 10 {
				out = append(out, fmt.Sprintf("p%d@%d", p, off))
			}
		}
	}
	return out
}

func (o *orderChecker) report() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.violations...)
}
