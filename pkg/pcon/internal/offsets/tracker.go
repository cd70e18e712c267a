// Package offsets holds the per-partition offset bookkeeping of pcon: which
// received offsets are complete, the committable offset below which
// everything is complete, and the codec that stores completed offsets above
// it in Kafka commit metadata.
package offsets

import "sort"

// Tracker follows the records of one partition assignment. It is not safe
// for concurrent use; the control plane guards it with its own lock.
//
// The tracker works in terms of received offsets rather than integer ranges
// because a Kafka log may skip offsets (compaction, transaction markers): an
// offset that was never delivered can never block the committable offset.
type Tracker struct {
	// outstanding holds received offsets at or above the committable offset in
	// ascending order; outstanding[head] is the blocking offset when present.
	outstanding []entry
	head        int
	done        int // completed entries among outstanding[head:]

	next     int64   // one past the highest received offset, or the start offset
	hydrated []int64 // ascending offsets known complete from a previous owner
}

type entry struct {
	off  int64
	done bool
}

// NewTracker starts tracking at start, the committed offset of the
// partition. hydrated lists offsets above start that a previous owner
// recorded as complete; records at those offsets are reported as already
// done by Add.
func NewTracker(start int64, hydrated []int64) *Tracker {
	h := make([]int64, 0, len(hydrated))
	for _, o := range hydrated {
		if o > start {
			h = append(h, o)
		}
	}
	sort.Slice(h, func(i, j int) bool { return h[i] < h[j] })
	return &Tracker{next: start, hydrated: h}
}

// Add records that offset off was received. It reports whether the record is
// already complete (hydrated) and must not be processed, and whether it was
// accepted at all: offsets at or below a previously received offset are
// duplicates and are rejected.
func (t *Tracker) Add(off int64) (accepted, alreadyDone bool) {
	if off < t.next {
		return false, false
	}
	t.next = off + 1
	for len(t.hydrated) > 0 && t.hydrated[0] < off {
		t.hydrated = t.hydrated[1:]
	}
	if len(t.hydrated) > 0 && t.hydrated[0] == off {
		t.hydrated = t.hydrated[1:]
		alreadyDone = true
	}
	if alreadyDone && t.head == len(t.outstanding) {
		// Nothing below it is pending, so it never needs an entry.
		return true, true
	}
	t.outstanding = append(t.outstanding, entry{off: off, done: alreadyDone})
	if alreadyDone {
		t.done++
	}
	return true, alreadyDone
}

// Complete marks off as complete. It reports false for offsets that are not
// outstanding (never received, or already complete).
func (t *Tracker) Complete(off int64) bool {
	live := t.outstanding[t.head:]
	// Offsets are mostly consecutive, so off usually sits at its distance
	// from the first; only gaps in the log need the search.
	i := -1
	if len(live) > 0 {
		if d := off - live[0].off; d >= 0 && d < int64(len(live)) && live[d].off == off {
			i = int(d)
		}
	}
	if i < 0 {
		i = sort.Search(len(live), func(i int) bool { return live[i].off >= off })
	}
	if i == len(live) || live[i].off != off || live[i].done {
		return false
	}
	live[i].done = true
	t.done++
	t.advance()
	return true
}

func (t *Tracker) advance() {
	for t.head < len(t.outstanding) && t.outstanding[t.head].done {
		t.head++
		t.done--
	}
	if t.head == len(t.outstanding) {
		t.outstanding = t.outstanding[:0]
		t.head = 0
		return
	}
	// Compact once the consumed prefix dominates, so memory follows the
	// number of outstanding records rather than the number ever received.
	if t.head > 1024 && t.head*2 > len(t.outstanding) {
		n := copy(t.outstanding, t.outstanding[t.head:])
		t.outstanding = t.outstanding[:n]
		t.head = 0
	}
}

// Committable returns the offset to commit: every received offset below it
// is complete, and it is itself the first incomplete offset or one past the
// highest received offset.
func (t *Tracker) Committable() int64 {
	if t.head < len(t.outstanding) {
		return t.outstanding[t.head].off
	}
	return t.next
}

// Blocking returns the lowest incomplete offset, the one holding the
// committable offset back.
func (t *Tracker) Blocking() (int64, bool) {
	if t.head < len(t.outstanding) {
		return t.outstanding[t.head].off, true
	}
	return 0, false
}

// Gap returns how many offsets are complete but not committable because a
// lower offset is still incomplete.
func (t *Tracker) Gap() int { return t.done }

// Incomplete returns how many received offsets are not complete yet.
func (t *Tracker) Incomplete() int { return len(t.outstanding) - t.head - t.done }

// Next returns one past the highest received offset.
func (t *Tracker) Next() int64 { return t.next }

// CompletedAbove appends the completed offsets above the committable offset
// to dst in ascending order.
func (t *Tracker) CompletedAbove(dst []int64) []int64 {
	for _, e := range t.outstanding[t.head:] {
		if e.done {
			dst = append(dst, e.off)
		}
	}
	// Hydrated offsets not received yet are still known complete; dropping
	// them would make the next owner process them again.
	return append(dst, t.hydrated...)
}
