package app_test

import (
	"context"
	"log/slog"
	"maps"
	"os"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/cloudevents/sdk-go/protocol/kafka_sarama/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/loopers/commerce-pipeline/internal/config"
	"github.com/loopers/commerce-pipeline/internal/testenv"
	"github.com/loopers/commerce-pipeline/pkg/events"
	"github.com/loopers/commerce-pipeline/services/product-consumers/internal/app"
)

// fixture is what an app test runs against: every topic under a prefix of
// its own on Apache Kafka, a fresh database, a Redis database and a
// producer of CloudEvents. Tests name topics as the pipeline does
// (like-events); the fixture puts them on the cluster (f.kafka.Topic).
type fixture struct {
	reg      *events.Registry
	kafka    *testenv.KafkaEnv
	brokers  []string
	dbURL    string
	redisURL string
	producer sarama.SyncProducer
	seq      int64
}

// fixtureIssued is the outbox id a fixture's database has issued so far.
const fixtureIssued = 1_000_000

// newFixture is a fixture on the test binary's shared broker.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	return newFixtureOn(t, testenv.Kafka(t, events.NewRegistry().AllTopics()...))
}

// newFixtureOn is a fixture on k, whose topics exist.
func newFixtureOn(t *testing.T, k *testenv.KafkaEnv) *fixture {
	t.Helper()
	f := &fixture{reg: events.NewRegistry(), kafka: k, brokers: k.Brokers, dbURL: testenv.DatabaseURL(t), redisURL: testenv.RedisURL(t)}
	// The record's key picks its partition, as the relay's does.
	sp, err := sarama.NewSyncProducer(f.brokers, k.Config("fixture"))
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

// message encodes rec as the relay would, with the next sequence, for topic
// (the pipeline's name).
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
	pm := &sarama.ProducerMessage{Topic: f.kafka.Topic(topic), Key: sarama.StringEncoder(rec.AggregateID)}
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

// required are the settings the service cannot run without: the
// fixture's database, Redis and Kafka (brokers and prefix), and an admin
// address of its own.
func (f *fixture) required() map[string]string {
	vars := map[string]string{"DATABASE_URL": f.dbURL, "REDIS_URL": f.redisURL, "ADMIN_ADDR": "127.0.0.1:0"}
	maps.Copy(vars, f.kafka.Env())
	return vars
}

// start runs the service with the fixture's settings plus env until stop is
// called; done receives Run's result. Retries back off 10 ms, not 1 s.
func (f *fixture) start(t *testing.T, env map[string]string) (admin string, done <-chan error, stop func()) {
	t.Helper()
	vars := f.required()
	vars["PRODUCT_CONSUMERS_RETRY_BACKOFF"] = "10ms"
	maps.Copy(vars, env)
	return f.run(t, vars)
}

// run runs the service with exactly vars (and the shipped defaults) until
// stop is called, and returns once its admin server listens.
func (f *fixture) run(t *testing.T, vars map[string]string) (admin string, done <-chan error, stop func()) {
	t.Helper()
	r := f.launch(t, vars)
	select {
	case admin = <-r.admin:
	case err := <-r.done:
		t.Fatalf("Run returned before its admin server listened: %v", err)
	}
	return admin, r.done, r.stop
}

// instance is a service run by launch.
type instance struct {
	admin <-chan string // its admin address, once it listens
	done  <-chan error  // Run's result
	stop  func()
}

// launch starts the service with exactly vars (and the shipped defaults)
// and returns at once; the service stops, at the latest, when the test
// ends, before its database and topics go away.
func (f *fixture) launch(t *testing.T, vars map[string]string) instance {
	t.Helper()
	cfg, err := config.Parse(config.FromMap(vars), app.Load)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	finished := make(chan struct{})
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	admin := make(chan string, 1)
	go func() {
		done <- app.Run(ctx, cfg, logger, admin)
		close(finished)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-finished:
		case <-time.After(time.Minute):
			t.Error("Run did not return within a minute of its shutdown")
		}
	})
	return instance{admin: admin, done: done, stop: cancel}
}
