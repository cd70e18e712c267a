package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of the CPU times in /proc/<pid>/stat (USER_HZ, 100 on
// every Linux architecture this runs on).
const userHZ = 100

// procStat is what the benchmark reads of one process in /proc/<pid>/stat.
type procStat struct {
	ppid int
	// self is the process's own user and system time; reaped is that of
	// its children it has waited for (cutime + cstime).
	self, reaped time.Duration
}

func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	// The command name, field 2, is in parentheses and may hold spaces:
	// the fields are counted from the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state): ppid is field 4, utime 14, stime 15, cutime
	// 16, cstime 17.
	if len(f) < 15 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	n := func(field int) int64 {
		v, _ := strconv.ParseInt(f[field-3], 10, 64)
		return v
	}
	tick := time.Second / userHZ
	return procStat{
		ppid:   int(n(4)),
		self:   time.Duration(n(14)+n(15)) * tick,
		reaped: time.Duration(n(16)+n(17)) * tick,
	}, nil
}

// processCPU is the CPU time pid has used so far.
func processCPU(pid int) (time.Duration, error) {
	s, err := readStat(pid)
	return s.self, err
}

// treeSnapshot is the CPU time of a process tree at one moment
// (PostgreSQL's postmaster and its backends): the root's own plus that of
// the children it has reaped, and each live child's.
type treeSnapshot struct {
	root     time.Duration
	children map[int]time.Duration
}

func snapshotTree(root int) (treeSnapshot, error) {
	r, err := readStat(root)
	if err != nil {
		return treeSnapshot{}, err
	}
	t := treeSnapshot{root: r.self + r.reaped, children: map[int]time.Duration{}}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return treeSnapshot{}, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == root {
			continue
		}
		s, err := readStat(pid)
		if err != nil || s.ppid != root {
			continue // gone meanwhile, or not a child
		}
		t.children[pid] = s.self + s.reaped
	}
	return t, nil
}

// since is the CPU the tree used from before to t, leaving out the children
// in skip. A child that exits between the two moves from the live children
// into the root's reaped time, so its whole use still counts once.
func (t treeSnapshot) since(before treeSnapshot, skip map[int]bool) time.Duration {
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

// cpuSample is a process's CPU time at one moment.
type cpuSample struct {
	at  time.Time
	cpu time.Duration
}

// cpuSampler reads a process's CPU time every 20 ms while it runs, so that
// the CPU of a window the process reports afterwards (from its first record
// to its last) can be read off: the JVM's start-up and the group join are
// left out, for both sides alike.
type cpuSampler struct {
	pid     int
	stop    chan struct{}
	done    chan struct{}
	samples []cpuSample
}

func sampleCPU(pid int) *cpuSampler {
	s := &cpuSampler{pid: pid, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			if c, err := processCPU(pid); err == nil {
				s.samples = append(s.samples, cpuSample{time.Now(), c})
			}
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// finish stops sampling; call it before the process exits.
func (s *cpuSampler) finish() {
	close(s.stop)
	<-s.done
	if c, err := processCPU(s.pid); err == nil {
		s.samples = append(s.samples, cpuSample{time.Now(), c})
	}
}

// between is the CPU time used from `from` to `to`, from the samples
// around them (the last sample at or before from, the first at or after
// to): at most 20 ms wider than the window on each side.
func (s *cpuSampler) between(from, to time.Time) time.Duration {
	if len(s.samples) == 0 {
		return 0
	}
	lo, hi := s.samples[0], s.samples[len(s.samples)-1]
	for _, x := range s.samples {
		if !x.at.After(from) {
			lo = x
		}
	}
	for i := len(s.samples) - 1; i >= 0; i-- {
		if !s.samples[i].at.Before(to) {
			hi = s.samples[i]
		}
	}
	return hi.cpu - lo.cpu
}
