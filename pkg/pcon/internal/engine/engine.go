// Package engine holds pcon's execution engines. An engine only runs work:
// it never decides what runs next, never touches offsets and never talks to
// Kafka. The control plane hands it tasks it has capacity for and gets one
// Completion back per task through a Sink.
package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"
)

// TP names a topic partition.
type TP struct {
	Topic     string
	Partition int32
}

// Task is one record handed to an engine. Payload is opaque to the engine
// and given back unchanged to the Runner and in the Completion; the record's
// partition, offset and assignment are the control plane's, behind it. A
// Task is copied on every hand-off, so it holds no more than engines use.
type Task struct {
	Payload any
	Size    int // bytes, for batch size limits
	// Follows ties the task to the one submitted just before it in the same
	// Submit call: a batch engine runs both in the same batch, in that
	// order. The control plane uses it for a key's run of records, which
	// must never be split across batches running at the same time.
	Follows bool
	// Alone asks a batch engine to run the task in a batch of its own. The
	// control plane sets it on retries, so that a record that failed its
	// batch is tried without its batch-mates: a poison record then fails
	// alone, and the others succeed.
	Alone bool
}

// Completion reports the outcome of one Task.
type Completion struct {
	Task    Task
	Err     error
	Elapsed time.Duration
}

// Runner executes tasks and returns nil when all of them succeeded, or one
// error per task (nil for the ones that succeeded). The per-record engine
// always passes one task; the batch engine passes many.
type Runner func(ctx context.Context, tasks []Task) []error

// Sink receives completions. Engines call it from their own goroutines,
// never from within Submit, and never while holding an internal lock, so a
// Sink may take the caller's locks. It must not keep the slice.
type Sink func([]Completion)

// Engine is the contract every execution engine meets; the contract suite
// in enginetest checks it.
//
//   - Submit never blocks on the work itself. It accepts all the tasks or
//     none; every accepted task yields exactly one Completion, later,
//     through the Sink. The Completions of one Runner call reach the Sink
//     in one call.
//   - InFlight counts accepted tasks whose Completion has not been
//     delivered. It is informational: the control plane keeps its own count
//     and never decides on this one.
//   - Close stops accepting tasks, starts whatever is queued, and waits for
//     running work until ctx ends; then it cancels the handlers' context and
//     returns ctx's error. Close is idempotent.
type Engine interface {
	Submit(tasks ...Task) error
	InFlight() int
	Close(ctx context.Context) error
}

// ErrClosed is returned by Submit after Close.
var ErrClosed = errors.New("engine: closed")

// ErrFull is returned by Submit when the caller exceeded the capacity it
// promised to respect.
var ErrFull = errors.New("engine: over capacity")

// ErrTimeout is the error of tasks whose handler returned after its
// deadline. It wraps context.DeadlineExceeded.
var ErrTimeout = fmt.Errorf("handler timed out: %w", context.DeadlineExceeded)

// PanicError is the error a task gets when its handler panicked.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("handler panic: %v", e.Value) }

// invoke runs run and turns a panic or a malformed answer into one error
// per task, so a broken handler can never take the consumer down.
//
// Time is read as time.Since(base), which reads only the monotonic clock;
// time.Now would also read the wall clock, twice per record.
//
// With a timeout the handler's context gets a deadline, and a handler that
// returns after it fails all its tasks with ErrTimeout whatever it returned:
// its work may be half done, and only a retry makes the outcome known.
// Nothing abandons a handler that does not return; its key stays busy,
// because starting the key's next record would break the key's order.
func invoke(ctx context.Context, base time.Time, timeout time.Duration, run Runner, tasks []Task) (errs []error, elapsed time.Duration) {
	start := time.Since(base)
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	defer func() {
		if r := recover(); r != nil {
			errs = fill(len(tasks), &PanicError{Value: r, Stack: debug.Stack()})
		}
		if timeout > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			errs = fill(len(tasks), ErrTimeout)
		}
		elapsed = time.Since(base) - start
	}()
	errs = run(ctx, tasks)
	if errs != nil && len(errs) != len(tasks) {
		errs = fill(len(tasks), fmt.Errorf("engine: runner returned %d errors for %d tasks", len(errs), len(tasks)))
	}
	return errs, 0
}

func fill(n int, err error) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}
