package engine

import (
	"context"
	"sync"
	"sync/atomic"
)

// lifecycle is the part both engines share: the handlers' context, the
// in-flight count, and waiting for goroutines on Close.
type lifecycle struct {
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	inflight atomic.Int64
	run      Runner
	sink     Sink
}

func newLifecycle(run Runner, sink Sink) lifecycle {
	ctx, cancel := context.WithCancel(context.Background())
	return lifecycle{ctx: ctx, cancel: cancel, run: run, sink: sink}
}

// exec runs tasks on the calling goroutine and delivers their completions.
func (l *lifecycle) exec(tasks []Task) {
	errs, elapsed := invoke(l.ctx, l.run, tasks)
	cs := completions(tasks, errs, elapsed)
	// The count drops before delivery so that a caller who has seen every
	// completion also sees zero in flight.
	l.inflight.Add(-int64(len(tasks)))
	l.sink(cs)
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
