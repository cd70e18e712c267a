package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// PerRecord runs each task on its own goroutine, at most limit at a time.
// Workers are started on demand, when a task finds no idle worker, and then
// stay, parked on the task channel, until Close: reusing a goroutine whose
// stack has already grown is much cheaper than starting one per record, and
// there are never more than the peak concurrency.
type PerRecord struct {
	lifecycle
	limit int
	tasks chan Task

	// idle counts the receives that parked or finishing workers will make
	// and that no submitted task has claimed yet. Only Submit takes from
	// it, under mu, so it never goes negative.
	idle atomic.Int64

	mu      sync.Mutex
	closed  bool
	workers int
}

// NewPerRecord returns a per-record engine running at most limit tasks,
// each handler call limited to timeout (0: no limit).
func NewPerRecord(run Runner, sink Sink, limit int, timeout time.Duration) *PerRecord {
	return &PerRecord{lifecycle: newLifecycle(run, sink, timeout), limit: limit, tasks: make(chan Task, limit)}
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
	// Every task claims a receive of an idle worker or gets a new worker,
	// so no task waits in the channel behind a busy worker while capacity
	// is left.
	claimed := min(e.idle.Load(), int64(len(tasks)))
	e.idle.Add(-claimed)
	spawn := min(len(tasks)-int(claimed), e.limit-e.workers)
	e.workers += spawn
	e.wg.Add(spawn)
	// The channel holds limit tasks and at most limit are in flight, so
	// these sends never block; they happen under the lock so that Close
	// cannot close the channel between the check above and a send.
	for _, t := range tasks {
		e.tasks <- t
	}
	e.mu.Unlock()
	for range spawn {
		go e.work()
	}
	return nil
}

func (e *PerRecord) work() {
	defer e.wg.Done()
	var one [1]Task
	for t := range e.tasks {
		one[0] = t
		e.exec(one[:])
		e.idle.Add(1)
	}
}

// Close implements Engine.
func (e *PerRecord) Close(ctx context.Context) error {
	e.mu.Lock()
	if !e.closed {
		e.closed = true
		close(e.tasks)
	}
	e.mu.Unlock()
	return e.wait(ctx)
}
