package pcon_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/loopers/commerce-pipeline/pkg/pcon"
)

const (
	topic      = "t"
	partitions = 3
	// waitLong bounds every wait on the cluster; tests never assert on
	// timing, this only turns a hang into a failure.
	waitLong = 90 * time.Second
)

// env is an in-process Kafka cluster that sarama reaches over TCP.
type env struct {
	t       *testing.T
	cluster *kfake.Cluster
	addrs   []string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.SeedTopics(partitions, topic, topic+".DLT"),
		kfake.GroupMinSessionTimeout(100*time.Millisecond),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return &env{t: t, cluster: c, addrs: c.ListenAddrs()}
}

// produced identifies one record written by the test.
type produced struct {
	Partition int32
	Offset    int64
	Key       string
}

// produce writes n records keyed by key(i) and returns where they landed.
func (e *env) produce(n int, key func(i int) string, headers ...kgo.RecordHeader) []produced {
	e.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.addrs...), kgo.DefaultProduceTopic(topic),
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

func (e *env) saramaConfig() *sarama.Config {
	sc := sarama.NewConfig()
	sc.Version = sarama.V2_8_0_0
	sc.Consumer.Offsets.Initial = sarama.OffsetOldest
	sc.Consumer.Group.Session.Timeout = 2 * time.Second
	sc.Consumer.Group.Heartbeat.Interval = 100 * time.Millisecond
	sc.Consumer.Group.Rebalance.Timeout = 5 * time.Second
	sc.Consumer.Group.Rebalance.Retry.Backoff = 50 * time.Millisecond
	sc.Metadata.Retry.Backoff = 50 * time.Millisecond
	sc.Consumer.Retry.Backoff = 50 * time.Millisecond
	sc.Producer.Retry.Backoff = 50 * time.Millisecond
	sc.Consumer.MaxWaitTime = 50 * time.Millisecond
	return sc
}

func (e *env) config(group string) pcon.Config {
	return pcon.Config{
		Brokers:        e.addrs,
		Group:          group,
		Topics:         []string{topic},
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
		test(t, pcon.ShareWorkers)
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

// committed reads the group's committed offsets of the test topic.
func (e *env) committed(group string) map[int32]committedOffset {
	e.t.Helper()
	admin, err := sarama.NewClusterAdmin(e.addrs, e.saramaConfig())
	if err != nil {
		e.t.Fatal(err)
	}
	defer admin.Close()
	out := make(map[int32]committedOffset)
	resp, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: {0, 1, 2}})
	if err != nil {
		return out // the group does not exist yet
	}
	for p := range int32(partitions) {
		if b := resp.GetBlock(topic, p); b != nil && b.Err == sarama.ErrNoError {
			out[p] = committedOffset{Offset: b.Offset, Metadata: b.Metadata}
		}
	}
	return out
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
