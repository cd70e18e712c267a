package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/loopers/commerce-pipeline/internal/kafka"
	"github.com/loopers/commerce-pipeline/internal/kafkabroker"
	"github.com/loopers/commerce-pipeline/internal/logkey"
	"github.com/loopers/commerce-pipeline/internal/outbox"
	"github.com/loopers/commerce-pipeline/internal/pg"
	"github.com/loopers/commerce-pipeline/internal/procstat"
	"github.com/loopers/commerce-pipeline/pkg/events"
)

// relayPeer is one side of the relay arm.
type relayPeer string

const (
	ourRelay         relayPeer = "relay"
	debeziumDefaults relayPeer = "debezium"
	debeziumTuned    relayPeer = "debezium-tuned"
	watermillDefault relayPeer = "watermill"
	watermillTuned   relayPeer = "watermill-tuned"
)

var allRelayPeers = []relayPeer{ourRelay, debeziumDefaults, debeziumTuned, watermillDefault, watermillTuned}

type relayKind int

const (
	ourKind relayKind = iota
	debeziumKind
	watermillKind
)

func (p relayPeer) kind() relayKind {
	switch p {
	case debeziumDefaults, debeziumTuned:
		return debeziumKind
	case watermillDefault, watermillTuned:
		return watermillKind
	default:
		return ourKind
	}
}

// idHeader is the record header each side puts the outbox row's event_id
// in: the relay's CloudEvents id, the EventRouter's id header, watermill's
// message UUID (its forwarder's envelope carries the row's event_id).
func (p relayPeer) idHeader() string {
	switch p.kind() {
	case debeziumKind:
		return "id"
	case watermillKind:
		return "_watermill_message_uuid"
	default:
		return "ce_id"
	}
}

// Debezium's settings beyond what the run needs (connection, slot,
// publication, table, routing): none at its defaults; tuned, the engine
// polls its queue every millisecond (our relay is woken at once by the
// writer's notification; the default poll is 500 ms), takes bigger batches,
// and the producer sends at once (linger.ms=0, as the relay's producer;
// kafka-clients 4's default is 5 ms).
var debeziumTuning = []string{
	"--P", "poll.interval.ms=1",
	"--P", "max.batch.size=8192",
	"--P", "max.queue.size=32768",
	"--X", "linger.ms=0",
}

// watermill's settings: the SQL subscriber's PollInterval (1 s by default)
// and the rows per SELECT (100, the default of its PostgreSQL schemas).
var watermillSettings = map[relayPeer][]string{
	watermillDefault: {"--poll", "1s", "--batch", "100"},
	watermillTuned:   {"--poll", "10ms", "--batch", "1000"},
}

// settings describes a side's settings for the tables.
func (p relayPeer) settings() string {
	switch p {
	case ourRelay:
		return "the built binary, its shipped defaults; woken by the writer's NOTIFY after each commit"
	case debeziumDefaults:
		return "embedded engine defaults (poll.interval.ms=500, max.batch.size=2048), pgoutput, EventRouter, KafkaProducer defaults (acks=all, idempotent)"
	case debeziumTuned:
		return "poll.interval.ms=1, max.batch.size=8192, max.queue.size=32768, producer linger.ms=0"
	case watermillDefault:
		return "forwarder over watermill-sql (PollInterval 1 s, 100 rows per SELECT), watermill-kafka's sync publisher defaults (sarama's acks=1: the leader's append alone, no replica, acknowledges a record)"
	default:
		return "PollInterval 10 ms, 1,000 rows per SELECT"
	}
}

// relayPhase is one measured phase of one side.
type relayPhase struct {
	n             int
	p50, p99, max time.Duration // commit → append, latency phases
	rate          float64       // events/s, drain phases
	cpu           relayCPU
}

// relayCPU is the CPU time of each party over the phase.
type relayCPU struct{ relay, postgres, broker time.Duration }

func (c relayCPU) per1k(n int) [3]float64 {
	k := float64(n) / 1000
	return [3]float64{c.relay.Seconds() / k, c.postgres.Seconds() / k, c.broker.Seconds() / k}
}

// relayResults are the arm's phases: latency per rate, and the drain.
type relayResults struct {
	versions map[relayPeer]string
	latency  map[int]map[relayPeer][]relayPhase
	drain    map[relayPeer][]relayPhase
}

// relayArm runs the relay sides on one Kafka cluster and the arm's
// PostgreSQL.
type relayArm struct {
	o       options
	cluster *kafkabroker.Cluster
	pg      *pgCluster
	self    string
	relay   string // the built outbox-relay binary
	dir     string
	reg     *events.Registry
	rf      int16
	n       int
	res     *relayResults
}

func runRelayArm(ctx context.Context, o options, c *kafkabroker.Cluster, self string) (*relayResults, error) {
	dir, err := os.MkdirTemp("", "bench-peers-relay-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	a := &relayArm{
		o: o, cluster: c, self: self, dir: dir, reg: events.NewRegistry(), rf: int16(min(len(c.Nodes()), 3)), //nolint:gosec // 1 to 3
		res: &relayResults{versions: map[relayPeer]string{}, latency: map[int]map[relayPeer][]relayPhase{}, drain: map[relayPeer][]relayPhase{}},
	}
	if slices.Contains(o.relayPeers, ourRelay) {
		a.relay = filepath.Join(dir, "outbox-relay")
		build := exec.CommandContext(ctx, "go", "build", "-o", a.relay, "github.com/loopers/commerce-pipeline/services/outbox-relay")
		if out, err := build.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("build the relay: %w\n%s", err, out)
		}
		a.res.versions[ourRelay] = "this tree, franz-go " + moduleVersion("github.com/twmb/franz-go")
	}
	if a.pg, err = startPG(ctx); err != nil {
		return nil, err
	}
	defer a.pg.close()
	for _, rate := range o.rates {
		a.res.latency[rate] = map[relayPeer][]relayPhase{}
	}
	if o.warmup && len(o.rates) > 0 {
		// The first side to run would otherwise pay for the brokers' and
		// PostgreSQL's cold start (the JIT, the page cache, the first
		// topics' leadership): p99 figures several times the warm ones.
		for _, p := range o.relayPeers {
			rate := o.rates[0]
			ph, err := a.phase(ctx, p, rate, int(float64(rate)*relayWarmup.Seconds()))
			if err != nil {
				return nil, fmt.Errorf("warm-up: %w", err)
			}
			slog.Info("relay warm-up run, discarded", "side", p, "rate", rate, "p50", ph.p50, "p99", ph.p99)
		}
	}
	for round := range max(1, o.relayRounds) {
		// Each round starts with the next side, so that no side always
		// runs right after the same other one.
		n := len(o.relayPeers)
		for i := range n {
			p := o.relayPeers[(round+i)%n]
			for _, rate := range o.rates {
				ph, err := a.phase(ctx, p, rate, int(float64(rate)*o.latencyTime.Seconds()))
				if err != nil {
					return nil, err
				}
				a.res.latency[rate][p] = append(a.res.latency[rate][p], ph)
				slog.Info("relay latency run", "side", p, "rate", rate, "p50", ph.p50, "p99", ph.p99)
			}
			if o.drainRows > 0 {
				ph, err := a.phase(ctx, p, 0, o.drainRows)
				if err != nil {
					return nil, err
				}
				a.res.drain[p] = append(a.res.drain[p], ph)
				slog.Info("relay drain run", "side", p, "rows", ph.n, "eventsPerS", int(ph.rate))
			}
		}
	}
	return a.res, nil
}

// relayWarmup is the length of each side's discarded warm-up run.
const relayWarmup = 3 * time.Second

// bed is one phase's database, topics and running side.
type bed struct {
	peer    relayPeer
	db      string
	pool    *pg.DB
	wake    *pg.Notifier
	prefix  string
	topics  []string
	cmd     *exec.Cmd
	done    chan error
	stdout  bytes.Buffer   // read once the side has exited
	stdin   io.WriteCloser // Debezium's: closing it stops the peer
	logPath string
}

// topicsOf are the topics a side publishes the events to: the relay's
// event topics, or one per aggregate type for Debezium's EventRouter and
// watermill (both route by a column).
func (a *relayArm) topicsOf(p relayPeer, prefix string) []string {
	if p.kind() == ourKind {
		return kafka.Settings{Prefix: prefix}.Topics(a.reg.Topics())
	}
	var ts []string
	for _, t := range aggregateTypes {
		ts = append(ts, prefix+t)
	}
	return ts
}

// writerApp is the application_name of the writer's connections: their
// backends stand for commerce-api's and are left out of PostgreSQL's CPU.
const writerApp = "peers-writer"

func (a *relayArm) newBed(ctx context.Context, p relayPeer, n int) (*bed, error) {
	a.n++
	db, err := a.pg.newDatabase(ctx)
	if err != nil {
		return nil, err
	}
	b := &bed{peer: p, db: db, prefix: fmt.Sprintf("peers-%d-%s.", a.n, p), done: make(chan error, 1)}
	b.topics = a.topicsOf(p, b.prefix)
	specs := make([]kafka.TopicSpec, len(b.topics))
	for i, t := range b.topics {
		// LogAppendTime: each record's timestamp is the leader's append.
		specs[i] = kafka.TopicSpec{Name: t, Partitions: 3, Replication: a.rf, Config: map[string]string{"message.timestamp.type": "LogAppendTime"}}
	}
	k := kafka.Settings{Brokers: a.cluster.Brokers()}
	if err := k.CreateTopics(ctx, specs); err != nil {
		_ = a.pg.dropDatabase(ctx, db)
		return nil, err
	}
	if b.pool, err = pg.Open(ctx, a.pg.url(db)+"&application_name="+writerApp, pg.Options{MaxConns: a.o.writers}); err != nil {
		a.closeBed(ctx, b)
		return nil, err
	}
	b.wake = b.pool.NewNotifier(outbox.Channel)
	if err := a.startSide(ctx, b, n); err != nil {
		a.closeBed(ctx, b)
		return nil, err
	}
	return b, nil
}

// startSide starts the side's process and waits until it is ready to
// publish what is committed from now on.
func (a *relayArm) startSide(ctx context.Context, b *bed, n int) error {
	dbURL := a.pg.url(b.db)
	brokers := strings.Join(a.cluster.Brokers(), ",")
	var ready func() (bool, error)
	switch b.peer.kind() {
	case ourKind:
		b.cmd = exec.Command(a.relay)
		b.cmd.Env = append(os.Environ(), "DATABASE_URL="+dbURL, "KAFKA_BROKERS="+brokers, "KAFKA_PREFIX="+b.prefix,
			"ADMIN_ADDR=127.0.0.1:0", "CLUSTER_NODE_ID=peers")
		ready = func() (bool, error) {
			l, err := outbox.ReadLeadership(ctx, b.pool.Pool.QueryRow)
			return l.Leader != nil && l.Leader.Owner == "peers", err
		}
	case debeziumKind:
		slot := "peers_" + strconv.Itoa(a.n)
		args := []string{"--records", strconv.Itoa(n),
			"--P", "name=peers", "--P", "connector.class=io.debezium.connector.postgresql.PostgresConnector",
			"--P", "offset.storage=org.apache.kafka.connect.storage.MemoryOffsetBackingStore",
			"--P", "database.hostname=127.0.0.1", "--P", "database.port=" + strconv.Itoa(a.pg.port),
			"--P", "database.user=postgres", "--P", "database.password=", "--P", "database.dbname=" + b.db,
			"--P", "topic.prefix=peers", "--P", "plugin.name=pgoutput",
			"--P", "slot.name=" + slot, "--P", "slot.drop.on.stop=true",
			"--P", "publication.name=" + slot, "--P", "publication.autocreate.mode=filtered",
			"--P", "table.include.list=public.outbox", "--P", "snapshot.mode=no_data",
			"--P", "transforms=outbox", "--P", "transforms.outbox.type=io.debezium.transforms.outbox.EventRouter",
			"--P", "transforms.outbox.table.field.event.id=event_id",
			"--P", "transforms.outbox.table.field.event.key=aggregate_id",
			"--P", "transforms.outbox.table.field.event.payload=payload",
			"--P", "transforms.outbox.route.by.field=aggregate_type",
			"--P", "transforms.outbox.route.topic.replacement=" + b.prefix + "${routedByValue}",
			"--X", "bootstrap.servers=" + brokers,
		}
		if b.peer == debeziumTuned {
			args = append(args, debeziumTuning...)
		}
		cmd, err := debeziumPeer.command(ctx, args...)
		if err != nil {
			return err
		}
		b.cmd = cmd
		ready = func() (bool, error) {
			var active bool
			err := b.pool.Pool.QueryRow(ctx, `SELECT coalesce(bool_or(active), false) FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&active)
			return active, err
		}
	case watermillKind:
		b.cmd = exec.Command(a.self, append([]string{"--database-url", dbURL, "--brokers", brokers, "--prefix", b.prefix},
			watermillSettings[b.peer]...)...)
		b.cmd.Env = append(os.Environ(), childEnv+"="+string(watermillChild))
		ready = func() (bool, error) {
			var n int
			err := b.pool.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE tablename = $1`, watermillOffsetsTable).Scan(&n)
			if err != nil || n == 0 {
				return false, err
			}
			err = b.pool.Pool.QueryRow(ctx, `SELECT count(*) FROM `+watermillOffsetsTable).Scan(&n)
			return n > 0, err
		}
	}
	b.logPath = filepath.Join(a.dir, fmt.Sprintf("%d-%s.log", a.n, b.peer))
	logf, err := os.Create(b.logPath)
	if err != nil {
		return err
	}
	b.cmd.Stderr = logf
	// exec copies stdout into the buffer and Wait returns once the copy
	// is done, so the buffer is whole when the side has exited.
	b.cmd.Stdout = &b.stdout
	if b.stdin, err = b.cmd.StdinPipe(); err != nil {
		logf.Close()
		return err
	}
	if err := b.cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", b.peer, err)
	}
	go func() { b.done <- b.cmd.Wait(); logf.Close() }()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ok, err := ready()
		if err == nil && ok {
			return nil
		}
		select {
		case err := <-b.done:
			b.done <- err
			return fmt.Errorf("%s exited before it was ready: %w\n%s", b.peer, err, a.logTail(b))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s was not ready within 2 minutes (%w)\n%s", b.peer, err, a.logTail(b))
		}
	}
}

func (a *relayArm) logTail(b *bed) string {
	log, _ := os.ReadFile(b.logPath)
	return tail(string(log))
}

// stopSide ends the side's process (SIGTERM; Debezium's peer stops when
// its stdin closes) and returns its JSON line, if it printed one.
func (a *relayArm) stopSide(b *bed) (map[string]any, error) {
	if b.peer.kind() == debeziumKind {
		_ = b.stdin.Close()
	} else {
		_ = b.cmd.Process.Signal(syscall.SIGTERM)
	}
	var err error
	select {
	case err = <-b.done:
	case <-time.After(30 * time.Second):
		_ = b.cmd.Process.Kill()
		err = fmt.Errorf("%s did not stop within 30 s: %w", b.peer, <-b.done)
	}
	b.cmd = nil
	if err != nil {
		return nil, fmt.Errorf("%s: %w\n%s", b.peer, err, a.logTail(b))
	}
	var line string
	for _, l := range strings.Split(b.stdout.String(), "\n") {
		if strings.HasPrefix(l, "{") {
			line = l
			break
		}
	}
	if line == "" {
		return nil, nil
	}
	var res map[string]any
	if err := json.Unmarshal([]byte(line), &res); err != nil {
		return nil, fmt.Errorf("%s: its line %q: %w", b.peer, line, err)
	}
	return res, nil
}

func (a *relayArm) closeBed(ctx context.Context, b *bed) {
	if b.cmd != nil {
		_ = b.cmd.Process.Kill()
		if err := <-b.done; err != nil {
			slog.Info("stopped a side after a failed run", "side", b.peer, logkey.Err, err)
		}
	}
	if b.wake != nil {
		b.wake.Close()
	}
	if b.pool != nil {
		b.pool.Close()
	}
	if err := (kafka.Settings{Brokers: a.cluster.Brokers()}).DeleteTopics(b.topics...); err != nil {
		fmt.Fprintln(os.Stderr, "bench/peers:", err)
	}
	if err := a.pg.dropDatabase(ctx, b.db); err != nil {
		fmt.Fprintln(os.Stderr, "bench/peers:", err)
	}
}

// aggregateTypes are the aggregate types of the arm's events: Debezium and
// watermill route by them.
var aggregateTypes = []string{"Product"}

// entries are n outbox rows: product views over 500 products, as
// commerce-api writes them. One event type, so that every side publishes
// to one topic of 3 partitions (the relay by event type, the others by
// aggregate type).
func (a *relayArm) entries(n int) ([]outbox.Entry, error) {
	out := make([]outbox.Entry, n)
	for i := range out {
		rec, err := a.reg.Marshal(events.ProductViewedV1{ProductID: int64(i%500 + 1), UserID: "user-" + strconv.Itoa(i%977)})
		if err != nil {
			return nil, err
		}
		if !slices.Contains(aggregateTypes, rec.AggregateType) {
			return nil, fmt.Errorf("aggregate type %q is not among %v", rec.AggregateType, aggregateTypes)
		}
		out[i] = outbox.Entry{EventID: uuid.NewString(), Source: "commerce-api", Record: rec}
	}
	return out, nil
}

// phase runs one side once: n rows committed at rate (0: all in one
// transaction, the drain), each row's commit time against its record's
// append time, and the CPU of the side, PostgreSQL and the broker.
func (a *relayArm) phase(ctx context.Context, p relayPeer, rate, n int) (relayPhase, error) {
	entries, err := a.entries(n)
	if err != nil {
		return relayPhase{}, err
	}
	b, err := a.newBed(ctx, p, n)
	if err != nil {
		return relayPhase{}, fmt.Errorf("%s: %w", p, err)
	}
	defer a.closeBed(ctx, b)
	rd, err := newAppendReader(ctx, a.cluster.Brokers(), b.topics, p.idHeader(), n)
	if err != nil {
		return relayPhase{}, err
	}
	defer rd.close()

	// The writers' connections exist before the first snapshot, so that
	// their backends are known and left out.
	writers := a.o.writers
	if rate == 0 {
		writers = 1
	}
	if err := warmPool(ctx, b.pool, writers); err != nil {
		return relayPhase{}, err
	}
	b.wake.Notify()
	skip, err := writerBackends(ctx, b.pool)
	if err != nil {
		return relayPhase{}, err
	}
	before, err := a.cpuNow(b)
	if err != nil {
		return relayPhase{}, err
	}
	committed := make(map[string]time.Time, n)
	var t0 time.Time
	if rate == 0 {
		t0, err = commitAll(ctx, b.pool, entries)
		if err != nil {
			return relayPhase{}, err
		}
		b.wake.Notify()
		for _, e := range entries {
			committed[e.EventID] = t0
		}
	} else if committed, err = commitAt(ctx, b, entries, rate, writers); err != nil {
		return relayPhase{}, err
	}
	appended, err := rd.wait(ctx, 5*time.Minute+time.Duration(n)*time.Millisecond)
	if err != nil {
		return relayPhase{}, fmt.Errorf("%s: %w\n%s", p, err, a.logTail(b))
	}
	after, err := a.cpuNow(b)
	if err != nil {
		return relayPhase{}, err
	}
	res := relayPhase{n: n, cpu: relayCPU{
		relay:    after.side - before.side,
		postgres: after.pg.Since(before.pg, skip),
		broker:   after.broker - before.broker,
	}}
	lat := make([]time.Duration, 0, n)
	var last time.Time
	for id, at := range committed {
		ap, ok := appended[id]
		if !ok {
			return relayPhase{}, fmt.Errorf("%s: event %s never reached Kafka", p, id)
		}
		lat = append(lat, max(ap.Sub(at), 0))
		if ap.After(last) {
			last = ap
		}
	}
	slices.Sort(lat)
	res.p50, res.p99, res.max = lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)], lat[len(lat)-1]
	if rate == 0 {
		res.rate = float64(n) / last.Sub(t0).Seconds()
	}
	out, err := a.stopSide(b)
	if err != nil {
		return relayPhase{}, err
	}
	if out != nil {
		if v, ok := out["version"].(string); ok {
			a.res.versions[p] = fmt.Sprintf("%s (%v)", v, out["client"])
		}
	}
	if p.kind() != ourKind && out == nil {
		return relayPhase{}, fmt.Errorf("%s printed no JSON line", p)
	}
	return res, nil
}

// cpuSnapshot is the CPU time of the three parties at one moment.
type cpuSnapshot struct {
	side, broker time.Duration
	pg           procstat.TreeSnapshot
}

func (a *relayArm) cpuNow(b *bed) (cpuSnapshot, error) {
	var s cpuSnapshot
	var err error
	if s.side, err = procstat.ProcessCPU(b.cmd.Process.Pid); err != nil {
		return s, err
	}
	if s.pg, err = procstat.SnapshotTree(a.pg.pid()); err != nil {
		return s, err
	}
	for _, node := range a.cluster.Nodes() {
		c, err := procstat.ProcessCPU(node.Pid())
		if err != nil {
			return s, err
		}
		s.broker += c
	}
	return s, nil
}

// warmPool opens n connections of the writer's pool at once.
func warmPool(ctx context.Context, db *pg.DB, n int) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conns := make([]interface{ Release() }, 0, n)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range n {
		c, err := db.Pool.Acquire(ctx)
		if err != nil {
			return err
		}
		conns = append(conns, c)
	}
	return nil
}

// writerBackends are the process ids of the writer's backends.
func writerBackends(ctx context.Context, db *pg.DB) (map[int]bool, error) {
	rows, err := db.Pool.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = $1`, writerApp)
	if err != nil {
		return nil, err
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, err
	}
	skip := map[int]bool{}
	for _, p := range pids {
		skip[int(p)] = true
	}
	return skip, nil
}

// commitAll writes the entries in one transaction (COPY of outbox.Columns,
// as a bulk writer would) and returns when it committed.
func commitAll(ctx context.Context, db *pg.DB, entries []outbox.Entry) (time.Time, error) {
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		return time.Time{}, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.CopyFrom(ctx, pgx.Identifier{"outbox"}, outbox.Columns, pgx.CopyFromSlice(len(entries), func(i int) ([]any, error) {
		return entries[i].Values(), nil
	}))
	if err != nil {
		return time.Time{}, fmt.Errorf("fill the outbox: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return time.Time{}, err
	}
	return time.Now(), nil
}

// commitAt commits one row per transaction (outbox.Insert) at rate, on
// writers connections, each followed by the relay's wake-up as
// commerce-api sends it, and returns each row's commit time.
func commitAt(ctx context.Context, b *bed, entries []outbox.Entry, rate, writers int) (map[string]time.Time, error) {
	work := make(chan outbox.Entry, len(entries))
	var (
		mu        sync.Mutex
		committed = make(map[string]time.Time, len(entries))
		failed    error
		wg        sync.WaitGroup
	)
	for range writers {
		wg.Go(func() {
			for e := range work {
				_, err := outbox.Insert(ctx, b.pool.Pool.QueryRow, e)
				at := time.Now()
				b.wake.Notify()
				mu.Lock()
				committed[e.EventID] = at
				if err != nil {
					failed = errors.Join(failed, err)
				}
				mu.Unlock()
			}
		})
	}
	start := time.Now()
	for i, e := range entries {
		if d := time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(rate))); d > 0 {
			time.Sleep(d)
		}
		work <- e
	}
	close(work)
	wg.Wait()
	return committed, failed
}

// appendReader reads every record of a phase's topics and keeps each
// one's append time (LogAppendTime) by the event id in idHeader.
type appendReader struct {
	cl       *kgo.Client
	want     int
	mu       sync.Mutex
	appended map[string]time.Time
	full     chan struct{}
	cancel   context.CancelFunc
	done     chan struct{}
}

func newAppendReader(ctx context.Context, brokers, topics []string, idHeader string, want int) (*appendReader, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	r := &appendReader{cl: cl, want: want, appended: make(map[string]time.Time, want), full: make(chan struct{}), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			r.mu.Lock()
			fs.EachRecord(func(rec *kgo.Record) {
				for _, h := range rec.Headers {
					if h.Key == idHeader {
						r.appended[string(h.Value)] = rec.Timestamp
					}
				}
			})
			full := len(r.appended) >= r.want
			r.mu.Unlock()
			if full {
				close(r.full)
				return
			}
		}
	}()
	return r, nil
}

// wait returns the append times once every record was read.
func (r *appendReader) wait(ctx context.Context, limit time.Duration) (map[string]time.Time, error) {
	select {
	case <-r.full:
		return r.appended, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(limit):
		r.mu.Lock()
		defer r.mu.Unlock()
		return nil, fmt.Errorf("%d of %d records reached Kafka within %s", len(r.appended), r.want, limit)
	}
}

func (r *appendReader) close() {
	r.cancel()
	<-r.done
	r.cl.Close()
}
