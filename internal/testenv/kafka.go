package testenv

import (
	"context"
	"fmt"
	"maps"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/loopers/commerce-pipeline/internal/kafka"
	"github.com/loopers/commerce-pipeline/internal/kafkabroker"
)

// BrokerProps are the settings of every broker the tests start, on top of
// Apache Kafka's defaults:
//   - no initial rebalance delay (Kafka's own config/server.properties and
//     compose ship 0 too; TestTwoInstancesUnderInitialRebalanceDelay runs the 3 s default),
//   - session timeouts down to 500 ms, so that a test can have a dead
//     member noticed in a second or two instead of the 6 s minimum,
//   - retention enforced every second from the start (the first check
//     otherwise waits 30 s), so that a test with a short retention.ms sees
//     closed segments deleted while it runs.
var BrokerProps = map[string]string{
	"group.initial.rebalance.delay.ms": "0",
	"group.min.session.timeout.ms":     "500",
	"log.retention.check.interval.ms":  "1000",
	"log.initial.task.delay.ms":        "0",
}

// BrokerJVMOptions keep a test broker's CPU low on a small machine: the
// tests move little data, so the optimising compiler's work would never pay
// back. Benchmarks run the JVM's default compilers.
var BrokerJVMOptions = []string{"-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"}

var (
	brokerOnce  sync.Once
	brokerAddrs []string
	brokerErr   error
)

// KafkaBrokers returns the addresses of the Apache Kafka broker the tests of
// this binary share: TEST_KAFKA_BROKERS when it is set (a broker of one's
// own, version 4.x), else one node started on first use on free loopback
// ports, which lives as long as the test binary (the kernel ends it with
// the binary, however that ends).
func KafkaBrokers(t testing.TB) []string {
	t.Helper()
	Needs(t, needsKafka)
	brokerOnce.Do(func() {
		if v := os.Getenv("TEST_KAFKA_BROKERS"); v != "" {
			brokerAddrs = strings.Split(v, ",")
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		var c *kafkabroker.Cluster
		c, brokerErr = kafkabroker.Start(ctx, kafkabroker.Options{Props: BrokerProps, JVMOptions: BrokerJVMOptions})
		if brokerErr == nil {
			brokerAddrs = c.Brokers()
		}
	})
	if brokerErr != nil {
		t.Fatalf("testenv: start Apache Kafka: %v\nRun the tests with `make test` (scripts/testenv.sh installs the JDK and Maven), or set TEST_KAFKA_BROKERS.", brokerErr)
	}
	return brokerAddrs
}

// KafkaEnv is a test's own names on the shared broker: every topic and
// group under a prefix no other test uses (the services' KAFKA_PREFIX).
type KafkaEnv struct {
	kafka.Settings
}

// Kafka gives the test a fresh prefix on the shared real broker and creates
// topics under it (3 partitions each, the pipeline's retention for the
// pipeline's topics), deleting them when the test ends. Name topics and
// groups the way the code under test does, through Topic and Group.
func Kafka(t testing.TB, topics ...string) *KafkaEnv {
	t.Helper()
	k := &KafkaEnv{kafka.Settings{Brokers: KafkaBrokers(t), Prefix: "t" + randomHex(5) + "."}}
	specs := make([]kafka.TopicSpec, len(topics))
	for i, name := range topics {
		specs[i] = kafka.TopicSpec{Name: k.Topic(name), Partitions: 3, Replication: 1}
	}
	k.CreateTopics(t, specs...)
	return k
}

// CreateTopics creates topics (named on the cluster already) and deletes
// them when the test ends.
func (k *KafkaEnv) CreateTopics(t testing.TB, specs ...kafka.TopicSpec) {
	t.Helper()
	if len(specs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := k.Settings.CreateTopics(ctx, specs); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Name
	}
	t.Cleanup(func() {
		// Keeps a long test binary's broker small; what a test left
		// behind cannot reach another test, whose prefix differs.
		if err := k.DeleteTopics(names...); err != nil {
			t.Logf("testenv: %v", err)
		}
	})
}

// Env returns the variables that point a service at these names.
func (k *KafkaEnv) Env() map[string]string {
	return map[string]string{"KAFKA_BROKERS": strings.Join(k.Brokers, ","), "KAFKA_PREFIX": k.Prefix}
}

// KafkaCluster starts a broker, or a cluster of opts.Nodes, of the test's own
// (with BrokerProps unless opts.Props overrides them) and ends it when the
// test ends: for tests that kill, stop or reconfigure brokers.
func KafkaCluster(t testing.TB, opts kafkabroker.Options) *kafkabroker.Cluster {
	t.Helper()
	Needs(t, needsKafka)
	props := maps.Clone(BrokerProps)
	maps.Copy(props, opts.Props)
	opts.Props = props
	if opts.JVMOptions == nil {
		opts.JVMOptions = BrokerJVMOptions
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := kafkabroker.Start(ctx, opts)
	if err != nil {
		t.Fatalf("testenv: start Apache Kafka: %v\nRun the tests with `make test` (scripts/testenv.sh installs the JDK and Maven).", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("testenv: broker logs were in %s", c.Dir())
		}
		_ = c.Close()
	})
	return c
}

// FakeKafka starts kfake, an in-process Kafka-protocol fake, with topics (3
// partitions each), and closes it when the test ends. It is for the faults
// only it can inject (Fault, ControlKey); why says which, and is required.
func FakeKafka(t testing.TB, why string, topics ...string) *kfake.Cluster {
	t.Helper()
	if why == "" {
		t.Fatal("testenv: FakeKafka needs the reason the test cannot run on Apache Kafka")
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topics...))
	if err != nil {
		t.Fatalf("testenv: start kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// saramaConfig is the tests' reader configuration.
func saramaConfig() *sarama.Config {
	return kafka.Settings{}.Config("testenv")
}

// ReadTopic reads topic from its oldest offset on every partition until n
// records arrived, failing the test if they do not within limit.
func ReadTopic(t testing.TB, brokers []string, topic string, n int, limit time.Duration) []*sarama.ConsumerMessage {
	t.Helper()
	c, err := sarama.NewConsumer(brokers, saramaConfig())
	if err != nil {
		t.Fatalf("testenv: consume %s: %v", topic, err)
	}
	defer c.Close()
	parts, err := c.Partitions(topic)
	if err != nil {
		t.Fatalf("testenv: partitions of %s: %v", topic, err)
	}
	got := make(chan *sarama.ConsumerMessage, n)
	for _, p := range parts {
		pc, err := c.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			t.Fatalf("testenv: consume %s/%d: %v", topic, p, err)
		}
		defer pc.Close()
		go func() {
			for m := range pc.Messages() {
				select {
				case got <- m:
				default: // more than n arrived; the extra ones are not wanted
				}
			}
		}()
	}
	var out []*sarama.ConsumerMessage
	timeout := time.After(limit)
	for len(out) < n {
		select {
		case m := <-got:
			out = append(out, m)
		case <-timeout:
			t.Fatalf("testenv: read %d records from %s within %s, want %d", len(out), topic, limit, n)
		}
	}
	return out
}

// Headers returns a record's headers as a map.
func Headers(m *sarama.ConsumerMessage) map[string]string {
	h := make(map[string]string, len(m.Headers))
	for _, r := range m.Headers {
		h[string(r.Key)] = string(r.Value)
	}
	return h
}

// EndOffsets returns the sum of topic's partitions' end offsets.
func EndOffsets(t testing.TB, brokers []string, topic string) int64 {
	t.Helper()
	client, err := sarama.NewClient(brokers, saramaConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	parts, err := client.Partitions(topic)
	if err != nil {
		t.Fatal(err)
	}
	var end int64
	for _, p := range parts {
		off, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			t.Fatal(err)
		}
		end += off
	}
	return end
}

// EachKeyOnce checks that topic holds exactly n records, each with a key of
// its own: what a re-drive of n distinct dead letters must leave behind,
// whoever re-drove them.
func EachKeyOnce(t testing.TB, brokers []string, topic string, n int) {
	t.Helper()
	seen := map[string]int{}
	for _, m := range ReadTopic(t, brokers, topic, n, 30*time.Second) {
		seen[string(m.Key)]++
	}
	for k, c := range seen {
		if c != 1 {
			t.Errorf("%s: key %s %d times", topic, k, c)
		}
	}
	if end := EndOffsets(t, brokers, topic); len(seen) != n || end != int64(n) {
		t.Errorf("%s: %d distinct keys in %d records, want each of %d once", topic, len(seen), end, n)
	}
}

// String describes the names, for test logs.
func (k *KafkaEnv) String() string {
	return fmt.Sprintf("Kafka %v, prefix %q", k.Brokers, k.Prefix)
}

// SetTopicConfig sets topic-level settings (nil value: back to the
// default) and waits until the broker reports them, so that the next
// request meets them: a real fault such as a small max.message.bytes
// (MESSAGE_TOO_LARGE), or a short retention.ms. (min.insync.replicas above
// a topic's replicas is no fault: the broker requires at most as many
// replicas as the topic has.)
func SetTopicConfig(t testing.TB, brokers []string, topic string, entries map[string]*string) {
	t.Helper()
	admin, err := sarama.NewClusterAdmin(brokers, saramaConfig())
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	defer admin.Close()
	ops := map[string]sarama.IncrementalAlterConfigsEntry{}
	for k, v := range entries {
		op := sarama.IncrementalAlterConfigsOperationSet
		if v == nil {
			op = sarama.IncrementalAlterConfigsOperationDelete
		}
		ops[k] = sarama.IncrementalAlterConfigsEntry{Operation: op, Value: v}
	}
	if err := admin.IncrementalAlterConfig(sarama.TopicResource, topic, ops, false); err != nil {
		t.Fatalf("testenv: alter %s: %v", topic, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := admin.DescribeConfigs([]*sarama.ConfigResource{{Type: sarama.TopicResource, Name: topic}}, sarama.DescribeConfigsOptions{})
		if err == nil && len(res) == 1 && res[0].ErrorCode != sarama.ErrNoError {
			err = res[0].ErrorCode
		}
		if err != nil {
			t.Fatalf("testenv: describe %s: %v", topic, err)
		}
		applied := true
		for k, v := range entries {
			for _, e := range res[0].Configs {
				if e.Name == k && (v == nil && e.Source == sarama.SourceTopic || v != nil && e.Value != *v) {
					applied = false
				}
			}
		}
		if applied {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: %s: settings %v not applied within 30 s", topic, entries)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
