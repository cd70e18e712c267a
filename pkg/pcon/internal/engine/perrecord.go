package engine

import (
	"context"
	"sync"
)

// PerRecord runs each task on its own goroutine, at most limit at a time.
// Workers are elastic: Submit starts one when fewer than limit run, and a
// worker keeps taking queued tasks until there are none, then exits. Under
// load the same goroutines (with their already grown stacks) run task after
// task; when idle none are left parked.
type PerRecord struct {
	lifecycle
	limit int

	mu      sync.Mutex
	closed  bool
	queue   []Task
	head    int
	workers int
}

// NewPerRecord returns a per-record engine running at most limit tasks.
func NewPerRecord(run Runner, sink Sink, limit int) *PerRecord {
	return &PerRecord{lifecycle: newLifecycle(run, sink), limit: limit}
}

// Submit implements Engine.
func (e *PerRecord) Submit(tasks ...Task) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return ErrClosed
	}
	if e.inflight.Load()+int64(len(tasks)) > int64(e.limit) {
		e.mu.Unlock()
		return ErrFull
	}
	e.inflight.Add(int64(len(tasks)))
	e.queue = append(e.queue, tasks...)
	spawn := min(len(tasks), e.limit-e.workers)
	e.workers += spawn
	e.wg.Add(spawn)
	e.mu.Unlock()
	for range spawn {
		go e.work()
	}
	return nil
}

func (e *PerRecord) work() {
	defer e.wg.Done()
	var one [1]Task
	for {
		e.mu.Lock()
		if e.head == len(e.queue) {
			e.queue = e.queue[:0]
			e.head = 0
			e.workers--
			e.mu.Unlock()
			return
		}
		one[0] = e.queue[e.head]
		e.queue[e.head] = Task{}
		e.head++
		if e.head >= 1024 && e.head*2 >= len(e.queue) {
			// Under steady load the queue never empties; reclaim the
			// consumed prefix so it does not grow without bound.
			n := copy(e.queue, e.queue[e.head:])
			e.queue = e.queue[:n]
			e.head = 0
		}
		e.mu.Unlock()
		e.exec(one[:])
	}
}

// Close implements Engine.
func (e *PerRecord) Close(ctx context.Context) error {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	return e.wait(ctx)
}
