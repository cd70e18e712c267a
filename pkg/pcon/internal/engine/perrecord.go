package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// PerRecord runs each task in a handler call of its own, at most limit at a
// time. Workers are started on demand and then stay until Close: reusing a
// goroutine whose stack has already grown is much cheaper than starting one
// per record, and there are never more than the peak concurrency.
//
// How tasks reach workers depends on how long handler calls take, averaged
// over the recent ones:
//
//   - Slow handlers (anything that waits on I/O): every task gets a worker
//     at once, an idle one or a new one, so no task waits behind another
//     task's handler while capacity is left.
//   - Fast handlers (averaging under FastCall): handing each task to
//     another goroutine would cost more than the handler itself, so up to
//     GOMAXPROCS workers take the queued tasks a few at a time, run them
//     back to back, and deliver their completions together. A task may
//     then wait behind another task's call. Should a call block, a
//     watchdog puts back the tasks queued behind it, delivers what was
//     completed before it, and gives every waiting task a worker of its
//     own, once the call has run for StallAfter. A handler that turns
//     slow lifts the average (calls of 50 µs within a few dozen), and the
//     engine goes back to a worker per task.
type PerRecord struct {
	lifecycle
	limit   int
	runners int          // workers that share the tasks of fast handlers
	chunk   int          // most tasks a worker takes at once for fast handlers
	avg     atomic.Int64 // moving average of handler call durations, nanoseconds
	mode    atomic.Int32 // a Mode

	mu      sync.Mutex
	wake    sync.Cond // signalled with mu held, one waiter per task or runner
	closed  bool
	pending fifoTasks
	workers int // started and not exited
	parked  int // waiting on wake and not signalled
	// coming counts workers that were signalled or started and have not yet
	// taken a task. For slow handlers Submit keeps pending.len() <= coming,
	// which is what "every task gets a worker at once" means.
	coming   int
	chunked  map[*worker]struct{} // workers running a chunk of several tasks
	watchdog *time.Timer          // armed while fast tasks are in flight
	watching bool
	taken    uint64 // chunks taken off pending
	mark     uint64 // taken when the watchdog last looked
}

// FastCall is the average handler call under which PerRecord shares tasks
// among a few workers instead of one worker per task. It is short enough
// that such a handler cannot be waiting on a network round trip, where a
// few workers would cap throughput, only computing.
const FastCall = 5 * time.Microsecond

// StallAfter bounds how long tasks of fast handlers wait behind a call
// that blocks: a watchdog looking this often gives them other workers.
const StallAfter = time.Millisecond

// slowCall caps what one call adds to the average. A new engine starts
// from it, so a handler must show about a thousand fast calls before tasks
// share workers.
const slowCall = 100 * FastCall

const initialAvg = int64(slowCall)

// maxChunk bounds the tasks a worker takes at once.
const maxChunk = 32

// NewPerRecord returns a per-record engine running at most limit tasks,
// each handler call limited to timeout (0: no limit).
func NewPerRecord(run Runner, sink Sink, limit int, timeout time.Duration) *PerRecord {
	e := &PerRecord{
		lifecycle: newLifecycle(run, sink, timeout),
		limit:     limit,
		runners:   max(1, min(runtime.GOMAXPROCS(0), limit)),
		chunked:   make(map[*worker]struct{}),
	}
	// Chunks stay small against the limit, so that completions waiting for
	// the rest of their chunk never leave the control plane without
	// capacity to dispatch more.
	e.chunk = max(1, min(maxChunk, limit/(4*e.runners)))
	e.avg.Store(initialAvg)
	e.wake.L = &e.mu
	return e
}

// Mode says how a PerRecord hands tasks to workers.
type Mode int32

// Modes.
const (
	// Adaptive shares workers while handler calls average under FastCall
	// and gives every task a worker otherwise.
	Adaptive Mode = iota
	// Shared always shares workers, as for fast handlers.
	Shared
	// Dedicated always gives every task a worker, as for slow handlers.
	Dedicated
)

// SetMode fixes how tasks reach workers, whatever the handlers take.
// Engines start Adaptive; tests fix a mode to hold each to the same
// guarantees.
func (e *PerRecord) SetMode(m Mode) { e.mode.Store(int32(m)) }

func (e *PerRecord) fast() bool {
	switch Mode(e.mode.Load()) {
	case Shared:
		return true
	case Dedicated:
		return false
	}
	return e.avg.Load() < int64(FastCall)
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
	e.pending.push(tasks...)
	var spawn int
	if e.fast() {
		// Enough workers awake to take the pending tasks in chunks, at
		// most runners: waking a worker for a few tasks costs more than
		// running them.
		awake := e.workers - e.parked
		spawn = e.wakeLocked(min(e.runners, (e.pending.len()+e.chunk-1)/e.chunk) - awake)
		e.watchLocked()
	} else {
		spawn = e.wakeLocked(e.pending.len() - e.coming)
	}
	e.mu.Unlock()
	for range spawn {
		go e.work()
	}
	return nil
}

// wakeLocked signals up to n parked workers and accounts for new ones to
// make n, within the limit. It returns how many to start.
func (e *PerRecord) wakeLocked(n int) (spawn int) {
	if n <= 0 {
		return 0
	}
	k := min(n, e.parked)
	e.parked -= k
	e.coming += k
	for range k {
		e.wake.Signal()
	}
	spawn = min(n-k, e.limit-e.workers)
	e.workers += spawn
	e.coming += spawn
	e.wg.Add(spawn)
	return spawn
}

// worker is one worker goroutine's state that the watchdog may look at.
// While a chunk runs, the worker and the watchdog share it through atomics
// only, so running a task costs no lock.
type worker struct {
	chunk []Task // taken off pending under PerRecord.mu; fixed until the next
	// next is the index of the next task to start. The watchdog swaps in
	// len(chunk) to take the tasks not started.
	next atomic.Int32
	// done[i] is chunk[i]'s completion; the worker writes it, then counts
	// it in finished.
	done     []Completion
	finished atomic.Int32
	// handed counts the completions handed on for delivery. The worker and
	// the watchdog advance it with CompareAndSwap, so each completion is
	// delivered once.
	handed atomic.Int32
	seen   int32   // next when the watchdog last looked, under PerRecord.mu
	one    [1]Task // the argument of the call under way
}

// handOn takes the completions not handed on yet.
func (w *worker) handOn() []Completion {
	for {
		from, to := w.handed.Load(), w.finished.Load()
		if from >= to {
			return nil
		}
		if w.handed.CompareAndSwap(from, to) {
			return w.done[from:to]
		}
	}
}

func (e *PerRecord) work() {
	defer e.wg.Done()
	w := &worker{}
	coming := true // started as one
	e.mu.Lock()
	for {
		if coming {
			e.coming--
			coming = false
		}
		n := 1
		if e.fast() {
			n = min(e.chunk, (e.pending.len()+e.runners-1)/e.runners)
		}
		if e.pending.len() == 0 {
			if e.closed {
				break
			}
			e.parked++
			e.wake.Wait()
			// Whoever signalled counted this worker as coming; Close
			// wakes every worker and counts none.
			coming = !e.closed
			continue
		}
		w.chunk = e.pending.takeInto(w.chunk[:0], n)
		if cap(w.done) < len(w.chunk) {
			w.done = make([]Completion, len(w.chunk))
		}
		w.done = w.done[:len(w.chunk)]
		w.next.Store(0)
		w.finished.Store(0)
		w.handed.Store(0)
		w.seen = -1
		e.taken++
		if len(w.chunk) > 1 {
			e.chunked[w] = struct{}{}
		}
		e.mu.Unlock()
		e.runChunk(w)
		e.mu.Lock()
		delete(e.chunked, w)
		clear(w.chunk)
		clear(w.done)
	}
	e.workers--
	e.mu.Unlock()
}

// runChunk runs w's chunk back to back, reading the clock once per call,
// then delivers the completions the watchdog did not take. The average
// call is updated once per chunk: workers share it.
func (e *PerRecord) runChunk(w *worker) {
	n := int32(len(w.chunk))
	avg := e.avg.Load()
	defer func() { e.avg.Store(avg) }()
	start := time.Since(e.base)
	for {
		i := w.next.Add(1) - 1
		if i >= n {
			break
		}
		t := w.chunk[i]
		w.one[0] = t
		err := e.call(w.one[:])
		w.one[0] = Task{}
		end := time.Since(e.base)
		avg = nextAvg(avg, end-start)
		w.done[i] = Completion{Task: t, Err: err, Elapsed: end - start}
		w.finished.Store(i + 1)
		start = end
	}
	e.deliver(w.handOn())
}

// deliver delivers completions handed on.
func (e *PerRecord) deliver(done []Completion) {
	if len(done) == 0 {
		return
	}
	e.inflight.Add(-int64(len(done)))
	e.out.deliverCompletions(done)
}

// call runs one handler call, turning a panic or a malformed answer into
// the task's error; see invoke.
func (e *PerRecord) call(one []Task) (err error) {
	ctx := e.ctx
	if e.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, e.timeout)
		defer cancel()
	}
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Stack: debug.Stack()}
		}
		if e.timeout > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = ErrTimeout
		}
	}()
	errs := e.run(ctx, one)
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return fmt.Errorf("engine: runner returned %d errors for 1 task", len(errs))
}

// nextAvg is the average call duration after a call of d. The average is
// long and each call counts at most slowCall, so that a call that only
// looks slow (its goroutine preempted, a GC pause) does not switch modes;
// a handler that turns slow for real, every call or often, lifts it within
// a few dozen calls, and the watchdog covers a call that blocks meanwhile.
func nextAvg(avg int64, d time.Duration) int64 {
	return avg + (min(int64(d), int64(slowCall))-avg)/256
}

// watchLocked arms the watchdog, unless it is armed.
func (e *PerRecord) watchLocked() {
	if e.watching || e.closed {
		return
	}
	e.watching = true
	e.wg.Add(1) // Close waits for a watchdog that fired
	if e.watchdog == nil {
		e.watchdog = time.AfterFunc(StallAfter, e.watch)
		return
	}
	e.watchdog.Reset(StallAfter)
}

// watch looks for calls that block while tasks wait behind them. A worker
// that started no task since the last look is stuck in one call: the rest
// of its chunk goes back to pending, and what it completed before the call
// is delivered. If no worker took tasks off pending since the last look,
// pending tasks get workers of their own. It stays armed while tasks of
// fast handlers are in flight.
func (e *PerRecord) watch() {
	defer e.wg.Done()
	var held []Completion
	e.mu.Lock()
	e.watching = false
	for w := range e.chunked {
		cur := w.next.Load()
		if cur == w.seen {
			// Stuck in one call since the last look.
			n := int32(len(w.chunk))
			if i := w.next.Swap(n); i < n {
				e.pending.push(w.chunk[i:]...)
			}
			held = append(held, w.handOn()...)
		}
		w.seen = cur
	}
	spawn := 0
	if e.taken == e.mark || len(held) > 0 {
		spawn = e.wakeLocked(e.pending.len() - e.coming)
	}
	e.mark = e.taken
	if len(e.chunked) > 0 || (e.fast() && e.inflight.Load() > 0) {
		e.watchLocked()
	}
	e.mu.Unlock()
	for range spawn {
		go e.work()
	}
	e.deliver(held)
}

// Close implements Engine.
func (e *PerRecord) Close(ctx context.Context) error {
	e.mu.Lock()
	if !e.closed {
		e.closed = true
		if e.watching && e.watchdog.Stop() {
			e.watching = false
			e.wg.Done()
		}
		// Pending tasks still owe completions: every worker wakes to run
		// them, and one is started if there is none.
		e.parked = 0
		e.wake.Broadcast()
		if e.pending.len() > 0 && e.workers == 0 {
			e.workers++
			e.coming++
			e.wg.Add(1)
			go e.work()
		}
	}
	e.mu.Unlock()
	return e.wait(ctx)
}
