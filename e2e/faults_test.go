package e2e

import (
	"context"
	"errors"
	"fmt"
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
	"github.com/loopers/commerce-pipeline/internal/testenv"
	"github.com/loopers/commerce-pipeline/pkg/events"
	"github.com/loopers/commerce-pipeline/pkg/pcon"
)

// TestThreeBrokerFaults runs the pipeline on a cluster of three combined
// broker/controller nodes, every topic with three replicas and
// min.insync.replicas=2, the relay's producer as it ships (acks=all,
// idempotent), under a steady mix of likes, unlikes, views, orders and
// payments through the API, and injects three faults one after the other:
//
//  1. SIGKILL of the leader of like-events' busiest partition, then its
//     restart;
//  2. SIGKILL of the active KRaft controller (as DescribeQuorum names it),
//     then its restart;
//  3. SIGSTOP of the leader of like-events' busiest partition until the
//     controller has fenced it (its broker session, Kafka's default 9 s,
//     ended without a heartbeat) and the relay has recovered without it,
//     then SIGCONT.
//
// After each fault the pipeline must recover with the node still down (two
// in-sync replicas are enough), and before the next one the node must be
// back in every partition's ISR and the pipeline caught up. At the end every
// event of the outbox must be in its topic (none lost), the first copy of
// each event of a key must come in sequence order (copies after it are
// counted, not failed: the relay publishes at least once), and
// product_metrics must equal the oracle of the domain tables exactly. The
// recovery times are logged as a table.
//
// Broker settings are Kafka's defaults (testenv.BrokerProps aside): the
// broker session stays 9 s, so a dead or frozen broker's partitions move
// when they would in production.
//
//nolint:paralleltest // starts three broker JVMs and the service processes and measures recovery times: other tests' processes on the 2 shared cores would skew them and theirs
func TestThreeBrokerFaults(t *testing.T) {
	c := testenv.KafkaCluster(t, kafkabroker.Options{Nodes: 3})
	keepBrokerLogs(t, c)
	s := newSystemOn(t, kafkaSetup{Cluster: c, Replication: 3, Config: map[string]string{"min.insync.replicas": "2"}})
	s.startRelay("relay-a")
	s.startRelay("relay-b")
	s.startConsumers()

	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)

	l := newLoad(t, s, 8, 12)
	stopLoad := l.run(envInt("E2E_FAULTS_RATE", 60))
	t.Cleanup(stopLoad) // a failed test stops its load before its processes
	f := &faultRun{t: t, s: s, c: c, conn: conn, load: l}

	// The consumers join their groups and the first events go through:
	// not a recovery, so not in the table.
	f.await("warm-up", time.Now(), f.probe(), 2*time.Minute)
	f.baseline()
	f.killLeader()
	f.killController()
	f.pauseLeader()
	f.logTable()

	stopLoad()
	mark := f.mark()
	f.await("the last events", time.Now(), mark, 2*time.Minute)
	var failed int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM outbox_failed`).Scan(&failed); err != nil {
		t.Fatal(err)
	}
	if failed != 0 {
		t.Errorf("%d events in outbox_failed: the relay gave up on them, they are not in Kafka", failed)
	}
	want := l.oracle(t, conn)
	if diff := cmp.Diff(want, waitMetrics(t, conn, want, time.Minute)); diff != "" {
		t.Errorf("product_metrics differ from the oracle after %d actions (-want +got):\n%s", l.actions.Load(), diff)
	}
	f.checkKafka()
	if !t.Failed() {
		t.Logf("%d actions, outbox ids up to %d: every event in Kafka, in order per key; aggregates equal the oracle for all %d products", l.actions.Load(), mark, len(l.products))
	}
}

// load is the traffic of the fault test: users liking, unliking, viewing,
// ordering and paying for a handful of products, the mix of TestScenario,
// paced, for as long as the faults take.
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

// run sends rate actions a second from 8 workers until the returned
// function is called; it returns once they stopped and may be called again.
func (l *load) run(rate int) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	pace := time.NewTicker(time.Second / time.Duration(rate))
	var wg sync.WaitGroup
	for w := range 8 {
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

// faultRun injects the faults and keeps their recovery times.
type faultRun struct {
	t      *testing.T
	s      *system
	c      *kafkabroker.Cluster
	conn   *pgx.Conn
	load   *load
	probes int
	rows   []recoveryRow
}

// recoveryRow is one line of the recovery table. Every duration is measured
// from the fault's signal except restart (from the restarted node's start
// to its answering a metadata request that lists it) and inSync (from that
// start, or the SIGCONT, to every replica of every partition being in its
// ISR again).
type recoveryRow struct {
	fault, node        string
	published, applied time.Duration
	restart, inSync    time.Duration
	note               string
}

// The groups whose idempotency records show that an event reached the
// aggregates (the records carry the groups' own names, never a prefix).
const (
	viewGroup  = "product-view-consumer"
	orderGroup = "product-order-consumer"
)

// unappliedSQL counts the outbox's events up to $1 that have not reached
// the aggregates yet: a view or a payment has no idempotency record, a like
// or cancel is not in product_like_state and no later change of the same
// user and product is either. stock.depleted only evicts the page cache and
// is not counted.
const unappliedSQL = `
	SELECT count(*) FROM outbox o
	WHERE o.id <= $1 AND CASE
		WHEN o.event_type IN ('loopers.like.created.v1', 'loopers.like.canceled.v1') THEN NOT EXISTS (
			SELECT 1 FROM product_like_state s
			WHERE s.user_id = o.payload::jsonb->>'userId' AND s.product_id = o.aggregate_id::bigint
			  AND s.sequence >= coalesce(o.sequence, o.id))
		WHEN o.event_type = 'loopers.product.viewed.v1' THEN NOT EXISTS (
			SELECT 1 FROM event_handled h WHERE h.idempotency_key = '` + viewGroup + `:' || o.event_id)
		WHEN o.event_type = 'loopers.order.paid.v1' THEN NOT EXISTS (
			SELECT 1 FROM event_handled h WHERE h.idempotency_key = '` + orderGroup + `:' || o.event_id)
		ELSE false
	END`

// mark returns the highest outbox id: every event committed so far is at or
// below it.
func (f *faultRun) mark() int64 {
	f.t.Helper()
	var id int64
	if err := f.conn.QueryRow(context.Background(), `SELECT coalesce(max(id), 0) FROM outbox`).Scan(&id); err != nil {
		f.t.Fatal(err)
	}
	return id
}

// probe likes every product as a user of its own, so that events are
// written right after a fault on every partition of like-events (the
// products' keys cover them all: checkKafka checks), and returns the mark
// above them.
func (f *faultRun) probe() int64 {
	f.probes++
	user := "probe-" + strconv.Itoa(f.probes)
	var wg sync.WaitGroup
	for _, id := range f.load.products {
		wg.Go(func() {
			f.s.expect(f.s.call("POST", "/products/"+strconv.FormatInt(id, 10)+"/likes", user, nil, nil), http.StatusOK)
		})
	}
	wg.Wait()
	return f.mark()
}

// progress watches the events up to mark go through the pipeline.
//
// A fault's recovery is measured from its signal: right after it, the test
// writes probe events (probe) and takes the mark, the highest outbox id,
// so the events watched are those committed up to just after the fault.
// published is when the relay's cursor passed the mark (every one of them
// acknowledged by the in-sync replicas, or given up to outbox_failed, which
// the test fails at the end); applied is when every one of them had reached
// the aggregates (unappliedSQL). Each is the start of the first poll (every
// 100 ms) whose statement saw it.
type progress struct {
	f                  *faultRun
	since              time.Time
	mark               int64
	published, applied time.Duration // zero until reached
	cursor, unapplied  int64         // as last seen
}

func (f *faultRun) watch(since time.Time, mark int64) *progress {
	return &progress{f: f, since: since, mark: mark}
}

// poll reads the pipeline's progress once and reports whether both
// moments were reached.
func (p *progress) poll() bool {
	ctx := context.Background()
	at := time.Since(p.since)
	if p.published == 0 {
		if err := p.f.conn.QueryRow(ctx, `SELECT last_processed_id FROM outbox_cursor`).Scan(&p.cursor); err != nil {
			p.f.t.Fatal(err)
		}
		if p.cursor >= p.mark {
			p.published = at
		}
	}
	if p.applied == 0 {
		at := time.Since(p.since)
		if err := p.f.conn.QueryRow(ctx, unappliedSQL, p.mark).Scan(&p.unapplied); err != nil {
			p.f.t.Fatal(err)
		}
		if p.unapplied == 0 {
			p.applied = at
		}
	}
	return p.published > 0 && p.applied > 0
}

// until polls until both moments were reached (true) or deadline passed.
func (p *progress) until(deadline time.Time) bool {
	for !p.poll() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
	return true
}

func (p *progress) String() string {
	return fmt.Sprintf("mark %d: cursor %d, %d events up to it not applied", p.mark, p.cursor, p.unapplied)
}

// await waits until the events up to mark are published and applied,
// failing the test after limit.
func (f *faultRun) await(what string, since time.Time, mark int64, limit time.Duration) *progress {
	f.t.Helper()
	p := f.watch(since, mark)
	if !p.until(since.Add(limit)) {
		f.t.Fatalf("%s: the pipeline did not catch up within %s: %s", what, limit, p)
	}
	return p
}

// baseline is the table's first row: the same measurement with no fault.
func (f *faultRun) baseline() {
	at := time.Now()
	p := f.await("baseline", at, f.probe(), time.Minute)
	f.rows = append(f.rows, recoveryRow{fault: "none (baseline)", node: "–", published: p.published, applied: p.applied})
}

// killLeader is fault 1: SIGKILL of the node leading the partition of
// like-events that holds the most records, then its restart.
func (f *faultRun) killLeader() {
	t := f.t
	topic := f.s.topic("like-events")
	partition, leader := f.busiestLeader(topic)
	row := recoveryRow{fault: fmt.Sprintf("SIGKILL leader of like-events/%d", partition), node: strconv.Itoa(leader)}
	if ctl, err := activeController(f.liveAddrs(nil)); err == nil && int(ctl) == leader {
		row.note = "also the active controller"
	}
	n := f.c.Node(leader)
	at := time.Now()
	if err := n.Kill(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: node %d killed at %s", row.fault, leader, at.Format(logTime))
	p := f.await(row.fault, at, f.probe(), 2*time.Minute)
	row.published, row.applied = p.published, p.applied
	f.restart(n, &row)
	f.rows = append(f.rows, row)
}

// killController is fault 2: SIGKILL of the active controller, then its
// restart. The note says which node the quorum elected and when it could
// be seen.
func (f *faultRun) killController() {
	t := f.t
	ctl, err := activeController(f.liveAddrs(nil))
	if err != nil || ctl < 1 || int(ctl) > len(f.c.Nodes()) {
		t.Fatalf("find the active controller: node %d, %v", ctl, err)
	}
	row := recoveryRow{fault: "SIGKILL active controller", node: strconv.Itoa(int(ctl))}
	n := f.c.Node(int(ctl))
	at := time.Now()
	if err := n.Kill(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: node %d killed at %s", row.fault, ctl, at.Format(logTime))
	// The new election is watched beside the pipeline, so that neither
	// delays the other's measurement.
	elected := make(chan string, 1)
	go func() {
		for {
			id, err := activeController(f.liveAddrs(n))
			if err == nil && id >= 0 && id != ctl {
				elected <- fmt.Sprintf("node %d elected controller within %s", id, time.Since(at).Round(100*time.Millisecond))
				return
			}
			if time.Since(at) > time.Minute {
				elected <- fmt.Sprintf("no new controller within a minute (last: %d, %v)", id, err)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	p := f.await(row.fault, at, f.probe(), 2*time.Minute)
	row.published, row.applied = p.published, p.applied
	row.note = <-elected
	if strings.HasPrefix(row.note, "no new controller") {
		t.Error(row.note)
	}
	f.restart(n, &row)
	f.rows = append(f.rows, row)
}

// pauseLeader is fault 3: SIGSTOP of the node leading like-events'
// busiest partition. It stays stopped until the controller has fenced it
// (the other nodes' metadata no longer lists it: its broker session ended
// without a heartbeat) and the relay has published past the mark without
// it (or 30 s more), as a machine that hangs for a while, and is then
// continued (SIGCONT). Recovery counts from the SIGSTOP; the note says
// which side recovered while the node was stopped.
func (f *faultRun) pauseLeader() {
	t := f.t
	topic := f.s.topic("like-events")
	partition, leader := f.busiestLeader(topic)
	n := f.c.Node(leader)
	row := recoveryRow{node: strconv.Itoa(leader)}
	at := time.Now()
	if err := n.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Resume() }) // a failed test must not leave it stopped for the cleanups
	t.Logf("SIGSTOP: node %d, leader of like-events/%d, stopped at %s", leader, partition, at.Format(logTime))
	fenced := make(chan time.Duration, 1)
	go func() {
		for time.Since(at) < time.Minute {
			if md, err := f.liveMetadata(n); err == nil && !slices.ContainsFunc(md.Brokers, func(b *sarama.Broker) bool { return int(b.ID()) == leader }) {
				fenced <- time.Since(at)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		fenced <- 0
	}()
	p := f.watch(at, f.probe())
	fence := <-fenced
	if fence == 0 {
		t.Fatalf("node %d stopped for a minute and still listed by the others: the controller did not fence it", leader)
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if p.poll(); p.published != 0 {
			break
		}
	}
	relayStopped, consumersStopped := p.published != 0, p.applied != 0
	if err := n.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	t.Logf("SIGCONT: node %d continued at %s", leader, resumed.Format(logTime))
	if !p.until(resumed.Add(2 * time.Minute)) {
		t.Fatalf("SIGSTOP: the pipeline did not catch up within 2 minutes of SIGCONT: %s", p)
	}
	row.fault = fmt.Sprintf("SIGSTOP %.1f s, leader of like-events/%d", resumed.Sub(at).Seconds(), partition)
	row.published, row.applied = p.published, p.applied
	row.note = fmt.Sprintf("fenced after %.1f s; relay recovered %s, consumers %s", fence.Seconds(), whileStopped(relayStopped), whileStopped(consumersStopped))
	f.waitInSync(resumed, &row)
	f.settle()
	f.rows = append(f.rows, row)
}

func whileStopped(yes bool) string {
	if yes {
		return "while it was stopped"
	}
	return "only after SIGCONT"
}

// logTime is how the test logs the moments of its faults, to be found in
// the services' and brokers' logs (UTC there).
const logTime = "15:04:05.000Z07:00"

// restart starts n again, waits until it is back in every ISR and the
// pipeline caught up, and notes how long the node took.
func (f *faultRun) restart(n *kafkabroker.Node, row *recoveryRow) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	if err := n.Start(ctx); err != nil {
		f.t.Fatalf("restart node %d: %v", n.ID(), err)
	}
	row.restart = time.Since(start)
	f.t.Logf("node %d answers again at %s", n.ID(), time.Now().Format(logTime))
	f.waitInSync(start, row)
	f.settle()
}

// waitInSync waits until the metadata lists all three nodes and every
// partition of every topic has all its replicas in sync.
func (f *faultRun) waitInSync(start time.Time, row *recoveryRow) {
	f.t.Helper()
	var last string
	for time.Since(start) < 2*time.Minute {
		md, err := f.liveMetadata(nil)
		if err == nil {
			last = outOfSync(md, len(f.c.Nodes()))
			if last == "" {
				row.inSync = time.Since(start)
				return
			}
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	f.t.Fatalf("the cluster is not whole 2 minutes after node %s started again: %s", row.node, last)
}

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

// settle lets the pipeline catch up with what was written up to now, so
// that the next fault starts from a pipeline at work, not one recovering.
func (f *faultRun) settle() {
	f.t.Helper()
	f.await("catching up between faults", time.Now(), f.mark(), 2*time.Minute)
}

// liveAddrs are the addresses of the nodes running, except skip.
func (f *faultRun) liveAddrs(skip *kafkabroker.Node) []string {
	var out []string
	for _, n := range f.c.Nodes() {
		if n.Running() && n != skip {
			out = append(out, n.Addr(kafkabroker.PlainListener))
		}
	}
	return out
}

// liveMetadata asks the running nodes but skip, one at a time, for the
// metadata of every topic, and returns the first answer. A stopped node is
// never asked: it would answer nothing until its read timeout.
func (f *faultRun) liveMetadata(skip *kafkabroker.Node) (*sarama.MetadataResponse, error) {
	var errs []error
	for _, addr := range f.liveAddrs(skip) {
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

// busiestLeader finds topic's partition holding the most records and the
// node leading it.
func (f *faultRun) busiestLeader(topic string) (partition int32, node int) {
	t := f.t
	t.Helper()
	client, err := sarama.NewClient(f.liveAddrs(nil), adminConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	parts, err := client.Partitions(topic)
	if err != nil {
		t.Fatal(err)
	}
	most := int64(-1)
	for _, p := range parts {
		end, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			t.Fatal(err)
		}
		if end > most {
			most, partition = end, p
		}
	}
	leader, err := client.Leader(topic, partition)
	if err != nil {
		t.Fatal(err)
	}
	return partition, int(leader.ID())
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

// logTable logs the recovery table, in the form the README takes.
func (f *faultRun) logTable() {
	d := func(v time.Duration) string {
		if v == 0 {
			return "–"
		}
		return fmt.Sprintf("%.1f s", v.Seconds())
	}
	var b strings.Builder
	b.WriteString("recovery: published/applied = from the fault's signal until every event committed up to just after it was published (relay cursor) / applied to the aggregates; restart = node start until it answers; in sync = node start (SIGCONT) until every replica is in its ISR\n")
	b.WriteString("| fault | node | published | applied | restart | in sync | note |\n|---|---|---|---|---|---|---|\n")
	for _, r := range f.rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", r.fault, r.node, d(r.published), d(r.applied), d(r.restart), d(r.inSync), r.note)
	}
	f.t.Log(b.String())
}

// record is one event record read back from Kafka.
type record struct {
	partition int32
	offset    int64
	key, id   string
	sequence  int64
	appended  time.Time // the record's timestamp: when the producer took it
	deadError string    // a dead letter's pcon.HeaderError
}

// checkKafka reads every event topic back and checks it against the
// outbox: every event is there (on its aggregate's key, with its
// sequence), and per key the first copies of the events come in sequence
// order. Later copies are counted and logged. The dead-letter topics must
// be empty: no broker fault may cost an event its processing.
func (f *faultRun) checkKafka() {
	t := f.t
	t.Helper()
	ctx := context.Background()
	type row struct {
		ID                 int64
		EventID, Type, Agg string
		Sequence           int64
	}
	rows, err := f.conn.Query(ctx, `SELECT id, event_id::text, event_type, aggregate_id, coalesce(sequence, id) FROM outbox ORDER BY id`)
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

	client, err := sarama.NewClient(f.s.kafka.Brokers, adminConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	first := map[string]map[string]record{} // topic → event id → first copy
	probePartitions := map[int32]bool{}
	probeKeys := map[string]bool{}
	for _, id := range f.load.products {
		probeKeys[strconv.FormatInt(id, 10)] = true
	}
	var summary []string
	for _, name := range events.NewRegistry().Topics() {
		topic := f.s.topic(name)
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
			if name == "like-events" && probeKeys[r.key] {
				probePartitions[r.partition] = true
			}
		}
		if reordered > 0 {
			t.Errorf("%s: %d events out of sequence order on their key (broker logs: %s)", topic, reordered, f.c.Dir())
		}
		summary = append(summary, fmt.Sprintf("%s: %d records, %d events, %d duplicates", name, len(recs), len(first[name]), dups))

		dlt := readAllRecords(t, client, f.s.topic(events.DLTOf(name)))
		for _, r := range dlt {
			t.Errorf("%s: event %s (key %s) was dead-lettered: %s", events.DLTOf(name), r.id, r.key, r.deadError)
		}
	}
	t.Logf("read back: %s", strings.Join(summary, "; "))
	if len(probePartitions) != 3 {
		t.Errorf("the products' likes went to like-events partitions %v only: the probes after each fault must cover all 3", probePartitions)
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
				t.Errorf("lost: outbox row %d, event %s (%s, key %s) is not in %s", r.ID, r.EventID, r.Type, r.Agg, f.s.topic(topic))
			}
		case got.key != r.Agg || got.sequence != r.Sequence:
			t.Errorf("%s/%d@%d: event %s has key %s and sequence %d, the outbox says %s and %d", f.s.topic(topic), got.partition, got.offset, r.EventID, got.key, got.sequence, r.Agg, r.Sequence)
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d outbox events are not in Kafka (broker logs: %s)", lost, len(outbox), f.c.Dir())
	}
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
