package app_test

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/cloudevents/sdk-go/protocol/kafka_sarama/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/loopers/commerce-pipeline/internal/config"
	"github.com/loopers/commerce-pipeline/internal/testenv"
	"github.com/loopers/commerce-pipeline/pkg/events"
	"github.com/loopers/commerce-pipeline/services/product-consumers/internal/app"
)

// fixture is what an app test runs against: an in-process broker with every
// topic, a fresh database, a Redis database and a producer of CloudEvents.
type fixture struct {
	reg      *events.Registry
	cluster  *kfake.Cluster
	brokers  []string
	dbURL    string
	redisURL string
	producer sarama.SyncProducer
	seq      int64
}

// fixtureIssued is the outbox id a fixture's database has issued so far.
const fixtureIssued = 1_000_000

func newFixture(t *testing.T) *fixture {
	t.Helper()
	reg := events.NewRegistry()
	cluster := testenv.Kafka(t, reg.AllTopics()...)
	f := &fixture{reg: reg, cluster: cluster, brokers: cluster.ListenAddrs(), dbURL: testenv.DatabaseURL(t), redisURL: testenv.RedisURL(t)}
	sc := sarama.NewConfig()
	sc.Producer.Return.Successes = true
	sp, err := sarama.NewSyncProducer(f.brokers, sc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sp.Close() })
	f.producer = sp
	// The events a test writes straight to Kafka carry sequences the outbox
	// must have issued: like events beyond its last id are refused.
	if _, err := f.conn(t).Exec(context.Background(), `SELECT setval('outbox_id_seq', $1)`, fixtureIssued); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) redis(t *testing.T) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(f.redisURL)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opts)
	t.Cleanup(func() { c.Close() })
	return c
}

func (f *fixture) conn(t *testing.T) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), f.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func (f *fixture) event(t *testing.T) func(ev any) events.Record {
	return func(ev any) events.Record {
		t.Helper()
		rec, err := f.reg.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
}

// message encodes rec as the relay would, with the next sequence.
func (f *fixture) message(t *testing.T, topic string, rec events.Record, id string) *sarama.ProducerMessage {
	t.Helper()
	return f.messageAt(t, topic, rec, id, time.Now())
}

// messageAt is message for an event that happened at at.
func (f *fixture) messageAt(t *testing.T, topic string, rec events.Record, id string, at time.Time) *sarama.ProducerMessage {
	t.Helper()
	f.seq++
	ce, err := f.reg.ToCloudEvent(events.Envelope{ID: id, Source: "test", Time: at, Sequence: f.seq, Record: rec})
	if err != nil {
		t.Fatal(err)
	}
	pm := &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(rec.AggregateID)}
	if err := kafka_sarama.WriteProducerMessage(context.Background(), binding.ToMessage(&ce), pm); err != nil {
		t.Fatal(err)
	}
	return pm
}

func (f *fixture) sender(t *testing.T) func(topic string, rec events.Record, id string) {
	return func(topic string, rec events.Record, id string) {
		t.Helper()
		if _, _, err := f.producer.SendMessage(f.message(t, topic, rec, id)); err != nil {
			t.Fatal(err)
		}
	}
}

// start runs the service with the fixture's settings plus env until stop is
// called; done receives Run's result.
func (f *fixture) start(t *testing.T, env map[string]string) (admin string, done <-chan error, stop func()) {
	t.Helper()
	vars := map[string]string{
		"DATABASE_URL": f.dbURL, "KAFKA_BROKERS": strings.Join(f.brokers, ","), "REDIS_URL": f.redisURL,
		"ADMIN_ADDR": "127.0.0.1:0", "CONSUMER_RETRY_BACKOFF": "10ms",
	}
	for k, v := range env {
		vars[k] = v
	}
	cfg, err := config.Parse(config.FromMap(vars), app.Load)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan error, 1)
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	adminReady := make(chan string, 1)
	go func() { ch <- app.Run(ctx, cfg, logger, adminReady) }()
	t.Cleanup(cancel)
	return <-adminReady, ch, cancel
}
