// Package relaytest gives the relay's tests a real environment: a fresh
// migrated PostgreSQL database, the event topics on Apache Kafka under a
// prefix of the test's own (or, for the faults only it can inject, on
// kfake), helpers that write outbox rows the way commerce-api does
// (plain SQL inside the caller's transaction) and a reader of what reached
// Kafka.
package relaytest

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/loopers/commerce-pipeline/internal/kafka"
	"github.com/loopers/commerce-pipeline/internal/kafkabroker"
	"github.com/loopers/commerce-pipeline/internal/outbox"
	"github.com/loopers/commerce-pipeline/internal/pg"
	"github.com/loopers/commerce-pipeline/internal/testenv"
	"github.com/loopers/commerce-pipeline/pkg/events"
)

// Env is one test's database and Kafka topics.
type Env struct {
	URL  string
	Pool *pgxpool.Pool
	// Wake wakes the relay after a commit, as commerce-api does; Insert
	// through Pool and Commit use it.
	Wake  *pg.Notifier
	Kafka kafka.Settings // the brokers, and the prefix the relay publishes under
	// Cluster is the kfake cluster of NewFake, for its fault injection; nil
	// on Apache Kafka.
	Cluster *kfake.Cluster
	Reg     *events.Registry
}

// New starts an environment that lives as long as the test, with the event
// topics on the test binary's Apache Kafka broker.
func New(t testing.TB) *Env {
	t.Helper()
	e := newEnv(t)
	e.Kafka = testenv.Kafka(t, e.Reg.Topics()...).Settings
	return e
}

// NewFake is New on kfake, for a test whose point is a fault only kfake
// injects (Cluster.Fault, Cluster.ControlKey); why says which.
func NewFake(t testing.TB, why string) *Env {
	t.Helper()
	e := newEnv(t)
	e.Cluster = testenv.FakeKafka(t, why, e.Reg.Topics()...)
	e.Kafka = kafka.Settings{Brokers: e.Cluster.ListenAddrs()}
	return e
}

// NewOn is New with the event topics on a broker of the test's own (from
// testenv.KafkaCluster), for tests that stop or kill it.
func NewOn(t testing.TB, c *kafkabroker.Cluster) *Env {
	t.Helper()
	e := newEnv(t)
	e.Kafka = kafka.Settings{Brokers: c.Brokers()}
	specs := make([]kafka.TopicSpec, 0, 4)
	for _, name := range e.Reg.Topics() {
		specs = append(specs, kafka.TopicSpec{Name: name, Partitions: 3, Replication: int16(min(len(c.Nodes()), 3))})
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := e.Kafka.CreateTopics(ctx, specs); err != nil {
		t.Fatalf("relaytest: %v", err)
	}
	return e
}

func newEnv(t testing.TB) *Env {
	t.Helper()
	reg := events.NewRegistry()
	url := testenv.DatabaseURL(t)
	// Tests hold many transactions open at once.
	db, err := pg.Open(context.Background(), url, pg.Options{MaxConns: 64})
	if err != nil {
		t.Fatalf("relaytest: open pool: %v", err)
	}
	t.Cleanup(db.Close)
	wake := db.NewNotifier(outbox.Channel)
	t.Cleanup(wake.Close)
	return &Env{URL: url, Pool: db.Pool, Wake: wake, Reg: reg}
}

// Topic names an event topic (like-events) as the relay publishes it.
func (e *Env) Topic(name string) string { return e.Kafka.Topic(name) }

// Querier runs SQL: a pool, a connection or a transaction.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Row is an outbox row as written.
type Row struct {
	ID      int64
	EventID string
	events.Record
}

// Insert writes domain event ev to the outbox through q, as commerce-api
// does: through Pool (a transaction of its own) it wakes the relay after the
// commit; in a transaction, Commit does.
func (e *Env) Insert(t testing.TB, q Querier, ev any) Row {
	t.Helper()
	rec, err := e.Reg.Marshal(ev)
	if err != nil {
		t.Fatalf("relaytest: marshal %T: %v", ev, err)
	}
	return e.InsertRecord(t, q, rec, time.Time{})
}

// InsertRecord writes rec to the outbox through q; a zero createdAt means
// now.
func (e *Env) InsertRecord(t testing.TB, q Querier, rec events.Record, createdAt time.Time) Row {
	t.Helper()
	r := Row{EventID: uuid.NewString(), Record: rec}
	var err error
	r.ID, err = outbox.Insert(context.Background(), q.QueryRow, outbox.Entry{EventID: r.EventID, Source: "commerce-api", Record: rec, CreatedAt: createdAt})
	if err != nil {
		t.Fatalf("relaytest: insert outbox row: %v", err)
	}
	if q == Querier(e.Pool) {
		e.Wake.Notify()
	}
	return r
}

// Begin starts a transaction on its own connection.
func (e *Env) Begin(t testing.TB) pgx.Tx {
	t.Helper()
	tx, err := e.Pool.Begin(context.Background())
	if err != nil {
		t.Fatalf("relaytest: begin: %v", err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

// Commit commits tx and wakes the relay, as commerce-api does.
func (e *Env) Commit(t testing.TB, tx pgx.Tx) {
	t.Helper()
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatalf("relaytest: commit: %v", err)
	}
	e.Wake.Notify()
}

// Cursor returns the relay's cursor.
func (e *Env) Cursor(t testing.TB) int64 {
	t.Helper()
	id, err := outbox.ReadCursor(context.Background(), e.Pool.QueryRow)
	if err != nil {
		t.Fatalf("relaytest: %v", err)
	}
	return id
}

// FailedIDs returns the outbox ids in outbox_failed with their errors.
func (e *Env) FailedIDs(t testing.TB) map[int64]string {
	t.Helper()
	rows, err := e.Pool.Query(context.Background(), `SELECT outbox_id, error_message FROM outbox_failed ORDER BY outbox_id`)
	if err != nil {
		t.Fatalf("relaytest: read outbox_failed: %v", err)
	}
	out := map[int64]string{}
	for rows.Next() {
		var (
			id  int64
			msg string
		)
		if err := rows.Scan(&id, &msg); err != nil {
			t.Fatalf("relaytest: scan outbox_failed: %v", err)
		}
		out[id] = msg
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("relaytest: read outbox_failed: %v", err)
	}
	return out
}

// Record is a Kafka record the relay wrote.
type Record struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       string
	Headers   map[string]string
	Value     []byte
	Sequence  int64 // ce_sequence
	EventID   string
	Raw       *kgo.Record
}

// Records reads every record of the event topics from the start until at
// least n have arrived, then keeps reading briefly so that extra records
// (duplicates) show up too. It fails the test if n do not arrive in time.
func (e *Env) Records(t testing.TB, n int, timeout time.Duration) []Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.Kafka.Brokers...), kgo.ConsumeTopics(e.Kafka.Topics(e.Reg.Topics())...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		t.Fatalf("relaytest: kafka client: %v", err)
	}
	defer cl.Close()
	var out []Record
	deadline := time.Now().Add(timeout)
	var settle time.Time
	for {
		now := time.Now()
		if !settle.IsZero() && now.After(settle) {
			return out
		}
		if settle.IsZero() && now.After(deadline) {
			t.Fatalf("relaytest: %d of %d records arrived within %s", len(out), n, timeout)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		fs := cl.PollFetches(ctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) { out = append(out, toRecord(r)) })
		if settle.IsZero() && len(out) >= n {
			settle = time.Now().Add(300 * time.Millisecond)
		}
	}
}

func toRecord(r *kgo.Record) Record {
	rec := Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: string(r.Key),
		Headers: map[string]string{}, Value: r.Value, Raw: r}
	for _, h := range r.Headers {
		rec.Headers[h.Key] = string(h.Value)
	}
	rec.Sequence, _ = strconv.ParseInt(rec.Headers["ce_sequence"], 10, 64)
	rec.EventID = rec.Headers["ce_id"]
	return rec
}
