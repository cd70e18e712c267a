package pcon_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/loopers/commerce-pipeline/pkg/pcon"
)

// fakeTopic is the topic of a fake cluster, with fakePartitions partitions.
const (
	fakeTopic      = "t"
	fakePartitions = 3
)

// newFakeCluster starts kfake, franz-go's in-process Kafka, with fakeTopic
// and its dead-letter topic, for this module's tests: they run with nothing
// but Go. kfake speaks the protocol sarama speaks but is not Apache Kafka;
// the tests of pcon against Apache Kafka (rebalances, broker restarts,
// metadata limits) are in this repository's pkg/pcon/internal/brokertest.
func newFakeCluster(t *testing.T) []string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(fakePartitions, fakeTopic, fakeTopic+".DLT"))
	if err != nil {
		t.Fatalf("start kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// fakeProduce writes n records to fakeTopic, record i keyed "k<i%keys>"
// with value "v<i>" and a header "i" of i, and waits for every one.
func fakeProduce(t *testing.T, addrs []string, n, keys int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.DefaultProduceTopic(fakeTopic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rs := make([]*kgo.Record, n)
	for i := range rs {
		rs[i] = &kgo.Record{
			Key: fmt.Appendf(nil, "k%d", i%keys), Value: fmt.Appendf(nil, "v%d", i),
			Headers: []kgo.RecordHeader{{Key: "i", Value: fmt.Appendf(nil, "%d", i)}},
		}
	}
	if err := cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// fakeConfig is a consumer of fakeTopic in group, with group timings short
// enough for a test.
func fakeConfig(addrs []string, group string) pcon.Config {
	sc := sarama.NewConfig()
	sc.Version = sarama.V3_0_0_0
	sc.Consumer.Offsets.Initial = sarama.OffsetOldest
	sc.Consumer.MaxWaitTime = 50 * time.Millisecond
	sc.Consumer.Group.Rebalance.Retry.Backoff = 50 * time.Millisecond
	sc.Metadata.Retry.Backoff = 50 * time.Millisecond
	return pcon.Config{
		Brokers: addrs, Group: group, Topics: []string{fakeTopic}, Sarama: sc,
		Backoff: 10 * time.Millisecond, CommitInterval: 50 * time.Millisecond,
	}
}

// runUntil runs a consumer of cfg with h until done is closed (failing the
// test after limit), then closes it and checks Run's error.
func runUntil(t *testing.T, cfg pcon.Config, h pcon.Handler, done <-chan struct{}, limit time.Duration) {
	t.Helper()
	c, err := pcon.New(cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- c.Run(context.Background()) }()
	select {
	case <-done:
	case <-time.After(limit):
		t.Errorf("not done after %s", limit)
	}
	c.Close()
	if err := <-ran; err != nil {
		t.Errorf("Run: %v", err)
	}
}
