package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/loopers/commerce-pipeline/internal/kafka"
)

// consumerPartitions is the partition count of every consumer-arm topic.
const consumerPartitions = 12

// keyset is how a backlog's records are keyed.
type keyset string

const (
	uniformKeys  keyset = "uniform" // 1,000 keys, round robin
	zipfKeys     keyset = "zipf"    // Zipf (s = 1.1) over 10,000 keys
	hotKey       keyset = "hot"     // one key
	distinctKeys keyset = "distinct"
)

var keysets = []keyset{uniformKeys, zipfKeys, hotKey, distinctKeys}

func (k keyset) String() string {
	switch k {
	case uniformKeys:
		return "1,000 uniform"
	case zipfKeys:
		return "Zipf 1.1 / 10,000"
	case hotKey:
		return "one hot key"
	default:
		return "all distinct"
	}
}

// keys returns the keys of n records, in order, from a fixed seed: the same
// records every run.
func (k keyset) keys(n int) []string {
	out := make([]string, n)
	z := rand.NewZipf(rand.New(rand.NewSource(33)), 1.1, 1, 9_999) //nolint:gosec // a benchmark's key draw
	for i := range out {
		switch k {
		case uniformKeys:
			out[i] = "k" + strconv.Itoa(i%1000)
		case zipfKeys:
			out[i] = "k" + strconv.FormatUint(z.Uint64(), 10)
		case hotKey:
			out[i] = "hot"
		default:
			out[i] = "k" + strconv.Itoa(i)
		}
	}
	return out
}

// lanes is how many records of the keyset may run at once under an
// ordering, before the concurrency cap: the keys in KEY order, the
// partitions in PARTITION order.
func (k keyset) lanes(ordering string) int {
	if ordering == "UNORDERED" {
		return 1 << 30
	}
	if ordering == "PARTITION" {
		if k == hotKey {
			return 1
		}
		return consumerPartitions
	}
	switch k {
	case uniformKeys:
		return 1000
	case zipfKeys:
		return 10_000
	case hotKey:
		return 1
	default:
		return 1 << 30
	}
}

// consumerCell is one cell of the consumer arm.
type consumerCell struct {
	handler  time.Duration
	keys     keyset
	ordering string // KEY, PARTITION or UNORDERED, as the Parallel Consumer names them
	cap      int    // the concurrency cap: pcon's MaxConcurrency, the Parallel Consumer's maxConcurrency
}

func (c consumerCell) String() string {
	return fmt.Sprintf("%s handler, %s, %s, cap %d", fmtHandler(c.handler), c.keys, c.ordering, c.cap)
}

func fmtHandler(d time.Duration) string {
	if d == 0 {
		return "0 ms"
	}
	return strconv.FormatInt(d.Milliseconds(), 10) + " ms"
}

// ceiling is the records/s the cell allows at most with a sleeping handler:
// the concurrency (the cap, or fewer lanes) over the handler's time; 0 for
// the no-op handler.
func (c consumerCell) ceiling() float64 {
	if c.handler == 0 {
		return 0
	}
	return float64(min(c.cap, c.keys.lanes(c.ordering))) / c.handler.Seconds()
}

// records sizes the cell's backlog: o.records, or fewer where the ceiling
// would make the run last longer than o.cellTime.
func (c consumerCell) records(o options) int {
	n := o.records
	if ceil := c.ceiling(); ceil > 0 {
		n = min(n, max(200, int(ceil*o.cellTime.Seconds())))
	}
	return n
}

// peerResult is the JSON line every consumer peer prints.
type peerResult struct {
	Peer        string `json:"peer"`
	Version     string `json:"version"`
	Client      string `json:"client"`
	Ordering    string `json:"ordering"`
	Concurrency int    `json:"concurrency"`
	Records     int    `json:"records"`
	Handled     int    `json:"handled"`
	FirstNS     int64  `json:"first_ns"`
	LastNS      int64  `json:"last_ns"`
	Violations  int64  `json:"violations"`
	P50NS       int64  `json:"p50_ns"`
	P99NS       int64  `json:"p99_ns"`
}

// consumerRun is one run of one side.
type consumerRun struct {
	res  peerResult
	rate float64       // records/s from the first record handled to the last
	cpu  time.Duration // the process's CPU over that window
}

func (r consumerRun) cpuPer1k() float64 {
	return r.cpu.Seconds() / float64(r.res.Records) * 1000
}

// side is one consumer under test.
type side string

const (
	pconSide side = "pcon"
	pcSide   side = "confluent-parallel-consumer"
)

// consumerArm runs the consumer cells on one cluster.
type consumerArm struct {
	o       options
	brokers []string
	rf      int16
	self    string // this program, re-run as the pcon peer
	topics  map[string]string
	groups  int
	// versions are the peers' versions, as they reported them.
	versions map[side]string
}

// backlog returns a topic holding n records keyed by keys, producing it on
// the first call: every run of every side of a cell reads the same records.
func (a *consumerArm) backlog(ctx context.Context, keys keyset, n int) (string, error) {
	id := fmt.Sprintf("%s-%d", string(keys), n)
	if t, ok := a.topics[id]; ok {
		return t, nil
	}
	topic := "peers-backlog-" + id
	if err := a.createTopic(ctx, topic, nil); err != nil {
		return "", err
	}
	err := a.produce(ctx, topic, kgo.ProducerLinger(5*time.Millisecond), func(send func(*kgo.Record)) {
		seq := map[string]int64{}
		for _, k := range keys.keys(n) {
			send(&kgo.Record{Key: []byte(k), Value: value(seq, k, 0)})
		}
	})
	if err != nil {
		return "", fmt.Errorf("fill %s: %w", topic, err)
	}
	a.topics[id] = topic
	return topic, nil
}

func (a *consumerArm) createTopic(ctx context.Context, topic string, config map[string]string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return kafka.Settings{Brokers: a.brokers}.CreateTopics(ctx, []kafka.TopicSpec{{
		Name: topic, Partitions: consumerPartitions, Replication: a.rf, Config: config,
	}})
}

// command returns the process of one side's run.
func (a *consumerArm) command(ctx context.Context, s side, cell consumerCell, topic string, n int, live bool) (*exec.Cmd, error) {
	a.groups++
	args := []string{
		"--brokers", strings.Join(a.brokers, ","), "--topic", topic,
		"--group", fmt.Sprintf("peers-%s-%d", strings.ReplaceAll(string(s), "-", ""), a.groups),
		"--records", strconv.Itoa(n), "--sleep-ms", strconv.FormatInt(cell.handler.Milliseconds(), 10),
		"--ordering", cell.ordering, "--concurrency", strconv.Itoa(cell.cap),
		"--check-order", "true", "--live", strconv.FormatBool(live),
	}
	if s == pcSide {
		return parallelConsumerPeer.command(ctx, args...)
	}
	cmd := exec.CommandContext(ctx, a.self, args...)
	cmd.Env = append(os.Environ(), childEnv+"="+string(pconChild))
	return cmd, nil
}

// run runs one side once over n records of topic and reads its JSON line.
// started, when not nil, is called once the side's group is stable (the
// live run produces only then).
func (a *consumerArm) run(ctx context.Context, s side, cell consumerCell, topic string, n int, live bool, started func() error) (consumerRun, error) {
	cmd, err := a.command(ctx, s, cell, topic, n, live)
	if err != nil {
		return consumerRun{}, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return consumerRun{}, err
	}
	if err := cmd.Start(); err != nil {
		return consumerRun{}, fmt.Errorf("start %s: %w", s, err)
	}
	cpu := sampleCPU(cmd.Process.Pid)
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "{") {
				lines <- sc.Text()
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		close(lines)
	}()
	fail := func(err error) (consumerRun, error) {
		cpu.finish()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return consumerRun{}, fmt.Errorf("%s, %s: %w\n%s", s, cell, err, tail(stderr.String()))
	}
	if started != nil {
		if err := a.waitStable(ctx, cmd.Args); err != nil {
			return fail(err)
		}
		if err := started(); err != nil {
			return fail(err)
		}
	}
	line, ok := <-lines
	cpu.finish()
	if err := cmd.Wait(); err != nil {
		return consumerRun{}, fmt.Errorf("%s, %s: %w\n%s", s, cell, err, tail(stderr.String()))
	}
	if !ok {
		return consumerRun{}, fmt.Errorf("%s, %s: no JSON line\n%s", s, cell, tail(stderr.String()))
	}
	var r peerResult
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		return consumerRun{}, fmt.Errorf("%s, %s: its line %q: %w", s, cell, line, err)
	}
	if r.Handled < n || r.Records != n || r.LastNS <= r.FirstNS {
		return consumerRun{}, fmt.Errorf("%s, %s: handled %d of %d records (%s)", s, cell, r.Handled, n, line)
	}
	a.versions[s] = r.Version + " (" + r.Client + ")"
	first, last := time.Unix(0, r.FirstNS), time.Unix(0, r.LastNS)
	return consumerRun{
		res:  r,
		rate: float64(n-1) / last.Sub(first).Seconds(),
		cpu:  cpu.between(first, last),
	}, nil
}

// waitStable waits until the group named in args has a stable membership.
func (a *consumerArm) waitStable(ctx context.Context, args []string) error {
	group := args[slices.Index(args, "--group")+1]
	admin, err := sarama.NewClusterAdmin(a.brokers, sarama.NewConfig())
	if err != nil {
		return err
	}
	defer admin.Close()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		gs, err := admin.DescribeConsumerGroups([]string{group})
		if err == nil && len(gs) == 1 && gs[0].State == "Stable" && len(gs[0].Members) > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("group %s never became stable", group)
}

// cellResult is a cell's runs on both sides.
type cellResult struct {
	cell consumerCell
	n    int
	runs map[side][]consumerRun
}

// cell runs a warm-up of each side (discarded) and then o.rounds rounds,
// alternating which side goes first.
func (a *consumerArm) cell(ctx context.Context, cell consumerCell) (cellResult, error) {
	n := cell.records(a.o)
	topic, err := a.backlog(ctx, cell.keys, n)
	if err != nil {
		return cellResult{}, err
	}
	out := cellResult{cell: cell, n: n, runs: map[side][]consumerRun{}}
	order := []side{pconSide, pcSide}
	for round := -1; round < a.o.rounds; round++ {
		if round < 0 && !a.o.warmup {
			continue
		}
		for _, s := range order {
			r, err := a.run(ctx, s, cell, topic, n, false, nil)
			if err != nil {
				return cellResult{}, err
			}
			slog.Info("consumer run", "side", s, "cell", cell.String(), "round", round+1, "records", n,
				"recordsPerS", int(r.rate), "cpuSPer1k", r.cpuPer1k())
			if round >= 0 {
				out.runs[s] = append(out.runs[s], r)
			}
		}
		slices.Reverse(order)
	}
	return out, nil
}

// liveResult is one live run's lateness on both sides.
type liveResult struct {
	rate int
	n    int
	runs map[side]consumerRun
}

// live produces records at rate for o.liveTime, each stamped with its
// intended send time, to a fresh topic that one side consumes from the
// moment its group is stable; each side gets its own topic and run.
func (a *consumerArm) live(ctx context.Context, rate int) (liveResult, error) {
	cell := consumerCell{handler: time.Millisecond, keys: uniformKeys, ordering: "KEY", cap: a.o.liveCap}
	n := max(1, int(float64(rate)*a.o.liveTime.Seconds()))
	out := liveResult{rate: rate, n: n, runs: map[side]consumerRun{}}
	for _, s := range []side{pconSide, pcSide} {
		a.groups++
		topic := fmt.Sprintf("peers-live-%d-%d", rate, a.groups)
		if err := a.createTopic(ctx, topic, nil); err != nil {
			return out, err
		}
		produced := make(chan error, 1)
		r, err := a.run(ctx, s, cell, topic, n, true, func() error {
			go func() { produced <- a.produceAt(ctx, topic, cell.keys.keys(n), rate) }()
			return nil
		})
		if err != nil {
			return out, err
		}
		if err := <-produced; err != nil {
			return out, err
		}
		out.runs[s] = r
		slog.Info("live consumer run", "side", s, "rate", rate, "p50", time.Duration(r.res.P50NS), "p99", time.Duration(r.res.P99NS))
	}
	return out, nil
}

// produceAt sends one record per key at rate, each stamped with the time
// it is meant to go out at; a producer that falls behind still stamps the
// schedule, so its lag counts against the consumer as it would in life.
func (a *consumerArm) produceAt(ctx context.Context, topic string, keys []string, rate int) error {
	return a.produce(ctx, topic, kgo.ProducerLinger(0), func(send func(*kgo.Record)) {
		seq := map[string]int64{}
		start := time.Now()
		for i, k := range keys {
			at := start.Add(time.Duration(float64(i) / float64(rate) * float64(time.Second)))
			if d := time.Until(at); d > 0 {
				time.Sleep(d)
			}
			send(&kgo.Record{Key: []byte(k), Value: value(seq, k, at.UnixNano())})
		}
	})
}

// value is a record's value: the key's next sequence number (counted in
// seq) and the intended send time, 8 bytes each, big-endian.
func value(seq map[string]int64, key string, intended int64) []byte {
	v := make([]byte, 16)
	binary.BigEndian.PutUint64(v, uint64(seq[key]))     //nolint:gosec // a count
	binary.BigEndian.PutUint64(v[8:], uint64(intended)) //nolint:gosec // after 1970
	seq[key]++
	return v
}

// produce runs fill with a send function producing to topic, then waits
// for every acknowledgement and returns the failures.
func (a *consumerArm) produce(ctx context.Context, topic string, linger kgo.Opt, fill func(send func(*kgo.Record))) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(a.brokers...), kgo.DefaultProduceTopic(topic), linger)
	if err != nil {
		return err
	}
	defer cl.Close()
	var (
		mu     sync.Mutex
		failed error
	)
	fill(func(r *kgo.Record) {
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				failed = errors.Join(failed, err)
				mu.Unlock()
			}
		})
	})
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	return failed
}

// tail is the end of a peer's stderr, for an error.
func tail(s string) string {
	if len(s) > 4000 {
		return "…" + s[len(s)-4000:]
	}
	return s
}
