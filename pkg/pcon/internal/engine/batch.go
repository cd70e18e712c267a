package engine

import (
	"context"
	"sync"
	"time"
)

// BatchOptions sizes the micro-batches.
type BatchOptions struct {
	MaxRecords  int           // a batch holds at most this many tasks
	MaxBytes    int           // and at most this many bytes (a single larger run still runs alone)
	MaxWait     time.Duration // optional linger: how long a batch may wait for company while a slot is free
	Concurrency int           // batches running at the same time
	Timeout     time.Duration // per handler call; 0 means none
}

// Batch groups tasks into micro-batches and runs each batch with one Runner
// call, at most Concurrency at a time.
//
// Batching is natural: a batch starts as soon as a slot is free, with
// whatever is pending, so an idle consumer pays no wait for batching; while
// every slot is busy, submitted tasks accumulate and the next free slot
// takes them, so batches grow with the load. MaxWait, when set, lets a
// batch that is not full wait that long for company even with a slot free.
//
// The engine keeps no ordering of its own beyond Task.Follows: the control
// plane submits a key's records only after the key's previous ones
// completed, as one run of tasks tied by Follows, and a run is never split
// across batches. So a batch may hold several records of one key, in offset
// order, and key order holds across batches.
type Batch struct {
	lifecycle
	opt BatchOptions

	mu      sync.Mutex
	closed  bool
	pending fifoTasks
	running int         // workers, each running or about to run a batch
	since   time.Time   // when the oldest pending task arrived, for the linger
	timer   *time.Timer // armed while the linger holds pending tasks back
}

// NewBatch returns a micro-batch engine.
func NewBatch(run Runner, sink Sink, opt BatchOptions) *Batch {
	return &Batch{lifecycle: newLifecycle(run, sink, opt.Timeout), opt: opt}
}

// Submit implements Engine.
func (e *Batch) Submit(tasks ...Task) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return ErrClosed
	}
	e.inflight.Add(int64(len(tasks)))
	if e.pending.len() == 0 {
		e.since = time.Now()
	}
	e.pending.push(tasks...)
	starts := e.startLocked()
	e.mu.Unlock()
	e.spawn(starts)
	return nil
}

// startLocked takes batches for every free slot and returns them, one per
// worker to start. The caller starts them after unlocking.
func (e *Batch) startLocked() [][]Task {
	var starts [][]Task
	for e.running < e.opt.Concurrency {
		b := e.takeLocked()
		if b == nil {
			break
		}
		e.running++
		e.wg.Add(1) // under the lock, so Close never sees the count at zero in between
		starts = append(starts, b)
	}
	return starts
}

func (e *Batch) spawn(starts [][]Task) {
	for _, b := range starts {
		go e.work(b)
	}
}

// work runs b, then keeps taking batches while there are any, so a busy
// engine reuses its goroutines.
func (e *Batch) work(b []Task) {
	defer e.wg.Done()
	for b != nil {
		e.exec(b)
		e.mu.Lock()
		b = e.takeLocked()
		if b == nil {
			e.running--
		}
		e.mu.Unlock()
	}
}

// takeLocked detaches the next batch from the pending tasks, or returns nil
// when there is none to start now. A batch ends before the run that would
// take it past MaxRecords or MaxBytes (the first run always fits whole) and
// before a task that must run alone, which gets a batch of its own.
func (e *Batch) takeLocked() []Task {
	n := e.pending.len()
	if n == 0 {
		return nil
	}
	if !e.closed && e.lingerLocked() {
		return nil
	}
	end, bytes := 0, 0
	for end < n {
		if e.pending.at(end).Alone {
			if end == 0 {
				end = 1
			}
			break
		}
		runEnd, runBytes := end+1, e.pending.at(end).Size
		for runEnd < n && e.pending.at(runEnd).Follows {
			runBytes += e.pending.at(runEnd).Size
			runEnd++
		}
		if end > 0 && (runEnd > e.opt.MaxRecords || bytes+runBytes > e.opt.MaxBytes) {
			break
		}
		end, bytes = runEnd, bytes+runBytes
		if end >= e.opt.MaxRecords || bytes >= e.opt.MaxBytes {
			break
		}
	}
	b := e.pending.take(end)
	if e.pending.len() > 0 {
		e.since = time.Now()
	}
	return b
}

// lingerLocked reports whether the pending tasks should wait for company,
// arming a timer that starts them when the linger ends.
func (e *Batch) lingerLocked() bool {
	if e.opt.MaxWait <= 0 || e.pending.len() >= e.opt.MaxRecords {
		return false
	}
	left := e.opt.MaxWait - time.Since(e.since)
	if left <= 0 {
		return false
	}
	if e.timer == nil {
		e.timer = time.AfterFunc(left, e.lingerEnded)
	}
	return true
}

func (e *Batch) lingerEnded() {
	e.mu.Lock()
	e.timer = nil
	starts := e.startLocked()
	e.mu.Unlock()
	e.spawn(starts)
}

// Close implements Engine.
func (e *Batch) Close(ctx context.Context) error {
	e.mu.Lock()
	e.closed = true
	if e.timer != nil {
		e.timer.Stop()
		e.timer = nil
	}
	// Pending tasks still owe completions: start them without the linger.
	starts := e.startLocked()
	e.mu.Unlock()
	e.spawn(starts)
	return e.wait(ctx)
}

// fifoTasks is a queue of tasks that reuses its backing array.
type fifoTasks struct {
	items []Task
	head  int
}

func (f *fifoTasks) len() int      { return len(f.items) - f.head }
func (f *fifoTasks) at(i int) Task { return f.items[f.head+i] }

func (f *fifoTasks) push(ts ...Task) {
	if f.head > 0 && f.head == len(f.items) {
		f.items, f.head = f.items[:0], 0
	}
	f.items = append(f.items, ts...)
}

// takeInto moves the first n tasks (at most all) to dst.
func (f *fifoTasks) takeInto(dst []Task, n int) []Task {
	n = min(n, f.len())
	dst = append(dst, f.items[f.head:f.head+n]...)
	clear(f.items[f.head : f.head+n])
	f.head += n
	f.compact()
	return dst
}

// take removes the first n tasks into a new slice the caller owns.
func (f *fifoTasks) take(n int) []Task {
	b := make([]Task, n)
	copy(b, f.items[f.head:f.head+n])
	clear(f.items[f.head : f.head+n])
	f.head += n
	f.compact()
	return b
}

// compact reuses the backing array once the queue is empty, or moves the
// queue to its front once most of the array is behind the head, so a queue
// that never empties does not grow without bound.
func (f *fifoTasks) compact() {
	if f.head == len(f.items) {
		f.items, f.head = f.items[:0], 0
	} else if f.head > 4096 && f.head*2 > len(f.items) {
		k := copy(f.items, f.items[f.head:])
		clear(f.items[k:])
		f.items, f.head = f.items[:k], 0
	}
}
