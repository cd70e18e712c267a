package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/loopers/commerce-pipeline/internal/kafka"
	"github.com/loopers/commerce-pipeline/internal/kafkabroker"
	"github.com/loopers/commerce-pipeline/internal/procstat"
	"github.com/loopers/commerce-pipeline/internal/stack"
	"github.com/loopers/commerce-pipeline/internal/testenv"
	"github.com/loopers/commerce-pipeline/pkg/events"
	"github.com/loopers/commerce-pipeline/pkg/pcon"
)

// TestThreeBrokerFaults is the soak on three brokers: the three binaries as
// they ship (the relay's acks=all idempotent producer, its lease, poll and
// retry intervals, the consumers' session: ShippedDefaults) on a cluster of
// three combined broker/controller nodes, every topic with three replicas,
// min.insync.replicas=2 and message.timestamp.type=LogAppendTime, under the
// mixed API load (likes, unlikes, views, orders, payments) at SOAK_RATE
// actions a second (1,000), with product-consumers SIGKILLed and restarted
// every 2 s and the leading relay SIGKILLed once. The same run is made four
// times, each on a pipeline of its own (database, topic prefix, processes)
// on the one cluster:
//
//  1. no broker fault;
//  2. a broker SIGKILLed, then restarted;
//  3. a broker shut down cleanly (SIGTERM: the step of a rolling restart),
//     then restarted;
//  4. the active KRaft controller (as DescribeQuorum names it) SIGKILLed,
//     then restarted.
//
// Every run must end with every outbox event in Kafka (none lost, none in
// outbox_failed or a dead-letter topic), the first copy of each event of a
// key in sequence order, and product_metrics equal to the oracle of the
// domain tables: these are asserted strictly. The run measures, and logs
// as a table (soakTable), each event's delay from its commit to its append
// (soak_test.go says how both ends are read), separately for the partitions
// the fault touched (those the faulted node led when it was hit) and the
// others; the time from a touched partition having a leader again to its
// held rows appended; and the time from the last request to the aggregates
// exact.
//
// The latency targets (missedTargets) are asserted only with
// SOAK_ASSERT_TARGETS=1: the relay today stops every partition when one
// send is slow (its ordered retry holds back every later row for the send
// timeout plus the retry interval), so they fail until the relay, being
// rewritten to meet them, holds back only the failing partition. Until then
// they are logged, and the table is what to compare before and after.
//
// Sizes: SOAK_RATE, SOAK_SECONDS (each run's load, 30), SOAK_DOWN_SECONDS
// (how long a faulted node stays down, 8), SOAK_WORKERS (the load's
// concurrent clients, 48); the defaults keep the test within about five
// minutes on two cores.
//
//nolint:paralleltest // starts three broker JVMs and the service processes under 1,000 actions a second and measures latencies: other tests' processes on the 2 shared cores would skew them and theirs
func TestThreeBrokerFaults(t *testing.T) {
	cfg := loadSoakConfig()
	c := testenv.KafkaCluster(t, kafkabroker.Options{Nodes: 3})
	keepBrokerLogs(t, c)
	var results []*soakResult
	for i, fault := range soakFaults {
		t.Run(fault.name, func(t *testing.T) {
			results = append(results, soak(t, c, cfg, i, fault))
		})
	}
	t.Log(soakTable(cfg, results))
	if cfg.assertTargets {
		for _, r := range results {
			for _, miss := range r.missedTargets(cfg) {
				t.Errorf("%s: %s", r.fault, miss)
			}
		}
	}
}

// soakConfig sizes the soak.
type soakConfig struct {
	rate, workers int
	load, down    time.Duration
	assertTargets bool
}

func loadSoakConfig() soakConfig {
	return soakConfig{
		rate: envInt("SOAK_RATE", 1000), workers: envInt("SOAK_WORKERS", 48),
		load: time.Duration(envInt("SOAK_SECONDS", 30)) * time.Second,
		down: time.Duration(envInt("SOAK_DOWN_SECONDS", 8)) * time.Second,
		// The opt-in to the latency targets: see TestThreeBrokerFaults.
		assertTargets: os.Getenv("SOAK_ASSERT_TARGETS") == "1",
	}
}

// brokerFault is one run's broker fault: which node it hits and how.
type brokerFault struct {
	name string
	// pick chooses the node among the running ones (nil: no fault).
	pick func(t *testing.T, c *kafkabroker.Cluster) *kafkabroker.Node
	// signal is how: SIGKILL (Kill) or SIGTERM (Stop, which waits for the
	// controlled shutdown to end).
	signal string
}

var soakFaults = []brokerFault{
	{name: "no broker fault"},
	{name: "broker SIGKILL", pick: brokerNotController, signal: "SIGKILL"},
	{name: "broker SIGTERM", pick: brokerNotController, signal: "SIGTERM"},
	{name: "controller SIGKILL", pick: controllerNode, signal: "SIGKILL"},
}

// brokerNotController picks the lowest node that is not the active
// controller, so that the broker faults hit a broker alone and the
// controller's run stays the only one that moves the quorum.
func brokerNotController(t *testing.T, c *kafkabroker.Cluster) *kafkabroker.Node {
	t.Helper()
	ctl := controllerNode(t, c)
	for _, n := range c.Nodes() {
		if n != ctl {
			return n
		}
	}
	t.Fatal("no node besides the controller")
	return nil
}

func controllerNode(t *testing.T, c *kafkabroker.Cluster) *kafkabroker.Node {
	t.Helper()
	id, err := activeController(liveAddrs(c))
	if err != nil || id < 1 || int(id) > len(c.Nodes()) {
		t.Fatalf("find the active controller: node %d, %v", id, err)
	}
	return c.Node(int(id))
}

// soak makes one run: a pipeline of its own on c, the load for cfg.load
// with the consumers killed every 2 s, the fault at a sixth of it (the node
// started again cfg.down later), the leading relay killed at three fifths;
// then the checks and the measurements.
func soak(t *testing.T, c *kafkabroker.Cluster, cfg soakConfig, run int, fault brokerFault) *soakResult {
	t.Helper()
	s := newSystemOn(t, kafkaSetup{
		Cluster: c, Prefix: fmt.Sprintf("soak%d.", run+1), Replication: 3, ShippedDefaults: true,
		Config: map[string]string{"min.insync.replicas": "2", "message.timestamp.type": "LogAppendTime"},
	})
	checkLogAppendTime(t, s)
	relayA, adminA := s.startRelay("relay-a")
	relayB, adminB := s.startRelay("relay-b")
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// 20 products: with fewer, a payment queues behind the others on its
	// product's row lock past commerce-api's 3 s statement timeout (503)
	// when the 2 cores are busy.
	l := newLoad(t, s, 20, 50)
	clock := watchCommits(t, s.dbURL)
	stopKills := killConsumersEvery(s, 2*time.Second)
	t.Cleanup(stopKills)

	start := time.Now()
	res := &soakResult{fault: fault.name, node: "–", start: start}
	stalled, stallErr := procstat.CPUStalled()
	stopLoad := l.run(cfg.rate, cfg.workers)
	t.Cleanup(stopLoad) // a failed test stops its load before its processes
	var hit *faultHit
	if fault.pick != nil {
		sleepUntil(start.Add(cfg.load / 6))
		hit = injectFault(t, s, c, fault)
		res.node = strconv.Itoa(hit.node.ID())
		// Beside the run: a node slow to start must not push the relay's
		// kill or the load's end back.
		go hit.restart(t, hit.at.Add(cfg.down))
		t.Cleanup(func() { <-hit.started }) // it logs: not after the test ended
	}
	sleepUntil(start.Add(cfg.load * 3 / 5))
	rk := killLeadingRelay(t, conn, map[string]*stack.Proc{adminA: relayA, adminB: relayB})
	sleepUntil(start.Add(cfg.load))
	stopLoad()
	last := time.Now()
	stopKills() // a consumers process keeps running
	res.actions = l.actions.Load()
	res.rate = float64(res.actions) / last.Sub(start).Seconds()
	res.pressure = math.NaN()
	if stalledEnd, err := procstat.CPUStalled(); err == nil && stallErr == nil {
		res.pressure = (stalledEnd - stalled).Seconds() / last.Sub(start).Seconds()
	}
	t.Logf("%s: %d actions in %.1f s (%.0f/s, %d wanted), CPU pressure %s", fault.name, res.actions, last.Sub(start).Seconds(), res.rate, cfg.rate, pressure(res.pressure))
	if t.Failed() {
		t.FailNow() // the load's requests failed: what follows would only repeat it
	}

	want := l.oracle(t, conn)
	got, exact := waitExact(t, conn, want, 3*time.Minute)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("product_metrics differ from the oracle 3 minutes after the last of %d actions (-want +got):\n%s", res.actions, diff)
	}
	res.exact = exact.Sub(last)
	res.relay = rk.wait(t)
	if hit != nil {
		res.hit = hit.wait(t)
		res.inSync = waitWhole(t, c, hit.restarted)
	}
	awaitPublished(t, conn, 2*time.Minute)
	stamps := clock.stop(t)

	var failed int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM outbox_failed`).Scan(&failed); err != nil {
		t.Fatal(err)
	}
	if failed != 0 {
		t.Errorf("%d events in outbox_failed: the relay gave up on them, they are not in Kafka", failed)
	}
	first := checkKafka(t, conn, s, c, l.products)
	res.measure(t, conn, stamps, first, hit)
	t.Log(res.detail())
	return res
}

// checkLogAppendTime fails the test unless every event topic of s has its
// records stamped with their append: the soak's delays are read from it.
func checkLogAppendTime(t *testing.T, s *system) {
	t.Helper()
	admin, err := sarama.NewClusterAdmin(s.kafka.Brokers, adminConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	var resources []*sarama.ConfigResource
	for _, name := range events.NewRegistry().Topics() {
		resources = append(resources, &sarama.ConfigResource{Type: sarama.TopicResource, Name: s.topic(name), ConfigNames: []string{"message.timestamp.type"}})
	}
	results, err := admin.DescribeConfigs(resources, sarama.DescribeConfigsOptions{})
	if err != nil {
		t.Fatalf("describe the topics' configuration: %v", err)
	}
	if len(results) != len(resources) {
		t.Fatalf("described %d topics, want %d", len(results), len(resources))
	}
	for _, r := range results {
		if r.ErrorCode != sarama.ErrNoError || len(r.Configs) != 1 || r.Configs[0].Value != "LogAppendTime" {
			t.Fatalf("%s: message.timestamp.type %+v (%v %s), want LogAppendTime", r.Name, r.Configs, r.ErrorCode, r.ErrorMsg)
		}
	}
}

// sleepUntil sleeps until at (not at all when it passed).
func sleepUntil(at time.Time) { time.Sleep(time.Until(at)) }

// killConsumersEvery SIGKILLs product-consumers every period and starts it
// again at once (its static group membership lets the new process take
// the old one's partitions without waiting out a session), until the
// returned function is called; a process is left running.
func killConsumersEvery(s *system, period time.Duration) (stop func()) {
	p := s.startConsumers()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			p.Kill()
			p = s.startConsumers()
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { cancel(); <-done }) }
}

// relayKill is the SIGKILL of the leading relay and the standby's takeover.
type relayKill struct {
	at       time.Time
	done     chan struct{}
	takeover time.Duration // from the kill until the standby reports leading
	caughtUp time.Time     // when the cursor passed every row committed by the takeover
	err      error
}

// killLeadingRelay SIGKILLs whichever of relays (by admin address) leads
// and watches the other take the lease and catch up.
func killLeadingRelay(t *testing.T, conn *pgx.Conn, relays map[string]*stack.Proc) *relayKill {
	t.Helper()
	var leader, standby string
	for admin := range relays {
		if isLeader(t.Context(), admin) {
			leader = admin
		} else {
			standby = admin
		}
	}
	if leader == "" || standby == "" {
		t.Fatalf("relays %v: want one leading, one standing by", slices.Collect(maps.Keys(relays)))
	}
	rk := &relayKill{at: time.Now(), done: make(chan struct{})}
	relays[leader].Kill()
	t.Logf("relay %s killed at %s", leader, rk.at.Format(logTime))
	// Its own connection: the test's is busy with the run's other queries.
	watch, err := pgx.Connect(context.Background(), conn.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(rk.done)
		defer watch.Close(context.Background())
		for !isLeader(t.Context(), standby) {
			if time.Since(rk.at) > time.Minute {
				rk.err = fmt.Errorf("the standby relay %s did not lead within a minute of the kill", standby)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		rk.takeover = time.Since(rk.at)
		mark, err := maxOutboxID(watch)
		for err == nil {
			var cursor int64
			var done bool
			if cursor, done, err = publishedThrough(watch, mark); err == nil && done {
				rk.caughtUp = time.Now()
				return
			}
			if time.Since(rk.at) > 3*time.Minute {
				err = fmt.Errorf("the cursor stands at %d, 3 minutes after the relay's kill, below %d", cursor, mark)
			}
			time.Sleep(100 * time.Millisecond)
		}
		rk.err = err
	}()
	return rk
}

// wait returns the kill's window: from the kill until the standby caught
// up with what was committed when it took over.
func (rk *relayKill) wait(t *testing.T) relayWindow {
	t.Helper()
	<-rk.done
	if rk.err != nil {
		t.Fatal(rk.err)
	}
	return relayWindow{at: rk.at, caughtUp: rk.caughtUp, takeover: rk.takeover}
}

// maxOutboxID is the highest outbox id: every event committed so far is at
// or below it.
func maxOutboxID(conn *pgx.Conn) (int64, error) {
	var id int64
	if err := conn.QueryRow(context.Background(), `SELECT coalesce(max(id), 0) FROM outbox`).Scan(&id); err != nil {
		return 0, fmt.Errorf("max outbox id: %w", err)
	}
	return id, nil
}

// publishedThrough reports whether the relay has handled every outbox row
// up to mark: its cursor passed them and none of them is held (passed
// unpublished, outbox_held); it returns the cursor too.
func publishedThrough(conn *pgx.Conn, mark int64) (cursor int64, done bool, err error) {
	err = conn.QueryRow(context.Background(), `
		SELECT c.last_processed_id, c.last_processed_id >= $1 AND NOT EXISTS (SELECT 1 FROM outbox_held WHERE outbox_id <= $1)
		FROM outbox_cursor c`, mark).Scan(&cursor, &done)
	if err != nil {
		return 0, false, fmt.Errorf("read the relay's progress: %w", err)
	}
	return cursor, done, nil
}

// awaitPublished waits until the relay has handled every outbox row.
func awaitPublished(t *testing.T, conn *pgx.Conn, limit time.Duration) {
	t.Helper()
	mark, err := maxOutboxID(conn)
	if err != nil {
		t.Fatal(err)
	}
	var cursor int64
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var done bool
		if cursor, done, err = publishedThrough(conn, mark); err != nil {
			t.Fatal(err)
		}
		if done {
			return
		}
	}
	t.Fatalf("the relay's cursor stands at %d, %s after the load, below the last outbox id %d or with rows held", cursor, limit, mark)
}

// waitExact polls product_metrics every 100 ms until it equals want or
// limit passed; it returns the last reading and when it was taken.
func waitExact(t *testing.T, conn *pgx.Conn, want map[int64]aggregate, limit time.Duration) (map[int64]aggregate, time.Time) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		at := time.Now()
		got := readMetrics(t, conn, want)
		if cmp.Equal(want, got) || time.Now().After(deadline) {
			return got, at
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// faultHit is a broker fault under way: the node, when it was hit, the
// partitions it led then (by the pipeline's topic name) with their leader
// epochs, and when each had a leader again.
type faultHit struct {
	node      *kafkabroker.Node
	signal    string
	at        time.Time
	prefix    string // of the pipeline's topics on the cluster
	epochs    map[topicPartition]int32
	restarted time.Time     // the node's start after the fault
	answered  time.Duration // from that start until it answered
	started   chan struct{} // closed when the restart ended
	startErr  error
	done      chan struct{} // closed when the watch ended
	back      map[topicPartition]time.Time
	err       error
}

// topicPartition names a partition by the pipeline's topic name.
type topicPartition struct {
	topic     string
	partition int32
}

// injectFault hits the node fault picks, after noting the partitions of
// s's event topics it leads, and watches them get a leader again.
func injectFault(t *testing.T, s *system, c *kafkabroker.Cluster, fault brokerFault) *faultHit {
	t.Helper()
	n := fault.pick(t, c)
	md, err := liveMetadata(c)
	if err != nil {
		t.Fatal(err)
	}
	h := &faultHit{node: n, signal: fault.signal, prefix: s.kafka.Prefix, epochs: map[topicPartition]int32{}, back: map[topicPartition]time.Time{}, started: make(chan struct{}), done: make(chan struct{})}
	// The event topics only: their dead-letter and parked topics get no
	// records in the soak.
	eventTopics := events.NewRegistry().Topics()
	for _, topic := range md.Topics {
		name, ok := strings.CutPrefix(topic.Name, s.kafka.Prefix)
		if !ok || !slices.Contains(eventTopics, name) {
			continue
		}
		for _, p := range topic.Partitions {
			if int(p.Leader) == n.ID() {
				h.epochs[topicPartition{name, p.ID}] = p.LeaderEpoch
			}
		}
	}
	if len(h.epochs) == 0 {
		t.Fatalf("node %d leads no partition of the pipeline's event topics", n.ID())
	}
	h.at = time.Now()
	go h.watch(c)
	switch fault.signal {
	case "SIGKILL":
		err = n.Kill()
	case "SIGTERM":
		err = n.Stop() // returns once the controlled shutdown ended
	default:
		err = fmt.Errorf("no such fault signal %q", fault.signal)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: node %d, leading %d partitions of the pipeline's event topics, hit at %s, down at %s", fault.signal, n.ID(), len(h.epochs), h.at.Format(logTime), time.Now().Format(logTime))
	return h
}

// watch asks the running nodes for the metadata every 100 ms until every
// partition the node led has a leader of a later epoch: a new leader, or
// the node again after its restart.
func (h *faultHit) watch(c *kafkabroker.Cluster) {
	defer close(h.done)
	for time.Since(h.at) < 2*time.Minute {
		for _, md := range everyNodesMetadata(c) {
			at := time.Now()
			for _, topic := range md.Topics {
				for _, p := range topic.Partitions {
					for tp, epoch := range h.epochs {
						if _, seen := h.back[tp]; !seen && topic.Name == h.prefix+tp.topic && p.ID == tp.partition && p.Leader >= 0 && p.LeaderEpoch > epoch {
							h.back[tp] = at
						}
					}
				}
			}
		}
		if len(h.back) == len(h.epochs) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	h.err = fmt.Errorf("node %d's partitions without a new leader 2 minutes after the fault: %d of %d", h.node.ID(), len(h.epochs)-len(h.back), len(h.epochs))
}

// everyNodesMetadata asks each running node at once for its own view: a
// node that shuts down may answer late or not at all, and a newer leader
// epoch seen by any node is the cluster's.
func everyNodesMetadata(c *kafkabroker.Cluster) []*sarama.MetadataResponse {
	addrs := liveAddrs(c)
	out := make([]*sarama.MetadataResponse, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		wg.Go(func() {
			if md, err := metadataFrom(addr); err == nil {
				out[i] = md
			}
		})
	}
	wg.Wait()
	return slices.DeleteFunc(out, func(md *sarama.MetadataResponse) bool { return md == nil })
}

// restart starts the node again at at and waits until it answers; wait
// reports its failure.
func (h *faultHit) restart(t *testing.T, at time.Time) {
	defer close(h.started)
	sleepUntil(at)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	h.restarted = time.Now()
	if err := h.node.Start(ctx); err != nil {
		h.startErr = fmt.Errorf("restart node %d: %w", h.node.ID(), err)
		return
	}
	h.answered = time.Since(h.restarted)
	t.Logf("node %d started again at %s, answers after %.1f s", h.node.ID(), h.restarted.Format(logTime), h.answered.Seconds())
}

// wait returns the fault once its node was started again and its
// partitions have a leader again.
func (h *faultHit) wait(t *testing.T) *faultHit {
	t.Helper()
	<-h.started
	<-h.done
	if err := errors.Join(h.startErr, h.err); err != nil {
		t.Fatal(err)
	}
	return h
}

// waitWhole waits until the metadata lists all the nodes and every
// partition of every topic has all its replicas in sync, and returns how
// long that took from since.
func waitWhole(t *testing.T, c *kafkabroker.Cluster, since time.Time) time.Duration {
	t.Helper()
	var last string
	for time.Since(since) < 3*time.Minute {
		md, err := liveMetadata(c)
		if err == nil {
			last = outOfSync(md, len(c.Nodes()))
			if last == "" {
				return time.Since(since)
			}
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the cluster is not whole 3 minutes after the node started again: %s", last)
	return 0
}

// load is the traffic of the soak: users liking, unliking, viewing,
// ordering and paying for a handful of products, the mix of TestScenario,
// paced, for as long as a run takes.
type load struct {
	s        *system
	products []int64
	users    int
	views    []atomic.Int64 // successful product page reads, by product index
	actions  atomic.Int64
}

// newLoad creates n products (the first sells out soon, so stock.depleted
// flows too) for users.
func newLoad(t *testing.T, s *system, n, users int) *load {
	t.Helper()
	l := &load{s: s, users: users, views: make([]atomic.Int64, n)}
	for i := range n {
		stock := 1_000_000
		if i == 0 {
			stock = 30
		}
		var p struct{ ID int64 }
		if st := s.call("POST", "/products", "", map[string]any{"name": fmt.Sprintf("product %d", i), "price": 1000 + 100*i, "stock": stock}, &p); st != http.StatusCreated {
			t.Fatalf("create product: status %d", st)
		}
		l.products = append(l.products, p.ID)
	}
	return l
}

// run sends up to rate actions a second from workers concurrent clients
// (fewer when the API answers too slowly for them: a tick no worker takes is
// dropped) until the returned function is called; it returns once they
// stopped and may be called again.
func (l *load) run(rate, workers int) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	pace := time.NewTicker(time.Second / time.Duration(rate))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(7, uint64(w)))
			for {
				select {
				case <-ctx.Done():
					return
				case <-pace.C:
				}
				l.actions.Add(1)
				l.act(rng)
			}
		})
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			pace.Stop()
		})
	}
}

// act is one user action.
func (l *load) act(rng *rand.Rand) {
	s := l.s
	user := "user-" + strconv.Itoa(rng.IntN(l.users))
	pi := rng.IntN(len(l.products))
	pid := strconv.FormatInt(l.products[pi], 10)
	switch r := rng.IntN(100); {
	case r < 30:
		s.expect(s.call("POST", "/products/"+pid+"/likes", user, nil, nil), http.StatusOK)
	case r < 45:
		s.expect(s.call("DELETE", "/products/"+pid+"/likes", user, nil, nil), http.StatusOK)
	case r < 75:
		if s.expect(s.call("GET", "/products/"+pid, user, nil, nil), http.StatusOK) {
			l.views[pi].Add(1)
		}
	default:
		items := []map[string]any{{"productId": l.products[pi], "quantity": 1 + rng.IntN(3)}}
		if rng.IntN(3) == 0 {
			items = append(items, map[string]any{"productId": l.products[(pi+1+rng.IntN(len(l.products)-1))%len(l.products)], "quantity": 1})
		}
		var order struct{ ID int64 }
		if !s.expect(s.call("POST", "/orders", user, map[string]any{"items": items}, &order), http.StatusCreated) {
			return
		}
		// Paying may find a sold-out product: 409, nothing changes.
		s.expect(s.call("POST", "/orders/"+strconv.FormatInt(order.ID, 10)+"/payments", user, nil, nil), http.StatusOK, http.StatusConflict)
	}
}

// oracle computes what product_metrics must hold: likes and paid orders
// from the domain tables, views as made.
func (l *load) oracle(t *testing.T, conn *pgx.Conn) map[int64]aggregate {
	t.Helper()
	ctx := context.Background()
	want := map[int64]aggregate{}
	for i, id := range l.products {
		want[id] = aggregate{Views: l.views[i].Load()}
	}
	rows, _ := conn.Query(ctx, `SELECT product_id, count(*), 0::bigint FROM likes GROUP BY product_id`)
	scanInto(t, rows, func(id, n, _ int64) { a := want[id]; a.Likes = n; want[id] = a })
	rows, _ = conn.Query(ctx, `
		SELECT oi.product_id, sum(oi.quantity)::bigint, sum(oi.quantity * oi.unit_price)::bigint
		FROM order_items oi JOIN orders o ON o.id = oi.order_id
		WHERE o.status = 'PAID' GROUP BY oi.product_id`)
	scanInto(t, rows, func(id, q, amount int64) { a := want[id]; a.Sales, a.Amount = q, amount; want[id] = a })
	return want
}

// logTime is how the test logs the moments of its faults, to be found in
// the services' and brokers' logs (UTC there).
const logTime = "15:04:05.000Z07:00"

// outOfSync describes what keeps the cluster from being whole, "" when
// nothing does.
func outOfSync(md *sarama.MetadataResponse, nodes int) string {
	if len(md.Brokers) != nodes {
		return fmt.Sprintf("%d brokers listed", len(md.Brokers))
	}
	for _, topic := range md.Topics {
		if !errors.Is(topic.Err, sarama.ErrNoError) {
			return fmt.Sprintf("%s: %v", topic.Name, topic.Err)
		}
		for _, p := range topic.Partitions {
			if p.Leader < 0 || len(p.Isr) != len(p.Replicas) {
				return fmt.Sprintf("%s/%d: leader %d, ISR %v of %v", topic.Name, p.ID, p.Leader, p.Isr, p.Replicas)
			}
		}
	}
	return ""
}

// liveAddrs are the addresses of c's nodes that are running.
func liveAddrs(c *kafkabroker.Cluster) []string {
	var out []string
	for _, n := range c.Nodes() {
		if n.Running() {
			out = append(out, n.Addr(kafkabroker.PlainListener))
		}
	}
	return out
}

// liveMetadata asks the running nodes, one at a time, for the metadata of
// every topic, and returns the first answer. A stopped node is never asked:
// it would answer nothing until its read timeout.
func liveMetadata(c *kafkabroker.Cluster) (*sarama.MetadataResponse, error) {
	var errs []error
	for _, addr := range liveAddrs(c) {
		md, err := metadataFrom(addr)
		if err == nil {
			return md, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("no node answered: %w", errors.Join(errs...))
}

// metadataFrom asks the node at addr alone: its own view of the cluster.
func metadataFrom(addr string) (*sarama.MetadataResponse, error) {
	cfg := adminConfig()
	cfg.Net.DialTimeout, cfg.Net.ReadTimeout, cfg.Net.WriteTimeout = time.Second, 3*time.Second, 3*time.Second
	b := sarama.NewBroker(addr)
	if err := b.Open(cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", addr, err)
	}
	defer b.Close()
	md, err := b.GetMetadata(sarama.NewMetadataRequest(kafka.Version, nil))
	if err != nil {
		return nil, fmt.Errorf("%s: metadata: %w", addr, err)
	}
	return md, nil
}

// activeController asks the nodes at addrs which node leads the KRaft
// quorum (DescribeQuorum on __cluster_metadata-0; a broker forwards it to
// the controllers).
func activeController(addrs []string) (int32, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DialTimeout(time.Second), kgo.RequestTimeoutOverhead(3*time.Second))
	if err != nil {
		return -1, fmt.Errorf("connect: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := kmsg.NewPtrDescribeQuorumRequest()
	topic := kmsg.NewDescribeQuorumRequestTopic()
	topic.Topic = "__cluster_metadata"
	part := kmsg.NewDescribeQuorumRequestTopicPartition()
	topic.Partitions = append(topic.Partitions, part) // partition 0
	req.Topics = append(req.Topics, topic)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return -1, fmt.Errorf("DescribeQuorum: %w", err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return -1, fmt.Errorf("DescribeQuorum: %w", err)
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return -1, fmt.Errorf("DescribeQuorum: unexpected answer %+v", resp)
	}
	p := resp.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
		return -1, fmt.Errorf("DescribeQuorum: %w", err)
	}
	return p.LeaderID, nil
}

// record is one event record read back from Kafka.
type record struct {
	partition int32
	offset    int64
	key, id   string
	sequence  int64
	appended  time.Time // the record's timestamp: the leader's append on a LogAppendTime topic, else the producer's
	deadError string    // a dead letter's pcon.HeaderError
}

// checkKafka reads every event topic of s back and checks it against the
// outbox: every event is there (on its aggregate's key, with its
// sequence), and per key the first copies of the events come in sequence
// order. Later copies are counted and logged. The dead-letter topics must
// be empty: no broker fault may cost an event its processing. It returns
// the first copies, by the pipeline's topic name and event id.
func checkKafka(t *testing.T, conn *pgx.Conn, s *system, c *kafkabroker.Cluster, products []int64) map[string]map[string]record {
	t.Helper()
	ctx := context.Background()
	type row struct {
		ID                 int64
		EventID, Type, Agg string
		Sequence           int64
	}
	rows, err := conn.Query(ctx, `SELECT id, event_id::text, event_type, aggregate_id, coalesce(sequence, id) FROM outbox ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	outbox, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	if err != nil {
		t.Fatal(err)
	}
	inOutbox := map[string]bool{}
	for _, r := range outbox {
		inOutbox[r.EventID] = true
	}

	client, err := sarama.NewClient(s.kafka.Brokers, adminConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	first := map[string]map[string]record{} // topic → event id → first copy
	productPartitions := map[int32]bool{}
	productKeys := map[string]bool{}
	for _, id := range products {
		productKeys[strconv.FormatInt(id, 10)] = true
	}
	var summary []string
	for _, name := range events.NewRegistry().Topics() {
		topic := s.topic(name)
		recs := readAllRecords(t, client, topic)
		first[name] = map[string]record{}
		last := map[string]record{}       // key → latest first copy
		partitionOf := map[string]int32{} // key → its partition
		dups, reordered := 0, 0
		for _, r := range recs {
			if !inOutbox[r.id] {
				t.Errorf("%s/%d@%d: event %s is in no outbox row", topic, r.partition, r.offset, r.id)
			}
			if _, seen := first[name][r.id]; seen {
				dups++
				continue
			}
			first[name][r.id] = r
			if p, ok := partitionOf[r.key]; ok && p != r.partition {
				t.Errorf("%s: key %s on partitions %d and %d", topic, r.key, p, r.partition)
			}
			partitionOf[r.key] = r.partition
			if prev, ok := last[r.key]; ok && r.sequence <= prev.sequence {
				reordered++
				if reordered <= 20 {
					t.Errorf("%s/%d key %s: the first copy of event %s (sequence %d, offset %d, produced %s) comes after event %s (sequence %d, offset %d, produced %s)",
						topic, r.partition, r.key, r.id, r.sequence, r.offset, r.appended.Format(logTime), prev.id, prev.sequence, prev.offset, prev.appended.Format(logTime))
				}
			}
			last[r.key] = r
			if name == "like-events" && productKeys[r.key] {
				productPartitions[r.partition] = true
			}
		}
		if reordered > 0 {
			t.Errorf("%s: %d events out of sequence order on their key (broker logs: %s)", topic, reordered, c.Dir())
		}
		summary = append(summary, fmt.Sprintf("%s: %d records, %d events, %d duplicates", name, len(recs), len(first[name]), dups))

		dlt := readAllRecords(t, client, s.topic(events.DLTOf(name)))
		for _, r := range dlt {
			t.Errorf("%s: event %s (key %s) was dead-lettered: %s", events.DLTOf(name), r.id, r.key, r.deadError)
		}
	}
	t.Logf("read back: %s", strings.Join(summary, "; "))
	if len(productPartitions) != 3 {
		t.Errorf("the products' likes went to like-events partitions %v only: the load must reach all 3, or a fault's partitions may have had no traffic", productPartitions)
	}

	lost := 0
	for _, r := range outbox {
		topic, err := events.TopicOf(r.Type)
		if err != nil {
			t.Errorf("outbox row %d: %v", r.ID, err)
			continue
		}
		got, ok := first[topic][r.EventID]
		switch {
		case !ok:
			lost++
			if lost <= 20 {
				t.Errorf("lost: outbox row %d, event %s (%s, key %s) is not in %s", r.ID, r.EventID, r.Type, r.Agg, s.topic(topic))
			}
		case got.key != r.Agg || got.sequence != r.Sequence:
			t.Errorf("%s/%d@%d: event %s has key %s and sequence %d, the outbox says %s and %d", s.topic(topic), got.partition, got.offset, r.EventID, got.key, got.sequence, r.Agg, r.Sequence)
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d outbox events are not in Kafka (broker logs: %s)", lost, len(outbox), c.Dir())
	}
	return first
}

// readAllRecords reads topic from its first to its last offset, as they
// are now.
func readAllRecords(t *testing.T, client sarama.Client, topic string) []record {
	t.Helper()
	parts, err := client.Partitions(topic)
	if err != nil {
		t.Fatalf("partitions of %s: %v", topic, err)
	}
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	var out []record
	for _, p := range parts {
		start, err := client.GetOffset(topic, p, sarama.OffsetOldest)
		if err != nil {
			t.Fatal(err)
		}
		end, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			t.Fatal(err)
		}
		if start >= end {
			continue
		}
		pc, err := consumer.ConsumePartition(topic, p, start)
		if err != nil {
			t.Fatalf("consume %s/%d: %v", topic, p, err)
		}
		timeout := time.After(time.Minute)
		for next := start; next < end; {
			select {
			case m := <-pc.Messages():
				h := testenv.Headers(m)
				seq, err := strconv.ParseInt(h["ce_"+events.ExtSequence], 10, 64)
				if err != nil {
					t.Errorf("%s/%d@%d: sequence %q: %v", topic, p, m.Offset, h["ce_"+events.ExtSequence], err)
				}
				out = append(out, record{partition: p, offset: m.Offset, key: string(m.Key), id: h["ce_id"], sequence: seq, appended: m.Timestamp, deadError: h[pcon.HeaderError]})
				next = m.Offset + 1
			case <-timeout:
				_ = pc.Close()
				t.Fatalf("%s/%d: read up to offset %d within a minute, want %d", topic, p, next, end)
			}
		}
		if err := pc.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// keepBrokerLogs copies the nodes' logs out of the cluster's directory,
// which closing the cluster removes, when the test failed, and shows their
// ends: they are the evidence of what the brokers did.
func keepBrokerLogs(t *testing.T, c *kafkabroker.Cluster) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		dir, err := os.MkdirTemp("", "e2e-broker-logs-")
		if err != nil {
			t.Logf("keep the broker logs: %v", err)
			return
		}
		for _, n := range c.Nodes() {
			b, err := os.ReadFile(filepath.Join(c.Dir(), fmt.Sprintf("node-%d", n.ID()), "broker.log"))
			if err != nil {
				t.Logf("node %d log: %v", n.ID(), err)
				continue
			}
			_ = os.WriteFile(filepath.Join(dir, fmt.Sprintf("node-%d.log", n.ID())), b, 0o644)
			t.Logf("node %d log (last 3 KiB):\n%s", n.ID(), b[max(0, len(b)-3072):])
		}
		t.Logf("broker logs kept in %s", dir)
	})
}
