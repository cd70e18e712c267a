package relay

import (
	"slices"

	"github.com/loopers/commerce-pipeline/services/outbox-relay/internal/store"
)

// The gap rule: how the cursor never skips a row that commits late.
//
// Outbox ids are drawn at INSERT, not at commit, so the row with id 10 can
// become visible after the row with id 11. When a read after the cursor sees
// ids missing below the highest id it sees (a gap), the relay publishes up to
// the gap and stops there until it can prove the gap is permanent (a rolled
// back transaction, a failed insert, or a sequence jump after a crash).
//
// Each read returns its rows together with pg_current_snapshot() from the
// same statement, hence the same snapshot S (store.ReadBatch). The first time
// an id g is seen missing in S while some m > g is visible, the relay reads W
// (store.OutboxWriters), after S: the transactions holding a RowExclusiveLock
// on outbox at that moment, and remembers X = the members of W that had not
// ended in S (listed in S.xip, or at or above S.xmax). In a later read, with
// snapshot S' taken after W was read, g is skipped only if every transaction
// of X had ended in S' AND g is still missing in S'. Until then the pass stops
// before g and the cursor stays below it.
//
// Why that is enough. Suppose a transaction T inserts the row g.
//  1. outbox_next_id() takes T's xid (pg_current_xact_id) before it calls
//     nextval, and nextval hands out ids in call order (the sequence is not
//     cached per session), so T had an xid before g existed.
//  2. An INSERT locks its target table (RowExclusiveLock) before it evaluates
//     the id default, and holds the lock until the transaction ends.
//  3. S does not see g, so T had not committed when S was taken (had T
//     aborted before S, g can never appear anyway). So T had not ended in S.
//  4. When W is read, either T still runs, then T ∈ W (2) and T ∈ X (3); or T
//     has ended, before W was read and hence before S' was taken: if it
//     committed, S' sees g and there is no gap; if it aborted, g never
//     appears.
//  5. If T ∈ X and every transaction of X had ended in S': S' sees g if T
//     committed, and g never appears if it aborted.
// So a gap skipped under this rule never fills later.
//
// Two traps this avoids. S.xip alone is not the set of transactions in
// progress: PostgreSQL leaves out every xid at or above S.xmax (the newest
// completed xid + 1), which still run; T can be one of them when it took its
// xid after the transaction that committed m (whatever their id order), so
// "S.xip is empty" proves nothing and a later snapshot is always needed. And
// waiting on all of S.xip would stall the relay for the whole life of any
// long transaction on the server (a report, another service, another
// database); X holds only transactions writing to outbox.
//
// Xids in snapshots are 64-bit (xid8), without wraparound; W's 32-bit xids
// are widened against S (store.Snapshot.Widen). Subtransactions do not
// matter: the xid taken first is the top-level one, which snapshots list and
// which holds the locks. Remembered sets are kept per id range and dropped
// once the cursor passes them.

// gap is a range of ids seen missing, and the outbox writers that may hold
// them.
type gap struct {
	lo, hi int64
	xip    []uint64
}

// gaps remembers the gaps the relay is waiting on. Only the pass goroutine
// uses it.
type gaps struct {
	known []gap // sorted by lo, disjoint
	// recorded is set when a range was remembered; it can settle only in a
	// later read, so the pass reads again at once.
	recorded bool
}

// resolved reports whether the ids lo..hi, missing in the read with snapshot
// snap (which saw an id above hi), can never appear. Ranges not seen before
// are remembered with inFlight(), the outbox writers that had not ended in
// snap; they can settle only in a later read. If inFlight cannot tell, the
// range is not remembered and is looked at again in a later read.
func (g *gaps) resolved(lo, hi int64, snap store.Snapshot, inFlight func() ([]uint64, bool)) bool {
	ok := true
	for cur := lo; cur <= hi; {
		i, found := g.find(cur)
		if found {
			if !snap.AllEnded(g.known[i].xip) {
				ok = false
			}
			cur = g.known[i].hi + 1
			continue
		}
		end := hi
		if i < len(g.known) && g.known[i].lo <= hi {
			end = g.known[i].lo - 1
		}
		ok = false
		if xs, known := inFlight(); known {
			g.known = slices.Insert(g.known, i, gap{lo: cur, hi: end, xip: xs})
			g.recorded = true
		}
		cur = end + 1
	}
	return ok
}

// find returns the index of the range holding id, or where a range starting
// at id would be inserted.
func (g *gaps) find(id int64) (int, bool) {
	i, _ := slices.BinarySearchFunc(g.known, id, func(x gap, id int64) int {
		switch {
		case x.hi < id:
			return -1
		case x.lo > id:
			return 1
		}
		return 0
	})
	return i, i < len(g.known) && g.known[i].lo <= id && id <= g.known[i].hi
}

// forget drops the ranges at or below the cursor.
func (g *gaps) forget(cursor int64) {
	g.known = slices.DeleteFunc(g.known, func(x gap) bool { return x.hi <= cursor })
}
