package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// lifecycle is the part both engines share: the handlers' context, the
// in-flight count, delivering completions, and waiting for goroutines on
// Close.
type lifecycle struct {
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	inflight atomic.Int64
	run      Runner
	out      combiner
	base     time.Time     // reference for monotonic-only clock reads
	timeout  time.Duration // per handler call; 0 means none
}

func newLifecycle(run Runner, sink Sink, timeout time.Duration) lifecycle {
	ctx, cancel := context.WithCancel(context.Background())
	return lifecycle{ctx: ctx, cancel: cancel, run: run, out: combiner{sink: sink}, base: time.Now(), timeout: timeout}
}

// exec runs tasks on the calling goroutine and delivers their completions.
func (l *lifecycle) exec(tasks []Task) {
	errs, elapsed := invoke(l.ctx, l.base, l.timeout, l.run, tasks)
	// The count drops before delivery so that a caller who has seen every
	// completion also sees zero in flight.
	l.inflight.Add(-int64(len(tasks)))
	l.out.deliver(tasks, errs, elapsed)
}

// wait blocks until every goroutine exited or ctx ends; in the latter case
// it cancels the handlers' context so they can give up, and reports ctx's
// error.
func (l *lifecycle) wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		l.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		l.cancel()
		return nil
	case <-ctx.Done():
		l.cancel()
		return ctx.Err()
	}
}

// InFlight implements Engine.
func (l *lifecycle) InFlight() int { return int(l.inflight.Load()) }

// combiner hands completions to the Sink in groups. Whichever goroutine
// finds no delivery under way delivers everything buffered, including what
// others add meanwhile; the rest only append. Under load the Sink (and the
// control plane's lock behind it) is entered once per group instead of once
// per record, which is what keeps thousands of handler goroutines from
// queueing on that lock.
type combiner struct {
	sink Sink

	mu         sync.Mutex
	buf, spare []Completion
	delivering bool
}

func (c *combiner) deliver(tasks []Task, errs []error, elapsed time.Duration) {
	c.mu.Lock()
	c.appendLocked(tasks, errs, elapsed)
	c.flushLocked()
}

// deliverCompletions delivers cs, which the caller may reuse on return.
func (c *combiner) deliverCompletions(cs []Completion) {
	c.mu.Lock()
	if c.delivering || len(c.buf) > 0 {
		c.buf = append(c.buf, cs...)
		c.flushLocked()
		return
	}
	// Nothing else to deliver: hand cs over without copying it.
	c.delivering = true
	c.mu.Unlock()
	c.sink(cs)
	c.mu.Lock()
	c.delivering = false
	c.flushLocked()
}

func (c *combiner) appendLocked(tasks []Task, errs []error, elapsed time.Duration) {
	for i, t := range tasks {
		cp := Completion{Task: t, Elapsed: elapsed}
		if errs != nil {
			cp.Err = errs[i]
		}
		c.buf = append(c.buf, cp)
	}
}

// flushLocked delivers the buffer and unlocks c.mu.
func (c *combiner) flushLocked() {
	if c.delivering {
		c.mu.Unlock()
		return
	}
	c.delivering = true
	for len(c.buf) > 0 {
		batch := c.buf
		c.buf = c.spare[:0]
		c.mu.Unlock()
		c.sink(batch)
		clear(batch)
		c.mu.Lock()
		c.spare = batch[:0]
	}
	c.delivering = false
	c.mu.Unlock()
}
