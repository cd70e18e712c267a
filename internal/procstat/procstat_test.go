package procstat

import (
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestTreeCountsAnExitedChildOnce: a child that burns CPU and exits
// between two snapshots moves from the live children to the root's reaped
// time; Since counts it once.
//
//nolint:paralleltest // this process reaps the children of every test: another test's child would count in its tree
func TestTreeCountsAnExitedChildOnce(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	// A busy child running under this process, so that this process reaps it.
	child := exec.Command("sh", "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	before, err := SnapshotTree(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Wait(); err != nil {
		t.Fatal(err)
	}
	after, err := SnapshotTree(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	used := child.ProcessState.UserTime() + child.ProcessState.SystemTime()
	if used < 50*time.Millisecond {
		t.Fatalf("the child used %s of CPU, too little to tell apart", used)
	}
	got := after.Since(before, nil)
	// The root's own CPU (this test) counts too; the child's whole use is
	// in it once, not twice, within the 10 ms ticks of each reading.
	if own := got - used; own < -20*time.Millisecond || own > used/2 {
		t.Errorf("Since = %s with the child's %s: the child is counted %.1f times", got, used, float64(got)/float64(used))
	}
}

// TestTreeSkipsALiveChild: the CPU of a child alive at both snapshots counts
// unless it is skipped.
//
//nolint:paralleltest // its child, reaped at the end, would count in another test's tree
func TestTreeSkipsALiveChild(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	child := exec.Command("sh", "-c", "while :; do :; done")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = child.Process.Kill()
		_ = child.Wait()
	}()
	before, err := SnapshotTree(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Until the child has spun for 150 ms, however busy the machine.
	start, err := ProcessCPU(child.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		c, err := ProcessCPU(child.Process.Pid)
		if err != nil {
			t.Fatal(err)
		}
		if c-start >= 150*time.Millisecond {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the child spun %s in a minute", c-start)
		}
	}
	after, err := SnapshotTree(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	all, skipped := after.Since(before, nil), after.Since(before, map[int]bool{child.Process.Pid: true})
	if all-skipped < 150*time.Millisecond {
		t.Errorf("Since = %s, skipping the child %s: the child's spin is not told apart", all, skipped)
	}
}

// TestCPUStalledGrows: with more spinning processes than cores, some
// runnable task waits for a core, and the stall total grows.
//
//nolint:paralleltest // its children, reaped at the end, would count in another test's tree
func TestCPUStalledGrows(t *testing.T) {
	before, err := CPUStalled()
	if errors.Is(err, ErrNoPressure) {
		t.Skip("this kernel reports no CPU pressure:", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	var spinners []*exec.Cmd
	defer func() {
		for _, c := range spinners {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}()
	for range runtime.NumCPU() + 2 {
		c := exec.Command("sh", "-c", "while :; do :; done")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		spinners = append(spinners, c)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		now, err := CPUStalled()
		if err != nil {
			t.Fatal(err)
		}
		if now-before >= 50*time.Millisecond {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stall total grew %s in a minute of %d spinners on %d cores", now-before, len(spinners), runtime.NumCPU())
		}
	}
}

// TestThreadsCPU: the threads are chosen by their name's prefix; this
// process's threads carry its name, and none is named like a JIT compiler
// (ThreadsCPU's case on the brokers).
func TestThreadsCPU(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	comm, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimSpace(string(comm))
	// Spin until the threads named like this process have used 30 ms,
	// however busy the machine: they are found and their times read.
	prefix := name[:min(len(name), 4)]
	var own time.Duration
	for deadline := time.Now().Add(time.Minute); own < 30*time.Millisecond; {
		if own, err = ThreadsCPU(os.Getpid(), prefix); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("threads named %q used %s in a minute of spinning", name, own)
		}
	}
	if none, err := ThreadsCPU(os.Getpid(), "C2 CompilerThre"); err != nil || none != 0 {
		t.Errorf("threads named like a JIT compiler used %s (%v), want none", none, err)
	}
}
