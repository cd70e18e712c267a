package testenv

import (
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kfake"
)

// Kafka starts an in-process Kafka-protocol cluster with the given topics, 3
// partitions each, and closes it when the test ends. Clients such as sarama
// reach it over TCP at cluster.ListenAddrs().
func Kafka(t testing.TB, topics ...string) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topics...))
	if err != nil {
		t.Fatalf("testenv: start Kafka cluster: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// ReadTopic reads topic from its oldest offset on every partition until n
// records arrived, failing the test if they do not within limit.
func ReadTopic(t testing.TB, brokers []string, topic string, n int, limit time.Duration) []*sarama.ConsumerMessage {
	t.Helper()
	c, err := sarama.NewConsumer(brokers, sarama.NewConfig())
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
	client, err := sarama.NewClient(brokers, sarama.NewConfig())
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
	if len(seen) != n || end != int64(n) {
		t.Errorf("%s: %d distinct keys in %d records, want each of %d once", topic, len(seen), end, n)
	}
}
