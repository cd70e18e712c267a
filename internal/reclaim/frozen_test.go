package reclaim_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/loopers/commerce-pipeline/internal/kafka"
	"github.com/loopers/commerce-pipeline/internal/kafkabroker"
	"github.com/loopers/commerce-pipeline/internal/reclaim"
	"github.com/loopers/commerce-pipeline/internal/testenv"
)

// frozenPassBound is how long a pass may take once Kafka has moved a
// frozen broker's partitions: the reclaimer let go of the broker seconds
// before (SilentBroker, 3 s, against Kafka's 9 s broker session), so what
// remains is sarama's retry backoff (2 s) to the new leader and the pass's
// own requests, with room for a loaded machine. Without the watch every
// request that reaches the frozen broker waits out sarama's read timeout
// (30 s): in a run with SilentBroker set to an hour, the pass took 120 s.
const frozenPassBound = 8 * time.Second

// TestFrozenDLTLeader freezes (SIGSTOP) the node leading the DLT partition
// the reclaimer re-drives, on three nodes with three replicas and
// min.insync.replicas=2, after a pass has connected the reclaimer to it.
// Once Kafka has moved the partition, a pass must re-drive a record
// dead-lettered there since, within frozenPassBound.
//
//nolint:paralleltest // measures a pass against a bound: other tests' brokers and binaries on the 2 shared cores would add their waits to it
func TestFrozenDLTLeader(t *testing.T) {
	c := testenv.KafkaCluster(t, kafkabroker.Options{Nodes: 3})
	k := kafka.Settings{Brokers: c.Brokers(), Prefix: fmt.Sprintf("t%08x.", rand.Uint32())}
	var specs []kafka.TopicSpec
	for _, name := range envTopics() {
		specs = append(specs, kafka.TopicSpec{Name: k.Topic(name), Partitions: 3, Replication: 3})
	}
	(&testenv.KafkaEnv{Settings: k}).CreateTopics(t, specs...)
	e := newEnvOn(t, k)
	r := e.reclaimer(nil, func(c *reclaim.Config) { c.Topics = e.topics("order-events") })
	e.deadLetter(dead{topic: "order-events", partition: 1, key: "a", age: time.Hour})
	if got := counts(r.Pass(context.Background(), reclaim.Options{})); !cmp.Equal(got, map[reclaim.Outcome]int{reclaim.Redriven: 1}) {
		t.Fatalf("first pass: %v, want one re-driven", got)
	}

	dlt := e.topic("order-events.DLT")
	node, moved := testenv.FreezeLeader(t, c, dlt, 1)
	leader := node.ID()
	live := c.Others(leader)
	var addrs []string
	for _, n := range live {
		addrs = append(addrs, n.Addr(kafkabroker.PlainListener))
	}
	newEnvOn(t, kafka.Settings{Brokers: addrs, Prefix: k.Prefix}).
		deadLetter(dead{topic: "order-events", partition: 1, key: "b", age: time.Hour})

	begin := time.Now()
	res := r.Pass(context.Background(), reclaim.Options{})
	took := time.Since(begin)
	t.Logf("node %d (leader of %s/1) frozen; Kafka moved the partition after %.1f s; the next pass took %.2f s: %v, error %v",
		leader, dlt, moved.Seconds(), took.Seconds(), counts(res), res.Err())
	if got := counts(res); res.Err() != nil || !cmp.Equal(got, map[reclaim.Outcome]int{reclaim.Redriven: 1}) {
		t.Errorf("pass after the move: %v, error %v; want one re-driven", got, res.Err())
	}
	// Which records it took: from the offset the first pass committed
	// (the group's coordinator may have moved with the frozen node) to
	// the one record dead-lettered since.
	if p := res.Domains[0].Partitions[1]; p.From != 1 || p.End != 2 {
		t.Errorf("pass after the move read %s/1 from %d to %d, want from 1 (committed by the first pass) to 2", dlt, p.From, p.End)
	}
	if took > frozenPassBound {
		t.Errorf("pass after the move took %s, want within %s", took.Round(time.Millisecond), frozenPassBound)
	}
	if err := node.Resume(); err != nil {
		t.Fatal(err)
	}
}
