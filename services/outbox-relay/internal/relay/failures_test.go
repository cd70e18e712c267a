package relay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/loopers/commerce-pipeline/internal/kafkabroker"
	"github.com/loopers/commerce-pipeline/internal/testenv"
	"github.com/loopers/commerce-pipeline/pkg/events"
	"github.com/loopers/commerce-pipeline/services/outbox-relay/internal/relaytest"
)

// produceFault fails every produce to topic with err until removed (kfake
// only: Env.Cluster is set by relaytest.NewFake).
func produceFault(env *relaytest.Env, topic string, err *kerr.Error, count int) *kfake.FaultHandle {
	return env.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: err, Count: count})
}

// notEnoughReplicas starts a two-node cluster whose topics keep two
// replicas and need both in sync (min.insync.replicas=2), leads a relay on
// it, and returns the fault: one node shut down, so that every acks=all
// produce fails with NOT_ENOUGH_REPLICAS (retriable), as when replicas are
// down; and its cure, the node started again. (On one node the fault cannot
// be made: with eligible leader replicas, on by default since Kafka 4.1, a
// topic's effective minimum in-sync replicas is at most its replication
// factor.)
func notEnoughReplicas(t *testing.T) (env *relaytest.Env, n *node, fault, heal func()) {
	t.Helper()
	c := testenv.KafkaCluster(t, kafkabroker.Options{Nodes: 2, Props: map[string]string{"min.insync.replicas": "2"}})
	env, n = leaderOn(t, relaytest.NewOn(t, c))
	fault = func() {
		if err := c.Node(2).Stop(); err != nil {
			t.Fatal(err)
		}
	}
	heal = func() {
		if err := c.Node(2).Start(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	return env, n, fault, heal
}

// tooLarge makes topic refuse records larger than 64 bytes, as every event
// is: MESSAGE_TOO_LARGE, a permanent error. It returns the cure.
func tooLarge(t *testing.T, env *relaytest.Env, topic string) (heal func()) {
	t.Helper()
	name, limit := env.Topic(topic), "64"
	testenv.SetTopicConfig(t, env.Kafka.Brokers, name, map[string]*string{"max.message.bytes": &limit})
	return func() {
		testenv.SetTopicConfig(t, env.Kafka.Brokers, name, map[string]*string{"max.message.bytes": nil})
	}
}

func insertCommitted(t *testing.T, env *relaytest.Env, evs ...any) []relaytest.Row {
	t.Helper()
	var out []relaytest.Row
	for _, ev := range evs {
		out = append(out, env.Insert(t, env.Pool, ev))
	}
	return out
}

func sequences(recs []relaytest.Record) []int64 {
	out := []int64{}
	for _, r := range recs {
		out = append(out, r.Sequence)
	}
	return out
}

func ids(rows []relaytest.Row) []int64 {
	out := []int64{}
	for _, r := range rows {
		out = append(out, r.ID)
	}
	return out
}

// passUntil runs passes until the cursor reaches id.
func passUntil(t *testing.T, n *node, env *relaytest.Env, id int64) {
	t.Helper()
	eventually(t, 20*time.Second, "the cursor to pass the failed rows", func() bool {
		n.pass(t)
		return env.Cursor(t) >= id
	})
}

// heldIDs returns the rows the cursor passed unpublished (outbox_held).
func heldIDs(t *testing.T, env *relaytest.Env) []int64 {
	t.Helper()
	rows, err := env.Pool.Query(context.Background(), `SELECT outbox_id FROM outbox_held ORDER BY outbox_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := []int64{}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		out = append(out, id)
	}
	return out
}

func hasPrefix(msgs []string, prefix string) bool {
	for _, m := range msgs {
		if strings.HasPrefix(m, prefix) {
			return true
		}
	}
	return false
}

func likes(product int64, users ...string) []any {
	var out []any
	for _, u := range users {
		out = append(out, events.LikeCreatedV1{UserID: u, ProductID: product})
	}
	return out
}

// TestUnacknowledgedRowsAreHeldInTheProducer: while the cluster cannot
// acknowledge (too few in-sync replicas), the records stay in the producer,
// which retries them; after the send timeout the cursor passes them,
// recording them as held, without marking anything for a later retry; once
// the cluster heals they are published, in order, exactly once, and no
// longer held.
func TestUnacknowledgedRowsAreHeldInTheProducer(t *testing.T) {
	t.Parallel()
	env, n, fault, heal := notEnoughReplicas(t)
	rows := insertCommitted(t, env, likes(3, "a", "b", "c", "d")...)

	fault()
	res := n.pass(t)
	if diff := cmp.Diff(PassResult{Held: len(rows), Cursor: rows[len(rows)-1].ID}, res); diff != "" {
		t.Fatalf("pass while Kafka fails (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(ids(rows), heldIDs(t, env)); diff != "" {
		t.Errorf("held rows (-want +got):\n%s", diff)
	}
	heal()
	eventually(t, 30*time.Second, "the held rows to be published", func() bool {
		n.pass(t)
		return len(heldIDs(t, env)) == 0
	})
	recs := env.Records(t, len(rows), 10*time.Second)
	if diff := cmp.Diff(ids(rows), sequences(recs)); diff != "" {
		t.Errorf("published sequences in log order (-want +got):\n%s", diff)
	}
}

// TestRefusedAggregateHoldsBackOnlyItself: the broker refuses one topic's
// records (a non-retriable error, so the producer fails them); their
// aggregate waits, retried with a growing backoff, while another topic's
// events go on; once the broker accepts again, the held rows are published
// in order before the aggregate's later rows.
func TestRefusedAggregateHoldsBackOnlyItself(t *testing.T) {
	t.Parallel()
	env, n := leaderOn(t, relaytest.NewFake(t, "a refusal of one topic's produce requests, counted, is a fault only kfake injects"))
	fault := produceFault(env, "like-events", kerr.PolicyViolation, -1)
	held := insertCommitted(t, env, likes(3, "a", "b")...)
	views := insertCommitted(t, env, events.ProductViewedV1{ProductID: 3, UserID: "a"}, events.ProductViewedV1{ProductID: 4, UserID: "b"})

	res := n.pass(t)
	if res.Cursor != views[1].ID || res.Published != 2 || res.Held != 2 || res.Retried == 0 {
		t.Fatalf("pass while like-events refuses: %+v; want the views published, both likes held, the cursor at %d", res, views[1].ID)
	}
	if diff := cmp.Diff(ids(held), heldIDs(t, env)); diff != "" {
		t.Errorf("held rows (-want +got):\n%s", diff)
	}
	if !n.logs.logged("INFO", "message held for retry", held[0].ID, "nextRetryAt") {
		t.Errorf("no retry log line; INFO lines: %q", n.logs.messages("INFO"))
	}
	// The retries back off: over a second, far fewer than a busy loop's.
	hits := fault.Hits()
	time.Sleep(time.Second)
	for range 5 {
		n.pass(t)
	}
	if more := fault.Hits() - hits; more > 8 {
		t.Errorf("%d produce requests refused in a second of retries; want a backoff", more)
	}
	later := insertCommitted(t, env, likes(3, "c")...)
	fault.Remove()
	want := append(ids(held), later[0].ID)
	eventually(t, 20*time.Second, "the held likes to be published", func() bool {
		n.pass(t)
		return len(heldIDs(t, env)) == 0 && env.Cursor(t) == later[0].ID
	})
	var likeSeqs []int64
	for _, r := range env.Records(t, len(views)+len(want), 10*time.Second) {
		if strings.HasSuffix(r.Topic, "like-events") {
			likeSeqs = append(likeSeqs, r.Sequence)
		}
	}
	if diff := cmp.Diff(want, likeSeqs); diff != "" {
		t.Errorf("like-events sequences in log order (-want +got):\n%s", diff)
	}
}

// TestHeldRowsGoFirstAfterAHandover: a leader that held an aggregate's rows
// dies; the next leader, on another node, publishes them, in id order,
// before the aggregate's later rows, though the cursor is past them.
func TestHeldRowsGoFirstAfterAHandover(t *testing.T) {
	t.Parallel()
	env := relaytest.NewFake(t, "a refusal of one topic's produce requests is a fault only kfake injects")
	cfg := testConfig(env, "node-a")
	cfg.LeaseTTL = time.Minute
	a := newNode(t, env, cfg)
	a.lead(t)
	fault := produceFault(env, "like-events", kerr.PolicyViolation, -1)
	held := insertCommitted(t, env, likes(5, "a", "b", "c")...)
	if res := a.pass(t); res.Held != len(held) {
		t.Fatalf("pass while like-events refuses: %+v, want %d held", res, len(held))
	}
	// node-a dies holding them: its lease is released as a dead node's
	// expires, and node-b takes it.
	if _, err := env.Pool.Exec(context.Background(), `UPDATE relay_lease SET lease_until = '-infinity'`); err != nil {
		t.Fatal(err)
	}
	fault.Remove()
	later := insertCommitted(t, env, likes(5, "d", "e")...)
	b := newNode(t, env, testConfig(env, "node-b"))
	b.lead(t)
	eventually(t, 20*time.Second, "node-b to publish everything", func() bool {
		b.pass(t)
		return len(heldIDs(t, env)) == 0 && env.Cursor(t) == later[len(later)-1].ID
	})
	recs := env.Records(t, len(held)+len(later), 10*time.Second)
	if diff := cmp.Diff(append(ids(held), ids(later)...), sequences(recs)); diff != "" {
		t.Errorf("published sequences in log order (-want +got):\n%s", diff)
	}
}

func TestExpiredFailureMovesToFailedAndCursorPassesIt(t *testing.T) {
	t.Parallel()
	env, n, fault, heal := notEnoughReplicas(t)
	rec, err := env.Reg.Marshal(events.LikeCreatedV1{UserID: "old", ProductID: 3})
	if err != nil {
		t.Fatal(err)
	}
	old := env.InsertRecord(t, env.Pool, rec, time.Now().Add(-10*time.Minute))
	fresh := insertCommitted(t, env, likes(3, "new")...)[0]

	fault()
	res := n.pass(t)
	// Whether the fresh row was refused (and so retried) or stayed
	// unacknowledged in the producer depends on whether the producer's
	// initialisation failed during the fault first: either way it is held.
	res.Retried = 0
	if diff := cmp.Diff(PassResult{Failed: 1, Held: 1, Cursor: fresh.ID}, res); diff != "" {
		t.Fatalf("pass while Kafka fails (-want +got):\n%s", diff)
	}
	if _, ok := env.FailedIDs(t)[old.ID]; !ok {
		t.Errorf("expired row %d is not in outbox_failed: %v", old.ID, env.FailedIDs(t))
	}
	if !n.logs.logged("WARN", "message expired, moving to failed", old.ID, "createdAt") {
		t.Errorf("no expiry log line; WARN lines: %q", n.logs.messages("WARN"))
	}
	heal()
	eventually(t, 30*time.Second, "the held row to be published", func() bool {
		n.pass(t)
		return len(heldIDs(t, env)) == 0
	})
	recs := env.Records(t, 1, 10*time.Second)
	if diff := cmp.Diff([]int64{fresh.ID}, sequences(recs)); diff != "" {
		t.Errorf("published sequences (-want +got):\n%s", diff)
	}
}

func TestPermanentFailureMovesToFailedAtOnce(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		insert func(t *testing.T, env *relaytest.Env) relaytest.Row
		// fault breaks Kafka for the bad row and returns its cure.
		fault func(t *testing.T, env *relaytest.Env) func()
	}{
		{
			name: "message too large",
			insert: func(t *testing.T, env *relaytest.Env) relaytest.Row {
				return insertCommitted(t, env, likes(4, "big")...)[0]
			},
			fault: func(t *testing.T, env *relaytest.Env) func() { return tooLarge(t, env, "like-events") },
		},
		{
			name: "type without a derivable topic",
			insert: func(t *testing.T, env *relaytest.Env) relaytest.Row {
				return env.InsertRecord(t, env.Pool, events.Record{Type: "LikeCreated", AggregateType: "Product", AggregateID: "4", Data: []byte(`{}`)}, time.Time{})
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env, n := leader(t)
			bad := tt.insert(t, env)
			heal := func() {}
			if tt.fault != nil {
				heal = tt.fault(t, env)
			}
			res := n.pass(t)
			if diff := cmp.Diff(PassResult{Failed: 1, Cursor: bad.ID}, res); diff != "" {
				t.Fatalf("pass (-want +got):\n%s", diff)
			}
			if msg, ok := env.FailedIDs(t)[bad.ID]; !ok || msg == "" {
				t.Errorf("row %d not in outbox_failed with its error: %v", bad.ID, env.FailedIDs(t))
			}
			heal()
			good := insertCommitted(t, env, likes(4, "after")...)[0]
			passUntil(t, n, env, good.ID)
			recs := env.Records(t, 1, 10*time.Second)
			if diff := cmp.Diff([]int64{good.ID}, sequences(recs)); diff != "" {
				t.Errorf("published sequences (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAmbiguousProduceLeavesNoDuplicate: the broker appends the batch but
// answers REQUEST_TIMED_OUT; the idempotent producer's retry must not append
// it again.
func TestAmbiguousProduceLeavesNoDuplicate(t *testing.T) {
	t.Parallel()
	env, n := leaderOn(t, relaytest.NewFake(t, "a broker that appends a batch and then answers REQUEST_TIMED_OUT is a fault only kfake injects"))
	rows := insertCommitted(t, env, likes(6, "a", "b", "c", "d", "e")...)
	fault := produceFault(env, "like-events", kerr.RequestTimedOut, 1)
	passUntil(t, n, env, rows[len(rows)-1].ID)
	if fault.Hits() != 1 {
		t.Fatalf("the fault answered %d produce requests, want 1", fault.Hits())
	}
	recs := env.Records(t, len(rows), 10*time.Second)
	if diff := cmp.Diff(ids(rows), sequences(recs)); diff != "" {
		t.Errorf("published sequences in log order (-want +got):\n%s", diff)
	}
}

// TestTypeUnknownToTheRegistryIsPublished: a type this build does not know
// but whose topic derives by convention is published like any other, so that
// consumers dead-letter it visibly instead of it vanishing into outbox_failed.
func TestTypeUnknownToTheRegistryIsPublished(t *testing.T) {
	t.Parallel()
	env, n := leader(t)
	odd := env.InsertRecord(t, env.Pool, events.Record{Type: "loopers.like.exploded.v1", AggregateType: "Product", AggregateID: "4", Data: []byte(`{}`)}, time.Time{})
	good := insertCommitted(t, env, likes(4, "after")...)[0]
	passUntil(t, n, env, good.ID)
	recs := env.Records(t, 2, 10*time.Second)
	if diff := cmp.Diff([]int64{odd.ID, good.ID}, sequences(recs)); diff != "" {
		t.Errorf("published sequences (-want +got):\n%s", diff)
	}
	if failed := env.FailedIDs(t); len(failed) != 0 {
		t.Errorf("outbox_failed = %v, want empty", failed)
	}
}

// TestOnlyTheRecordTooLargeFails: the broker refuses a produce batch as a
// whole when it is too large, and the producer fails every record of it;
// the one record too large moves to outbox_failed, and its batch-mates are
// sent again, alone where needed, and published in order.
func TestOnlyTheRecordTooLargeFails(t *testing.T) {
	t.Parallel()
	env, n := leader(t)
	limit := "20000"
	testenv.SetTopicConfig(t, env.Kafka.Brokers, env.Topic("like-events"), map[string]*string{"max.message.bytes": &limit})
	var rows []relaytest.Row
	rows = append(rows, insertCommitted(t, env, likes(8, "a", "b", "c", "d", "e")...)...)
	big := env.InsertRecord(t, env.Pool, events.Record{Type: "loopers.like.huge.v1", AggregateType: "Product", AggregateID: "8",
		Data: []byte(`{"pad":"` + randomHex(t, 100_000) + `"}`)}, time.Time{}) // past the limit even compressed
	rows = append(rows, insertCommitted(t, env, likes(8, "f", "g", "h", "i", "j")...)...)
	passUntil(t, n, env, rows[len(rows)-1].ID)
	// The refused batches held small records too: they were retried, not
	// failed.
	if !slices.Contains(n.logs.messages("INFO"), "message held for retry") {
		t.Error("no record was retried: the big record never shared a refused batch, so the test did not test that")
	}
	if diff := cmp.Diff([]int64{big.ID}, slices.Sorted(maps.Keys(env.FailedIDs(t)))); diff != "" {
		t.Errorf("outbox_failed (-want +got):\n%s", diff)
	}
	recs := env.Records(t, len(rows), 10*time.Second)
	if diff := cmp.Diff(ids(rows), sequences(recs)); diff != "" {
		t.Errorf("published sequences in log order (-want +got):\n%s", diff)
	}
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n/2)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
