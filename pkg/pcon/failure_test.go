package pcon_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/loopers/commerce-pipeline/pkg/pcon"
)

// observeCommits checks every offset commit the broker receives for group.
func (e *env) observeCommits(group string, chk *orderChecker) *kfake.FaultHandle {
	return e.cluster.Fault(kfake.Fault{
		Keys: []kmsg.Key{kmsg.OffsetCommit}, Group: group, Count: -1, Observe: true,
		When: func(req kmsg.Request) bool {
			for _, tp := range req.(*kmsg.OffsetCommitRequest).Topics {
				if tp.Topic != topic {
					continue
				}
				for _, p := range tp.Partitions {
					chk.checkCommit(p.Partition, p.Offset)
				}
			}
			return true
		},
	})
}

func TestRebalanceStorm(t *testing.T) {
	t.Parallel()
	forEachEngineMode(t, testRebalanceStorm)
}

func testRebalanceStorm(t *testing.T, mode func(*pcon.Consumer)) {
	e := newEnv(t)
	recs := e.produce(100_000, keyMod(1000))
	chk := newOrderChecker(recs)
	const group = "storm"
	commits := e.observeCommits(group, chk)
	handler := pcon.RecordHandler(func(ctx context.Context, r *pcon.Record) error {
		chk.begin(r)
		if rand.N(4) == 0 {
			time.Sleep(rand.N(200 * time.Microsecond))
		}
		chk.end(r)
		return nil
	})
	cfg := e.config(group)
	cfg.MaxInFlight = 300
	members := storm(24, func() time.Duration { return 50*time.Millisecond + rand.N(150*time.Millisecond) },
		func() func() { _, stop := start(t, cfg, handler, mode); return stop }, nil)
	handledDuringStorm := chk.completed()
	t.Logf("%d of %d records completed when the storm ended", handledDuringStorm, len(recs))
	e.waitCommitted(group, endOffsets(recs))
	members.stop()
	if commits.Hits() == 0 {
		t.Error("no commits observed")
	}
	checkClean(t, chk)
}

// members are up to three consumers of one group; nil slots are not
// running.
type members [3]func()

func (m *members) stop() {
	for i, stop := range m {
		if stop != nil {
			stop()
			m[i] = nil
		}
	}
}

// storm starts one member, then makes changes joins or leaves, a gap()
// apart, always keeping at least one member; before each change it calls
// each (if not nil). It returns the members left running.
func storm(changes int, gap func() time.Duration, join func() func(), each func()) *members {
	var ms members
	ms[0] = join()
	for range changes {
		time.Sleep(gap())
		if each != nil {
			each()
		}
		var live, idle []int
		for i, m := range ms {
			if m != nil {
				live = append(live, i)
			} else {
				idle = append(idle, i)
			}
		}
		if len(idle) > 0 && (len(live) == 1 || rand.N(2) == 0) {
			ms[idle[rand.N(len(idle))]] = join()
		} else {
			i := live[rand.N(len(live))]
			ms[i]()
			ms[i] = nil
		}
	}
	return &ms
}

// dltRecords reads n records from the dead-letter topic.
func (e *env) dltRecords(n int) []*kgo.Record {
	e.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.addrs...), kgo.ConsumeTopics(topic+".DLT"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			e.t.Fatalf("read %d dead letters, want %d", len(out), n)
		}
		out = append(out, fs.Records()...)
	}
	return out
}

func headerMap(r *kgo.Record) map[string]string {
	m := map[string]string{}
	for _, h := range r.Headers {
		m[h.Key] = string(h.Value)
	}
	return m
}

type poison struct {
	permanent bool
	attempts  atomic.Int32
}

func TestPoisonRecordsDeadLettered(t *testing.T) {
	t.Parallel()
	forEachEngineMode(t, testPoisonRecordsDeadLettered)
}

func testPoisonRecordsDeadLettered(t *testing.T, mode func(*pcon.Consumer)) {
	e := newEnv(t)
	recs := e.produce(3000, keyMod(50), kgo.RecordHeader{Key: "trace", Value: []byte("abc")})
	chk := newOrderChecker(recs)
	const group = "poison"
	bad := map[[2]int64]*poison{}
	for i, idx := range []int{100, 1000, 2000} {
		r := recs[idx]
		bad[[2]int64{int64(r.Partition), r.Offset}] = &poison{permanent: i == 2}
	}
	var maxDone [partitions]atomic.Int64
	cfg := e.config(group)
	cfg.MaxAttempts = 3
	cfg.Backoff = 20 * time.Millisecond
	cfg.BackoffMultiplier = 2
	c, stop := start(t, cfg, pcon.RecordHandler(func(ctx context.Context, r *pcon.Record) error {
		pz := bad[[2]int64{int64(r.Partition), r.Offset}]
		if pz == nil {
			chk.begin(r)
			chk.end(r)
			for cur := maxDone[r.Partition].Load(); r.Offset > cur && !maxDone[r.Partition].CompareAndSwap(cur, r.Offset); cur = maxDone[r.Partition].Load() {
			}
			return nil
		}
		n := pz.attempts.Add(1)
		if n == 1 {
			chk.begin(r)
			// Hold the first attempt until later records of the same
			// partition have completed: other keys must keep flowing.
			deadline := time.Now().Add(waitLong)
			for maxDone[r.Partition].Load() <= r.Offset {
				if time.Now().After(deadline) {
					chk.violate("p%d: nothing after poison offset %d completed", r.Partition, r.Offset)
					break
				}
				time.Sleep(time.Millisecond)
			}
		}
		if pz.permanent {
			chk.end(r)
			return pcon.Permanent(errors.New("poison: cannot decode"))
		}
		if n == 3 {
			chk.end(r)
		}
		return fmt.Errorf("poison attempt %d", n)
	}), mode)
	e.waitCommitted(group, endOffsets(recs))
	stats := c.Stats()
	stop()
	checkClean(t, chk)

	var dead, retried uint64
	for _, p := range stats.Partitions {
		dead += p.DeadLettered
		retried += p.Retried
	}
	if dead != 3 || retried != 4 {
		t.Errorf("dead-lettered %d retried %d, want 3 and 4", dead, retried)
	}
	byOffset := map[string]*kgo.Record{}
	for _, d := range e.dltRecords(3) {
		h := headerMap(d)
		byOffset[h[pcon.HeaderOriginalPartition]+"@"+h[pcon.HeaderOriginalOffset]] = d
	}
	for k, pz := range bad {
		d := byOffset[strconv.FormatInt(k[0], 10)+"@"+strconv.FormatInt(k[1], 10)]
		if d == nil {
			t.Errorf("p%d@%d not dead-lettered", k[0], k[1])
			continue
		}
		h := headerMap(d)
		wantAttempts := "3"
		if pz.permanent {
			wantAttempts = "1"
		}
		orig := recs[0]
		for _, r := range recs {
			if int64(r.Partition) == k[0] && r.Offset == k[1] {
				orig = r
			}
		}
		checks := map[string][2]string{
			"key":                      {string(d.Key), orig.Key},
			"trace header":             {h["trace"], "abc"},
			pcon.HeaderOriginalTopic:   {h[pcon.HeaderOriginalTopic], topic},
			pcon.HeaderConsumerGroup:   {h[pcon.HeaderConsumerGroup], group},
			pcon.HeaderAttempts:        {h[pcon.HeaderAttempts], wantAttempts},
			"error mentions poison":    {strconv.FormatBool(strings.Contains(h[pcon.HeaderError], "poison")), "true"},
			"timestamp present":        {strconv.FormatBool(h[pcon.HeaderOriginalTimestamp] != ""), "true"},
			"value preserved":          {strconv.FormatBool(len(d.Value) > 1 && d.Value[0] == 'v'), "true"},
			"dead-lettered-at present": {strconv.FormatBool(h[pcon.HeaderDeadLetteredAt] != ""), "true"},
		}
		for name, c := range checks {
			if c[0] != c[1] {
				t.Errorf("p%d@%d %s = %q, want %q", k[0], k[1], name, c[0], c[1])
			}
		}
	}
}

func TestBrokerFaults(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	recs := e.produce(20_000, keyMod(100))
	chk := newOrderChecker(recs)
	const group = "faults"
	bad := map[[2]int64]bool{}
	for _, idx := range []int{10, 5000, 15000} {
		bad[[2]int64{int64(recs[idx].Partition), recs[idx].Offset}] = true
	}
	commits := e.observeCommits(group, chk)
	faults := map[string]*kfake.FaultHandle{
		"fetch":  e.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: topic, Err: kerr.NotLeaderForPartition, Count: 5}),
		"commit": e.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Group: group, Err: kerr.UnknownServerError, Count: 5}),
		"dlt":    e.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic + ".DLT", Err: kerr.UnknownServerError, Count: 4}),
	}
	var mu sync.Mutex
	cfg := e.config(group)
	cfg.Backoff = 20 * time.Millisecond
	c, stop := start(t, cfg, pcon.RecordHandler(func(ctx context.Context, r *pcon.Record) error {
		chk.begin(r)
		jitter()
		chk.end(r)
		mu.Lock()
		defer mu.Unlock()
		if bad[[2]int64{int64(r.Partition), r.Offset}] {
			return pcon.Permanent(errors.New("poison"))
		}
		return nil
	}))
	e.waitCommitted(group, endOffsets(recs))
	stats := c.Stats()
	stop()
	checkClean(t, chk)
	for name, f := range faults {
		if f.Hits() == 0 {
			t.Errorf("fault %s never fired", name)
		}
	}
	if commits.Hits() == 0 {
		t.Error("no commits observed")
	}
	var dead, dltFailures uint64
	for _, p := range stats.Partitions {
		dead += p.DeadLettered
		dltFailures += p.DLTFailures
	}
	if dead != 3 || dltFailures == 0 {
		t.Errorf("dead-lettered %d with %d publish failures, want 3 and some", dead, dltFailures)
	}
	seen := map[string]bool{}
	for _, d := range e.dltRecords(3) {
		h := headerMap(d)
		seen[h[pcon.HeaderOriginalPartition]+"@"+h[pcon.HeaderOriginalOffset]] = true
	}
	for k := range bad {
		if !seen[fmt.Sprintf("%d@%d", k[0], k[1])] {
			t.Errorf("p%d@%d missing from the dead-letter topic", k[0], k[1])
		}
	}
}
