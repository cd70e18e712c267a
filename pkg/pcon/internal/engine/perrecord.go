package engine

import (
	"context"
	"sync"
)

// PerRecord runs each task on its own goroutine, at most limit at a time.
// Goroutines are started per task rather than pooled: a parked pool of
// MaxInFlight goroutines costs memory for nothing when the consumer is
// idle, and starting a goroutine is cheap next to any real handler.
type PerRecord struct {
	lifecycle
	limit int

	mu     sync.Mutex
	closed bool
}

// NewPerRecord returns a per-record engine running at most limit tasks.
func NewPerRecord(run Runner, sink Sink, limit int) *PerRecord {
	return &PerRecord{lifecycle: newLifecycle(run, sink), limit: limit}
}

// Submit implements Engine.
func (e *PerRecord) Submit(t Task) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return ErrClosed
	}
	if e.inflight.Load() >= int64(e.limit) {
		e.mu.Unlock()
		return ErrFull
	}
	e.inflight.Add(1)
	e.wg.Add(1)
	e.mu.Unlock()
	go func() {
		defer e.wg.Done()
		var one [1]Task
		one[0] = t
		e.exec(one[:])
	}()
	return nil
}

// Close implements Engine.
func (e *PerRecord) Close(ctx context.Context) error {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	return e.wait(ctx)
}
