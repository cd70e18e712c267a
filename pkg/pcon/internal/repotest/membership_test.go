package pcon_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/loopers/commerce-pipeline/pkg/pcon"
)

// hookEvent is one partition of one OnAssigned or OnRevoked call.
type hookEvent struct {
	Member   string
	Revoked  bool
	Group    string
	Event    pcon.PartitionEvent
	Received time.Time
}

// hookRecorder collects the assignment hooks of several members. From
// inside each hook it calls the member's Stats, which must not block: the
// hooks run outside pcon's locks.
type hookRecorder struct {
	t          *testing.T
	mu         sync.Mutex
	events     []hookEvent
	violations []string
}

func (h *hookRecorder) violate(format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.violations = append(h.violations, fmt.Sprintf(format, args...))
}

// hooks sets cfg's hooks for the member named member; the returned setter
// must be given the Consumer once New has made it.
func (h *hookRecorder) hooks(cfg *pcon.Config, member string) func(*pcon.Consumer) {
	var c atomic.Pointer[pcon.Consumer]
	record := func(revoked bool) func(string, []pcon.PartitionEvent) {
		return func(group string, ps []pcon.PartitionEvent) {
			deadline := time.Now().Add(5 * time.Second)
			for c.Load() == nil && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			if cons := c.Load(); cons != nil {
				done := make(chan struct{})
				go func() {
					defer close(done)
					_ = cons.Stats()
				}()
				select {
				case <-done:
				case <-time.After(5 * time.Second):
					h.violate("%s: Stats blocked inside a hook (revoked=%v, %+v)", member, revoked, ps)
				}
			}
			h.mu.Lock()
			defer h.mu.Unlock()
			for _, p := range ps {
				h.events = append(h.events, hookEvent{Member: member, Revoked: revoked, Group: group, Event: p, Received: time.Now()})
			}
		}
	}
	cfg.OnAssigned = record(false)
	cfg.OnRevoked = record(true)
	return func(cons *pcon.Consumer) { c.Store(cons) }
}

func (h *hookRecorder) startMember(cfg pcon.Config, member string, handler pcon.Handler) (*pcon.Consumer, func()) {
	set := h.hooks(&cfg, member)
	c, stop := start(h.t, cfg, handler)
	set(c)
	return c, stop
}

// of returns the events of member, in the order they were received.
func (h *hookRecorder) of(member string) []hookEvent {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []hookEvent
	for _, e := range h.events {
		if e.Member == member {
			out = append(out, e)
		}
	}
	return out
}

// checkSequences checks, per member and partition, that assignments and
// revocations alternate, that each revocation names the epoch of the
// assignment it ends, and that epochs grow.
func (h *hookRecorder) checkSequences(t *testing.T, group, topic string) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, v := range h.violations {
		t.Error(v)
	}
	type mp struct {
		member string
		p      int32
	}
	last := map[mp]hookEvent{}
	for _, e := range h.events {
		if e.Group != group || e.Event.Topic != topic {
			t.Errorf("hook for group %q topic %q, want %q %q", e.Group, e.Event.Topic, group, topic)
		}
		k := mp{e.Member, e.Event.Partition}
		prev, seen := last[k]
		switch {
		case !seen && e.Revoked:
			t.Errorf("%s p%d revoked before any assignment", e.Member, e.Event.Partition)
		case seen && prev.Revoked == e.Revoked:
			t.Errorf("%s p%d: two %s in a row (epochs %d, %d)", e.Member, e.Event.Partition, kind(e.Revoked), prev.Event.Epoch, e.Event.Epoch)
		case seen && e.Revoked && e.Event.Epoch != prev.Event.Epoch:
			t.Errorf("%s p%d revoked with epoch %d, assigned with %d", e.Member, e.Event.Partition, e.Event.Epoch, prev.Event.Epoch)
		case seen && !e.Revoked && e.Event.Epoch <= prev.Event.Epoch:
			t.Errorf("%s p%d reassigned with epoch %d, not above %d", e.Member, e.Event.Partition, e.Event.Epoch, prev.Event.Epoch)
		}
		last[k] = e
	}
}

func kind(revoked bool) string {
	if revoked {
		return "revocations"
	}
	return "assignments"
}

// partitionsOf returns, for the events given, partition -> field.
func partitionsOf(es []hookEvent, revoked bool, f func(pcon.PartitionEvent) int64) map[int32]int64 {
	out := map[int32]int64{}
	for _, e := range es {
		if e.Revoked == revoked {
			out[e.Event.Partition] = f(e.Event)
		}
	}
	return out
}

func offsetOf(p pcon.PartitionEvent) int64    { return p.Offset }
func completedOf(p pcon.PartitionEvent) int64 { return int64(p.Completed) }

func countByPartition(recs []produced) map[int32]int64 {
	out := map[int32]int64{}
	for _, r := range recs {
		out[r.Partition]++
	}
	return out
}

// TestAssignmentHooks follows a group through a first run, a restart after
// more records, and a member joining: every hook names the right epochs,
// the committed offset it starts at or released at, and the records
// completed in between.
func TestAssignmentHooks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	group := e.group("hooks")
	handler := pcon.RecordHandler(func(context.Context, *pcon.Record) error { return nil })
	h := &hookRecorder{t: t}
	cfg := e.config(group)

	// A fresh group: every partition starts at 0 and is released at its end.
	first := e.produce(300, keyMod(30))
	_, stop := h.startMember(cfg, "first", handler)
	e.waitCommitted(group, endOffsets(first))
	stop()
	ev := h.of("first")
	zero := map[int32]int64{0: 0, 1: 0, 2: 0}
	if diff := cmp.Diff(zero, partitionsOf(ev, false, offsetOf)); diff != "" {
		t.Errorf("first run OnAssigned offsets (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(endOffsets(first), partitionsOf(ev, true, offsetOf)); diff != "" {
		t.Errorf("first run OnRevoked offsets (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(countByPartition(first), partitionsOf(ev, true, completedOf)); diff != "" {
		t.Errorf("first run OnRevoked completed (-want +got):\n%s", diff)
	}
	committed := map[int32]int64{}
	for p, c := range e.committed(group) {
		committed[p] = c.Offset
	}
	if diff := cmp.Diff(partitionsOf(ev, true, offsetOf), committed); diff != "" {
		t.Errorf("OnRevoked offsets vs committed (-hook +committed):\n%s", diff)
	}

	// A restart starts at the committed offsets; a second member joining
	// revokes everything (eager rebalance) after the new records are done.
	second := e.produce(90, keyMod(30))
	all := append(slices.Clone(first), second...)
	_, stopRestarted := h.startMember(cfg, "restarted", handler)
	e.waitCommitted(group, endOffsets(all))
	ev = h.of("restarted")
	if diff := cmp.Diff(endOffsets(first), partitionsOf(ev, false, offsetOf)); diff != "" {
		t.Errorf("restart OnAssigned offsets (-want +got):\n%s", diff)
	}
	// Wait for the periodic commit to have passed everything, then let a
	// second member in.
	_, stopJoiner := h.startMember(cfg, "joiner", handler)
	deadline := time.Now().Add(waitLong)
	for len(h.of("joiner")) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the joining member was never assigned a partition")
		}
		time.Sleep(20 * time.Millisecond)
	}
	ev = h.of("restarted")
	var firstRevokes []hookEvent
	for _, x := range ev {
		if x.Revoked && len(firstRevokes) < 3 {
			firstRevokes = append(firstRevokes, x)
		}
	}
	if diff := cmp.Diff(endOffsets(all), partitionsOf(firstRevokes, true, offsetOf)); diff != "" {
		t.Errorf("rebalance OnRevoked offsets (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(countByPartition(second), partitionsOf(firstRevokes, true, completedOf)); diff != "" {
		t.Errorf("rebalance OnRevoked completed (-want +got):\n%s", diff)
	}
	// After the rebalance each partition is owned by one member again,
	// starting at the end offsets.
	deadline = time.Now().Add(waitLong)
	for {
		owned := map[int32]int64{}
		for _, m := range []string{"restarted", "joiner"} {
			evs := h.of(m)
			cur := map[int32]hookEvent{}
			for _, x := range evs {
				cur[x.Event.Partition] = x
			}
			for p, x := range cur {
				if !x.Revoked && (m == "joiner" || x.Received.After(firstRevokes[len(firstRevokes)-1].Received)) {
					owned[p] = x.Event.Offset
				}
			}
		}
		if cmp.Diff(endOffsets(all), owned) == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the join, assigned offsets (-want +got):\n%s", cmp.Diff(endOffsets(all), owned))
		}
		time.Sleep(20 * time.Millisecond)
	}
	stopJoiner()
	stopRestarted()
	h.checkSequences(t, group, e.topic)
	var reassigned bool
	for p := range int32(partitions) {
		n := 0
		for _, x := range h.of("restarted") {
			if !x.Revoked && x.Event.Partition == p {
				n++
			}
		}
		reassigned = reassigned || n > 1
	}
	if !reassigned {
		t.Error("no partition was assigned twice to the restarted member: epochs never had to grow")
	}
}

// TestStaticMembershipRejoin: with static members "a" and "b" on Apache
// Kafka, "a" stops without leaving (static members send no LeaveGroup) and
// a new Consumer with InstanceID "a" comes back within the session
// timeout. The broker hands it a's partitions in the generation b already
// has: no rebalance, so b's hooks never run, its partitions and epochs
// stay, and records produced after the rejoin are handled by both.
func TestStaticMembershipRejoin(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	group := e.group("static")
	var handled sync.Map
	handler := pcon.RecordHandler(func(_ context.Context, r *pcon.Record) error {
		handled.Store([2]int64{int64(r.Partition), r.Offset}, true)
		return nil
	})
	h := &hookRecorder{t: t}
	const assigned = "pcon: partitions assigned"
	member := func(id string) (pcon.Config, *logCapture) {
		c := e.config(group)
		// Long enough that the restart below, on a loaded machine, stays
		// well within the session; the broker forgets "a" only after it.
		c.Sarama.Consumer.Group.Session.Timeout = 20 * time.Second
		c.Sarama.Consumer.Group.Rebalance.Timeout = 20 * time.Second
		c.InstanceID = id
		logs := newLogCapture(assigned)
		c.Logger = logs.logger()
		return c, logs
	}
	owned := func(m string) map[int32]uint64 { // partition -> epoch
		cur := map[int32]hookEvent{}
		for _, x := range h.of(m) {
			cur[x.Event.Partition] = x
		}
		out := map[int32]uint64{}
		for p, x := range cur {
			if !x.Revoked {
				out[p] = x.Event.Epoch
			}
		}
		return out
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(waitLong)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: a owns %v, b owns %v, a2 owns %v", what, owned("a"), owned("b"), owned("a2"))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// generations lists the group generations a member's sessions started.
	generations := func(logs *logCapture) []string {
		var out []string
		for _, r := range logs.records(assigned) {
			out = append(out, r.Attrs["generation"])
		}
		return out
	}

	recs := e.produce(300, keyMod(30))
	// "b" first, so that it leads the group: the rejoining member is then
	// a follower, whom KIP-345 serves without any rebalance.
	cfgB, logsB := member("b")
	cB, stopB := h.startMember(cfgB, "b", handler)
	waitFor("b never owned every partition", func() bool { return len(owned("b")) == partitions })
	cfgA, _ := member("a")
	_, stopA := h.startMember(cfgA, "a", handler)
	waitFor("a and b never shared the partitions", func() bool {
		return len(owned("a")) > 0 && len(owned("a"))+len(owned("b")) == partitions
	})
	e.waitCommitted(group, endOffsets(recs))
	aBefore, bBefore := owned("a"), owned("b")
	bEvents := len(h.of("b"))
	bGens := generations(logsB)
	assignedB := func() map[int32]bool {
		out := map[int32]bool{}
		for _, p := range cB.Stats().Partitions {
			if p.Assigned {
				out[p.Partition] = true
			}
		}
		return out
	}
	bStats := assignedB()

	stopA()
	cfgA2, logsA2 := member("a")
	_, stopA2 := h.startMember(cfgA2, "a2", handler)
	// Each partition's OnAssigned comes from its own goroutine: wait for
	// as many as a had, or for b to be rebalanced.
	waitFor("the restarted a was never assigned", func() bool {
		return len(owned("a2")) >= len(aBefore) || len(h.of("b")) > bEvents
	})
	// b's sessions are ordered before a2's assignment: had a2's join
	// started a rebalance, the broker would have answered a2 only after b
	// rejoined, and b revokes (and its OnRevoked runs) before it rejoins.
	// So b's hooks and generations, read now, already show any rebalance.
	got := map[string]any{
		"a2's partitions":          keys(owned("a2")),
		"b's partitions, epochs":   owned("b"),
		"b's hooks since":          len(h.of("b")) - bEvents,
		"b's generations":          generations(logsB),
		"a2 joined b's generation": slices.Equal(generations(logsA2), bGens[len(bGens)-1:]),
		"b's assigned partitions":  assignedB(),
	}
	want := map[string]any{
		"a2's partitions":          keys(aBefore),
		"b's partitions, epochs":   bBefore,
		"b's hooks since":          0,
		"b's generations":          bGens,
		"a2 joined b's generation": true,
		"b's assigned partitions":  bStats,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("after a's restart (-want +got):\n%s\na2 started generations %v", diff, generations(logsA2))
	}

	more := e.produce(300, keyMod(30))
	all := append(slices.Clone(recs), more...)
	e.waitCommitted(group, endOffsets(all))
	for _, r := range more {
		if _, ok := handled.Load([2]int64{int64(r.Partition), r.Offset}); !ok {
			t.Errorf("p%d@%d produced after the rejoin was never handled", r.Partition, r.Offset)
		}
	}
	if later := h.of("b")[bEvents:]; len(later) > 0 {
		t.Errorf("b saw hooks after a rejoined, want none: %+v", later)
	}
	stopA2()
	stopB()
	h.checkSequences(t, group, e.topic)
}

// keys returns m's keys in order.
func keys[V any](m map[int32]V) []int32 {
	return slices.Sorted(maps.Keys(m))
}
