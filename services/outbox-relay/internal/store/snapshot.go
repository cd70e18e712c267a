package store

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Snapshot is a PostgreSQL pg_snapshot: the transactions (64-bit xid8 ids,
// which never wrap) in progress when it was taken.
type Snapshot struct {
	Xmin uint64   // every transaction below it had ended
	Xmax uint64   // no transaction at or above it had started
	Xip  []uint64 // in progress, between Xmin and Xmax; sorted
}

// ParseSnapshot parses pg_snapshot's text form "xmin:xmax:xip,xip,...".
func ParseSnapshot(s string) (Snapshot, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return Snapshot{}, fmt.Errorf("parse snapshot %q: want xmin:xmax:xip", s)
	}
	var (
		snap Snapshot
		err  error
	)
	if snap.Xmin, err = strconv.ParseUint(parts[0], 10, 64); err != nil {
		return Snapshot{}, fmt.Errorf("parse snapshot %q: xmin: %w", s, err)
	}
	if snap.Xmax, err = strconv.ParseUint(parts[1], 10, 64); err != nil {
		return Snapshot{}, fmt.Errorf("parse snapshot %q: xmax: %w", s, err)
	}
	if parts[2] != "" {
		for x := range strings.SplitSeq(parts[2], ",") {
			v, err := strconv.ParseUint(x, 10, 64)
			if err != nil {
				return Snapshot{}, fmt.Errorf("parse snapshot %q: xip: %w", s, err)
			}
			snap.Xip = append(snap.Xip, v)
		}
	}
	slices.Sort(snap.Xip)
	return snap, nil
}

// Ended reports whether transaction xid, known to have started before the
// snapshot was taken, had ended (committed or aborted) by then.
func (s Snapshot) Ended(xid uint64) bool {
	if xid < s.Xmin {
		return true
	}
	if xid >= s.Xmax {
		return false
	}
	_, running := slices.BinarySearch(s.Xip, xid)
	return !running
}

// AllEnded reports whether every one of xids had ended when s was taken.
func (s Snapshot) AllEnded(xids []uint64) bool {
	for _, x := range xids {
		if !s.Ended(x) {
			return false
		}
	}
	return true
}

// Widen returns the 64-bit id of the 32-bit transaction id xid (as pg_locks
// shows it) of a transaction running around the time s was taken: the value
// with those low 32 bits nearest to s.Xmax. PostgreSQL keeps every running
// transaction within 2^31 of the newest, so the nearest one is it.
func (s Snapshot) Widen(xid uint32) uint64 {
	const half = 1 << 31
	x := s.Xmax&^0xFFFFFFFF | uint64(xid)
	switch {
	case x > s.Xmax+half:
		x -= 1 << 32
	case x+half < s.Xmax:
		x += 1 << 32
	}
	return x
}
