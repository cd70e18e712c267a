package pcon_test

import (
	"context"
	"fmt"
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
func (h *hookRecorder) checkSequences(t *testing.T, group string) {
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
	const group = "hooks"
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
	h.checkSequences(t, group)
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

// TestStaticMembershipRejoin: with static members "a" and "b", "a" stops
// without leaving (static members do not send LeaveGroup) and a new
// Consumer with InstanceID "a" comes back within the session timeout. It
// gets a's partitions back and "b" is not rebalanced.
func TestStaticMembershipRejoin(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const group = "static"
	var handled sync.Map
	handler := pcon.RecordHandler(func(_ context.Context, r *pcon.Record) error {
		handled.Store([2]int64{int64(r.Partition), r.Offset}, true)
		return nil
	})
	h := &hookRecorder{t: t}
	cfg := e.config(group)
	cfg.Sarama.Consumer.Group.Session.Timeout = 10 * time.Second
	cfg.Sarama.Consumer.Group.Rebalance.Timeout = 10 * time.Second
	member := func(id string) pcon.Config {
		c := cfg
		sc := *cfg.Sarama
		c.Sarama = &sc
		c.InstanceID = id
		return c
	}
	owned := func(m string) map[int32]bool {
		cur := map[int32]bool{}
		for _, x := range h.of(m) {
			cur[x.Event.Partition] = !x.Revoked
		}
		for p, ok := range cur {
			if !ok {
				delete(cur, p)
			}
		}
		return cur
	}

	recs := e.produce(300, keyMod(30))
	// "b" first, so that it leads the group: the rejoining member is then
	// a follower, the case KIP-345 serves without any rebalance.
	_, stopB := h.startMember(member("b"), "b", handler)
	deadline := time.Now().Add(waitLong)
	for len(owned("b")) != partitions {
		if time.Now().After(deadline) {
			t.Fatalf("b owns %v", owned("b"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	_, stopA := h.startMember(member("a"), "a", handler)
	for len(owned("a")) == 0 || len(owned("a"))+len(owned("b")) != partitions {
		if time.Now().After(deadline) {
			t.Fatalf("a owns %v, b owns %v", owned("a"), owned("b"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.waitCommitted(group, endOffsets(recs))
	aBefore, bBefore := owned("a"), owned("b")
	bEvents := len(h.of("b"))

	stopA()
	_, stopA2 := h.startMember(member("a"), "a2", handler)
	for len(owned("a2")) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the restarted a was never assigned (b owns %v)", owned("b"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	more := e.produce(300, keyMod(30))
	all := append(slices.Clone(recs), more...)
	e.waitCommitted(group, endOffsets(all))
	// Let a late rebalance, if any, show up in the hooks.
	time.Sleep(500 * time.Millisecond)

	if diff := cmp.Diff(aBefore, owned("a2")); diff != "" {
		t.Errorf("partitions of the rejoined a (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(bBefore, owned("b")); diff != "" {
		t.Errorf("partitions of b (-before +after):\n%s", diff)
	}
	if later := h.of("b")[bEvents:]; len(later) > 0 {
		t.Errorf("b saw hooks after a rejoined, want none: %+v", later)
	}
	for _, r := range more {
		if _, ok := handled.Load([2]int64{int64(r.Partition), r.Offset}); !ok {
			t.Errorf("p%d@%d produced after the rejoin was never handled", r.Partition, r.Offset)
		}
	}
	stopA2()
	stopB()
	h.checkSequences(t, group)
}
