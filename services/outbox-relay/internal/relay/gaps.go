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
// an id g is seen missing in S while some m > g is visible:
//   - if S.xip is empty, g is skipped at once;
//   - else the relay remembers X = S.xip ∩ W, where W is read after S (a
//     later statement, store.OutboxWriters): the transactions holding a
//     RowExclusiveLock on outbox. In a later read with snapshot S', g is
//     skipped only if every transaction of X had ended in S' AND g is still
//     missing in S'.
//
// Why that is enough. Suppose a transaction T inserts the row g.
//  1. outbox_next_id() takes T's xid (pg_current_xact_id) before it calls
//     nextval, and nextval hands out ids in call order (the sequence is not
//     cached per session), so T had an xid before g existed.
//  2. m > g was drawn after g, and m's transaction committed before S was
//     taken, since S sees m. So T had its xid before S was taken.
//  3. S does not see g, so T had not committed when S was taken: either T
//     had already aborted (g never appears), or T was in progress: T ∈ S.xip.
//     So an empty S.xip proves g can never appear.
//  4. An INSERT locks its target table (RowExclusiveLock) before it evaluates
//     the id default and holds the lock until the transaction ends. So when W
//     is read, T is either still running, and then T ∈ W, hence T ∈ X; or T
//     has ended before W was read, hence before S' was taken: if it
//     committed, S' sees g (no gap); if it aborted, g never appears.
//  5. If T ∈ X and every transaction of X had ended in S': again S' sees g
//     if T committed, and g never appears if it aborted.
//
// So a gap skipped under this rule never fills later. Intersecting with W is
// what keeps the relay live: S.xip holds every transaction of the cluster,
// and one long transaction elsewhere (a report, another service, another
// database on the server) would otherwise stall the relay for its whole
// lifetime. W is read only when a new gap is first seen.
//
// A transaction that takes its xid after S cannot hold an id below m (its id
// comes after its xid, after S, after m). Xids in snapshots are 64-bit
// (xid8), no wraparound; W's 32-bit xids are matched to them by their low 32
// bits, which can only add transactions to X (never drop T). Subtransactions
// (savepoints) do not matter: the xid taken first is the top-level one, which
// is what xip lists and what holds the relation lock. The remembered sets are
// kept per id range and dropped once the cursor passes them.

// gap is a range of ids seen missing, and the transactions in progress in the
// snapshot where it was first seen.
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
// are remembered with inFlight(): snap's in-progress transactions that were
// still writing to outbox after snap was taken.
func (g *gaps) resolved(lo, hi int64, snap store.Snapshot, inFlight func() []uint64) bool {
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
		start := cur
		cur = end + 1
		if len(snap.Xip) == 0 {
			continue // nothing was in flight in snap: the ids can never appear
		}
		g.known = slices.Insert(g.known, i, gap{lo: start, hi: end, xip: inFlight()})
		g.recorded = true
		ok = false
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
