// Package enginetest is the contract suite every pcon execution engine
// passes. A new engine gets the same guarantees checked by calling Run from
// its own test.
package enginetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/loopers/commerce-pipeline/pkg/pcon/internal/engine"
)

// Factory builds the engine under test with room for capacity tasks and a
// per-call handler timeout (0: none).
type Factory func(run engine.Runner, sink engine.Sink, capacity int, timeout time.Duration) engine.Engine

// Options says which optional parts of the contract an engine takes on.
type Options struct {
	// Runs: the engine accepts runs (tasks tied by Task.Follows) and runs
	// each run whole, in order, in one Runner call. An engine without it is
	// never given a run by the control plane.
	Runs bool
}

// wait bounds every blocking step so a broken engine fails the test instead
// of hanging it; no assertion depends on timing.
const wait = 30 * time.Second

// Run runs the contract suite against the engine built by newEngine.
func Run(t *testing.T, newEngine Factory, opt Options) {
	t.Run("every submit completes exactly once", func(t *testing.T) { submitCompletesOnce(t, newEngine) })
	t.Run("failures and panics become failure events", func(t *testing.T) { failures(t, newEngine) })
	t.Run("in-flight counts accepted tasks until completion", func(t *testing.T) { inFlight(t, newEngine) })
	t.Run("close waits, then cancels, and leaks nothing", func(t *testing.T) { shutdown(t, newEngine) })
	t.Run("a call past its timeout fails all its tasks", func(t *testing.T) { timeout(t, newEngine) })
	t.Run("a runner call's completions arrive together", func(t *testing.T) { together(t, newEngine) })
	if opt.Runs {
		t.Run("runs stay whole and in order", func(t *testing.T) { runs(t, newEngine) })
	}
}

// collector gathers completions from the sink.
type collector struct {
	mu   sync.Mutex
	got  []engine.Completion
	more chan struct{}
}

func newCollector() *collector { return &collector{more: make(chan struct{}, 1)} }

func (c *collector) sink(cs []engine.Completion) {
	c.mu.Lock()
	c.got = append(c.got, cs...)
	c.mu.Unlock()
	select {
	case c.more <- struct{}{}:
	default:
	}
}

func (c *collector) waitFor(t *testing.T, n int) []engine.Completion {
	t.Helper()
	deadline := time.After(wait)
	for {
		c.mu.Lock()
		got := append([]engine.Completion(nil), c.got...)
		c.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-c.more:
		case <-deadline:
			t.Fatalf("got %d completions, want %d", len(got), n)
		}
	}
}

func task(i int) engine.Task {
	return engine.Task{Size: 10, Payload: i}
}

func closeEngine(t *testing.T, e engine.Engine) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := e.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func submitCompletesOnce(t *testing.T, newEngine Factory) {
	const n = 500
	c := newCollector()
	e := newEngine(func(context.Context, []engine.Task) []error { return nil }, c.sink, n, 0)
	for i := range n {
		if err := e.Submit(task(i)); err != nil {
			t.Fatalf("Submit(%d): %v", i, err)
		}
	}
	got := c.waitFor(t, n)
	closeEngine(t, e)
	seen := make(map[int]int)
	for _, cp := range c.waitFor(t, n) {
		if cp.Err != nil {
			t.Errorf("task %v failed: %v", cp.Task.Payload, cp.Err)
		}
		seen[cp.Task.Payload.(int)]++
	}
	if len(got) != n || len(seen) != n {
		t.Fatalf("completions %d for %d distinct tasks, want %d each", len(got), len(seen), n)
	}
	for i, k := range seen {
		if k != 1 {
			t.Errorf("task %d completed %d times", i, k)
		}
	}
}

func failures(t *testing.T, newEngine Factory) {
	const n = 60
	boom := errors.New("boom")
	c := newCollector()
	run := func(_ context.Context, ts []engine.Task) []error {
		errs := make([]error, len(ts))
		for i, tk := range ts {
			switch tk.Payload.(int) % 3 {
			case 1:
				errs[i] = boom
			case 2:
				if len(ts) == 1 {
					panic("kaboom")
				}
				errs[i] = boom
			}
		}
		return errs
	}
	e := newEngine(run, c.sink, n, 0)
	for i := range n {
		if err := e.Submit(task(i)); err != nil {
			t.Fatal(err)
		}
	}
	got := c.waitFor(t, n)
	closeEngine(t, e)
	for _, cp := range got {
		i := cp.Task.Payload.(int)
		if i%3 == 0 {
			// A batch engine may fail a good task only when the whole batch
			// panicked, which this runner never does for batches.
			if cp.Err != nil {
				t.Errorf("task %d: unexpected error %v", i, cp.Err)
			}
			continue
		}
		var pe *engine.PanicError
		if cp.Err == nil || !errors.Is(cp.Err, boom) && !errors.As(cp.Err, &pe) {
			t.Errorf("task %d: error %v, want boom or a panic error", i, cp.Err)
		}
	}
}

func inFlight(t *testing.T, newEngine Factory) {
	const n = 40
	gate := make(chan struct{})
	c := newCollector()
	e := newEngine(func(context.Context, []engine.Task) []error {
		<-gate
		return nil
	}, c.sink, n, 0)
	for i := range n {
		if err := e.Submit(task(i)); err != nil {
			t.Fatal(err)
		}
		if got := e.InFlight(); got != i+1 {
			t.Fatalf("after %d submits InFlight = %d", i+1, got)
		}
	}
	close(gate)
	c.waitFor(t, n)
	if got := e.InFlight(); got != 0 {
		t.Fatalf("after all completions InFlight = %d", got)
	}
	closeEngine(t, e)
}

func shutdown(t *testing.T, newEngine Factory) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c := newCollector()
	started := make(chan struct{}, 8)
	e := newEngine(func(ctx context.Context, ts []engine.Task) []error {
		started <- struct{}{}
		<-ctx.Done() // a handler that only stops when told to
		return fill(len(ts), ctx.Err())
	}, c.sink, 8, 0)
	for i := range 4 {
		if err := e.Submit(task(i)); err != nil {
			t.Fatal(err)
		}
	}
	// Close with an already expired deadline: it must not hang, must cancel
	// the handlers, and every accepted task must still complete.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := e.Close(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Close = %v, want context.Canceled", err)
	}
	for _, cp := range c.waitFor(t, 4) {
		if cp.Err == nil {
			t.Errorf("task %v completed without error after cancellation", cp.Task.Payload)
		}
	}
	if err := e.Submit(task(99)); !errors.Is(err, engine.ErrClosed) {
		t.Fatalf("Submit after Close = %v, want ErrClosed", err)
	}
	closeEngine(t, e) // idempotent
	if got := e.InFlight(); got != 0 {
		t.Fatalf("InFlight after shutdown = %d", got)
	}
}

func fill(n int, err error) []error {
	errs := make([]error, n)
	for i := range errs {
		errs[i] = err
	}
	return errs
}

func timeout(t *testing.T, newEngine Factory) {
	c := newCollector()
	e := newEngine(func(ctx context.Context, ts []engine.Task) []error {
		if ts[0].Payload.(int) == 0 {
			<-ctx.Done() // overruns, then returns success anyway
		}
		return nil
	}, c.sink, 8, 20*time.Millisecond)
	if err := e.Submit(task(0)); err != nil {
		t.Fatal(err)
	}
	// The overrunning task completes (as timed out) before the next one
	// is submitted: a timeout frees its slot.
	c.waitFor(t, 1)
	if err := e.Submit(task(1)); err != nil {
		t.Fatal(err)
	}
	got := c.waitFor(t, 2)
	closeEngine(t, e)
	for _, cp := range got {
		overran := cp.Task.Payload.(int) == 0
		if timedOut := errors.Is(cp.Err, engine.ErrTimeout); timedOut != overran {
			t.Errorf("task %v: error %v, want a timeout: %v", cp.Task.Payload, cp.Err, overran)
		}
	}
	if !errors.Is(engine.ErrTimeout, context.DeadlineExceeded) {
		t.Error("ErrTimeout does not wrap context.DeadlineExceeded")
	}
}

// together checks that the completions of one Runner call reach the Sink in
// one call: the control plane resolves a run only once all of its records
// reported, and must never see half a run when an assignment ends.
func together(t *testing.T, newEngine Factory) {
	const n = 300
	var mu sync.Mutex
	callOf := map[int]int{} // task -> the runner call that ran it
	var deliveries [][]int  // tasks of each sink call
	calls := 0
	c := newCollector()
	e := newEngine(func(_ context.Context, ts []engine.Task) []error {
		mu.Lock()
		calls++
		for _, tk := range ts {
			callOf[tk.Payload.(int)] = calls
		}
		mu.Unlock()
		return nil
	}, func(cs []engine.Completion) {
		d := make([]int, len(cs))
		for i, cp := range cs {
			d[i] = cp.Task.Payload.(int)
		}
		mu.Lock()
		deliveries = append(deliveries, d)
		mu.Unlock()
		c.sink(cs)
	}, n, 0)
	for i := range n {
		if err := e.Submit(task(i)); err != nil {
			t.Fatal(err)
		}
	}
	c.waitFor(t, n)
	closeEngine(t, e)
	mu.Lock()
	defer mu.Unlock()
	size := map[int]int{} // runner call -> its tasks
	for _, cl := range callOf {
		size[cl]++
	}
	for _, d := range deliveries {
		got := map[int]int{}
		for _, tk := range d {
			got[callOf[tk]]++
		}
		for cl, k := range got {
			if k != size[cl] {
				t.Errorf("runner call %d: %d of its %d completions in one sink call", cl, k, size[cl])
			}
		}
	}
}

func runs(t *testing.T, newEngine Factory) {
	c := newCollector()
	var mu sync.Mutex
	var batches [][]int
	e := newEngine(func(_ context.Context, ts []engine.Task) []error {
		b := make([]int, len(ts))
		for i, tk := range ts {
			b[i] = tk.Payload.(int)
		}
		mu.Lock()
		batches = append(batches, b)
		mu.Unlock()
		return nil
	}, c.sink, 64, 0)
	// Runs of 1 to 5 tasks, each submitted as one Submit call; payload is
	// run*10 + position.
	total := 0
	for r := range 12 {
		size := r%5 + 1
		ts := make([]engine.Task, size)
		for i := range ts {
			ts[i] = task(r*10 + i)
			ts[i].Follows = i > 0
		}
		total += size
		if err := e.Submit(ts...); err != nil {
			t.Fatal(err)
		}
	}
	c.waitFor(t, total)
	closeEngine(t, e)
	mu.Lock()
	defer mu.Unlock()
	where := map[int]int{} // run -> batch
	for bi, b := range batches {
		for i, p := range b {
			run, pos := p/10, p%10
			if prev, ok := where[run]; ok && prev != bi {
				t.Errorf("run %d split across batches %d and %d", run, prev, bi)
			}
			where[run] = bi
			if pos > 0 && (i == 0 || b[i-1] != p-1) {
				t.Errorf("batch %v: task %d not right after its run's previous task", b, p)
			}
		}
	}
}
