// Command pcon benchmarks pkg/pcon against a plain sarama consumer group
// that processes each partition sequentially, both on one broker in the same
// run: Apache Kafka's own broker (KAFKA=real, the default; a JVM process on
// loopback), kfake in this process (KAFKA=embedded), or the brokers given
// with -brokers. It prints the broker first, then one table with the
// baseline and the ratio.
//
//	go run ./bench/pcon                 # full run
//	go run ./bench/pcon -records 20000 -slow-records 2000 -memory-records 0 -rounds 1   # quick
//	KAFKA=embedded go run ./bench/pcon  # on kfake
//
// The machine is shared and noisy, so each scenario runs both sides
// -rounds times, alternating, and reports the best of each. Rates are
// clocked from the first record handled, leaving out the group join.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/IBM/sarama"

	"github.com/loopers/commerce-pipeline/internal/devkafka"
	"github.com/loopers/commerce-pipeline/internal/kafka"
	"github.com/loopers/commerce-pipeline/pkg/pcon"
)

type options struct {
	brokers []string
	// inProcess is set when the broker runs in this process (kfake): its
	// copy of the records is then part of the Go heap the memory scenarios
	// sample.
	inProcess     bool
	records       int // per pcon scenario
	slowRecords   int // per sequential-baseline scenario with a sleeping handler
	memoryRecords int
	keys          int
	maxInFlight   int
	inFlightSet   bool // -max-in-flight was given
	concurrency   int  // pcon MaxConcurrency for the sleeping handlers; 0: pcon's default
	noopInFlight  int
	hotRecords    int // per hot-key topic
	hotBaseline   int // records the one-record-per-key baseline drains
	memProfile    string
	cpuProfile    string
	mutexProfile  string
	rounds        int
	latencies     []time.Duration // handler latencies of the main table's rows
}

func main() {
	if err := run(os.Stdout, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(out io.Writer, args []string) error {
	fs := flag.NewFlagSet("pcon-bench", flag.ContinueOnError)
	var o options
	brokers := fs.String("brokers", "", "comma-separated brokers; empty starts the broker the KAFKA variable chooses: real (Apache Kafka, the default) or embedded (kfake, in this process)")
	fs.IntVar(&o.records, "records", 1_000_000, "records per pcon scenario and per no-op baseline")
	fs.IntVar(&o.slowRecords, "slow-records", 6_000, "records for the sequential baselines with a sleeping handler")
	fs.IntVar(&o.memoryRecords, "memory-records", 1_000_000, "backlog for the memory scenario (0 skips it)")
	fs.IntVar(&o.keys, "keys", 1000, "distinct keys")
	fs.IntVar(&o.maxInFlight, "max-in-flight", 5000, "pcon MaxInFlight for the sleeping handlers and the memory run")
	fs.IntVar(&o.concurrency, "max-concurrency", 0, "pcon MaxConcurrency (handler calls at once) for the sleeping handlers; 0 leaves pcon's default, MaxInFlight. When set, MaxInFlight is pcon's default for it unless -max-in-flight is given")
	fs.IntVar(&o.noopInFlight, "noop-max-in-flight", 1000, "pcon MaxInFlight for the no-op handler (1000: pcon's default)")
	fs.IntVar(&o.hotRecords, "hot-records", 1_000_000, "records of each hot-key topic (one key; Zipf over 10,000 keys); 0 skips the hot-key scenarios")
	fs.IntVar(&o.hotBaseline, "hot-baseline-records", 20_000, "records the one-record-per-key baseline drains in the Zipf scenario (a fortieth of it with one key)")
	fs.IntVar(&o.rounds, "rounds", 3, "runs of each side per scenario, alternating; the best of each is reported")
	fs.StringVar(&o.memProfile, "memprofile", "", "write a heap profile taken at the memory scenario's peak to this file")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	fs.StringVar(&o.mutexProfile, "mutexprofile", "", "write a mutex contention profile of the whole run to this file")
	latencies := fs.String("latencies", "0,1ms,5ms", "handler latencies of the main table's rows (comma-separated; 0 is the no-op row), to profile one row alone")
	if err := fs.Parse(args); err != nil {
		return err
	}
	fs.Visit(func(f *flag.Flag) { o.inFlightSet = o.inFlightSet || f.Name == "max-in-flight" })
	for _, s := range splitComma(*latencies) {
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("-latencies: %w", err)
		}
		o.latencies = append(o.latencies, d)
	}
	if o.mutexProfile != "" {
		runtime.SetMutexProfileFraction(5)
		defer func() {
			if f, err := os.Create(o.mutexProfile); err == nil {
				_ = pprof.Lookup("mutex").WriteTo(f, 0)
				f.Close()
			}
		}()
	}
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	b := &bench{o: o}
	if *brokers == "" {
		kind, err := devkafka.Kind(devkafka.Real)
		if err != nil {
			return err
		}
		// The JVM's default compilers: throughput is what is measured.
		k, err := devkafka.Start(context.Background(), devkafka.Options{Kind: kind})
		if err != nil {
			return fmt.Errorf("start the broker (KAFKA=%s): %w", kind, err)
		}
		defer k.Close()
		b.o.brokers, b.o.inProcess = k.Brokers, k.Fake != nil
		fmt.Fprintf(out, "broker: %s; KAFKA=%s, %s, up in %s\n", k.Version, kind, strings.Join(k.Brokers, ","), k.Started.Round(100*time.Millisecond))
	} else {
		b.o.brokers = splitComma(*brokers)
		fmt.Fprintf(out, "broker: %s (given with -brokers)\n", strings.Join(b.o.brokers, ","))
	}
	need := max(o.records, o.slowRecords)
	if err := b.createTopic("bench"); err != nil {
		return err
	}
	if err := b.produce("bench", need); err != nil {
		return err
	}
	fmt.Fprintf(out, "pcon benchmark: Key mode, %d keys, 3 partitions, GOMAXPROCS=%d, %s (no-op handler: MaxInFlight=%d)\n\n",
		o.keys, runtime.GOMAXPROCS(0), b.bounds(), o.noopInFlight)
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tpcon rec/s\tof ceiling\thandlers busy\tbaseline\tbaseline rec/s\tratio\ttarget\t")
	targets := map[time.Duration]func(p, s float64) string{
		0:                func(p, s float64) string { return verdict(p/s >= 0.6, "pcon >= 60% of baseline") },
		time.Millisecond: func(p, s float64) string { return verdict(p >= 150_000, ">= 150,000 rec/s") },
	}
	for _, lat := range o.latencies {
		target := targets[lat]
		if target == nil {
			target = func(float64, float64) string { return "" }
		}
		baseName, n := "sarama group, sequential per partition", o.slowRecords
		if lat == 0 {
			baseName, n = "sarama group, no-op", o.records
		}
		var p, s float64
		var took time.Duration // the mean handler call of pcon's best round
		for range o.rounds {
			pr, prTook, err := b.pcon("bench", o.records, lat)
			if err != nil {
				return err
			}
			if pr > p {
				took = prTook
			}
			sr, err := b.sarama("bench", n, lat)
			if err != nil {
				return err
			}
			p, s = max(p, pr), max(s, sr)
		}
		// The ceiling is the concurrency cap over the handler's time: no
		// consumer holding to the cap can handle records faster.
		// Busy is the mean number of handler calls running (Little's law:
		// the rate times the mean call, as the handler timed it) against
		// the cap: on a loaded machine a sleep overshoots, which lowers
		// the share of the ceiling but not this.
		ofCeiling, busy := "-", "-"
		if lat > 0 {
			ofCeiling = fmt.Sprintf("%.0f %%", 100*p*lat.Seconds()/float64(b.concurrency()))
			busy = fmt.Sprintf("%.0f %% (calls of %v)", 100*p*took.Seconds()/float64(b.concurrency()), took.Round(time.Microsecond))
		}
		fmt.Fprintf(tw, "handler %v\t%.0f\t%s\t%s\t%s\t%.0f\t%.2fx\t%s\t\n", lat, p, ofCeiling, busy, baseName, s, p/s, target(p, s))
	}
	tw.Flush()
	if o.hotRecords > 0 {
		if err := b.hotKeys(out); err != nil {
			return err
		}
	}
	if o.memoryRecords > 0 {
		if err := b.memory(out); err != nil {
			return err
		}
	}
	return nil
}

type bench struct {
	o      options
	groups atomic.Int64
}

// config is the pcon configuration of the sleeping handlers' rows.
func (b *bench) config() pcon.Config {
	c := pcon.Config{MaxInFlight: b.o.maxInFlight, MaxConcurrency: b.o.concurrency}
	if b.o.concurrency > 0 && !b.o.inFlightSet {
		c.MaxInFlight = 0
	}
	return c
}

// concurrency is the cap on handler calls of the sleeping handlers' rows.
func (b *bench) concurrency() int {
	if c := b.config(); c.MaxConcurrency > 0 {
		return c.MaxConcurrency
	}
	return b.o.maxInFlight
}

func (b *bench) bounds() string {
	c := b.config()
	if c.MaxInFlight == 0 {
		return fmt.Sprintf("MaxConcurrency=%d, MaxInFlight pcon's default", c.MaxConcurrency)
	}
	return fmt.Sprintf("MaxConcurrency=%d, MaxInFlight=%d", b.concurrency(), c.MaxInFlight)
}

func (b *bench) group() string { return "bench-" + strconv.FormatInt(b.groups.Add(1), 10) }

func (b *bench) produce(topic string, n int) error {
	return b.produceKeyed(topic, n, func(i int) string { return "k" + strconv.Itoa(i%b.o.keys) })
}

func (b *bench) saramaConfig() *sarama.Config {
	sc := kafka.Settings{}.Config("pcon-bench")
	sc.Consumer.Offsets.Initial = sarama.OffsetOldest
	// Each run is alone in a group of its own, joins once and leaves: the
	// session and heartbeat stay at sarama's defaults (a real broker refuses
	// sessions under its group.min.session.timeout.ms, 6 s). The broker may
	// hold a JoinGroup answer up to the rebalance timeout, so reads wait
	// longer than that.
	sc.Net.ReadTimeout = sc.Consumer.Group.Rebalance.Timeout + 15*time.Second
	sc.Consumer.MaxWaitTime = 50 * time.Millisecond
	// sarama decodes a whole fetch response at once; with compressed
	// batches of small records 1 MiB per partition is ~100k live messages.
	// Both pcon and the baseline use this configuration.
	sc.Consumer.Fetch.Default = 256 << 10
	return sc
}

func sleep(lat time.Duration) {
	if lat > 0 {
		time.Sleep(lat)
	}
}

// pcon measures records/s of a pcon consumer draining n records, and the
// mean handler call.
func (b *bench) pcon(topic string, n int, lat time.Duration) (float64, time.Duration, error) {
	// MaxInFlight is the concurrency a handler needs: thousands for
	// millisecond handlers. A no-op handler runs on GOMAXPROCS shared
	// workers whatever the bound, which then only buffers records: it gets
	// pcon's default.
	cfg := b.config()
	if lat == 0 {
		cfg = pcon.Config{MaxInFlight: b.o.noopInFlight}
	}
	cfg.Brokers, cfg.Group, cfg.Topics = b.o.brokers, b.group(), []string{topic}
	cfg.Sarama, cfg.RevokeGrace = b.saramaConfig(), time.Second
	prog := newProgress(n)
	var took atomic.Int64 // handler nanoseconds, summed
	c, err := pcon.New(cfg, pcon.RecordHandler(func(ctx context.Context, r *pcon.Record) error {
		if lat > 0 {
			start := time.Now()
			sleep(lat)
			took.Add(int64(time.Since(start)))
		}
		prog.add()
		return nil
	}))
	if err != nil {
		return 0, 0, err
	}
	rate, err := measure("pcon", prog, c.Run)
	return rate, time.Duration(took.Load() / int64(n)), err
}

// progress counts handled records. The clock starts at the first record,
// so the time to join the group is left out of both pcon's and the
// baseline's rate.
type progress struct {
	n        int64
	done     atomic.Int64
	first    atomic.Int64 // unix nanos of the first record
	last     time.Time
	finished chan struct{}
}

func newProgress(n int) *progress { return &progress{n: int64(n), finished: make(chan struct{})} }

func (p *progress) add() { p.addN(1) }

func (p *progress) addN(k int) {
	done := p.done.Add(int64(k))
	if done == int64(k) {
		p.first.Store(time.Now().UnixNano())
	}
	if done >= p.n && done-int64(k) < p.n {
		p.last = time.Now()
		close(p.finished)
	}
}

// measure runs consume until every record is handled and returns the rate.
// consume's goroutines carry the profiler label side=side, so that
// `go tool pprof -tagfocus side=pcon` shows one side without the
// in-process broker.
func measure(side string, p *progress, consume func(context.Context) error) (float64, error) {
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go pprof.Do(ctx, pprof.Labels("side", side), func(ctx context.Context) { errc <- consume(ctx) })
	select {
	case <-p.finished:
	case err := <-errc:
		cancel()
		return 0, fmt.Errorf("consumer stopped early: %w", err)
	}
	elapsed := p.last.Sub(time.Unix(0, p.first.Load()))
	n := p.n
	cancel()
	if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
		return 0, err
	}
	return float64(n) / elapsed.Seconds(), nil
}

// seqHandler is the baseline: sarama's own consumer group, each partition
// processed one record at a time.
type seqHandler struct {
	lat  time.Duration
	prog *progress
}

func (seqHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (seqHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h seqHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for m := range claim.Messages() {
		sleep(h.lat)
		sess.MarkMessage(m, "")
		h.prog.add()
	}
	return nil
}

func (b *bench) sarama(topic string, n int, lat time.Duration) (float64, error) {
	h := seqHandler{lat: lat, prog: newProgress(n)}
	return measure("baseline", h.prog, func(ctx context.Context) error {
		// Created here so that its goroutines carry the profiler label.
		g, err := sarama.NewConsumerGroup(b.o.brokers, b.group(), b.saramaConfig())
		if err != nil {
			return err
		}
		defer g.Close()
		for ctx.Err() == nil {
			if err := g.Consume(ctx, []string{topic}, h); err != nil {
				return err
			}
		}
		return nil
	})
}

// memory consumes a large backlog with a 5 ms handler and samples the heap.
func (b *bench) memory(out io.Writer) error {
	// A new group sees the whole bench topic as backlog; only a larger
	// backlog than it holds needs a topic of its own.
	topic := "bench"
	if b.o.memoryRecords > max(b.o.records, b.o.slowRecords) {
		topic = "bench-memory"
		if err := b.createTopic(topic); err != nil {
			return err
		}
		if err := b.produce(topic, b.o.memoryRecords); err != nil {
			return err
		}
	}
	stop := b.sampleHeap()
	rate, _, err := b.pcon(topic, b.o.memoryRecords, 5*time.Millisecond)
	before, peak := stop()
	if err != nil {
		return err
	}
	brokerCopy := ""
	if b.o.inProcess {
		brokerCopy = ", which includes the in-process broker's copy of the backlog"
	}
	fmt.Fprintf(out, "\nmemory: %d-record backlog, 5ms handler: %.0f rec/s, peak Go heap %.1f MB (%.1f MB before consuming%s); target < 150 MB: %s\n",
		b.o.memoryRecords, rate, mb(peak), mb(before), brokerCopy, verdict(peak < 150<<20, "peak heap"))
	return nil
}

func (b *bench) writeHeapProfile() {
	if b.o.memProfile == "" {
		return
	}
	f, err := os.Create(b.o.memProfile)
	if err != nil {
		return
	}
	defer f.Close()
	_ = pprof.Lookup("heap").WriteTo(f, 0)
}

// createTopic creates topic with 3 partitions unless it exists, and waits
// until every partition has a leader.
func (b *bench) createTopic(topic string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return kafka.Settings{Brokers: b.o.brokers}.CreateTopics(ctx, []kafka.TopicSpec{{Name: topic, Partitions: 3, Replication: 1}})
}

// heapBytes reads the live heap without stopping the world.
func heapBytes() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func verdict(ok bool, what string) string {
	if ok {
		return "met (" + what + ")"
	}
	return "MISSED (" + what + ")"
}

func mb(b uint64) float64 { return float64(b) / (1 << 20) }

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	return out
}
