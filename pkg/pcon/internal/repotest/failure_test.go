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

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/loopers/commerce-pipeline/internal/kafka"
	"github.com/loopers/commerce-pipeline/internal/kafkabroker"
	"github.com/loopers/commerce-pipeline/internal/testenv"
	"github.com/loopers/commerce-pipeline/pkg/pcon"
)

// checkCommits checks the group's commits against chk until the test ends
// and returns how many it has seen. On kfake it sees every OffsetCommit
// request the broker receives. Apache Kafka has no such hook, so there it
// reads the committed offsets every few milliseconds: a commit past an
// incomplete record is caught if that record is still incomplete when read.
func (e *env) checkCommits(group string, chk *orderChecker) (seen func() int) {
	e.t.Helper()
	if e.cluster != nil {
		f := e.cluster.Fault(kfake.Fault{
			Keys: []kmsg.Key{kmsg.OffsetCommit}, Group: group, Count: -1, Observe: true,
			When: func(req kmsg.Request) bool {
				for _, tp := range req.(*kmsg.OffsetCommitRequest).Topics {
					if tp.Topic != e.topic {
						continue
					}
					for _, p := range tp.Partitions {
						chk.checkCommit(p.Partition, p.Offset)
					}
				}
				return true
			},
		})
		return func() int { return int(f.Hits()) }
	}
	admin := e.clusterAdmin()
	var n atomic.Int64
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		last := map[int32]int64{}
		for {
			select {
			case <-done:
				return
			case <-time.After(10 * time.Millisecond):
			}
			resp, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{e.topic: {0, 1, 2}})
			if err != nil {
				continue // the coordinator moving, or not there yet
			}
			for p := range int32(partitions) {
				b := resp.GetBlock(e.topic, p)
				if b == nil || b.Err != sarama.ErrNoError || b.Offset < 0 || b.Offset == last[p] {
					continue
				}
				last[p] = b.Offset
				n.Add(1)
				chk.checkCommit(p, b.Offset)
			}
		}
	}()
	e.t.Cleanup(func() {
		close(done)
		<-exited
	})
	return func() int { return int(n.Load()) }
}

// TestRebalanceStorm makes members join and leave a group on Apache Kafka
// two dozen times while 100k records flow: key order holds, nothing is
// lost, no commit read passes an incomplete record, and the group commits
// the end offsets.
func TestRebalanceStorm(t *testing.T) {
	t.Parallel()
	forEachEngineMode(t, func(t *testing.T, mode func(*pcon.Consumer)) {
		testRebalanceStorm(t, mode, newEnv(t))
	})
}

// TestRebalanceStormEveryCommit is the storm with every commit request
// checked, not only the commits read back.
func TestRebalanceStormEveryCommit(t *testing.T) {
	t.Parallel()
	testRebalanceStorm(t, func(*pcon.Consumer) {}, newFakeEnv(t, "checks every OffsetCommit request the broker receives (kfake Observe fault); Apache Kafka shows none"))
}

func testRebalanceStorm(t *testing.T, mode func(*pcon.Consumer), e *env) {
	recs := e.produce(100_000, keyMod(1000))
	chk := newOrderChecker(recs)
	group := e.group("storm")
	commits := e.checkCommits(group, chk)
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
	if commits() == 0 {
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
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.addrs...), kgo.ConsumeTopics(e.dlt()),
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
	group := e.group("poison")
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
			pcon.HeaderOriginalTopic:   {h[pcon.HeaderOriginalTopic], e.topic},
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

// TestBrokerFaults answers fetches with NOT_LEADER_FOR_PARTITION, commits
// with UNKNOWN_SERVER_ERROR and dead-letter publishes with errors, a few of
// each, while records flow. (TestBrokerRestart and
// TestDeadLetterTopicRefusesWrites show the like on Apache Kafka.)
func TestBrokerFaults(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, "answers chosen fetches, commits and produces with errors (kfake Fault), each request on its own, which no Apache Kafka setting does")
	recs := e.produce(20_000, keyMod(100))
	chk := newOrderChecker(recs)
	group := e.group("faults")
	bad := map[[2]int64]bool{}
	for _, idx := range []int{10, 5000, 15000} {
		bad[[2]int64{int64(recs[idx].Partition), recs[idx].Offset}] = true
	}
	commits := e.checkCommits(group, chk)
	faults := map[string]*kfake.FaultHandle{
		"fetch":  e.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: e.topic, Err: kerr.NotLeaderForPartition, Count: 5}),
		"commit": e.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Group: group, Err: kerr.UnknownServerError, Count: 5}),
		"dlt":    e.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: e.dlt(), Err: kerr.UnknownServerError, Count: 4}),
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
	if commits() == 0 {
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

// poisonHandler completes every record, through chk, except the records
// at bad, which fail permanently and go to the dead-letter topic. A
// poison record counts as complete for chk only once markPoison says so.
type poisonHandler struct {
	chk       *orderChecker
	bad       map[[2]int64]bool
	completed atomic.Int64 // records other than the poison ones, at least once
}

func newPoisonHandler(chk *orderChecker, recs []produced, idx ...int) *poisonHandler {
	ph := &poisonHandler{chk: chk, bad: map[[2]int64]bool{}}
	for _, i := range idx {
		ph.bad[[2]int64{int64(recs[i].Partition), recs[i].Offset}] = true
	}
	return ph
}

func (ph *poisonHandler) handle(_ context.Context, r *pcon.Record) error {
	ph.chk.begin(r)
	jitter()
	if ph.bad[[2]int64{int64(r.Partition), r.Offset}] {
		return pcon.Permanent(errors.New("poison"))
	}
	if !ph.chk.done[r.Partition][r.Offset].Load() {
		ph.completed.Add(1)
	}
	ph.chk.end(r)
	return nil
}

// markPoison counts the poison records as complete: from the moment their
// dead letters can be published.
func (ph *poisonHandler) markPoison() {
	for k := range ph.bad {
		ph.chk.done[k[0]][k[1]].Store(true)
	}
}

// checkDeadLetters checks that every poison record reached the dead-letter
// topic (at least once: a redelivery may publish it again).
func (ph *poisonHandler) checkDeadLetters(t *testing.T, e *env, stats pcon.Stats) {
	t.Helper()
	if dead := sumStats(stats, func(p pcon.PartitionStats) uint64 { return p.DeadLettered }); dead < uint64(len(ph.bad)) {
		t.Errorf("dead-lettered %d records, want at least %d", dead, len(ph.bad))
	}
	seen := map[string]bool{}
	for _, d := range e.dltRecords(len(ph.bad)) {
		h := headerMap(d)
		seen[h[pcon.HeaderOriginalPartition]+"@"+h[pcon.HeaderOriginalOffset]] = true
	}
	for k := range ph.bad {
		if !seen[fmt.Sprintf("%d@%d", k[0], k[1])] {
			t.Errorf("p%d@%d missing from the dead-letter topic", k[0], k[1])
		}
	}
}

// TestDeadLetterTopicRefusesWrites: the dead-letter topic takes no record
// batch over 128 bytes (max.message.bytes) and a dead letter, with pcon's
// headers, is larger, so Apache Kafka answers every publish with
// MESSAGE_TOO_LARGE. The poison records stay incomplete, no commit passes
// them, the other keys go on; once the topic takes them the dead letters
// land and the group commits to the end. (min.insync.replicas above the
// replication factor would not do: Kafka 4.3 accepts acks=all writes to a
// topic of one replica that asks for two.)
func TestDeadLetterTopicRefusesWrites(t *testing.T) {
	t.Parallel()
	k := testenv.Kafka(t, "t")
	e := &env{t: t, addrs: k.Brokers, prefix: k.Prefix, topic: k.Topic("t")}
	k.CreateTopics(t, kafka.TopicSpec{Name: e.dlt(), Partitions: partitions, Replication: 1,
		Config: map[string]string{"max.message.bytes": "128"}})
	recs := e.produce(3000, keyMod(50))
	chk := newOrderChecker(recs)
	ph := newPoisonHandler(chk, recs, 100, 1500, 2900)
	group := e.group("dlt-refused")
	commits := e.checkCommits(group, chk)
	c, stop := start(t, e.config(group), pcon.RecordHandler(ph.handle))
	// Everything else completes while the dead letters are refused, again
	// and again.
	failures := func() uint64 { return sumStats(c.Stats(), func(p pcon.PartitionStats) uint64 { return p.DLTFailures }) }
	waitUntil(t, func() bool {
		return ph.completed.Load() >= int64(len(recs)-3*50) && failures() >= 2*uint64(len(ph.bad))
	}, func() string {
		return fmt.Sprintf("completed %d of %d, %d refused publishes: %+v", ph.completed.Load(), len(recs), failures(), c.Stats())
	})
	blocked := map[int32]int64{} // partition -> lowest poison offset
	for k := range ph.bad {
		if cur, ok := blocked[int32(k[0])]; !ok || k[1] < cur {
			blocked[int32(k[0])] = k[1]
		}
	}
	for p, c := range e.committed(group) {
		if off, ok := blocked[p]; ok && c.Offset > off {
			t.Errorf("p%d committed %d past the undelivered dead letter at %d", p, c.Offset, off)
		}
	}
	if dead := sumStats(c.Stats(), func(p pcon.PartitionStats) uint64 { return p.DeadLettered }); dead != 0 {
		t.Errorf("%d records dead-lettered while the topic refused writes", dead)
	}

	ph.markPoison()
	err := e.clusterAdmin().IncrementalAlterConfig(sarama.TopicResource, e.dlt(), map[string]sarama.IncrementalAlterConfigsEntry{
		"max.message.bytes": {Operation: sarama.IncrementalAlterConfigsOperationDelete}, // back to the broker's 1 MiB
	}, false)
	if err != nil {
		t.Fatal(err)
	}
	e.waitCommitted(group, endOffsets(recs))
	stats := c.Stats()
	stop()
	checkClean(t, chk)
	if commits() == 0 {
		t.Error("no commits observed")
	}
	ph.checkDeadLetters(t, e, stats)
}

// TestBrokerRestart runs a consumer on a broker of the test's own while the
// broker is killed (SIGKILL) and started again, then frozen (SIGSTOP) for
// longer than the group's session timeout and resumed. Fetches, commits
// and dead-letter publishes fail meanwhile. Key order holds, no commit
// passes an incomplete record, and everything is handled and committed.
func TestBrokerRestart(t *testing.T) {
	t.Parallel()
	cluster := testenv.KafkaCluster(t, kafkabroker.Options{Props: map[string]string{
		"offsets.topic.num.partitions": "1",
		// A node restarted after SIGKILL answers only once its broker
		// session is settled with its controller: some 10 s with the
		// default 9 s session, a few with this one.
		"broker.session.timeout.ms":    "2000",
		"broker.heartbeat.interval.ms": "500",
	}})
	node := cluster.Node(1)
	e := newEnvOn(t, cluster)
	const n = 30_000
	recs := e.produce(n, keyMod(100))
	chk := newOrderChecker(recs)
	ph := newPoisonHandler(chk, recs, 10, n/2, n-10)
	ph.markPoison() // publishes fail only while the broker is away
	group := e.group("restart")
	commits := e.checkCommits(group, chk)
	cfg := e.config(group)
	cfg.Backoff = 20 * time.Millisecond
	// The freeze below outlasts this session: the member must rejoin.
	cfg.Sarama.Consumer.Group.Session.Timeout = 2 * time.Second
	cfg.Sarama.Consumer.Group.Heartbeat.Interval = 100 * time.Millisecond
	c, stop := start(t, cfg, pcon.RecordHandler(ph.handle))
	progress := func(atLeast int64) {
		t.Helper()
		waitUntil(t, func() bool { return ph.completed.Load() >= atLeast }, func() string {
			return fmt.Sprintf("completed %d records, want %d: %+v", ph.completed.Load(), atLeast, c.Stats())
		})
	}

	progress(n / 4)
	if err := node.Kill(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := node.Start(ctx); err != nil {
		t.Fatal(err)
	}

	progress(n / 2)
	if err := node.Pause(); err != nil {
		t.Fatal(err)
	}
	// The fault's length, not a wait for an outcome: the broker comes back
	// with the member's session (2 s) expired.
	time.Sleep(3 * time.Second)
	if err := node.Resume(); err != nil {
		t.Fatal(err)
	}

	e.waitCommitted(group, endOffsets(recs))
	stats := c.Stats()
	stop()
	checkClean(t, chk)
	if commits() == 0 {
		t.Error("no commits observed")
	}
	ph.checkDeadLetters(t, e, stats)
}
