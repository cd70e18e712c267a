package core

import (
	"time"

	"github.com/loopers/commerce-pipeline/pkg/pcon/internal/engine"
	"github.com/loopers/commerce-pipeline/pkg/pcon/internal/offsets"
)

// part is one assignment epoch of one partition.
type part struct {
	tp       engine.TP
	epoch    uint64
	tr       *offsets.Tracker
	lanes    map[string]*lane
	sweepAt  int // lane count that triggers a sweep outside commits
	ready    readyQueue
	logEnd   int64
	counters *Counters
	latency  *Histogram // shared by the partitions of a topic

	queued   int // received, not dispatched
	inflight int // dispatched, not settled
	waiting  int // waiting for a retry
	revoking bool
	removed  bool
	drained  chan struct{} // closed when revoking and nothing is in flight

	completed   uint64        // records completed in this assignment
	blockedLane *lane         // the full lane the partition's feeder waits on
	unblock     chan struct{} // closed when the feeder may go on

	blockOff   int64
	blockSince time.Duration // since Core.base

	lastCommit Commit
	lastGap    int
	scratch    []int64
}

func newPart(tp engine.TP, epoch uint64, tr *offsets.Tracker) *part {
	return &part{tp: tp, epoch: epoch, tr: tr, lanes: make(map[string]*lane), blockOff: -1, sweepAt: 2 * idleLanes}
}

func (p *part) laneFor(key string) *lane {
	if l := p.lanes[key]; l != nil {
		return l
	}
	return p.newLane(key)
}

// laneForBytes is laneFor for a key in bytes: looking it up converts
// nothing, only a new lane copies the key.
func (p *part) laneForBytes(key []byte) *lane {
	if l := p.lanes[string(key)]; l != nil {
		return l
	}
	return p.newLane(string(key))
}

func (p *part) newLane(key string) *lane {
	if len(p.lanes) >= p.sweepAt {
		// Many distinct keys between commits: sweep now, and next at
		// twice what stays, so the cost per record stays constant.
		p.sweepLanes()
		p.sweepAt = max(2*len(p.lanes), 2*idleLanes)
	}
	l := &lane{key: key}
	p.lanes[key] = l
	return l
}

// idleLanes is how many idle lanes a partition keeps between sweeps. Idle
// lanes of recently seen keys are kept because a hot key comes back at once,
// and deleting and recreating its lane costs a map write and an allocation
// per record.
const idleLanes = 4096

// sweepLanes forgets idle lanes once there are many, so memory follows the
// keys seen since the last commit rather than all keys ever seen.
func (p *part) sweepLanes() {
	if len(p.lanes) <= idleLanes {
		return
	}
	for k, l := range p.lanes {
		if !l.busy && l.queue.len() == 0 {
			delete(p.lanes, k)
		}
	}
}

// release lets the partition's feeder go on.
func (p *part) release() {
	if p.unblock != nil {
		close(p.unblock)
		p.unblock = nil
	}
	p.blockedLane = nil
}

func (p *part) signalDrained() {
	if p.revoking && p.inflight == 0 && p.drained != nil {
		close(p.drained)
		p.drained = nil
	}
}

// noteBlocking restarts the blocked-duration clock when the blocking offset
// changes.
func (p *part) noteBlocking(now func() time.Duration) {
	b, ok := p.tr.Blocking()
	if !ok {
		p.blockOff = -1
		return
	}
	if b != p.blockOff {
		p.blockOff = b
		p.blockSince = now()
	}
}

// lane serialises the records of one key (or of the whole partition): busy
// while one of its records is dispatched or waiting for a retry.
type lane struct {
	key   string
	busy  bool
	queue fifo
}

// fifo is a queue of items that reuses its backing array.
type fifo struct {
	items []*item
	head  int
}

func (f *fifo) push(it *item) { f.items = append(f.items, it) }

func (f *fifo) len() int { return len(f.items) - f.head }

func (f *fifo) peek() *item {
	if f.head == len(f.items) {
		return nil
	}
	return f.items[f.head]
}

// pushFront puts its back at the head of the queue, in order. Only a failed
// run does it, so the copy is rare.
func (f *fifo) pushFront(its ...*item) {
	if len(its) == 0 {
		return
	}
	if f.head >= len(its) {
		f.head -= len(its)
		copy(f.items[f.head:], its)
		return
	}
	rest := f.items[f.head:]
	f.items = append(append(make([]*item, 0, len(its)+len(rest)), its...), rest...)
	f.head = 0
}

func (f *fifo) pop() *item {
	if f.head == len(f.items) {
		return nil
	}
	it := f.items[f.head]
	f.items[f.head] = nil
	f.head++
	if f.head == len(f.items) {
		f.items = f.items[:0]
		f.head = 0
	}
	return it
}

// item is one record inside the control plane.
type item struct {
	off      int64
	size     int
	payload  any
	p        *part
	lane     *lane
	attempts int
	err      error
	run      *run // the run it was dispatched in, until the run resolves
}

// run is records of one lane dispatched together, in offset order.
type run struct {
	items   []*item
	pending int // completions not reported yet
}

// readyQueue holds a partition's dispatchable items, lowest offset first,
// so the oldest ready record (the blocking offset when ready) goes first.
// Most become ready on arrival, in offset order: those queue in a FIFO,
// and only the rest (a key's next record once the key is free, a retry)
// go through a heap.
type readyQueue struct {
	fifo []ready // ascending offsets
	head int
	heap readyHeap
}

func (q *readyQueue) len() int { return len(q.fifo) - q.head + len(q.heap) }

func (q *readyQueue) push(it *item) {
	if n := len(q.fifo); n == q.head || q.fifo[n-1].off < it.off {
		q.fifo = append(q.fifo, ready{it.off, it})
		return
	}
	q.heap.push(it)
}

// min returns the lowest offset; the queue must not be empty.
func (q *readyQueue) min() int64 {
	switch {
	case q.head == len(q.fifo):
		return q.heap[0].off
	case len(q.heap) == 0 || q.fifo[q.head].off < q.heap[0].off:
		return q.fifo[q.head].off
	}
	return q.heap[0].off
}

// pop removes and returns the item of the lowest offset; the queue must
// not be empty.
func (q *readyQueue) pop() *item {
	if q.head == len(q.fifo) || (len(q.heap) > 0 && q.heap[0].off < q.fifo[q.head].off) {
		return q.heap.pop()
	}
	it := q.fifo[q.head].it
	q.fifo[q.head] = ready{}
	q.head++
	if q.head == len(q.fifo) {
		q.fifo, q.head = q.fifo[:0], 0
	} else if q.head > 1024 && q.head*2 > len(q.fifo) {
		n := copy(q.fifo, q.fifo[q.head:])
		clear(q.fifo[n:])
		q.fifo, q.head = q.fifo[:n], 0
	}
	return it
}

// readyHeap is a min-heap of items by offset. Entries carry the offset, so
// that ordering them reads no item.
type readyHeap []ready

type ready struct {
	off int64
	it  *item
}

func (h *readyHeap) push(it *item) {
	*h = append(*h, ready{it.off, it})
	s := *h
	i := len(s) - 1
	for i > 0 {
		parent := (i - 1) / 2
		if s[parent].off <= s[i].off {
			break
		}
		s[parent], s[i] = s[i], s[parent]
		i = parent
	}
}

func (h *readyHeap) pop() *item {
	s := *h
	top := s[0].it
	last := len(s) - 1
	s[0] = s[last]
	s[last] = ready{}
	s = s[:last]
	i := 0
	for {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(s) && s[l].off < s[m].off {
			m = l
		}
		if r < len(s) && s[r].off < s[m].off {
			m = r
		}
		if m == i {
			break
		}
		s[m], s[i] = s[i], s[m]
		i = m
	}
	*h = s
	return top
}
