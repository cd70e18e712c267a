package engine_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/loopers/commerce-pipeline/pkg/pcon/internal/engine"
	"github.com/loopers/commerce-pipeline/pkg/pcon/internal/enginetest"
)

//nolint:paralleltest // the contract's shutdown case checks with goleak that no goroutine of the process leaked
func TestPerRecordContract(t *testing.T) {
	// Which mode the engine picks depends on how fast the handlers are;
	// each mode must meet the contract on its own.
	for _, mode := range []struct {
		name string
		mode engine.Mode
	}{
		{"adaptive", engine.Adaptive},
		{"shared workers", engine.Shared},
		{"a worker per task", engine.Dedicated},
	} {
		t.Run(mode.name, func(t *testing.T) {
			enginetest.Run(t, func(run engine.Runner, sink engine.Sink, capacity int, timeout time.Duration) engine.Engine {
				e := engine.NewPerRecord(run, sink, capacity, timeout)
				e.SetMode(mode.mode)
				return e
			}, enginetest.Options{})
		})
	}
}

//nolint:paralleltest // the contract's shutdown case checks with goleak that no goroutine of the process leaked
func TestBatchContract(t *testing.T) {
	for _, linger := range []time.Duration{0, time.Millisecond} {
		t.Run(fmt.Sprintf("linger %v", linger), func(t *testing.T) {
			enginetest.Run(t, func(run engine.Runner, sink engine.Sink, capacity int, timeout time.Duration) engine.Engine {
				return engine.NewBatch(run, sink, engine.BatchOptions{
					MaxRecords: 7, MaxBytes: 1 << 20, MaxWait: linger, Concurrency: 2, Timeout: timeout,
				})
			}, enginetest.Options{Runs: true})
		})
	}
}

func TestBatchLimits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		opt   engine.BatchOptions
		sizes []int
		want  []int // batch lengths, in order
	}{
		{name: "record limit", opt: engine.BatchOptions{MaxRecords: 3, MaxBytes: 1000}, sizes: []int{1, 1, 1, 1, 1, 1, 1}, want: []int{3, 3, 1}},
		{name: "byte limit", opt: engine.BatchOptions{MaxRecords: 100, MaxBytes: 10}, sizes: []int{4, 4, 4, 4, 20, 1}, want: []int{2, 2, 1, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.opt.MaxWait = time.Hour // only Close flushes the remainder
			tt.opt.Concurrency = 1
			var mu sync.Mutex
			var got []int
			run := func(_ context.Context, ts []engine.Task) []error {
				mu.Lock()
				got = append(got, len(ts))
				mu.Unlock()
				return nil
			}
			e := engine.NewBatch(run, func([]engine.Completion) {}, tt.opt)
			for i, s := range tt.sizes {
				if err := e.Submit(engine.Task{Payload: i, Size: s}); err != nil {
					t.Fatal(err)
				}
			}
			if err := e.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			sort.Ints(got)
			want := append([]int(nil), tt.want...)
			sort.Ints(want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("batch sizes (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPerRecordNeverQueuesBehindBusyWorker submits work while a worker is
// blocked, repeatedly, so that a reused worker and a fresh task race; every
// new task must still run while the blocked one waits.
func TestPerRecordNeverQueuesBehindBusyWorker(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	done := make(chan int, 100)
	e := engine.NewPerRecord(func(_ context.Context, ts []engine.Task) []error {
		if ts[0].Payload == 0 {
			<-release
		}
		return nil
	}, func(cs []engine.Completion) {
		for _, c := range cs {
			done <- c.Task.Payload.(int)
		}
	}, 3, 0)
	if err := e.Submit(engine.Task{Payload: 0}); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 50; i++ {
		if err := e.Submit(engine.Task{Payload: i}); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-done:
			if got != i {
				t.Fatalf("completed %d, want %d", got, i)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("task %d waits behind the blocked task", i)
		}
	}
	close(release)
	if got := <-done; got != 0 {
		t.Fatalf("completed %d, want 0", got)
	}
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestBatchAlone: a task marked Alone gets a batch of its own, wherever it
// stands among the pending tasks.
func TestBatchAlone(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got [][]int64
	run := func(_ context.Context, ts []engine.Task) []error {
		b := make([]int64, len(ts))
		for i, tk := range ts {
			b[i] = tk.Payload.(int64)
		}
		mu.Lock()
		got = append(got, b)
		mu.Unlock()
		return nil
	}
	e := engine.NewBatch(run, func([]engine.Completion) {}, engine.BatchOptions{MaxRecords: 10, MaxBytes: 1000, MaxWait: time.Hour, Concurrency: 1})
	alone := map[int64]bool{2: true, 3: true, 6: true}
	for i := range int64(8) {
		if err := e.Submit(engine.Task{Payload: i, Size: 1, Alone: alone[i]}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := [][]int64{{0, 1}, {2}, {3}, {4, 5}, {6}, {7}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("batches (-want +got):\n%s", diff)
	}
}

// TestPerRecordFastStall: with fast handlers tasks share workers, so a call
// that blocks has tasks queued behind it. They must still run, and the
// completions of the tasks run before it must still be delivered, while it
// blocks.
func TestPerRecordFastStall(t *testing.T) {
	t.Parallel()
	const n, stuck = 200, 5
	release := make(chan struct{})
	var mu sync.Mutex
	got := map[int]int{}
	more := make(chan struct{}, 1)
	e := engine.NewPerRecord(func(_ context.Context, ts []engine.Task) []error {
		if ts[0].Payload == stuck {
			<-release
		}
		return nil
	}, func(cs []engine.Completion) {
		mu.Lock()
		for _, c := range cs {
			got[c.Task.Payload.(int)]++
		}
		mu.Unlock()
		select {
		case more <- struct{}{}:
		default:
		}
	}, n, 0)
	e.SetMode(engine.Shared)
	tasks := make([]engine.Task, n)
	for i := range tasks {
		tasks[i] = engine.Task{Payload: i}
	}
	if err := e.Submit(tasks...); err != nil {
		t.Fatal(err)
	}
	waitFor := func(want int) {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for {
			mu.Lock()
			k := len(got)
			mu.Unlock()
			if k >= want {
				return
			}
			select {
			case <-more:
			case <-deadline:
				t.Fatalf("%d of %d tasks completed", k, want)
			}
		}
	}
	waitFor(n - 1)
	mu.Lock()
	if _, ok := got[stuck]; ok {
		t.Fatal("the blocked task completed before it was released")
	}
	mu.Unlock()
	close(release)
	waitFor(n)
	if err := e.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for off, k := range got {
		if k != 1 {
			t.Errorf("task %d completed %d times", off, k)
		}
	}
}
