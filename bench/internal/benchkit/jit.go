package benchkit

import (
	"context"
	"time"

	"github.com/loopers/commerce-pipeline/internal/procstat"
)

// compilerThreads are the names HotSpot gives its JIT compiler threads,
// cut to the kernel's 15 bytes ("C2 CompilerThread0").
var compilerThreads = []string{"C1 CompilerThre", "C2 CompilerThre"}

// jitIdle is the compiler threads' share of one core, summed over the
// JVMs, under which they count as settled: a warm broker still compiles
// now and then.
const jitIdle = 0.10

// WarmUp runs step (one stretch of warm-up load, a few seconds long) until
// at least least has passed and, over the last step, the JIT compilers of
// the JVMs pids used less than a tenth of a core; or until most has
// passed. A fresh broker compiles the paths a load exercises for a minute
// or two, and its compiler threads meanwhile take a core or more of a
// small machine from whatever is measured; production brokers are warm.
// It returns how long it ran and whether the compilers settled. Processes
// that are not JVMs have no compiler threads: they count as settled.
func WarmUp(ctx context.Context, pids []int, least, most time.Duration, step func(context.Context) error) (time.Duration, bool, error) {
	compiled := func() (time.Duration, error) {
		var sum time.Duration
		for _, pid := range pids {
			c, err := procstat.ThreadsCPU(pid, compilerThreads...)
			if err != nil {
				return 0, err
			}
			sum += c
		}
		return sum, nil
	}
	start := time.Now()
	for {
		before, err := compiled()
		if err != nil {
			return time.Since(start), false, err
		}
		began := time.Now()
		if err := step(ctx); err != nil {
			return time.Since(start), false, err
		}
		after, err := compiled()
		if err != nil {
			return time.Since(start), false, err
		}
		share := (after - before).Seconds() / time.Since(began).Seconds()
		settled := share < jitIdle
		if elapsed := time.Since(start); elapsed >= least && settled || elapsed >= most {
			return elapsed, settled, nil
		}
	}
}
