package core

import (
	"context"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/loopers/commerce-pipeline/pkg/pcon/internal/engine"
)

// BenchmarkPipeline measures the control plane and the per-record engine
// alone: records of 1,000 keys over 3 partitions, a no-op handler.
func BenchmarkPipeline(b *testing.B) {
	var done sync.WaitGroup
	var c *Core
	e := engine.NewPerRecord(func(context.Context, []engine.Task) []error { return nil },
		func(cs []engine.Completion) {
			c.Complete(cs)
			done.Add(-len(cs))
		}, 5000, 0)
	c = New(Config{MaxInFlight: 5000, Ordering: ByKey, MaxAttempts: 1, Backoff: func(int) time.Duration { return 0 }},
		Deps{Submit: e.Submit, SetPaused: func(bool) {}})
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	tps := []engine.TP{{Topic: "t", Partition: 0}, {Topic: "t", Partition: 1}, {Topic: "t", Partition: 2}}
	epochs := make([]uint64, len(tps))
	for i, tp := range tps {
		epochs[i] = c.Assign(tp, 0, "")
	}
	next := make([]int64, len(tps))
	b.ResetTimer()
	cpu0 := cpuTime()
	const batch = 256
	items := make([]Item, 0, batch)
	for n := 0; n < b.N; n += batch {
		for c.Paused() {
			time.Sleep(10 * time.Microsecond)
		}
		p := (n / batch) % len(tps)
		items = items[:0]
		for i := 0; i < batch; i++ {
			items = append(items, Item{Offset: next[p], Key: keys[(n+i)%len(keys)], Payload: nil})
			next[p]++
		}
		done.Add(len(items))
		c.Add(tps[p], epochs[p], items, next[p])
	}
	done.Wait()
	b.StopTimer()
	// On a shared machine the CPU spent per record is steadier than the
	// wall time.
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
	_ = e.Close(context.Background())
	c.Close()
}

// cpuTime is the CPU time the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
