package pcon_test

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/loopers/commerce-pipeline/internal/kafkabroker"
	"github.com/loopers/commerce-pipeline/internal/testenv"
	"github.com/loopers/commerce-pipeline/pkg/pcon"
)

// movedBound is how soon after its acknowledgement a record written to a
// frozen broker's partition, once Kafka has given the partition a new
// leader, must be handled: the consumer let go of the frozen broker long
// before (pcon's SilentBroker, 3 s, against Kafka's 9 s broker session),
// so what remains is its retry backoff and a fetch, with room for a loaded
// machine. Without the watch every request that reaches the frozen broker
// waits out the read timeout (20 s here, 30 s in product-consumers), and
// the client's next steps can reach it again: in a run with SilentBroker
// set to an hour, none of the records had been handled 90 s after the
// freeze.
const movedBound = 5 * time.Second

// TestFrozenLeader freezes (SIGSTOP) the node that leads a partition the
// consumer reads, on three nodes with three replicas and
// min.insync.replicas=2, and is the group's coordinator when one node is
// both, so that the fetch, the heartbeat and the commit under way all go
// to a broker that stopped answering. Records written to that partition
// once Kafka has moved its leadership must be handled within movedBound of
// the move; once the node continues, everything is committed and key order
// held.
//
//nolint:paralleltest // measures how soon records are handled after a leader moves: other tests' brokers and binaries on the 2 shared cores would add their waits to the bound
func TestFrozenLeader(t *testing.T) {
	cluster := testenv.KafkaCluster(t, kafkabroker.Options{Nodes: 3})
	e := newEnvOn(t, cluster)
	group := e.group("frozen")

	var mu sync.Mutex
	handled := map[string]time.Time{} // by value
	all := []produced{}
	warm := e.produce(300, keyMod(30))
	all = append(all, warm...)
	cfg := e.config(group)
	_, stop := start(t, cfg, pcon.RecordHandler(func(_ context.Context, r *pcon.Record) error {
		mu.Lock()
		defer mu.Unlock()
		if _, ok := handled[string(r.Value)]; !ok {
			handled[string(r.Value)] = time.Now()
		}
		return nil
	}))
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(handled)
	}
	waitUntil(t, func() bool { return count() >= len(warm) }, func() string {
		return fmt.Sprintf("handled %d of the %d warm-up records", count(), len(warm))
	})

	partition := frozenTarget(t, cluster, e.topic, group)
	node, moveTook := testenv.FreezeLeader(t, cluster, e.topic, partition)
	movedAt := time.Now()
	frozen := node.ID()
	live := cluster.Others(frozen)

	const n = 200
	moved := produceTo(t, live, e.topic, partition, n)
	want := len(warm) + n
	waitUntil(t, func() bool { return count() >= want }, func() string {
		return fmt.Sprintf("handled %d of %d records, node %d frozen, partition moved at %s", count(), want, frozen, movedAt.Format(time.TimeOnly))
	})
	// Each record's wait: from when it could first have been fetched (its
	// acknowledgement, after the move) to its handling.
	mu.Lock()
	var lag, lastAck, lastHandled time.Duration
	for v, r := range moved {
		lag = max(lag, handled[v].Sub(r.at))
		lastAck = max(lastAck, r.at.Sub(movedAt))
		lastHandled = max(lastHandled, handled[v].Sub(movedAt))
	}
	mu.Unlock()
	t.Logf("node %d (leader of %s/%d) frozen; Kafka moved the partition after %.1f s; %d records written there, the last acknowledged %.2f s and handled %.2f s after the move; each handled at most %.2f s after its acknowledgement",
		frozen, e.topic, partition, moveTook.Seconds(), n, lastAck.Seconds(), lastHandled.Seconds(), lag.Seconds())
	if lag > movedBound {
		t.Errorf("records written to %s/%d after its leadership moved off frozen node %d were handled up to %.1f s after their acknowledgement, want within %s",
			e.topic, partition, frozen, lag.Seconds(), movedBound)
	}

	if err := node.Resume(); err != nil {
		t.Fatal(err)
	}
	for _, r := range moved {
		all = append(all, r.produced)
	}
	e.waitCommitted(group, endOffsets(all))
	stop()
}

// frozenTarget picks the partition of topic to freeze the leader of: one
// led by group's coordinator if there is one, else partition 0.
func frozenTarget(t *testing.T, c *kafkabroker.Cluster, topic, group string) int32 {
	t.Helper()
	node := c.Nodes()[0]
	co, err := node.GroupCoordinator(group)
	if err != nil {
		t.Fatal(err)
	}
	leaders := map[int32]int{}
	for p := range int32(partitions) {
		l, err := node.PartitionLeader(topic, p)
		if err != nil {
			t.Fatal(err)
		}
		leaders[p] = l
		if l == co {
			t.Logf("partition %d of %s is led by the group's coordinator, node %d", p, topic, l)
			return p
		}
	}
	t.Logf("no partition of %s led by the group's coordinator (node %d): leaders %v", topic, co, leaders)
	return 0
}

// produceTo writes n records to topic/partition through the nodes given
// and returns where each landed and when the cluster acknowledged it, by
// value.
func produceTo(t *testing.T, nodes []*kafkabroker.Node, topic string, partition int32, n int) map[string]acked {
	t.Helper()
	seeds := make([]string, len(nodes))
	for i, nd := range nodes {
		seeds[i] = nd.Addr(kafkabroker.PlainListener)
	}
	// A node's metadata may still name the frozen leader for a moment after
	// another named the new one: the producer looks again within 100 ms,
	// not franz-go's default 5 s, so that the acknowledgements follow the
	// move closely.
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.MetadataMinAge(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var mu sync.Mutex
	var wg sync.WaitGroup
	var firstErr error
	out := make(map[string]acked, n)
	for i := range n {
		wg.Add(1)
		r := &kgo.Record{Partition: partition, Key: fmt.Appendf(nil, "moved%d", i%10), Value: fmt.Appendf(nil, "moved-%d", i)}
		cl.Produce(ctx, r, func(r *kgo.Record, err error) {
			defer wg.Done()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				firstErr = cmp.Or(firstErr, err)
				return
			}
			out[string(r.Value)] = acked{produced: produced{Partition: r.Partition, Offset: r.Offset, Key: string(r.Key)}, at: time.Now()}
		})
	}
	wg.Wait()
	if firstErr != nil {
		t.Fatalf("produce to %s/%d: %v", topic, partition, firstErr)
	}
	return out
}

// acked is a record the cluster acknowledged, and when.
type acked struct {
	produced
	at time.Time
}
