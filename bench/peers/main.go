// Command peers puts our pieces beside what a team would otherwise pick, on
// the same Apache Kafka cluster, with the same records, in the same run:
//
//   - consumers: pkg/pcon against Confluent Parallel Consumer 0.5.3.3, over
//     the same pre-filled 12-partition topic (records/s and CPU per 1,000
//     records of the consumer process, per-key order violations), and live
//     (records produced at a fixed rate, handled minus intended p50/p99);
//   - relays: services/outbox-relay (the built binary, its shipped
//     defaults) against Debezium 3.6.1.Final's embedded engine (outbox
//     EventRouter, pgoutput) paired with a KafkaProducer, and against
//     watermill's outbox forwarder (watermill-sql polling, watermill-kafka
//     publishing), each at its defaults and tuned: commit → broker append
//     p50/p99 at fixed commit rates, draining a backlog, and CPU per 1,000
//     events of the relay, PostgreSQL and the broker, each apart.
//
// Every arm runs on a three-node cluster (replication factor 3,
// min.insync.replicas=2) and on one node (-nodes). The Java peers are built
// from pinned POMs under java/ (jars from Maven Central, cached; Peer.java
// compiled with javac) and run as plain java processes; pcon and
// watermill's forwarder run as processes of their own too (this program,
// re-run), so every side's CPU is read from /proc/<pid>/stat alike. Each
// peer prints one JSON line of results.
//
// The relay arm runs on a PostgreSQL cluster of its own (initdb into a
// temporary directory, wal_level=logical, its own port), so the tests'
// PostgreSQL is left as it is.
//
//	eval "$(scripts/testenv.sh kafka)" && go run ./bench/peers      # the default cells (about 1 to 1.5 hours)
//	go run ./bench/peers -full                                      # every cell (hours)
//	go run ./bench/peers -nodes 1 -arms consumer -handlers 1ms -keys uniform -orderings KEY -caps 100
//	go run ./bench/peers -docs docs/benchmarks.md                   # and write the peer section
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/loopers/commerce-pipeline/internal/devkafka"
	"github.com/loopers/commerce-pipeline/internal/kafkabroker"
)

func main() {
	if err := mainErr(); err != nil {
		fmt.Fprintln(os.Stderr, "bench/peers:", err)
		os.Exit(1)
	}
}

func mainErr() error {
	if ok, err := runChild(); ok {
		return err
	}
	kind, err := devkafka.Kind(devkafka.Real)
	if err != nil {
		return err
	}
	if kind == devkafka.Embedded {
		// The peers are JVM clients and a CDC engine: the comparison means
		// something only on Apache Kafka's broker.
		fmt.Println("bench/peers runs on Apache Kafka only (make bench KAFKA=real); left out with KAFKA=embedded")
		return nil
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return run(ctx, os.Stdout, os.Args[1:])
}

type options struct {
	nodes []int
	arms  []string

	// The consumer arm.
	handlers  []time.Duration
	keys      []keyset
	orderings []string
	caps      []int
	full      bool
	records   int
	cellTime  time.Duration
	rounds    int
	warmup    bool
	liveRates []int
	liveTime  time.Duration
	liveCap   int

	// The relay arm.
	rates       []int
	latencyTime time.Duration
	drainRows   int
	relayRounds int
	writers     int
	relayPeers  []relayPeer

	docs string
}

func parse(args []string) (options, error) {
	fs := flag.NewFlagSet("peers", flag.ContinueOnError)
	var o options
	nodes := fs.String("nodes", "3,1", "cluster sizes to run every arm on (3: replication factor 3, min.insync.replicas=2)")
	arms := fs.String("arms", "consumer,relay", "arms to run: consumer, relay")
	handlers := fs.String("handlers", "0,1ms,10ms", "consumer handler sleeps per record")
	keys := fs.String("keys", "uniform,zipf,hot,distinct", "consumer key sets: uniform (1,000 keys), zipf (s = 1.1 over 10,000), hot (one key), distinct")
	ords := fs.String("orderings", "KEY,PARTITION,UNORDERED", "consumer orderings")
	caps := fs.String("caps", "100,1000", "concurrency caps, the same on both sides (pcon MaxConcurrency, Parallel Consumer maxConcurrency)")
	fs.BoolVar(&o.full, "full", false, "run every combination of -handlers, -keys, -orderings and -caps; by default each axis is varied alone from the first cell (1 ms, uniform, KEY, the first cap), and every handler runs at every cap")
	fs.IntVar(&o.records, "records", 100_000, "records per consumer cell (fewer where the cell's ceiling, cap ÷ handler time, would take longer than -cell-time)")
	fs.DurationVar(&o.cellTime, "cell-time", 5*time.Second, "how long a sleeping-handler cell runs at its ceiling")
	fs.IntVar(&o.rounds, "rounds", 3, "measured rounds per cell, each side once per round, alternating which goes first")
	fs.BoolVar(&o.warmup, "warmup", true, "run each side once before the rounds, discarded (relay arm: 3 s at the first -rates)")
	liveRates := fs.String("live-rates", "1000,10000", "records/s of the live consumer runs (empty: none)")
	fs.DurationVar(&o.liveTime, "live-time", 10*time.Second, "length of each live run")
	fs.IntVar(&o.liveCap, "live-cap", 100, "concurrency cap of the live runs (1 ms handler, 1,000 keys, KEY)")
	rates := fs.String("rates", "500,2000", "commits/s of the relay latency runs")
	fs.DurationVar(&o.latencyTime, "latency-time", 10*time.Second, "length of each relay latency run")
	fs.IntVar(&o.drainRows, "drain-rows", 100_000, "outbox rows of the relay drain runs (0: none)")
	fs.IntVar(&o.writers, "writers", 8, "connections committing the relay latency runs' rows on the schedule, as commerce-api's concurrent requests do (their commits reach the outbox out of id order)")
	fs.IntVar(&o.relayRounds, "relay-rounds", 3, "runs of every relay-arm side per phase, each round starting with the next side; median (min–max) reported")
	peers := fs.String("relay-peers", "relay,debezium,debezium-tuned,watermill,watermill-tuned", "relay-arm sides")
	fs.StringVar(&o.docs, "docs", "", "also write the results into this Markdown file's peer section (docs/benchmarks.md), between its peers markers")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	var errs []error
	for _, s := range splitList(*nodes) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			errs = append(errs, fmt.Errorf("-nodes: %q", s))
		}
		o.nodes = append(o.nodes, n)
	}
	o.arms = splitList(*arms)
	for _, a := range o.arms {
		if a != "consumer" && a != "relay" {
			errs = append(errs, fmt.Errorf("-arms: unknown arm %q", a))
		}
	}
	for _, s := range splitList(*handlers) {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 || d%time.Millisecond != 0 {
			errs = append(errs, fmt.Errorf("-handlers: %q (whole milliseconds)", s))
		}
		o.handlers = append(o.handlers, d)
	}
	for _, s := range splitList(*keys) {
		if !slices.Contains(keysets, keyset(s)) {
			errs = append(errs, fmt.Errorf("-keys: unknown key set %q", s))
		}
		o.keys = append(o.keys, keyset(s))
	}
	for _, s := range splitList(*ords) {
		if _, ok := orderings[s]; !ok {
			errs = append(errs, fmt.Errorf("-orderings: unknown ordering %q", s))
		}
		o.orderings = append(o.orderings, s)
	}
	o.caps, errs = ints("-caps", *caps, errs)
	o.liveRates, errs = ints("-live-rates", *liveRates, errs)
	o.rates, errs = ints("-rates", *rates, errs)
	for _, s := range splitList(*peers) {
		if !slices.Contains(allRelayPeers, relayPeer(s)) {
			errs = append(errs, fmt.Errorf("-relay-peers: unknown side %q", s))
		}
		o.relayPeers = append(o.relayPeers, relayPeer(s))
	}
	if o.writers < 1 {
		errs = append(errs, errors.New("-writers: at least 1"))
	}
	if len(o.nodes) == 0 || len(o.handlers) == 0 || len(o.keys) == 0 || len(o.orderings) == 0 || len(o.caps) == 0 {
		errs = append(errs, errors.New("-nodes, -handlers, -keys, -orderings and -caps need a value each"))
	}
	return o, errors.Join(errs...)
}

func ints(name, s string, errs []error) ([]int, []error) {
	var out []int
	for _, f := range splitList(s) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			errs = append(errs, fmt.Errorf("%s: %q", name, f))
		}
		out = append(out, n)
	}
	return out, errs
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// cells are the consumer cells to run: every combination with -full, else
// each axis varied alone from the first cell, and every handler at every cap.
func (o options) cells() []consumerCell {
	var out []consumerCell
	add := func(c consumerCell) {
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	if o.full {
		for _, h := range o.handlers {
			for _, k := range o.keys {
				for _, ord := range o.orderings {
					for _, c := range o.caps {
						add(consumerCell{h, k, ord, c})
					}
				}
			}
		}
		return out
	}
	base := consumerCell{o.handlers[0], o.keys[0], o.orderings[0], o.caps[0]}
	if slices.Contains(o.handlers, time.Millisecond) {
		base.handler = time.Millisecond
	}
	for _, c := range o.caps {
		for _, h := range o.handlers {
			add(consumerCell{h, base.keys, base.ordering, c})
		}
	}
	for _, k := range o.keys {
		add(consumerCell{base.handler, k, base.ordering, base.cap})
	}
	for _, ord := range o.orderings {
		add(consumerCell{base.handler, base.keys, ord, base.cap})
	}
	return out
}

// clusterRun is everything measured on one cluster.
type clusterRun struct {
	nodes    int
	broker   string // the header line naming it
	cells    []cellResult
	live     []liveResult
	versions map[side]string
	relay    *relayResults
}

func run(ctx context.Context, out io.Writer, args []string) error {
	o, err := parse(args)
	if err != nil {
		return err
	}
	runs, err := measure(ctx, out, o)
	if err != nil {
		return err
	}
	if o.docs != "" {
		return writeDocs(o.docs, o, runs)
	}
	return nil
}

// measure runs the arms on every cluster size, printing each cluster's
// tables as it finishes.
func measure(ctx context.Context, out io.Writer, o options) ([]clusterRun, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	// Build the Java peers before any broker starts: a missing JDK or Maven
	// fails here, with what to install.
	for _, p := range o.javaPeers() {
		if _, err := p.classpath(ctx); err != nil {
			return nil, err
		}
	}
	var runs []clusterRun
	for _, n := range o.nodes {
		r, err := runCluster(ctx, out, o, self, n)
		if err != nil {
			return nil, err
		}
		runs = append(runs, r)
	}
	return runs, nil
}

func (o options) javaPeers() []javaPeer {
	var ps []javaPeer
	if slices.Contains(o.arms, "consumer") {
		ps = append(ps, parallelConsumerPeer)
	}
	if slices.Contains(o.arms, "relay") && slices.ContainsFunc(o.relayPeers, func(p relayPeer) bool { return p.kind() == debeziumKind }) {
		ps = append(ps, debeziumPeer)
	}
	return ps
}

// brokerProps are the cluster's settings beyond kafkabroker's defaults: a
// new group starts at once instead of after 3 s, for every side alike.
var brokerProps = map[string]string{"group.initial.rebalance.delay.ms": "0"}

func runCluster(ctx context.Context, out io.Writer, o options, self string, nodes int) (clusterRun, error) {
	c, err := kafkabroker.Start(ctx, kafkabroker.Options{Nodes: nodes, Props: brokerProps})
	if err != nil {
		return clusterRun{}, fmt.Errorf("start %d Apache Kafka node(s): %w", nodes, err)
	}
	slog.Info("cluster up", "nodes", nodes)
	defer c.Close()
	rf, minISR := min(nodes, 3), 1
	if nodes >= 3 {
		minISR = 2
	}
	r := clusterRun{
		nodes: nodes,
		broker: fmt.Sprintf("Apache Kafka %s, %d node(s) (KRaft, combined broker/controller, JVM defaults, 512 MB heap), "+
			"replication factor %d, min.insync.replicas=%d, group.initial.rebalance.delay.ms=0, on %s",
			kafkabroker.Version, nodes, rf, minISR, strings.Join(c.Brokers(), ",")),
		versions: map[side]string{},
	}
	fmt.Fprintf(out, "== %d node(s): %s\n\n", nodes, r.broker)
	if slices.Contains(o.arms, "consumer") {
		a := &consumerArm{o: o, brokers: c.Brokers(), rf: int16(rf), self: self, topics: map[string]string{}, versions: r.versions} //nolint:gosec // 1 to 3
		for _, cell := range o.cells() {
			res, err := a.cell(ctx, cell)
			if err != nil {
				return r, err
			}
			r.cells = append(r.cells, res)
		}
		for _, rate := range o.liveRates {
			res, err := a.live(ctx, rate)
			if err != nil {
				return r, err
			}
			r.live = append(r.live, res)
		}
		printConsumers(out, r)
	}
	if slices.Contains(o.arms, "relay") {
		res, err := runRelayArm(ctx, o, c, self)
		if err != nil {
			return r, err
		}
		r.relay = res
		printRelays(out, o, r)
	}
	return r, nil
}
