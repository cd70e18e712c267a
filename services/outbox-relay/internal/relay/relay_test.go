package relay

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/cloudevents/sdk-go/protocol/kafka_sarama/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/loopers/commerce-pipeline/pkg/events"
	"github.com/loopers/commerce-pipeline/services/outbox-relay/internal/relaytest"
)

// decode reads a Kafka record back into a domain message through the
// CloudEvents Kafka binding, as a consumer would.
func decode(t *testing.T, reg *events.Registry, r relaytest.Record) events.Message {
	t.Helper()
	cm := &sarama.ConsumerMessage{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: []byte(r.Key), Value: r.Value}
	for _, h := range r.Raw.Headers {
		cm.Headers = append(cm.Headers, &sarama.RecordHeader{Key: []byte(h.Key), Value: h.Value})
	}
	msg := kafka_sarama.NewMessageFromConsumerMessage(cm)
	if msg.ReadEncoding() != binding.EncodingBinary {
		t.Fatalf("record %s/%d@%d is not in binary content mode", r.Topic, r.Partition, r.Offset)
	}
	ce, err := binding.ToEvent(context.Background(), msg)
	if err != nil {
		t.Fatalf("record %s/%d@%d: %v", r.Topic, r.Partition, r.Offset, err)
	}
	m, err := reg.FromCloudEvent(*ce)
	if err != nil {
		t.Fatalf("record %s/%d@%d: %v", r.Topic, r.Partition, r.Offset, err)
	}
	return m
}

//nolint:paralleltest // lease timing: the node's 1 s lease must not lapse between the test's steps; under parallel load it did and the test flaked
func TestHappyPathPublishesEveryRowAsCloudEvent(t *testing.T) {
	env := relaytest.New(t)
	n := newNode(t, env, testConfig(env, "node-a"))
	n.start(t, true)

	evs := []any{
		events.LikeCreatedV1{UserID: "u1", ProductID: 1},
		events.ProductViewedV1{ProductID: 2, UserID: "u2"},
		events.OrderPaidV1{OrderID: 7, PaymentID: 70, Amount: 3000, Items: []events.OrderItem{{ProductID: 1, Quantity: 2, UnitPrice: 1500}}},
		events.LikeCanceledV1{UserID: "u1", ProductID: 1},
		events.StockDepletedV1{ProductID: 2},
		events.LikeCreatedV1{UserID: "u3", ProductID: 1},
		events.ProductViewedV1{ProductID: 1, UserID: "u3"},
		events.OrderPaidV1{OrderID: 8, PaymentID: 80, Amount: 10, Items: []events.OrderItem{{ProductID: 2, Quantity: 1, UnitPrice: 10}}},
	}
	want := map[string]relaytest.Row{}
	var last int64
	for _, ev := range evs {
		tx := env.Begin(t)
		row := env.Insert(t, tx, ev)
		env.Commit(t, tx)
		want[row.EventID] = row
		last = row.ID
	}

	recs := env.Records(t, len(evs), 30*time.Second)
	if len(recs) != len(evs) {
		t.Fatalf("got %d records, want %d", len(recs), len(evs))
	}
	for _, r := range recs {
		row, ok := want[r.EventID]
		if !ok {
			t.Fatalf("record with unknown event id %q", r.EventID)
		}
		topic, _ := events.TopicOf(row.Type)
		m := decode(t, env.Reg, r)
		wantEv, _ := env.Reg.Unmarshal(row.Type, row.Data)
		got := map[string]any{"topic": r.Topic, "key": r.Key, "type": m.Type, "source": m.Source,
			"aggregateType": m.AggregateType, "aggregateId": m.AggregateID, "sequence": m.Sequence,
			"contentType": r.Headers["content-type"], "data": string(r.Value), "event": m.Event}
		exp := map[string]any{"topic": env.Topic(topic), "key": row.AggregateID, "type": row.Type, "source": "commerce-api",
			"aggregateType": row.AggregateType, "aggregateId": row.AggregateID, "sequence": row.ID,
			"contentType": "application/json", "data": string(row.Data), "event": wantEv}
		if diff := cmp.Diff(exp, got); diff != "" {
			t.Errorf("record of outbox row %d (-want +got):\n%s", row.ID, diff)
		}
		if m.Time.IsZero() {
			t.Errorf("record of outbox row %d has no time", row.ID)
		}
	}
	if err := orderedPerKey(recs); err != nil {
		t.Error(err)
	}
	eventually(t, 10*time.Second, "the cursor to reach the last id", func() bool { return env.Cursor(t) == last })
}

// TestGapRuleTwoTransactions is the case that loses an event without the gap
// rule: T1 draws the lower id, T2 the higher one and commits first, a pass
// runs, then T1 commits.
func TestGapRuleTwoTransactions(t *testing.T) {
	t.Parallel()
	env, n := leader(t)

	t1 := env.Begin(t)
	first := env.Insert(t, t1, events.LikeCreatedV1{UserID: "u1", ProductID: 5})
	t2 := env.Begin(t)
	second := env.Insert(t, t2, events.LikeCanceledV1{UserID: "u1", ProductID: 5})
	env.Commit(t, t2)

	if res := n.pass(t); res.Published != 0 || res.Cursor != 0 {
		t.Fatalf("pass with id %d in flight: %+v, want nothing published and the cursor kept at 0", first.ID, res)
	}
	env.Commit(t, t1)
	if res := n.pass(t); res.Published != 2 || res.Cursor != second.ID {
		t.Fatalf("pass after both commits: %+v, want 2 published, cursor %d", res, second.ID)
	}
	recs := env.Records(t, 2, 10*time.Second)
	if diff := cmp.Diff([]int64{first.ID, second.ID}, sequences(recs)); diff != "" {
		t.Errorf("published sequences (-want +got):\n%s", diff)
	}
}

// TestGapHeldByATransactionAboveXmax: T2 takes its xid first (id 1), T1
// takes a newer xid and draws id 2, T2 draws id 3 and commits. A snapshot
// taken now has xmax = T2 + 1, so T1 is running but absent from its xip list;
// the relay must still wait for id 2.
func TestGapHeldByATransactionAboveXmax(t *testing.T) {
	t.Parallel()
	env, n := leader(t)

	t2 := env.Begin(t)
	a := env.Insert(t, t2, events.LikeCreatedV1{UserID: "u1", ProductID: 8})
	t1 := env.Begin(t)
	b := env.Insert(t, t1, events.LikeCanceledV1{UserID: "u1", ProductID: 8})
	c := env.Insert(t, t2, events.LikeCreatedV1{UserID: "u2", ProductID: 8})
	env.Commit(t, t2)

	if res := n.pass(t); res.Cursor != a.ID {
		t.Fatalf("pass with id %d in flight: %+v, want the cursor at %d", b.ID, res, a.ID)
	}
	env.Commit(t, t1)
	if res := n.pass(t); res.Cursor != c.ID {
		t.Fatalf("pass after both commits: %+v, want cursor %d", res, c.ID)
	}
	recs := env.Records(t, 3, 10*time.Second)
	if diff := cmp.Diff([]int64{a.ID, b.ID, c.ID}, sequences(recs)); diff != "" {
		t.Errorf("published sequences (-want +got):\n%s", diff)
	}
}

// TestOutOfOrderCommits is watermill's case: transactions commit in the
// reverse order of their ids, one rolls back, and passes run in between.
func TestOutOfOrderCommits(t *testing.T) {
	t.Parallel()
	env, n := leader(t)

	type txRow struct {
		tx   pgx.Tx
		row  relaytest.Row
		roll bool
	}
	var txs []txRow
	for i := range 5 {
		tx := env.Begin(t)
		row := env.Insert(t, tx, events.ProductViewedV1{ProductID: 9, UserID: "u" + strconv.Itoa(i)})
		txs = append(txs, txRow{tx: tx, row: row, roll: i == 2})
	}
	var want []int64
	for i := len(txs) - 1; i >= 0; i-- {
		x := txs[i]
		if x.roll {
			if err := x.tx.Rollback(context.Background()); err != nil {
				t.Fatal(err)
			}
		} else {
			if err := x.tx.Commit(context.Background()); err != nil {
				t.Fatal(err)
			}
			want = append(want, x.row.ID)
		}
		n.pass(t)
	}
	slices.Sort(want)
	n.pass(t)
	if got := env.Cursor(t); got != txs[len(txs)-1].row.ID {
		t.Fatalf("cursor %d, want %d", got, txs[len(txs)-1].row.ID)
	}
	recs := env.Records(t, len(want), 10*time.Second)
	if diff := cmp.Diff(want, sequences(recs)); diff != "" {
		t.Errorf("published sequences in log order (-want +got):\n%s", diff)
	}
}

// TestOutOfOrderCommitsStress races 32 writers, whose transactions commit
// after random delays and roll back about one time in ten, against a running
// relay: every committed event is published once, in per-aggregate order,
// and no rolled-back one is.
//
//nolint:paralleltest // lease timing: the node's 1 s lease must not lapse between the test's steps; under parallel load it did and the test flaked
func TestOutOfOrderCommitsStress(t *testing.T) {
	env := relaytest.New(t)
	cfg := testConfig(env, "node-a")
	cfg.BatchSize = 20 // more batches, more chances to cut through in-flight ids
	n := newNode(t, env, cfg)
	n.start(t, true)

	const writers, txPerWriter, aggregates = 32, 40, 6
	var (
		mu        sync.Mutex
		committed = map[string]int64{}
		rolled    = map[string]bool{}
		wg        sync.WaitGroup
	)
	for w := range writers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			for i := range txPerWriter {
				ctx := context.Background()
				tx, err := env.Pool.Begin(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				product := int64(rng.IntN(aggregates) + 1)
				// commerce-api locks the aggregate before writing its outbox
				// row, which makes id order the logical order per aggregate.
				if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, product); err != nil {
					t.Error(err)
					return
				}
				var rows []relaytest.Row
				for k := range rng.IntN(3) + 1 {
					rows = append(rows, env.Insert(t, tx, events.ProductViewedV1{ProductID: product, UserID: fmt.Sprintf("w%d-%d-%d", w, i, k)}))
				}
				time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
				roll := rng.IntN(10) == 0
				if roll {
					err = tx.Rollback(ctx)
				} else {
					err = tx.Commit(ctx)
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, r := range rows {
					if roll {
						rolled[r.EventID] = true
					} else {
						committed[r.EventID] = r.ID
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()

	recs := env.Records(t, len(committed), 60*time.Second)
	got := map[string]int64{}
	for _, r := range recs {
		if rolled[r.EventID] {
			t.Errorf("rolled-back event %s (id %d) was published", r.EventID, r.Sequence)
		}
		got[r.EventID] = r.Sequence
	}
	if diff := cmp.Diff(committed, got); diff != "" {
		t.Errorf("published events (-committed +published):\n%s", diff)
	}
	if d := duplicates(recs); d != 0 {
		t.Errorf("%d duplicate records without any failure", d)
	}
	if err := orderedPerKey(recs); err != nil {
		t.Error(err)
	}
	t.Logf("%d committed, %d rolled back, %d records", len(committed), len(rolled), len(recs))
}
