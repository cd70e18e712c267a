package benchkit

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
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
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ProcStat{}, err
	}
	// The command name, field 2, is in parentheses and may hold spaces:
	// the fields are counted from the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ProcStat{}, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state): ppid is field 4, utime 14, stime 15, cutime
	// 16, cstime 17.
	if len(f) < 15 {
		return ProcStat{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	var bad error
	n := func(field int) int64 {
		v, err := strconv.ParseInt(f[field-3], 10, 64)
		if err != nil && bad == nil {
			bad = fmt.Errorf("/proc/%d/stat: field %d: %w", pid, field, err)
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

// Querier is a pgx connection or pool.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// BackendCPU is the CPU time used so far by each backend of q's database
// that cond, a condition on pg_stat_activity with args, selects. A server on
// another machine has no /proc entry here: its backends are left out.
func BackendCPU(ctx context.Context, q Querier, cond string, args ...any) (map[int]time.Duration, error) {
	rows, err := q.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND (`+cond+`)`, args...)
	if err != nil {
		return nil, err
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, err
	}
	out := make(map[int]time.Duration, len(pids))
	for _, pid := range pids {
		if c, err := ProcessCPU(int(pid)); err == nil {
			out[int(pid)] = c
		}
	}
	return out, nil
}
