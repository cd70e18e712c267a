// Command relay benchmarks the outbox relay binary against a real PostgreSQL
// and Apache Kafka's own broker (KAFKA=real, the default; JVM processes on
// loopback) or kfake in this process (KAFKA=embedded). On Apache Kafka it
// runs everything twice, on a fresh cluster each time: first on three nodes
// (every topic with three replicas and min.insync.replicas=2, so acks=all
// waits for a follower, as in production), then on one node, whose figures
// are printed beside (-nodes chooses). Each run gets topics of its own under
// a fresh KAFKA_PREFIX on that cluster. A fresh cluster first takes records,
// unmeasured, for -warmup and until its JIT compilers settle: cold, the
// brokers' compiler threads take a core from whichever side runs first.
//
//  1. latency: commit of an outbox row to its record being readable in
//     Kafka, at -rate rows/s (500) for -duration, each commit followed by the
//     relay's wake-up as commerce-api sends it; first, before the drains,
//     whose topics' deletion would fall into it;
//  2. drain: -rows outbox rows (100,000) committed at once, published by the
//     relay with its shipped defaults (-drain-batch overrides the batch size,
//     and the table says so), against the raw producer the relay wraps, on
//     the same cluster: a franz-go client with the relay's own producer
//     options, sending the same records with no database; and, for
//     reference, sarama's async producer (the relay's producer before
//     franz-go) with the same guarantees. The machine is shared, so every
//     side runs -rounds times, in turn, and the fastest run of each is
//     reported, with the CPU it cost per 1,000 events (from /proc): the
//     producing process (the relay, or this program for the baseline), the
//     PostgreSQL backends serving the relay, and the brokers. On a machine
//     whose cores the brokers share, that cost is what bounds a drain.
//
// It runs the real service binary (built into a temporary directory), so the
// numbers include everything the deployed relay does. Each table's first
// line names the cluster. Run it from the module root:
//
//	eval "$(scripts/testenv.sh kafka)" && go run ./bench/relay
//	eval "$(scripts/testenv.sh kafka)" && go run ./bench/relay -rows 2000 -rounds 1 -rate 100 -duration 2s   # a quick check that it runs
//	eval "$(scripts/testenv.sh)" && KAFKA=embedded go run ./bench/relay -rows 20000 -rounds 1 -duration 3s
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	neturl "net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/IBM/sarama"
	"github.com/cloudevents/sdk-go/protocol/kafka_sarama/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/loopers/commerce-pipeline/bench/internal/benchkit"
	"github.com/loopers/commerce-pipeline/internal/devkafka"
	"github.com/loopers/commerce-pipeline/internal/kafka"
	"github.com/loopers/commerce-pipeline/internal/outbox"
	"github.com/loopers/commerce-pipeline/internal/pg"
	"github.com/loopers/commerce-pipeline/internal/procstat"
	"github.com/loopers/commerce-pipeline/internal/testenv"
	"github.com/loopers/commerce-pipeline/pkg/events"
)

type options struct {
	rows       int
	drainBatch int
	nodes      string
	rate       int
	duration   time.Duration
	keep       bool
	rounds     int
	pprof      string
	pprofSecs  int
	warmup     time.Duration
}

func main() {
	var o options
	flag.IntVar(&o.rows, "rows", 100_000, "outbox rows to drain")
	flag.IntVar(&o.drainBatch, "drain-batch", 0, "OUTBOX_RELAY_BATCH_SIZE for the drain run; 0: the relay's shipped default (a figure with another value is labelled with it)")
	flag.StringVar(&o.nodes, "nodes", benchkit.DefaultNodes, "cluster sizes to run on, each on a fresh cluster (KAFKA=real): three nodes, one node's figures beside")
	flag.IntVar(&o.rate, "rate", 500, "rows per second for the latency run")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "length of the latency run")
	flag.BoolVar(&o.keep, "keep", false, "keep the temporary directory with the relay logs")
	flag.StringVar(&o.pprof, "pprof", "", "directory to write the relay's CPU profile of each drain to, taken from its commit for -pprof-seconds (size -rows to last longer)")
	flag.IntVar(&o.pprofSecs, "pprof-seconds", 2, "how long each drain's profile runs")
	flag.IntVar(&o.rounds, "rounds", 3, "drain runs of each side, alternating; the fastest of each is reported (the machine is shared)")
	flag.DurationVar(&o.warmup, "warmup", 10*time.Second, "on Apache Kafka, how long at least the brokers take records, unmeasured, before the first round, and then until their JIT compilers settle (0 skips)")
	flag.Parse()
	if err := run(o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench/relay:", err)
		os.Exit(1)
	}
}

func run(o options, out io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.pprof != "" {
		if err := os.MkdirAll(o.pprof, 0o755); err != nil {
			return err
		}
	}
	reg := events.NewRegistry()
	kind, err := devkafka.Kind(devkafka.Real)
	if err != nil {
		return err
	}
	sizes, err := benchkit.ParseNodes(o.nodes, kind)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "bench-relay-")
	if err != nil {
		return err
	}
	defer func() {
		if o.keep {
			fmt.Fprintln(os.Stderr, "bench/relay: relay logs kept in", tmp)
			return
		}
		os.RemoveAll(tmp)
	}()
	bin := filepath.Join(tmp, "outbox-relay")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./services/outbox-relay")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("build the relay (run from the module root): %w", err)
	}
	payloads, err := makePayloads(reg, o.rows)
	if err != nil {
		return err
	}
	for i, n := range sizes {
		if i > 0 {
			fmt.Fprintln(out)
		}
		if err := runOn(ctx, o, kind, n, reg, bin, filepath.Join(tmp, strconv.Itoa(n)), payloads, out); err != nil {
			return fmt.Errorf("on %s: %w", benchkit.ClusterLabel(n), err)
		}
	}
	return nil
}

// runOn measures the relay on a fresh cluster of n nodes (KAFKA=real) or
// the embedded broker, and prints its table.
func runOn(ctx context.Context, o options, kind string, n int, reg *events.Registry, bin, dir string, payloads []payload, out io.Writer) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// The JVM's default compilers: throughput is what is measured.
	broker, err := devkafka.Start(ctx, devkafka.Options{Kind: kind, Nodes: n})
	if err != nil {
		return fmt.Errorf("start the broker (KAFKA=%s): %w", kind, err)
	}
	defer broker.Close()
	fmt.Fprintf(out, "broker: %s, %s; KAFKA=%s, %s, up in %s\n", broker.Version, benchkit.ClusterLabel(n), kind, strings.Join(broker.Brokers, ","), broker.Started.Round(100*time.Millisecond))
	topics := &topicSets{brokers: broker.Brokers, reg: reg, replication: devkafka.Replication(n)}
	if broker.Cluster != nil {
		for _, node := range broker.Cluster.Nodes() {
			topics.pids = append(topics.pids, node.Pid())
		}
	}

	if kind == devkafka.Real && o.warmup > 0 {
		took, settled, dropWarm, err := warmBrokers(ctx, reg, topics, payloads, o.warmup)
		if err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
		// Deleted after the measurements: a deletion's work on the brokers
		// would fall into them.
		defer dropWarm()
		state := "their JIT compilers settled"
		if !settled {
			state = "their JIT compilers still busy after " + warmupMax.String()
		}
		fmt.Fprintf(out, "warm-up: the brokers took %d records/s for %s, not measured (%s)\n", warmupRate, took.Round(time.Second), state)
	}
	// The latency first, on the warm cluster: the drains' topics are
	// deleted as they end, and the brokers' work on that (a minute later,
	// file.delete.delay.ms) would fall into it.
	lat, err := latencyRun(ctx, reg, topics, bin, dir, o)
	if err != nil {
		return fmt.Errorf("latency: %w", err)
	}
	var baseline, drain timed
	var baselineMapped, saramaBase timed // their CPU is not read
	for round := range max(1, o.rounds) {
		b, bm, err := rawProducer(ctx, reg, topics, payloads)
		if err != nil {
			return fmt.Errorf("baseline (franz-go): %w", err)
		}
		sb, _, err := rawSarama(ctx, reg, topics, payloads)
		if err != nil {
			return fmt.Errorf("baseline (sarama): %w", err)
		}
		d, err := drainRun(ctx, reg, topics, bin, dir, o, payloads, round+1)
		if err != nil {
			return fmt.Errorf("drain: %w", err)
		}
		baseline, drain = fastestRun(baseline, b), fastestRun(drain, d)
		baselineMapped, saramaBase = fastestRun(baselineMapped, timed{elapsed: bm}), fastestRun(saramaBase, timed{elapsed: sb})
	}

	drainRate := float64(o.rows) / drain.elapsed.Seconds()
	baseRate := float64(o.rows) / baseline.elapsed.Seconds()
	ratio := drainRate / baseRate
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "MISSED"
	}
	// The relay as it ships, unless -drain-batch says otherwise: then the
	// figure is labelled with it.
	relayConfig := "the relay's shipped defaults"
	if o.drainBatch > 0 {
		relayConfig = fmt.Sprintf("drain with OUTBOX_RELAY_BATCH_SIZE=%d, not the shipped default", o.drainBatch)
	}
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "relay benchmark on %s\t(%d rows; %s; fastest of %d runs each; latency at %d rows/s for %s, %d samples)\n",
		benchkit.ClusterLabel(n), o.rows, relayConfig, max(1, o.rounds), o.rate, o.duration, lat.n)
	fmt.Fprintln(w, "metric\toutbox-relay\tbaseline: raw franz-go producer, the relay's options\tratio\ttarget\tresult")
	fmt.Fprintf(w, "drain %d rows (events/s)\t%.0f (%s)\t%.0f (%s)\t%.2f\t≥ 50000 events/s and ≥ 0.50 × baseline\t%s\n",
		o.rows, drainRate, drain.elapsed.Round(time.Millisecond), baseRate, baseline.elapsed.Round(time.Millisecond), ratio,
		verdict(drainRate >= 50_000 && ratio >= 0.5))
	if drain.cpu.measured && baseline.cpu.measured {
		// What the drain cost each side of the machine, per 1,000 events:
		// on two cores shared with the brokers, throughput is bounded by it.
		perK := func(d time.Duration) float64 { return d.Seconds() * 1000 / float64(o.rows) }
		fmt.Fprintf(w, "  CPU s per 1,000 events: producer / PostgreSQL / brokers = total\t%.3f / %.3f / %.3f = %.3f\t%.3f / - / %.3f = %.3f\t%.2f\t(for reference)\t-\n",
			perK(drain.cpu.side), perK(drain.cpu.postgres), perK(drain.cpu.brokers), perK(drain.cpu.total()),
			perK(baseline.cpu.side), perK(baseline.cpu.brokers), perK(baseline.cpu.total()),
			drain.cpu.total().Seconds()/baseline.cpu.total().Seconds())
	}
	mappedRate := float64(o.rows) / baselineMapped.elapsed.Seconds()
	fmt.Fprintf(w, "  same, baseline incl. the SDK's CloudEvents mapping\t%.0f (%s)\t%.0f (%s)\t%.2f\t(for reference)\t-\n",
		drainRate, drain.elapsed.Round(time.Millisecond), mappedRate, baselineMapped.elapsed.Round(time.Millisecond), drainRate/mappedRate)
	saramaRate := float64(o.rows) / saramaBase.elapsed.Seconds()
	fmt.Fprintf(w, "  same, baseline: raw sarama async producer (the relay's before)\t%.0f (%s)\t%.0f (%s)\t%.2f\t(for reference)\t-\n",
		drainRate, drain.elapsed.Round(time.Millisecond), saramaRate, saramaBase.elapsed.Round(time.Millisecond), drainRate/saramaRate)
	fmt.Fprintf(w, "commit → Kafka latency p50\t%s\t-\t-\t-\t-\n", lat.p50.Round(10*time.Microsecond))
	fmt.Fprintf(w, "commit → Kafka latency p99\t%s\t-\t-\t≤ 50ms\t%s\n", lat.p99.Round(10*time.Microsecond), verdict(lat.p99 <= 50*time.Millisecond))
	fmt.Fprintf(w, "commit → Kafka latency max\t%s\t-\t-\t-\t-\n", lat.max.Round(10*time.Microsecond))
	return w.Flush()
}

// The warm-up's pace and longest run.
const (
	warmupRate = 5000
	warmupMax  = 3 * time.Minute
)

// warmBrokers sends the payloads' records with the relay's producer
// options, at warmupRate, to topics of their own, for at least least and
// until the brokers' JIT compilers have settled (benchkit.WarmUp); drop
// deletes those topics. Cold, the first side measured would pay for the
// compiling.
func warmBrokers(ctx context.Context, reg *events.Registry, topics *topicSets, payloads []payload, least time.Duration) (took time.Duration, settled bool, drop func(), err error) {
	k, drop, err := topics.next(ctx, "warmup")
	if err != nil {
		return 0, false, nil, err
	}
	defer func() {
		if err != nil {
			drop()
		}
	}()
	cl, err := kgo.NewClient(k.ProducerOptions("bench-warmup", sendTimeout)...)
	if err != nil {
		return 0, false, nil, err
	}
	defer cl.Close()
	recs, err := recordsOf(ctx, reg, k, payloads)
	if err != nil {
		return 0, false, nil, err
	}
	next := 0
	const tick = 100 * time.Millisecond
	step := func(ctx context.Context) error {
		for range 5 * time.Second / tick {
			began := time.Now()
			batch := make([]*kgo.Record, warmupRate*int(tick)/int(time.Second))
			for i := range batch {
				r := *recs[next%len(recs)] // a copy: the producer fills in its own fields
				batch[i], next = &r, next+1
			}
			if err := cl.ProduceSync(ctx, batch...).FirstErr(); err != nil {
				return err
			}
			time.Sleep(tick - time.Since(began))
		}
		return nil
	}
	took, settled, err = benchkit.WarmUp(ctx, topics.pids, least, max(least, warmupMax), step)
	return took, settled, drop, err
}

// timed is one run: how long it took and the CPU it cost.
type timed struct {
	elapsed time.Duration
	cpu     cpuUse
}

// fastestRun returns the faster of two runs, a zero one counting as none.
func fastestRun(a, b timed) timed {
	if a.elapsed == 0 || (b.elapsed != 0 && b.elapsed < a.elapsed) {
		return b
	}
	return a
}

// cpuUse is the CPU a run cost: the producing process (the relay, or this
// one for a baseline), the PostgreSQL backends serving the relay, and the
// brokers.
type cpuUse struct {
	side, postgres, brokers time.Duration
	measured                bool // false on the embedded broker, which runs in this process
}

func (c cpuUse) total() time.Duration { return c.side + c.postgres + c.brokers }

// cpuReading is the CPU time used so far by what a run counts.
type cpuReading struct {
	side, brokers time.Duration
	backends      map[int]time.Duration
}

// benchApp is the application_name of this program's own connections, whose
// backends (the cursor polls of a drain) are not the relay's cost.
const benchApp = "bench-relay"

// readCPU reads the CPU time of side, of the brokers, and, with pool, of
// the backends serving the pool's database other than this program's.
func (t *topicSets) readCPU(ctx context.Context, side int, pool *pgxpool.Pool) (cpuReading, error) {
	var r cpuReading
	var err error
	if r.side, err = procstat.ProcessCPU(side); err != nil {
		return r, err
	}
	for _, pid := range t.pids {
		c, err := procstat.ProcessCPU(pid)
		if err != nil {
			return r, err
		}
		r.brokers += c
	}
	if pool == nil {
		return r, nil
	}
	r.backends, err = benchkit.BackendCPU(ctx, pool, "application_name <> $1", benchApp)
	if err != nil {
		return r, err
	}
	return r, nil
}

// since is the CPU used from before to r; a backend that started in
// between counts whole.
func (r cpuReading) since(before cpuReading, measured bool) cpuUse {
	u := cpuUse{side: r.side - before.side, brokers: r.brokers - before.brokers, measured: measured}
	for pid, c := range r.backends {
		u.postgres += c - before.backends[pid]
	}
	return u
}

// payload is one event as the outbox stores it.
type payload struct {
	eventID string
	rec     events.Record
}

// source is the CloudEvents source of the benchmark's events, as if
// commerce-api had written them.
const source = "commerce-api"

func (p payload) entry() outbox.Entry {
	return outbox.Entry{EventID: p.eventID, Source: source, Record: p.rec}
}

func makePayloads(reg *events.Registry, n int) ([]payload, error) {
	out := make([]payload, n)
	for i := range out {
		var ev any
		p := int64(i%500 + 1)
		switch i % 4 {
		case 0:
			ev = events.ProductViewedV1{ProductID: p, UserID: "user-" + strconv.Itoa(i%977)}
		case 1:
			ev = events.LikeCreatedV1{UserID: "user-" + strconv.Itoa(i%977), ProductID: p}
		case 2:
			ev = events.OrderPaidV1{OrderID: int64(i + 1), PaymentID: int64(i + 1), Amount: 12000,
				Items: []events.OrderItem{{ProductID: p, Quantity: 2, UnitPrice: 6000}}}
		default:
			ev = events.LikeCanceledV1{UserID: "user-" + strconv.Itoa(i%977), ProductID: p}
		}
		rec, err := reg.Marshal(ev)
		if err != nil {
			return nil, err
		}
		out[i] = payload{eventID: uuid.NewString(), rec: rec}
	}
	return out, nil
}

// topicSets hands each run of the benchmark the event topics of its own,
// under a fresh prefix on the cluster: a run finds its topics empty, and
// counts only what it wrote.
type topicSets struct {
	brokers     []string
	reg         *events.Registry
	replication int16 // the cluster's: three replicas from three nodes on
	pids        []int // the nodes' processes, whose CPU each run reads (none when embedded)
	n           int
}

// next creates the event topics (3 partitions) under a new prefix and
// returns their settings, and drop, which deletes them.
func (t *topicSets) next(ctx context.Context, what string) (k kafka.Settings, drop func(), err error) {
	t.n++
	k = kafka.Settings{Brokers: t.brokers, Prefix: fmt.Sprintf("bench-%s-%d.", what, t.n)}
	specs := make([]kafka.TopicSpec, 0, len(t.reg.Topics()))
	for _, name := range k.Topics(t.reg.Topics()) {
		specs = append(specs, kafka.TopicSpec{Name: name, Partitions: 3, Replication: t.replication})
	}
	drop = func() {
		if err := k.DeleteTopics(k.Topics(t.reg.Topics())...); err != nil {
			fmt.Fprintln(os.Stderr, "bench/relay:", err)
		}
	}
	if err := k.CreateTopics(ctx, specs); err != nil {
		drop()
		return k, nil, err
	}
	return k, drop, nil
}

// sendTimeout is the relay's OUTBOX_RELAY_SEND_TIMEOUT default, which its
// producer options take.
const sendTimeout = 5 * time.Second

// rawProducer sends the payloads, mapped to the same CloudEvents records as
// the relay sends, with a bare franz-go client on the relay's producer
// options and no database. It returns the time from the first send to the
// last acknowledgement (records mapped beforehand), and the time including
// the mapping (done on every CPU, with the SDK's binding).
func rawProducer(ctx context.Context, reg *events.Registry, topics *topicSets, payloads []payload) (send timed, withMapping time.Duration, err error) {
	k, drop, err := topics.next(ctx, "baseline")
	if err != nil {
		return timed{}, 0, err
	}
	defer drop()
	cl, err := kgo.NewClient(k.ProducerOptions("bench-baseline", sendTimeout)...)
	if err != nil {
		return timed{}, 0, err
	}
	defer cl.Close()
	// Connected, as the relay's producer is once the relay is ready.
	if err := cl.Ping(ctx); err != nil {
		return timed{}, 0, err
	}

	mapStart := time.Now()
	recs, err := recordsOf(ctx, reg, k, payloads)
	if err != nil {
		return timed{}, 0, err
	}
	mapping := time.Since(mapStart)
	cpuBefore, err := topics.readCPU(ctx, os.Getpid(), nil)
	if err != nil {
		return timed{}, 0, err
	}
	start := time.Now()
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed error
	)
	wg.Add(len(recs))
	for _, r := range recs {
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				failed = errors.Join(failed, err)
				mu.Unlock()
			}
			wg.Done()
		})
	}
	wg.Wait()
	if failed != nil {
		return timed{}, 0, failed
	}
	send.elapsed = time.Since(start)
	cpuAfter, err := topics.readCPU(ctx, os.Getpid(), nil)
	if err != nil {
		return timed{}, 0, err
	}
	send.cpu = cpuAfter.since(cpuBefore, len(topics.pids) > 0)
	return send, mapping + send.elapsed, nil
}

// recordsOf maps payloads to the franz-go records the relay would send
// to k's topics.
func recordsOf(ctx context.Context, reg *events.Registry, k kafka.Settings, payloads []payload) ([]*kgo.Record, error) {
	msgs, err := mapAll(ctx, reg, k, payloads)
	if err != nil {
		return nil, err
	}
	recs := make([]*kgo.Record, len(msgs))
	for i, m := range msgs {
		if recs[i], err = toRecord(m); err != nil {
			return nil, err
		}
	}
	return recs, nil
}

// toRecord is the franz-go record of a sarama message: the same topic, key,
// value and headers, in order.
func toRecord(m *sarama.ProducerMessage) (*kgo.Record, error) {
	r := &kgo.Record{Topic: m.Topic}
	var err error
	if m.Key != nil {
		if r.Key, err = m.Key.Encode(); err != nil {
			return nil, err
		}
	}
	if m.Value != nil {
		if r.Value, err = m.Value.Encode(); err != nil {
			return nil, err
		}
	}
	r.Headers = make([]kgo.RecordHeader, len(m.Headers))
	for i, h := range m.Headers {
		r.Headers[i] = kgo.RecordHeader{Key: string(h.Key), Value: h.Value}
	}
	return r, nil
}

// saramaConfig is the configuration of the sarama async producer the
// relay used before franz-go, with the same guarantees (the pipeline's base
// client configuration, acks=all, idempotent, one request in flight, 3
// retries, the hash partitioner), for the reference row.
func saramaConfig(k kafka.Settings) *sarama.Config {
	cfg := k.Config("bench-baseline")
	cfg.Producer.Idempotent = true
	cfg.Net.MaxOpenRequests = 1
	cfg.Producer.Retry.Max = 3
	cfg.Producer.Retry.Backoff = 50 * time.Millisecond
	cfg.Producer.Timeout = sendTimeout
	cfg.Producer.Partitioner = sarama.NewHashPartitioner
	cfg.ChannelBufferSize = 4096
	cfg.Metadata.AllowAutoTopicCreation = false
	return cfg
}

// rawSarama is rawProducer with sarama's async producer.
func rawSarama(ctx context.Context, reg *events.Registry, topics *topicSets, payloads []payload) (send, withMapping time.Duration, err error) {
	k, drop, err := topics.next(ctx, "sarama")
	if err != nil {
		return 0, 0, err
	}
	defer drop()
	producer, err := sarama.NewAsyncProducer(k.Brokers, saramaConfig(k))
	if err != nil {
		return 0, 0, err
	}
	defer producer.Close()

	mapStart := time.Now()
	msgs, err := mapAll(ctx, reg, k, payloads)
	if err != nil {
		return 0, 0, err
	}
	mapping := time.Since(mapStart)
	start := time.Now()
	errc := make(chan error, 1)
	go func() {
		var failed error
		for range len(msgs) {
			select {
			case <-producer.Successes():
			case e := <-producer.Errors():
				failed = errors.Join(failed, e)
			}
		}
		errc <- failed
	}()
	for _, m := range msgs {
		producer.Input() <- m
	}
	if err := <-errc; err != nil {
		return 0, 0, err
	}
	send = time.Since(start)
	return send, mapping + send, nil
}

// mapAll maps payloads to CloudEvents records in binary content mode, on
// every CPU.
func mapAll(ctx context.Context, reg *events.Registry, k kafka.Settings, payloads []payload) ([]*sarama.ProducerMessage, error) {
	msgs := make([]*sarama.ProducerMessage, len(payloads))
	errs := make([]error, runtime.GOMAXPROCS(0))
	now := time.Now()
	wctx := binding.WithForceBinary(kafka_sarama.WithSkipKeyMapping(ctx))
	var wg sync.WaitGroup
	for w := range errs {
		wg.Go(func() {
			for i := w; i < len(payloads); i += len(errs) {
				p := payloads[i]
				topic, err := events.TopicOf(p.rec.Type)
				if err != nil {
					errs[w] = err
					return
				}
				ce, err := reg.ToCloudEvent(events.Envelope{ID: p.eventID, Source: source, Time: now, Sequence: int64(i + 1), Record: p.rec})
				if err != nil {
					errs[w] = err
					return
				}
				pm := &sarama.ProducerMessage{Topic: k.Topic(topic), Key: sarama.StringEncoder(p.rec.AggregateID)}
				if err := kafka_sarama.WriteProducerMessage(wctx, binding.ToMessage(&ce), pm); err != nil {
					errs[w] = err
					return
				}
				msgs[i] = pm
			}
		})
	}
	wg.Wait()
	return msgs, errors.Join(errs...)
}

// relayProcess runs the relay binary until stop is called.
type relayProcess struct {
	cmd  *exec.Cmd
	done chan error
}

func startRelay(ctx context.Context, bin, dir, name string, env map[string]string) (*relayProcess, error) {
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "ADMIN_ADDR=127.0.0.1:0", "CLUSTER_NODE_ID="+name)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	p := &relayProcess{cmd: cmd, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait(); logf.Close() }()
	return p, nil
}

func (p *relayProcess) stop() error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		return err
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		return errors.New("relay did not stop within 15s of SIGTERM")
	}
}

// waitFor polls cond every step until it holds or the timeout passes.
func waitFor(ctx context.Context, timeout, step time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s", timeout, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(step):
		}
	}
}

// withApp returns the connection URL u with application_name app.
func withApp(u, app string) string {
	p, err := neturl.Parse(u)
	if err != nil {
		return u // pg.Open names the fault
	}
	q := p.Query()
	q.Set("application_name", app)
	p.RawQuery = q.Encode()
	return p.String()
}

type bed struct {
	pool *pgxpool.Pool
	// wake tells the relay about a commit, as commerce-api does after each
	// of its commits: no trigger does (migration 00013).
	wake  *pg.Notifier
	kafka kafka.Settings // the relay's KAFKA_BROKERS and KAFKA_PREFIX
	relay *relayProcess
	close func()
}

// newBed starts a fresh database, event topics of its own and the relay
// with env, and waits until the relay leads.
func newBed(ctx context.Context, topics *topicSets, bin, dir, name string, env map[string]string) (*bed, error) {
	url, drop, err := testenv.NewDatabase(ctx)
	if err != nil {
		return nil, err
	}
	k, dropTopics, err := topics.next(ctx, name)
	if err != nil {
		_ = drop()
		return nil, err
	}
	// This program's connections are named, so that the relay's backends
	// can be told from them.
	db, err := pg.Open(ctx, withApp(url, benchApp), pg.Options{})
	if err != nil {
		dropTopics()
		_ = drop()
		return nil, err
	}
	b := &bed{pool: db.Pool, wake: db.NewNotifier(outbox.Channel), kafka: k}
	b.close = func() {
		if b.relay != nil {
			if err := b.relay.stop(); err != nil {
				fmt.Fprintln(os.Stderr, "bench/relay: stop relay:", err)
			}
		}
		b.wake.Close()
		db.Close()
		dropTopics()
		_ = drop()
	}
	env["DATABASE_URL"] = url
	env["KAFKA_BROKERS"] = strings.Join(k.Brokers, ",")
	env["KAFKA_PREFIX"] = k.Prefix
	if b.relay, err = startRelay(ctx, bin, dir, name, env); err != nil {
		b.close()
		return nil, err
	}
	err = waitFor(ctx, 30*time.Second, 10*time.Millisecond, "the relay to take the lease", func() (bool, error) {
		l, err := outbox.ReadLeadership(ctx, b.pool.QueryRow)
		return l.Leader != nil && l.Leader.Owner == name, err
	})
	if err != nil {
		b.close()
		return nil, fmt.Errorf("%w (relay log: %s)", err, filepath.Join(dir, name+".log"))
	}
	return b, nil
}

func drainRun(ctx context.Context, reg *events.Registry, topics *topicSets, bin, dir string, o options, payloads []payload, round int) (timed, error) {
	env := map[string]string{}
	if o.drainBatch > 0 {
		env["OUTBOX_RELAY_BATCH_SIZE"] = strconv.Itoa(o.drainBatch)
	}
	admin, err := freeAddr()
	if err != nil {
		return timed{}, err
	}
	env["ADMIN_ADDR"] = admin
	b, err := newBed(ctx, topics, bin, dir, "drain", env)
	if err != nil {
		return timed{}, err
	}
	defer b.close()
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		return timed{}, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.CopyFrom(ctx, pgx.Identifier{"outbox"}, outbox.Columns,
		pgx.CopyFromSlice(len(payloads), func(i int) ([]any, error) {
			return payloads[i].entry().Values(), nil
		}))
	if err != nil {
		return timed{}, fmt.Errorf("fill the outbox: %w", err)
	}
	var last int64
	if err := tx.QueryRow(ctx, `SELECT max(id) FROM outbox`).Scan(&last); err != nil {
		return timed{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return timed{}, err
	}
	cpuBefore, err := topics.readCPU(ctx, b.relay.cmd.Process.Pid, b.pool)
	if err != nil {
		return timed{}, err
	}
	start := time.Now()
	b.wake.Notify()
	profiled := make(chan error, 1)
	if o.pprof != "" {
		go func() {
			profiled <- benchkit.FetchProfile(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", admin, o.pprofSecs),
				filepath.Join(o.pprof, fmt.Sprintf("drain-%d.pprof", round)))
		}()
	} else {
		profiled <- nil
	}
	err = waitFor(ctx, 5*time.Minute, 5*time.Millisecond, "the relay to drain the outbox", func() (bool, error) {
		cursor, err := outbox.ReadCursor(ctx, b.pool.QueryRow)
		return cursor >= last, err
	})
	elapsed := time.Since(start)
	if err != nil {
		return timed{}, err
	}
	cpuAfter, err := topics.readCPU(ctx, b.relay.cmd.Process.Pid, b.pool)
	if err != nil {
		return timed{}, err
	}
	if err := <-profiled; err != nil {
		fmt.Fprintln(os.Stderr, "bench/relay: profile:", err)
	}
	if n, err := countRecords(ctx, b.kafka, reg); err != nil || n < int64(len(payloads)) {
		return timed{}, fmt.Errorf("kafka holds %d records, want %d (%w)", n, len(payloads), err)
	}
	return timed{elapsed: elapsed, cpu: cpuAfter.since(cpuBefore, len(topics.pids) > 0)}, nil
}

// freeAddr returns a loopback address with a port nobody listens on now.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// countRecords reads every record of the event topics once.
func countRecords(ctx context.Context, k kafka.Settings, reg *events.Registry) (int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.ConsumeTopics(k.Topics(reg.Topics())...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	var n int64
	idle := 0
	for idle < 5 {
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		fs := cl.PollFetches(pctx)
		cancel()
		got := int64(fs.NumRecords())
		if got == 0 {
			idle++
		} else {
			idle = 0
		}
		n += got
	}
	return n, ctx.Err()
}

type latency struct {
	n             int
	p50, p99, max time.Duration
}

func latencyRun(ctx context.Context, reg *events.Registry, topics *topicSets, bin, dir string, o options) (latency, error) {
	b, err := newBed(ctx, topics, bin, dir, "latency", map[string]string{})
	if err != nil {
		return latency{}, err
	}
	defer b.close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.kafka.Brokers...), kgo.ConsumeTopics(b.kafka.Topics(reg.Topics())...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		return latency{}, err
	}
	defer cl.Close()

	var (
		mu        sync.Mutex
		committed = map[string]time.Time{}
		arrived   = map[string]time.Time{}
	)
	total := int(o.duration.Seconds() * float64(o.rate))
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	consumed := make(chan struct{})
	go func() {
		defer close(consumed)
		for cctx.Err() == nil {
			fs := cl.PollFetches(cctx)
			now := time.Now()
			mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				for _, h := range r.Headers {
					if h.Key == "ce_id" {
						arrived[string(h.Value)] = now
					}
				}
			})
			done := len(arrived) >= total
			mu.Unlock()
			if done {
				return
			}
		}
	}()

	payloads, err := makePayloads(reg, total)
	if err != nil {
		return latency{}, err
	}
	tick := time.NewTicker(time.Second / time.Duration(o.rate))
	defer tick.Stop()
	for _, p := range payloads {
		select {
		case <-ctx.Done():
			return latency{}, ctx.Err()
		case <-tick.C:
		}
		_, err := outbox.Insert(ctx, b.pool.QueryRow, p.entry())
		now := time.Now()
		if err != nil {
			return latency{}, err
		}
		b.wake.Notify()
		mu.Lock()
		committed[p.eventID] = now
		mu.Unlock()
	}
	select {
	case <-consumed:
	case <-time.After(30 * time.Second):
		return latency{}, fmt.Errorf("only %d of %d records arrived", len(arrived), total)
	}
	mu.Lock()
	defer mu.Unlock()
	var ds []time.Duration
	for id, at := range committed {
		ds = append(ds, max(arrived[id].Sub(at), 0))
	}
	slices.Sort(ds)
	pct := func(p float64) time.Duration { return ds[min(len(ds)-1, int(float64(len(ds))*p))] }
	return latency{n: len(ds), p50: pct(0.50), p99: pct(0.99), max: ds[len(ds)-1]}, nil
}
