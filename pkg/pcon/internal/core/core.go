// Package core is pcon's control plane: it owns every decision about which
// record runs next, when a record counts as complete, what offset may be
// committed, and when fetching pauses. It never knows which engine runs the
// work; engines are reached only through Deps.Submit and report back through
// Complete.
//
// Concurrency: every method is safe for concurrent use. One mutex guards all
// state. SetPaused is invoked with it held and must not call back into Core;
// Submit and DeadLetter are invoked without it.
package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/loopers/commerce-pipeline/pkg/pcon/internal/engine"
	"github.com/loopers/commerce-pipeline/pkg/pcon/internal/offsets"
)

// Ordering says which records must not run at the same time.
type Ordering int

// Orderings.
const (
	ByKey       Ordering = iota // one record per key at a time
	ByPartition                 // one record per partition at a time
	None                        // no ordering
)

// ResumeRatio is the fraction of MaxInFlight the load must fall to before
// fetching resumes. The gap between pausing at 100 % and resuming at 70 %
// keeps the consumer from flapping between the two on every completion.
const ResumeRatio = 0.7

// Overflow says what happens to a record that finds its key's queue full.
type Overflow int

// Overflow policies.
const (
	// OverflowBlock stops taking records of the key's partition until the
	// key's queue drains to ResumeRatio of its capacity.
	OverflowBlock Overflow = iota
	// OverflowDropOldest completes the key's oldest queued record without
	// running it.
	OverflowDropOldest
	// OverflowDeadLetter sends the arriving record to the dead-letter topic.
	OverflowDeadLetter
)

// ErrKeyQueueFull is the dead-letter cause of a record refused by
// OverflowDeadLetter.
var ErrKeyQueueFull = errors.New("key queue full")

// Config tunes the control plane.
type Config struct {
	// MaxInFlight bounds the records held: dispatched, queued and waiting
	// for a retry. Fetching pauses when they reach it and resumes at
	// ResumeRatio of it.
	MaxInFlight int
	// MaxRunning bounds the tasks dispatched and not yet settled (with the
	// engine, or with the dead-letter publisher), counting those of
	// revoked assignments still running, so that the engine never runs
	// more at once. 0 means MaxInFlight. Above MaxInFlight it could never
	// be reached.
	MaxRunning     int
	Ordering       Ordering
	OrderEmptyKeys bool // in ByKey, run records without a key as one key instead of unordered
	MaxAttempts    int
	Backoff        func(attempt int) time.Duration // wait after the attempt-th failure
	MetadataLimit  int

	// MaxRun is how many consecutive ready records of one key (or of the
	// partition, in ByPartition) are dispatched together as a run, in
	// offset order, tied by engine.Task.Follows. 0 or 1 dispatches one
	// record per key at a time. MaxRunBytes bounds a run's bytes (0: no
	// bound); a run's first record always goes.
	MaxRun      int
	MaxRunBytes int
	// KeyQueueCapacity bounds the records one key may hold queued behind
	// its running ones; 0 means no bound. Overflow says what happens past it.
	KeyQueueCapacity int
	Overflow         Overflow
}

// Deps are the control plane's effects on the world.
type Deps struct {
	// Submit hands a task to the engine. Called without the lock, so that
	// starting work never holds up completions.
	Submit func(...engine.Task) error
	// SetPaused pauses or resumes fetching. Called with the lock held.
	SetPaused func(paused bool)
	// DeadLetter publishes a record that exhausted its attempts. It runs on
	// its own goroutine without the lock and may block.
	DeadLetter func(ctx context.Context, payload any, cause error, attempts int) error
	// Permanent reports errors that must not be retried.
	Permanent func(error) bool
	// AfterFunc schedules retries; nil means time.AfterFunc.
	AfterFunc func(time.Duration, func())
	Logger    *slog.Logger
}

// Item is one received record as the control plane sees it.
type Item struct {
	Offset int64
	Key    string
	// RawKey, when not nil, is the key instead of Key. The control plane
	// only looks keys up, so a caller whose key is already in bytes need
	// not convert it for every record.
	RawKey  []byte
	Size    int
	Payload any
}

// Core is the control plane.
type Core struct {
	cfg  Config
	deps Deps
	log  *slog.Logger

	base   time.Time       // reference for monotonic-only clock reads
	ctx    context.Context // ends on Close; stops dead-letter retries
	cancel context.CancelFunc
	bg     sync.WaitGroup // dead-letter goroutines

	mu       sync.Mutex
	closed   bool
	parts    map[engine.TP]*part
	order    []*part // round-robin order
	rr       int
	epochs   map[engine.TP]uint64
	zombies  map[engine.TP]int // tasks of revoked assignments still running
	inflight int               // tasks with the engine or the dead-letter publisher
	queued   int               // received, waiting for their turn
	waiting  int               // failed, waiting for a retry
	paused   bool
	outbox   *[]engine.Task // dispatched under the lock, submitted after it
	buffers  sync.Pool      // of *[]engine.Task, recycled outboxes
	stats    map[engine.TP]*Counters
	latency  map[string]*Histogram
	slab     []item        // where the next items are allocated
	clock    time.Duration // the clock read of the current locked section
	clockSet bool          // clock was read in the current locked section
}

// New returns a control plane.
func New(cfg Config, deps Deps) *Core {
	if deps.AfterFunc == nil {
		deps.AfterFunc = func(d time.Duration, f func()) { time.AfterFunc(d, f) }
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MetadataLimit == 0 {
		cfg.MetadataLimit = offsets.MaxMetadata
	}
	if cfg.MaxRunning == 0 {
		cfg.MaxRunning = cfg.MaxInFlight
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Core{
		cfg: cfg, deps: deps, log: deps.Logger,
		ctx: ctx, cancel: cancel, base: time.Now(),
		parts:   make(map[engine.TP]*part),
		epochs:  make(map[engine.TP]uint64),
		zombies: make(map[engine.TP]int),
		stats:   make(map[engine.TP]*Counters),
		latency: make(map[string]*Histogram),
	}
}

// Assign starts a new assignment epoch for tp at the committed offset start.
// meta is the committed metadata; completed offsets it records are skipped.
// Metadata that pcon did not write, or that belongs to another offset, is
// ignored with a log line: the cost is reprocessing, never loss.
func (c *Core) Assign(tp engine.TP, start int64, meta string) uint64 {
	var hydrated []int64
	if meta != "" {
		base, done, err := offsets.Decode(meta)
		switch {
		case err != nil:
			c.log.Info("pcon: ignoring commit metadata", "topic", tp.Topic, "partition", tp.Partition, ErrKey, err)
		case base != start:
			c.log.Info("pcon: ignoring commit metadata written for another offset",
				"topic", tp.Topic, "partition", tp.Partition, "committed", start, "metadataOffset", base)
		default:
			hydrated = done
		}
	}
	c.lock()
	defer c.mu.Unlock()
	if old := c.parts[tp]; old != nil {
		c.removeLocked(old)
	}
	c.epochs[tp]++
	p := newPart(tp, c.epochs[tp], offsets.NewTracker(start, hydrated))
	c.parts[tp] = p
	c.order = append(c.order, p)
	c.countersLocked(tp)
	p.latency = c.latencyLocked(tp.Topic)
	return p.epoch
}

// Add queues received records of tp's assignment epoch, in offset order.
// logEnd is the partition's log end offset as last seen by the fetcher.
//
// It takes the first n items. With OverflowBlock, n < len(items) when
// item n found its key's queue full: the caller must stop feeding the
// partition until wait is closed (the key drained, or the assignment
// ended), then add items[n:] again. Otherwise n is len(items) and wait nil.
func (c *Core) Add(tp engine.TP, epoch uint64, items []Item, logEnd int64) (n int, wait <-chan struct{}) {
	c.lock()
	defer c.unlockAndSubmit()
	p := c.parts[tp]
	if p == nil || p.epoch != epoch || p.revoking {
		return len(items), nil
	}
	p.logEnd = max(p.logEnd, logEnd)
	defer func() {
		p.noteBlocking(c.nowLocked)
		c.dispatchLocked()
	}()
	for i := range items {
		in := &items[i]
		l := c.laneOf(p, in)
		if c.fullLocked(l) && c.cfg.Overflow == OverflowBlock {
			p.counters.KeyBlocks++
			p.blockedLane = l
			p.unblock = make(chan struct{})
			return i, p.unblock
		}
		accepted, done := p.tr.Add(in.Offset)
		if !accepted {
			continue
		}
		if done {
			p.counters.Skipped++
			continue
		}
		it := c.newItem()
		*it = item{off: in.Offset, size: in.Size, payload: in.Payload, p: p, lane: l}
		c.route(p, it)
	}
	return len(items), nil
}

// laneOf returns the lane that orders in's records, nil when they run
// unordered.
func (c *Core) laneOf(p *part, in *Item) *lane {
	switch {
	case c.cfg.Ordering == ByPartition:
		return p.laneFor("")
	case c.cfg.Ordering != ByKey:
		return nil
	case in.RawKey != nil:
		if len(in.RawKey) > 0 || c.cfg.OrderEmptyKeys {
			return p.laneForBytes(in.RawKey)
		}
	case in.Key != "" || c.cfg.OrderEmptyKeys:
		return p.laneFor(in.Key)
	}
	return nil
}

// itemSlab is how many items share one allocation. An item still
// referenced keeps its slab-mates' memory, so slabs stay small; settled
// items drop their payload.
const itemSlab = 32

func (c *Core) newItem() *item {
	if len(c.slab) == 0 {
		c.slab = make([]item, itemSlab)
	}
	it := &c.slab[0]
	c.slab = c.slab[1:]
	return it
}

// fullLocked reports whether l's queue is at its capacity.
func (c *Core) fullLocked(l *lane) bool {
	return l != nil && c.cfg.KeyQueueCapacity > 0 && l.busy && l.queue.len() >= c.cfg.KeyQueueCapacity
}

// route puts it behind earlier records of its lane, or makes it ready. A
// full lane first applies the overflow policy.
func (c *Core) route(p *part, it *item) {
	l := it.lane
	if c.fullLocked(l) {
		switch c.cfg.Overflow {
		case OverflowDropOldest:
			old := l.queue.pop()
			p.queued--
			c.queued--
			p.tr.Complete(old.off)
			old.payload = nil
			p.completed++
			p.counters.Dropped++
			c.logOverflow(p, l, "pcon: key queue full, oldest record dropped", old.off, p.counters.Dropped)
		case OverflowDeadLetter:
			it.lane = nil // it never held the lane
			it.err = fmt.Errorf("%w: capacity %d", ErrKeyQueueFull, c.cfg.KeyQueueCapacity)
			p.inflight++
			c.inflight++
			p.counters.Overflowed++
			c.logOverflow(p, l, "pcon: key queue full, record dead-lettered", it.off, p.counters.Overflowed)
			c.deadLetterLocked(taskOf(it), it)
			return
		}
	}
	p.queued++
	c.queued++
	if l != nil && l.busy {
		l.queue.push(it)
		return
	}
	if l != nil {
		l.busy = true
	}
	p.ready.push(it)
}

// logOverflow logs the first overflow of a partition and then every
// thousandth, so a flooded key cannot flood the log.
func (c *Core) logOverflow(p *part, l *lane, msg string, off int64, count uint64) {
	if count%1000 != 1 {
		return
	}
	c.log.Warn(msg, "topic", p.tp.Topic, "partition", p.tp.Partition, "key", l.key,
		"offset", off, "capacity", c.cfg.KeyQueueCapacity, "count", count)
}

func taskOf(it *item) engine.Task {
	return engine.Task{Size: it.size, Payload: it}
}

// dispatchLocked hands ready records to the engine while capacity lasts.
// Records at a partition's blocking offset go first, because they hold the
// commit back; then partitions take turns, each giving its lowest ready
// offset. Both passes start where the previous dispatch stopped, so no
// partition starves, and lanes are FIFO, so no key starves.
func (c *Core) dispatchLocked() {
	defer c.gateLocked()
	defer c.unblockLocked()
	if c.closed {
		return
	}
	blocking := func(p *part) bool {
		b, ok := p.tr.Blocking()
		return ok && p.ready.min() == b
	}
	c.roundRobin(blocking)
	c.roundRobin(func(*part) bool { return true })
}

// roundRobin dispatches, one record per partition per round, from the
// partitions whose lowest ready record satisfies want.
func (c *Core) roundRobin(want func(*part) bool) {
	for c.inflight < c.cfg.MaxRunning {
		progressed := false
		for n := len(c.order); n > 0 && c.inflight < c.cfg.MaxRunning; n-- {
			c.rr = (c.rr + 1) % len(c.order)
			p := c.order[c.rr]
			if c.dispatchable(p) && p.ready.len() > 0 && want(p) {
				c.startLocked(p)
				progressed = true
			}
		}
		if !progressed {
			return
		}
	}
}

func (c *Core) dispatchable(p *part) bool {
	// Tasks of an earlier assignment of the same partition may still be
	// running; starting this assignment's records now could run two records
	// of one key at once.
	return !p.revoking && (len(c.zombies) == 0 || c.zombies[p.tp] == 0)
}

// unblockLocked lets a partition blocked by a full key queue be fed again
// once that queue drained to ResumeRatio of its capacity.
func (c *Core) unblockLocked() {
	for _, p := range c.order {
		if l := p.blockedLane; l != nil && l.queue.len() <= int(float64(c.cfg.KeyQueueCapacity)*ResumeRatio) {
			p.release()
		}
	}
}

// startLocked dispatches p's lowest ready record and, in run mode, the
// records queued behind it in its lane, up to MaxRun. A retried record runs
// alone: its followers wait until it succeeded or was dead-lettered.
func (c *Core) startLocked(p *part) {
	it := p.ready.pop()
	first := it.attempts == 0
	c.emitLocked(it, false)
	l := it.lane
	if l == nil || !first || c.cfg.MaxRun <= 1 {
		return
	}
	bytes := it.size
	for n := 1; n < c.cfg.MaxRun && c.inflight < c.cfg.MaxRunning; n++ {
		next := l.queue.peek()
		if next == nil || next.attempts > 0 || (c.cfg.MaxRunBytes > 0 && bytes+next.size > c.cfg.MaxRunBytes) {
			break
		}
		l.queue.pop()
		if it.run == nil {
			it.run = &run{items: []*item{it}}
		}
		it.run.items = append(it.run.items, next)
		next.run = it.run
		bytes += next.size
		c.emitLocked(next, true)
	}
	if r := it.run; r != nil {
		r.pending = len(r.items)
	}
}

func (c *Core) emitLocked(it *item, follows bool) {
	it.attempts++
	if c.outbox == nil {
		// The pool holds the slices' headers too, so recycling allocates
		// nothing.
		c.outbox, _ = c.buffers.Get().(*[]engine.Task)
		if c.outbox == nil {
			c.outbox = new([]engine.Task)
		}
	}
	t := taskOf(it)
	t.Follows = follows
	t.Alone = it.attempts > 1 // a retry: see engine.Task.Alone
	*c.outbox = append(*c.outbox, t)
	p := it.p
	p.queued--
	c.queued--
	p.inflight++
	c.inflight++
}

// unlockAndSubmit releases the lock, then hands the tasks dispatched under
// it to the engine.
func (c *Core) unlockAndSubmit() {
	buf := c.outbox
	c.outbox = nil
	c.mu.Unlock()
	if buf == nil {
		return
	}
	tasks := *buf
	if err := c.deps.Submit(tasks...); err != nil {
		// Only a closed engine refuses work: the records stay incomplete
		// and are redelivered to the partition's next owner.
		c.log.Warn("pcon: engine refused tasks", ErrKey, err, "tasks", len(tasks))
		c.refuse(tasks)
	}
	// Engines copy what they accept, so the buffer can serve again.
	clear(tasks)
	*buf = tasks[:0]
	c.buffers.Put(buf)
}

func (c *Core) refuse(tasks []engine.Task) {
	c.lock()
	defer c.mu.Unlock()
	c.closed = true
	for _, t := range tasks {
		it := t.Payload.(*item)
		if !c.currentLocked(t) {
			c.inflight--
			if c.zombies[it.p.tp]--; c.zombies[it.p.tp] <= 0 {
				delete(c.zombies, it.p.tp)
			}
			continue
		}
		it.p.inflight--
		c.inflight--
		it.p.signalDrained()
	}
}

// gateLocked applies backpressure with hysteresis.
func (c *Core) gateLocked() {
	load := c.inflight + c.queued + c.waiting
	switch {
	case !c.paused && load >= c.cfg.MaxInFlight:
		c.paused = true
		c.deps.SetPaused(true)
		c.log.Info("pcon: fetching paused", "load", load, "maxInFlight", c.cfg.MaxInFlight,
			"inFlight", c.inflight, "queued", c.queued, "waitingRetry", c.waiting)
	case c.paused && load <= int(float64(c.cfg.MaxInFlight)*ResumeRatio):
		c.paused = false
		c.deps.SetPaused(false)
		c.log.Info("pcon: fetching resumed", "load", load, "maxInFlight", c.cfg.MaxInFlight,
			"inFlight", c.inflight, "queued", c.queued, "waitingRetry", c.waiting)
	}
}

// Paused reports whether fetching is paused by backpressure.
func (c *Core) Paused() bool {
	c.lock()
	defer c.mu.Unlock()
	return c.paused
}

// Complete takes the engine's completions.
func (c *Core) Complete(cs []engine.Completion) {
	c.lock()
	defer c.unlockAndSubmit()
	for _, cp := range cs {
		it := cp.Task.Payload.(*item)
		it.p.latency.Observe(cp.Elapsed)
		if !c.currentLocked(cp.Task) {
			c.settleStaleLocked(it.p.tp)
			continue
		}
		it.err = cp.Err
		if r := it.run; r != nil {
			if r.pending--; r.pending == 0 {
				c.resolveRunLocked(r)
			}
			continue
		}
		c.outcomeLocked(it)
	}
	c.dispatchLocked()
}

// resolveRunLocked settles a run once all its records reported. The records
// before the first failure are complete. The failed one is retried or
// dead-lettered, holding the lane; the ones after it are not complete,
// whatever their own result, and go back to the front of the lane's queue
// with their attempt refunded, to run after it.
func (c *Core) resolveRunLocked(r *run) {
	fail := len(r.items)
	for i, x := range r.items {
		x.run = nil
		if x.err != nil && fail == len(r.items) {
			fail = i
		}
	}
	last := min(fail, len(r.items)-1)
	for i, x := range r.items[:fail] {
		if i != last {
			x.lane = nil // only the run's last record releases the lane
		}
		c.outcomeLocked(x)
	}
	if fail == len(r.items) {
		return
	}
	x := r.items[fail]
	rest := r.items[fail+1:]
	for _, y := range rest {
		y.attempts--
		y.err = nil
		y.p.inflight--
		c.inflight--
		y.p.queued++
		c.queued++
	}
	x.lane.queue.pushFront(rest...)
	c.outcomeLocked(x)
}

// outcomeLocked applies the result in it.err of it's latest attempt.
func (c *Core) outcomeLocked(it *item) {
	p := it.p
	if it.err == nil {
		p.counters.Processed++
		c.settleLocked(p, it, true)
		return
	}
	if (c.deps.Permanent != nil && c.deps.Permanent(it.err)) || it.attempts >= c.cfg.MaxAttempts {
		c.deadLetterLocked(taskOf(it), it)
		return
	}
	p.counters.Retried++
	c.log.Debug("pcon: handler failed, will retry", "topic", p.tp.Topic, "partition", p.tp.Partition,
		"offset", it.off, "attempt", it.attempts, ErrKey, it.err)
	p.inflight--
	c.inflight--
	p.waiting++
	c.waiting++
	p.signalDrained()
	c.deps.AfterFunc(c.cfg.Backoff(it.attempts), func() { c.retry(p, it) })
}

func (c *Core) retry(p *part, it *item) {
	c.lock()
	defer c.unlockAndSubmit()
	if p.removed {
		return
	}
	p.waiting--
	c.waiting--
	p.queued++
	c.queued++
	// The lane is still held by it, so it goes straight back to ready.
	p.ready.push(it)
	c.dispatchLocked()
}

// currentLocked reports whether t belongs to the current assignment epoch
// of its partition. The item knows its assignment (a part is one epoch),
// and an assignment is current until removed, which saves a map lookup per
// completion.
func (c *Core) currentLocked(t engine.Task) bool {
	return !t.Payload.(*item).p.removed
}

// settleStaleLocked accounts for a task of an assignment that is gone: its
// outcome is discarded, it is the new owner's to redo.
func (c *Core) settleStaleLocked(tp engine.TP) {
	c.inflight--
	c.zombies[tp]--
	if c.zombies[tp] <= 0 {
		delete(c.zombies, tp)
	}
	c.countersLocked(tp).StaleDropped++
}

// settleLocked ends a task of the current assignment. done means the record
// is complete (handled or dead-lettered); otherwise it stays incomplete and
// its offset is never committed.
func (c *Core) settleLocked(p *part, it *item, done bool) {
	p.inflight--
	c.inflight--
	if done {
		p.tr.Complete(it.off)
		p.completed++
		p.noteBlocking(c.nowLocked)
		if l := it.lane; l != nil {
			if next := l.queue.pop(); next != nil {
				p.ready.push(next)
			} else {
				l.busy = false
			}
		}
		// A settled item may live on in its slab; its payload need not.
		it.payload, it.err = nil, nil
	}
	p.signalDrained()
}

func (c *Core) deadLetterLocked(t engine.Task, it *item) {
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		for failures := 1; ; failures++ {
			err := c.deps.DeadLetter(c.ctx, it.payload, it.err, it.attempts)
			c.lock()
			current := c.currentLocked(t)
			switch {
			case !current:
				c.settleStaleLocked(it.p.tp)
			case err == nil:
				it.p.counters.DeadLettered++
				c.settleLocked(it.p, it, true)
			default:
				it.p.counters.DLTFailures++
			}
			if !current || err == nil {
				c.dispatchLocked()
				c.unlockAndSubmit()
				return
			}
			c.mu.Unlock()
			c.log.Error("pcon: dead-letter publish failed; the record stays uncommitted",
				"topic", it.p.tp.Topic, "partition", it.p.tp.Partition, "offset", it.off, ErrKey, err)
			select {
			case <-c.ctx.Done():
				c.lock()
				if c.currentLocked(t) {
					c.settleLocked(it.p, it, false)
				} else {
					c.settleStaleLocked(it.p.tp)
				}
				c.mu.Unlock()
				return
			case <-time.After(c.cfg.Backoff(failures)):
			}
		}
	}()
}

// Commit is an offset to commit with its metadata.
type Commit struct {
	TP       engine.TP
	Epoch    uint64
	Offset   int64
	Metadata string
	// Completed counts the records completed during the assignment; only
	// Revoke sets it.
	Completed uint64
}

// Commits returns the committable offset of every current assignment.
func (c *Core) Commits() []Commit {
	c.lock()
	defer c.mu.Unlock()
	out := make([]Commit, 0, len(c.order))
	for _, p := range c.order {
		out = append(out, c.commitLocked(p))
	}
	return out
}

func (c *Core) commitLocked(p *part) Commit {
	p.sweepLanes()
	off := p.tr.Committable()
	if off != p.lastCommit.Offset || p.tr.Gap() != p.lastGap || p.lastCommit.Epoch == 0 {
		p.scratch = p.tr.CompletedAbove(p.scratch[:0])
		meta, kept := offsets.Encode(off, p.scratch, c.cfg.MetadataLimit)
		if kept < len(p.scratch) {
			c.log.Debug("pcon: commit metadata truncated", "topic", p.tp.Topic, "partition", p.tp.Partition,
				"completed", len(p.scratch), "kept", kept)
		}
		p.lastCommit = Commit{TP: p.tp, Epoch: p.epoch, Offset: off, Metadata: meta}
		p.lastGap = p.tr.Gap()
	}
	return p.lastCommit
}

// LowerMetadataLimit brings the limit of commit metadata down to limit, if
// that is lower: metadata the broker is known to accept, after it refused
// longer metadata. Every assignment's next commit is encoded again within
// it. It reports whether the limit came down.
func (c *Core) LowerMetadataLimit(limit int) bool {
	c.lock()
	defer c.mu.Unlock()
	if limit >= c.cfg.MetadataLimit {
		return false
	}
	c.cfg.MetadataLimit = limit
	for _, p := range c.order {
		p.lastGap = -1
	}
	return true
}

// Revoke ends tp's assignment epoch: nothing more of it is dispatched, its
// running tasks get up to grace to finish, and the offset to commit is
// returned. Tasks still running after grace become stale: their results are
// discarded, and their records are redone by the next owner.
func (c *Core) Revoke(tp engine.TP, epoch uint64, grace time.Duration) (Commit, bool) {
	c.lock()
	p := c.parts[tp]
	if p == nil || p.epoch != epoch {
		c.mu.Unlock()
		return Commit{}, false
	}
	p.revoking = true
	var drained chan struct{}
	if p.inflight > 0 {
		p.drained = make(chan struct{})
		drained = p.drained
	}
	c.mu.Unlock()
	if drained != nil {
		t := time.NewTimer(grace)
		select {
		case <-drained:
		case <-t.C:
			c.log.Warn("pcon: revoke grace expired with records in flight", "topic", tp.Topic, "partition", tp.Partition)
		}
		t.Stop()
	}
	c.lock()
	defer c.unlockAndSubmit()
	cm := c.commitLocked(p)
	cm.Completed = p.completed
	c.removeLocked(p)
	c.dispatchLocked()
	return cm, true
}

func (c *Core) removeLocked(p *part) {
	p.removed = true
	delete(c.parts, p.tp)
	for i, q := range c.order {
		if q == p {
			c.order = append(c.order[:i], c.order[i+1:]...)
			break
		}
	}
	if p.inflight > 0 {
		c.zombies[p.tp] += p.inflight
	}
	c.queued -= p.queued
	c.waiting -= p.waiting
	p.release()
}

// SetLogEnd records a log end offset of tp's assignment epoch read while its
// records are not being fetched (paused or blocked), so lag stays current.
func (c *Core) SetLogEnd(tp engine.TP, epoch uint64, logEnd int64) {
	c.lock()
	defer c.mu.Unlock()
	if p := c.parts[tp]; p != nil && p.epoch == epoch {
		p.logEnd = max(p.logEnd, logEnd)
	}
}

// Stalled lists the current assignments whose records are not being
// fetched: all of them while paused, else those blocked by a full key queue.
func (c *Core) Stalled() map[engine.TP]uint64 {
	c.lock()
	defer c.mu.Unlock()
	out := map[engine.TP]uint64{}
	for _, p := range c.order {
		if c.paused || p.blockedLane != nil {
			out[p.tp] = p.epoch
		}
	}
	return out
}

// Close stops all dispatching and dead-letter retries. Assignments should
// be revoked first so their offsets are committed.
func (c *Core) Close() {
	c.lock()
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	c.bg.Wait()
}

// now reads only the monotonic clock, which is all durations need.
func (c *Core) now() time.Duration { return time.Since(c.base) }

// lock takes the lock and starts a locked section.
func (c *Core) lock() {
	c.mu.Lock()
	c.clockSet = false
}

// nowLocked reads the clock once per locked section: a section completing
// a group of records notes the blocking offset after each, and how long an
// offset has blocked needs no finer grain than one section.
func (c *Core) nowLocked() time.Duration {
	if !c.clockSet {
		c.clock, c.clockSet = c.now(), true
	}
	return c.clock
}

// Payload returns the payload given to Add for the record behind t.
func Payload(t engine.Task) any { return t.Payload.(*item).payload }
