package engine

import (
	"context"
	"sync"
	"sync/atomic"
)

// PerRecord runs each task on its own goroutine, at most limit at a time.
// Workers are started on demand, when a task finds every existing worker
// busy, and then stay, parked on the task channel, until Close: reusing a
// goroutine whose stack has already grown is much cheaper than starting one
// per record, and there are never more than the peak concurrency.
type PerRecord struct {
	lifecycle
	limit int
	tasks chan Task

	busy atomic.Int64 // workers running a task

	mu      sync.Mutex
	closed  bool
	workers int
}

// NewPerRecord returns a per-record engine running at most limit tasks.
func NewPerRecord(run Runner, sink Sink, limit int) *PerRecord {
	return &PerRecord{lifecycle: newLifecycle(run, sink), limit: limit, tasks: make(chan Task, limit)}
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
	// Start workers for the tasks that idle workers cannot take. The count
	// is approximate (a worker may be between taking a task and counting
	// itself busy); a shortfall only delays a task until the next Submit or
	// completion, and never exceeds one per racing worker.
	idle := e.workers - int(e.busy.Load()) - len(e.tasks)
	spawn := min(max(len(tasks)-idle, 0), e.limit-e.workers)
	e.workers += spawn
	e.wg.Add(spawn)
	e.mu.Unlock()
	for range spawn {
		go e.work()
	}
	// The channel holds limit tasks and at most limit are in flight, so
	// these sends never block.
	for _, t := range tasks {
		e.tasks <- t
	}
	return nil
}

func (e *PerRecord) work() {
	defer e.wg.Done()
	var one [1]Task
	for t := range e.tasks {
		e.busy.Add(1)
		one[0] = t
		e.exec(one[:])
		e.busy.Add(-1)
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
