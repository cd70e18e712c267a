package engine

import (
	"context"
	"sync"
	"time"
)

// BatchOptions sizes the micro-batches.
type BatchOptions struct {
	MaxRecords  int           // a batch holds at most this many tasks
	MaxBytes    int           // and at most this many bytes (a single larger task still runs alone)
	MaxWait     time.Duration // the first task of a batch waits at most this long for company
	Concurrency int           // batches running at the same time
}

// Batch groups tasks into micro-batches and runs each batch with one Runner
// call. It keeps no ordering of its own: the control plane never submits a
// task while an earlier task of the same key is unfinished, so a batch holds
// at most one task per key and key order holds across batches.
type Batch struct {
	lifecycle
	opt BatchOptions
	sem chan struct{}

	mu      sync.Mutex
	closed  bool
	pending []Task
	bytes   int
	gen     uint64 // identifies the pending batch a timer was armed for
	timer   *time.Timer
}

// NewBatch returns a micro-batch engine.
func NewBatch(run Runner, sink Sink, opt BatchOptions) *Batch {
	return &Batch{
		lifecycle: newLifecycle(run, sink),
		opt:       opt,
		sem:       make(chan struct{}, opt.Concurrency),
	}
}

// Submit implements Engine.
func (e *Batch) Submit(tasks ...Task) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return ErrClosed
	}
	e.inflight.Add(int64(len(tasks)))
	var full [][]Task
	for _, t := range tasks {
		if len(e.pending) > 0 && e.bytes+t.Size > e.opt.MaxBytes {
			full = append(full, e.takeLocked())
		}
		e.pending = append(e.pending, t)
		e.bytes += t.Size
		if len(e.pending) >= e.opt.MaxRecords || e.bytes >= e.opt.MaxBytes {
			full = append(full, e.takeLocked())
		}
	}
	if len(e.pending) > 0 && e.timer == nil {
		gen := e.gen
		e.timer = time.AfterFunc(e.opt.MaxWait, func() { e.flush(gen) })
	}
	e.mu.Unlock()
	for _, b := range full {
		e.launch(b)
	}
	return nil
}

func (e *Batch) flush(gen uint64) {
	e.mu.Lock()
	var b []Task
	if gen == e.gen && len(e.pending) > 0 {
		b = e.takeLocked()
	}
	e.mu.Unlock()
	e.launch(b)
}

// takeLocked detaches the pending batch. wg.Add happens here, under the
// lock, so Close cannot observe an empty WaitGroup between the detach and
// the goroutine start.
func (e *Batch) takeLocked() []Task {
	b := e.pending
	e.pending = nil
	e.bytes = 0
	e.gen++
	if e.timer != nil {
		e.timer.Stop()
		e.timer = nil
	}
	e.wg.Add(1)
	return b
}

func (e *Batch) launch(b []Task) {
	if b == nil {
		return
	}
	go func() {
		defer e.wg.Done()
		select {
		case e.sem <- struct{}{}:
			defer func() { <-e.sem }()
		case <-e.ctx.Done():
			// Shut down before a slot freed up: the batch still owes
			// completions, and its handler sees the cancelled context.
		}
		e.exec(b)
	}()
}

// Close implements Engine.
func (e *Batch) Close(ctx context.Context) error {
	e.mu.Lock()
	e.closed = true
	var b []Task
	if len(e.pending) > 0 {
		b = e.takeLocked()
	}
	e.mu.Unlock()
	e.launch(b)
	return e.wait(ctx)
}
