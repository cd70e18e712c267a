package testenv

import (
	"testing"

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
