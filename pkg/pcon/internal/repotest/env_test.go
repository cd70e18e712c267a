package pcon_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/loopers/commerce-pipeline/internal/kafka"
	"github.com/loopers/commerce-pipeline/internal/kafkabroker"
	"github.com/loopers/commerce-pipeline/internal/testenv"
	"github.com/loopers/commerce-pipeline/pkg/pcon"
	"github.com/loopers/commerce-pipeline/pkg/pcon/internal/testhook"
)

const (
	partitions = 3
	// waitLong bounds every wait on the cluster; tests never assert on
	// timing, this only turns a hang into a failure.
	waitLong = 90 * time.Second
)

// env is a test's own topic (partitions partitions) and its dead-letter
// topic, and the test's own consumer groups, on a broker: the test
// binary's shared Apache Kafka broker (newEnv), a broker of the test's
// own (newEnvOn), or kfake for a fault only it injects (newFakeEnv).
type env struct {
	t      *testing.T
	addrs  []string
	prefix string // before the env's topics and groups
	topic  string
	// cluster is set on kfake only.
	cluster *kfake.Cluster

	adminMu sync.Mutex
	admin   sarama.ClusterAdmin // made on first use
}

// newEnv gives the test a topic and groups no other test uses on the
// shared Apache Kafka broker.
func newEnv(t *testing.T) *env {
	t.Helper()
	k := testenv.Kafka(t, "t", "t.DLT")
	return &env{t: t, addrs: k.Brokers, prefix: k.Prefix, topic: k.Topic("t")}
}

// newEnvOn creates the env's topics on a broker (or cluster) of the
// test's own, for tests that stop it or give it settings of their own;
// under a prefix of their own, so that subtests may share it.
func newEnvOn(t *testing.T, c *kafkabroker.Cluster) *env {
	t.Helper()
	k := &testenv.KafkaEnv{Settings: kafka.Settings{Brokers: c.Brokers(), Prefix: fmt.Sprintf("t%08x.", rand.Uint32())}}
	rf := int16(min(len(c.Nodes()), 3))
	k.CreateTopics(t,
		kafka.TopicSpec{Name: k.Topic("t"), Partitions: partitions, Replication: rf},
		kafka.TopicSpec{Name: k.Topic("t.DLT"), Partitions: partitions, Replication: rf})
	return &env{t: t, addrs: k.Brokers, prefix: k.Prefix, topic: k.Topic("t")}
}

// newFakeEnv is the env on kfake, for a test whose point is a fault only
// kfake injects; why says which.
func newFakeEnv(t *testing.T, why string) *env {
	t.Helper()
	c := testenv.FakeKafka(t, why, "t", "t.DLT")
	e := &env{t: t, cluster: c, addrs: c.ListenAddrs(), topic: "t"}
	// Sessions as short as on the test brokers (testenv.BrokerProps);
	// kfake's own minimum is Kafka's default, 6 s.
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	res := kmsg.NewIncrementalAlterConfigsRequestResource()
	res.ResourceType = kmsg.ConfigResourceTypeBroker
	cfg := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	cfg.Name = "group.min.session.timeout.ms"
	cfg.Value = kmsg.StringPtr("500")
	res.Configs = append(res.Configs, cfg)
	req.Resources = append(req.Resources, res)
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resp.Resources {
		if r.ErrorCode != 0 {
			t.Fatalf("kfake: set group.min.session.timeout.ms: error %d", r.ErrorCode)
		}
	}
	return e
}

// group names a consumer group of the test's own.
func (e *env) group(name string) string { return e.prefix + name }

// dlt names the env's dead-letter topic.
func (e *env) dlt() string { return e.topic + ".DLT" }

// produced identifies one record written by the test.
type produced struct {
	Partition int32
	Offset    int64
	Key       string
}

// produce writes n records keyed by key(i) and returns where they landed.
func (e *env) produce(n int, key func(i int) string, headers ...kgo.RecordHeader) []produced {
	e.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.addrs...), kgo.DefaultProduceTopic(e.topic),
		kgo.MaxBufferedRecords(20000), kgo.ProducerLinger(time.Millisecond))
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	out := make([]produced, n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for i := range n {
		k := key(i)
		r := &kgo.Record{Value: fmt.Appendf(nil, "v%d", i), Headers: headers}
		if k != "" {
			r.Key = []byte(k)
		}
		wg.Add(1)
		cl.Produce(context.Background(), r, func(r *kgo.Record, err error) {
			defer wg.Done()
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			out[i] = produced{Partition: r.Partition, Offset: r.Offset, Key: k}
		})
	}
	wg.Wait()
	if firstErr != nil {
		e.t.Fatal(firstErr)
	}
	return out
}

// saramaConfig is the services' base client configuration (kafka.Version,
// dead letters confirmed by every in-sync replica) with group timings short
// enough for tests.
func (e *env) saramaConfig() *sarama.Config {
	sc := kafka.Settings{}.Config("pcon-test")
	sc.Consumer.Offsets.Initial = sarama.OffsetOldest
	// Long enough that a member starved of CPU for seconds (two test
	// binaries, their brokers and the race detector on two cores) keeps its
	// session: a spurious rebalance hands records out again, which the
	// tests rightly count as double handling. A test whose point is a
	// session that expires sets its own (the test brokers accept them from
	// 500 ms: testenv.BrokerProps).
	sc.Consumer.Group.Session.Timeout = 10 * time.Second
	sc.Consumer.Group.Heartbeat.Interval = 500 * time.Millisecond
	sc.Consumer.Group.Rebalance.Timeout = 10 * time.Second
	sc.Net.ReadTimeout = 20 * time.Second // past the rebalance timeout: a join waits that long
	sc.Consumer.Group.Rebalance.Retry.Backoff = 50 * time.Millisecond
	sc.Metadata.Retry.Backoff = 50 * time.Millisecond
	sc.Consumer.Retry.Backoff = 50 * time.Millisecond
	sc.Producer.Retry.Backoff = 50 * time.Millisecond
	sc.Consumer.MaxWaitTime = 50 * time.Millisecond
	return sc
}

// config is a consumer of the env's topic in group, a name from e.group.
func (e *env) config(group string) pcon.Config {
	return pcon.Config{
		Brokers:        e.addrs,
		Group:          group,
		Topics:         []string{e.topic},
		Sarama:         e.saramaConfig(),
		MaxInFlight:    500,
		Backoff:        10 * time.Millisecond,
		CommitInterval: 50 * time.Millisecond,
		RevokeGrace:    3 * time.Second,
		Logger:         testLogger(),
	}
}

func testLogger() *slog.Logger {
	if os.Getenv("PCON_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// forEachEngineMode runs test under each way a RecordHandler's records
// reach workers: the adaptive default, and workers shared among records,
// which fast handlers get, whatever test's handlers take. test passes mode
// to start.
func forEachEngineMode(t *testing.T, test func(t *testing.T, mode func(*pcon.Consumer))) {
	t.Run("adaptive", func(t *testing.T) {
		t.Parallel()
		test(t, func(*pcon.Consumer) {})
	})
	t.Run("shared workers", func(t *testing.T) {
		t.Parallel()
		test(t, func(c *pcon.Consumer) { testhook.ShareWorkers(c) })
	})
}

// start runs a consumer until the returned stop is called; stop reports
// Run's error. Each of opts is applied to the consumer before it runs.
func start(t *testing.T, cfg pcon.Config, h pcon.Handler, opts ...func(*pcon.Consumer)) (c *pcon.Consumer, stop func()) {
	t.Helper()
	c, err := pcon.New(cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range opts {
		o(c)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(context.Background()) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			c.Close()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return c, stop
}

type committedOffset struct {
	Offset   int64
	Metadata string
}

// committed reads the group's committed offsets of the env's topic; a
// partition without a commit is absent.
func (e *env) committed(group string) map[int32]committedOffset {
	e.t.Helper()
	out := make(map[int32]committedOffset)
	resp, err := e.clusterAdmin().ListConsumerGroupOffsets(group, map[string][]int32{e.topic: {0, 1, 2}})
	if err != nil {
		return out // the group does not exist yet
	}
	for p := range int32(partitions) {
		if b := resp.GetBlock(e.topic, p); b != nil && b.Err == sarama.ErrNoError && b.Offset >= 0 {
			out[p] = committedOffset{Offset: b.Offset, Metadata: b.Metadata}
		}
	}
	return out
}

// clusterAdmin returns the env's admin client, closed when the test ends.
func (e *env) clusterAdmin() sarama.ClusterAdmin {
	e.t.Helper()
	e.adminMu.Lock()
	defer e.adminMu.Unlock()
	if e.admin == nil {
		admin, err := sarama.NewClusterAdmin(e.addrs, e.saramaConfig())
		if err != nil {
			e.t.Fatal(err)
		}
		e.admin = admin
		e.t.Cleanup(func() { _ = admin.Close() })
	}
	return e.admin
}

// endOffsets returns the log end offset of each partition of the topic.
func endOffsets(recs []produced) map[int32]int64 {
	out := make(map[int32]int64)
	for _, r := range recs {
		out[r.Partition] = max(out[r.Partition], r.Offset+1)
	}
	return out
}

// waitCommitted waits until the group's commits reach want.
func (e *env) waitCommitted(group string, want map[int32]int64) {
	e.t.Helper()
	deadline := time.Now().Add(waitLong)
	for {
		got := e.committed(group)
		ok := true
		for p, off := range want {
			if got[p].Offset != off {
				ok = false
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("committed %v, want %v", got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// logCapture is a slog.Handler that keeps the records of the messages it
// is told to watch (and passes everything to testLogger's handler), so
// that a test can see what a Consumer reported.
type logCapture struct {
	next  slog.Handler
	watch map[string]bool
	attrs []slog.Attr // from WithAttrs

	mu   *sync.Mutex
	recs *[]loggedRecord
}

// loggedRecord is a watched log record with its attributes as text.
type loggedRecord struct {
	Level   slog.Level
	Message string
	Attrs   map[string]string
}

func newLogCapture(messages ...string) *logCapture {
	w := map[string]bool{}
	for _, m := range messages {
		w[m] = true
	}
	return &logCapture{next: testLogger().Handler(), watch: w, mu: &sync.Mutex{}, recs: &[]loggedRecord{}}
}

func (l *logCapture) logger() *slog.Logger { return slog.New(l) }

func (l *logCapture) Enabled(context.Context, slog.Level) bool { return true }

func (l *logCapture) Handle(ctx context.Context, r slog.Record) error {
	if l.watch[r.Message] {
		rec := loggedRecord{Level: r.Level, Message: r.Message, Attrs: map[string]string{}}
		for _, a := range l.attrs {
			rec.Attrs[a.Key] = a.Value.String()
		}
		r.Attrs(func(a slog.Attr) bool {
			rec.Attrs[a.Key] = a.Value.String()
			return true
		})
		l.mu.Lock()
		*l.recs = append(*l.recs, rec)
		l.mu.Unlock()
	}
	if l.next.Enabled(ctx, r.Level) {
		return l.next.Handle(ctx, r)
	}
	return nil
}

func (l *logCapture) WithAttrs(as []slog.Attr) slog.Handler {
	c := *l
	c.next = l.next.WithAttrs(as)
	c.attrs = append(append([]slog.Attr(nil), l.attrs...), as...)
	return &c
}

func (l *logCapture) WithGroup(name string) slog.Handler {
	c := *l
	c.next = l.next.WithGroup(name)
	return &c
}

// records returns the watched records logged so far with message msg.
func (l *logCapture) records(msg string) []loggedRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []loggedRecord
	for _, r := range *l.recs {
		if r.Message == msg {
			out = append(out, r)
		}
	}
	return out
}
