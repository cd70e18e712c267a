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

func nextRetryAt(t *testing.T, env *relaytest.Env) map[int64]bool {
	t.Helper()
	rows, err := env.Pool.Query(context.Background(), `SELECT id FROM outbox WHERE next_retry_at IS NOT NULL ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[int64]bool{}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		out[id] = true
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

func TestRetriableFailureBlocksTheHeadUntilItSucceeds(t *testing.T) {
	t.Parallel()
	env, n, fault, heal := notEnoughReplicas(t)
	rows := insertCommitted(t, env, likes(3, "a", "b", "c", "d")...)

	fault()
	res := n.pass(t)
	if diff := cmp.Diff(PassResult{Retried: 1}, res); diff != "" {
		t.Fatalf("pass while Kafka fails (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[int64]bool{rows[0].ID: true}, nextRetryAt(t, env)); diff != "" {
		t.Errorf("rows with next_retry_at (-want +got):\n%s", diff)
	}
	if !n.logs.logged("INFO", "message marked for retry", rows[0].ID, "nextRetryAt") {
		t.Errorf("no retry log line; INFO lines: %q", n.logs.messages("INFO"))
	}
	// A pass that sent the head again would fail it again and count a
	// retry; one before the retry time does nothing.
	if res := n.pass(t); res != (PassResult{}) {
		t.Errorf("pass before the retry time: %+v, want nothing done", res)
	}

	heal()
	passUntil(t, n, env, rows[len(rows)-1].ID)
	recs := env.Records(t, len(rows), 10*time.Second)
	if diff := cmp.Diff(ids(rows), sequences(recs)); diff != "" {
		t.Errorf("published sequences in log order (-want +got):\n%s", diff)
	}
}

// TestFaultedPassSendsNothingBeforeTheRetryTime: the kfake variant of the
// test above, counting produce requests: a pass before the retry time sends
// nothing to Kafka at all.
func TestFaultedPassSendsNothingBeforeTheRetryTime(t *testing.T) {
	t.Parallel()
	env, n := leaderOn(t, relaytest.NewFake(t, "counts the produce requests a fault answered, which a real broker does not report"))
	insertCommitted(t, env, likes(3, "a", "b")...)
	fault := produceFault(env, "like-events", kerr.NotEnoughReplicas, -1)
	if res := n.pass(t); res.Retried != 1 {
		t.Fatalf("pass while Kafka fails: %+v, want one retry", res)
	}
	hits := fault.Hits()
	if res := n.pass(t); res != (PassResult{}) {
		t.Errorf("pass before the retry time: %+v, want nothing done", res)
	}
	if fault.Hits() != hits {
		t.Errorf("a pass before the retry time sent to Kafka")
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
	if diff := cmp.Diff(PassResult{Failed: 1, Retried: 1, Cursor: old.ID}, res); diff != "" {
		t.Fatalf("pass while Kafka fails (-want +got):\n%s", diff)
	}
	if _, ok := env.FailedIDs(t)[old.ID]; !ok {
		t.Errorf("expired row %d is not in outbox_failed: %v", old.ID, env.FailedIDs(t))
	}
	if !n.logs.logged("WARN", "message expired, moving to failed", old.ID, "createdAt") {
		t.Errorf("no expiry log line; WARN lines: %q", n.logs.messages("WARN"))
	}
	heal()
	passUntil(t, n, env, fresh.ID)
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
	if !slices.Contains(n.logs.messages("INFO"), "message marked for retry") {
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
