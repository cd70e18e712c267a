package testenv

import (
	"testing"
	"time"

	"github.com/loopers/commerce-pipeline/internal/kafkabroker"
)

// FreezeLeader freezes (SIGSTOP) the node of c leading topic/partition, as
// a hung machine, and waits until another node names a new leader: Kafka
// fenced the frozen one after its broker session. It returns the frozen
// node and how long the move took. The node stays frozen until the test
// calls Resume, or ends.
func FreezeLeader(t testing.TB, c *kafkabroker.Cluster, topic string, partition int32) (frozen *kafkabroker.Node, moved time.Duration) {
	t.Helper()
	leader, err := c.Nodes()[0].PartitionLeader(topic, partition)
	if err != nil {
		t.Fatal(err)
	}
	frozen = c.Node(leader)
	at := time.Now()
	if err := frozen.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = frozen.Resume() }) // a failed test must not leave it stopped for the cleanups
	if _, err := c.Others(leader)[0].WaitLeaderMoved(topic, partition, leader, time.Minute); err != nil {
		t.Fatal(err)
	}
	return frozen, time.Since(at)
}
