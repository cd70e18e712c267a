// Package procstat reads what the kernel counts of processes and of the
// machine: a process's CPU time, a process tree's (PostgreSQL's postmaster
// and its backends), and the CPU pressure. Benchmarks and soak tests report
// with it what a run cost and how much it waited for a core.
//
//	before, _ := procstat.ProcessCPU(pid)
//	stalled, _ := procstat.CPUStalled()
//	// ... the run ...
//	after, _ := procstat.ProcessCPU(pid)
//	stalledAfter, _ := procstat.CPUStalled()
//	// after-before: the CPU pid used; stalledAfter-stalled: how long some
//	// runnable task waited for a core meanwhile.
package procstat

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of the CPU times in /proc/<pid>/stat (USER_HZ, 100 on
// every Linux architecture this runs on, whatever the kernel's tick rate).
const userHZ = 100

// ProcStat is what a benchmark reads of one process in /proc/<pid>/stat.
type ProcStat struct {
	PPID int
	// Self is the process's own user and system time; Reaped is that of
	// its children it has waited for (cutime + cstime).
	Self, Reaped time.Duration
}

// ReadStat reads /proc/<pid>/stat.
func ReadStat(pid int) (ProcStat, error) {
	return readStatFile(fmt.Sprintf("/proc/%d/stat", pid))
}

// readStatFile reads a process's or a thread's stat file.
func readStatFile(path string) (ProcStat, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return ProcStat{}, err
	}
	// The command name, field 2, is in parentheses and may hold spaces:
	// the fields are counted from the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ProcStat{}, fmt.Errorf("%s: no command name", path)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state): ppid is field 4, utime 14, stime 15, cutime
	// 16, cstime 17.
	if len(f) < 15 {
		return ProcStat{}, fmt.Errorf("%s: %d fields", path, len(f))
	}
	var bad error
	n := func(field int) int64 {
		v, err := strconv.ParseInt(f[field-3], 10, 64)
		if err != nil && bad == nil {
			bad = fmt.Errorf("%s: field %d: %w", path, field, err)
		}
		return v
	}
	tick := time.Second / userHZ
	st := ProcStat{
		PPID:   int(n(4)),
		Self:   time.Duration(n(14)+n(15)) * tick,
		Reaped: time.Duration(n(16)+n(17)) * tick,
	}
	return st, bad
}

// ProcessCPU is the CPU time (user + system) pid has used so far.
func ProcessCPU(pid int) (time.Duration, error) {
	s, err := ReadStat(pid)
	return s.Self, err
}

// TreeSnapshot is the CPU time of a process tree at one moment
// (PostgreSQL's postmaster and its backends): the root's own plus that of
// the children it has reaped, and each live child's.
type TreeSnapshot struct {
	root     time.Duration
	children map[int]time.Duration
}

// SnapshotTree reads the CPU time of root and its children.
func SnapshotTree(root int) (TreeSnapshot, error) {
	r, err := ReadStat(root)
	if err != nil {
		return TreeSnapshot{}, err
	}
	t := TreeSnapshot{root: r.Self + r.Reaped, children: map[int]time.Duration{}}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return TreeSnapshot{}, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == root {
			continue
		}
		s, err := ReadStat(pid)
		if err != nil || s.PPID != root {
			continue // gone meanwhile, or not a child
		}
		t.children[pid] = s.Self + s.Reaped
	}
	return t, nil
}

// Since is the CPU the tree used from before to t, leaving out the children
// in skip. A child that exits between the two moves from the live children
// into the root's reaped time, so its whole use still counts once.
func (t TreeSnapshot) Since(before TreeSnapshot, skip map[int]bool) time.Duration {
	d := t.root - before.root
	for pid, c := range t.children {
		if !skip[pid] {
			d += c - before.children[pid]
		}
	}
	for pid, c := range before.children {
		if _, alive := t.children[pid]; !alive && !skip[pid] {
			d -= c
		}
	}
	return d
}

// ErrNoPressure is CPUStalled's error where the kernel reports no pressure
// stall information.
var ErrNoPressure = errors.New("procstat: no /proc/pressure/cpu")

// CPUStalled is the total of /proc/pressure/cpu's "some" line: how long,
// since boot, at least one runnable task waited for a core. Its growth over
// a window, divided by the window, is the share of it the machine was short
// of cores.
func CPUStalled() (time.Duration, error) {
	b, err := os.ReadFile("/proc/pressure/cpu")
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrNoPressure, err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if !strings.HasPrefix(line, "some ") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "total="); ok {
				us, err := strconv.ParseUint(v, 10, 64)
				if err != nil {
					return 0, fmt.Errorf("/proc/pressure/cpu: %w", err)
				}
				return time.Duration(us) * time.Microsecond, nil
			}
		}
	}
	return 0, fmt.Errorf("%w: no \"some\" total", ErrNoPressure)
}

// ThreadsCPU is the CPU time used so far by the threads of pid whose name
// (/proc/<pid>/task/<tid>/comm, at most 15 bytes) starts with one of
// prefixes; threads that exited are not counted.
func ThreadsCPU(pid int, prefixes ...string) (time.Duration, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var sum time.Duration
	for _, task := range tasks {
		comm, err := os.ReadFile(filepath.Join(dir, task.Name(), "comm"))
		if err != nil {
			continue // exited meanwhile
		}
		name := strings.TrimSpace(string(comm))
		if !slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(name, p) }) {
			continue
		}
		s, err := readStatFile(filepath.Join(dir, task.Name(), "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		sum += s.Self
	}
	return sum, nil
}
