package app_test

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/loopers/commerce-pipeline/internal/cluster"
	"github.com/loopers/commerce-pipeline/internal/config"
	"github.com/loopers/commerce-pipeline/internal/kafka"
	"github.com/loopers/commerce-pipeline/internal/pg"
	"github.com/loopers/commerce-pipeline/internal/productcache"
	"github.com/loopers/commerce-pipeline/internal/testenv"
	"github.com/loopers/commerce-pipeline/pkg/events"
	"github.com/loopers/commerce-pipeline/pkg/pcon"
	"github.com/loopers/commerce-pipeline/services/product-consumers/internal/app"
)

func TestLoadConfig(t *testing.T) {
	t.Parallel()
	base := map[string]string{"DATABASE_URL": "postgres://h/db", "KAFKA_BROKERS": "a:9092,b:9092", "REDIS_URL": "redis://h:6379/0"}
	with := func(k, v string) map[string]string {
		m := map[string]string{}
		for a, b := range base {
			m[a] = b
		}
		m[k] = v
		return m
	}
	with2 := func(k1, v1, k2, v2 string) map[string]string {
		m := with(k1, v1)
		m[k2] = v2
		return m
	}
	tests := []struct {
		name    string
		env     map[string]string
		wantErr string
	}{
		{"defaults", base, ""},
		{"nothing set", map[string]string{}, "DATABASE_URL: is required"},
		{"no brokers", with("KAFKA_BROKERS", ""), "KAFKA_BROKERS: is required"},
		{"unknown consumer", with("PRODUCT_CONSUMERS_GROUPS", "like,refund"), `PRODUCT_CONSUMERS_GROUPS: unknown item "refund"`},
		{"zero backoff", with("PRODUCT_CONSUMERS_RETRY_BACKOFF", "0s"), "PRODUCT_CONSUMERS_RETRY_BACKOFF: must be positive"},
		{"bad retention", with("PRODUCT_CONSUMERS_HANDLED_RETENTION", "a week"), "PRODUCT_CONSUMERS_HANDLED_RETENTION: must be a duration"},
		{"negative in-flight", with("PRODUCT_CONSUMERS_MAX_IN_FLIGHT", "-5"), "PRODUCT_CONSUMERS_MAX_IN_FLIGHT: must be positive"},
		{"bad redis", with("REDIS_URL", "http://h"), "REDIS_URL: scheme must be one of redis"},
		{"bad reclaim switch", with("PRODUCT_CONSUMERS_RECLAIM_ENABLED", "maybe"), `PRODUCT_CONSUMERS_RECLAIM_ENABLED: must be true or false, got "maybe"`},
		{"zero reclaim count", with("PRODUCT_CONSUMERS_RECLAIM_COUNT", "0"), "PRODUCT_CONSUMERS_RECLAIM_COUNT: must be positive"},
		{"bad reclaim idle", with("PRODUCT_CONSUMERS_RECLAIM_MIN_IDLE", "soon"), "PRODUCT_CONSUMERS_RECLAIM_MIN_IDLE: must be a duration"},
		{"margin past the retention", with("PRODUCT_CONSUMERS_HORIZON_MARGIN", "200h"), "PRODUCT_CONSUMERS_HORIZON_MARGIN: must be shorter than PRODUCT_CONSUMERS_HANDLED_RETENTION"},
		{"instance id", with("CLUSTER_NODE_ID", "consumers-0"), ""},
		{"bad instance id", with("CLUSTER_NODE_ID", "pod 0"), "CLUSTER_NODE_ID: must be at most 249"},
		{"dynamic membership", with("PRODUCT_CONSUMERS_STATIC_MEMBERSHIP", "false"), ""},
		{"dynamic membership takes any node id", with2("PRODUCT_CONSUMERS_STATIC_MEMBERSHIP", "false", "CLUSTER_NODE_ID", "pod 0"), ""},
		{"the instance id's deprecated name", with("CONSUMER_INSTANCE_ID", "consumers-1"), ""},
		{"a deprecated switch", with("RECLAIM_ENABLED", "false"), ""},
		{"node id and its deprecated name apart", with2("CLUSTER_NODE_ID", "consumers-1", "CONSUMER_INSTANCE_ID", "consumers-2"),
			"CLUSTER_NODE_ID: is set and so is its deprecated name CONSUMER_INSTANCE_ID, to a different value"},
		{"bad membership switch", with("PRODUCT_CONSUMERS_STATIC_MEMBERSHIP", "sometimes"), `PRODUCT_CONSUMERS_STATIC_MEMBERSHIP: must be true or false, got "sometimes"`},
		{"negative handler timeout", with("PRODUCT_CONSUMERS_HANDLER_TIMEOUT", "-1s"), "PRODUCT_CONSUMERS_HANDLER_TIMEOUT: must be"},
		{"rebalance shorter than the revoke grace", with("PRODUCT_CONSUMERS_REBALANCE_TIMEOUT", "3s"), "PRODUCT_CONSUMERS_REBALANCE_TIMEOUT: must be longer than the 5s revoke grace"},
		{"prefix", with("KAFKA_PREFIX", "staging."), ""},
		{"prefix with a slash", with("KAFKA_PREFIX", "staging/"), `KAFKA_PREFIX: must be at most 200 of the characters a-z A-Z 0-9 . _ -, got "staging/"`},
		{"a reclaimer password without SASL", with("KAFKA_RECLAIMER_SASL_PASSWORD", "x"), "KAFKA_RECLAIMER_SASL_PASSWORD: is set but KAFKA_SASL_MECHANISM is empty"},
	}
	hostname, _ := os.Hostname()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := config.Parse(config.FromMap(tc.env), app.Load)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				want := app.Config{DatabaseURL: "postgres://h/db", DB: pg.Options{MaxConns: 16, StatementTimeout: 30 * time.Second}, Kafka: kafka.Settings{Brokers: []string{"a:9092", "b:9092"}, Prefix: tc.env["KAFKA_PREFIX"]},
					RedisURL: "redis://h:6379/0", AdminAddr: "127.0.0.1:8082", Consumers: []string{"like", "order", "view", "stock"},
					MaxInFlight: 1000, MaxAttempts: 3, RetryBackoff: time.Second, HandledRetention: 7 * 24 * time.Hour, PurgeInterval: time.Hour,
					SessionTimeout: 10 * time.Second, RebalanceTimeout: 15 * time.Second,
					InstanceID: hostname, HandlerTimeout: 30 * time.Second, HorizonMargin: time.Hour,
					Cluster: cluster.Defaults(cluster.DefaultNodeID()),
					Reclaim: app.Reclaim{Enabled: true, Interval: time.Minute, MinIdle: 5 * time.Minute, Count: 100, MaxRedrives: 3}}
				// Without KAFKA_RECLAIMER_* the reclaimer reaches Kafka as
				// the consumers do.
				want.Reclaimer = want.Kafka
				// One identity: the registry's node and the static
				// member id.
				if id := tc.env["CLUSTER_NODE_ID"] + tc.env["CONSUMER_INSTANCE_ID"]; id != "" {
					want.InstanceID, want.Cluster.NodeID = id, id
				}
				if tc.env["RECLAIM_ENABLED"] == "false" {
					want.Reclaim.Enabled = false
				}
				if tc.env["PRODUCT_CONSUMERS_STATIC_MEMBERSHIP"] == "false" {
					want.InstanceID = "" // a dynamic member
				}
				if diff := cmp.Diff(want, cfg); diff != "" {
					t.Errorf("config mismatch (-want +got):\n%s", diff)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("config error = %v, want it to contain %q", err, tc.wantErr)
			}
		})
	}
}

// TestConsumersAggregate runs every consumer against real PostgreSQL, Redis and
// Apache Kafka (under a prefix of the test's own), with redelivered events, an unknown event type and a
// record that is no CloudEvent at all.
func TestConsumersAggregate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	rdb := f.redis(t)
	// Cached pages of a product whose stock runs out and of the two whose
	// aggregates change: each must be invalidated.
	for _, id := range []int64{1, 2, 3} {
		if err := rdb.Set(ctx, productcache.Key(id), `{"cached":true}`, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	sp, send, event := f.producer, f.sender(t), f.event(t)

	// Orders: one redelivered.
	paid := event(events.OrderPaidV1{OrderID: 1, PaymentID: 1, Amount: 700, Items: []events.OrderItem{{ProductID: 1, Quantity: 2, UnitPrice: 200}, {ProductID: 2, Quantity: 3, UnitPrice: 100}}})
	send("order-events", paid, "00000000-0000-0000-0000-000000000001")
	send("order-events", paid, "00000000-0000-0000-0000-000000000001")
	send("order-events", event(events.OrderPaidV1{OrderID: 2, PaymentID: 2, Amount: 200, Items: []events.OrderItem{{ProductID: 1, Quantity: 1, UnitPrice: 200}}}), uuid.NewString())
	// Views: 5 distinct, one redelivered.
	for i := range 5 {
		id := uuid.NewString()
		send("product-events", event(events.ProductViewedV1{ProductID: int64(1 + i%2)}), id)
		if i == 0 {
			send("product-events", event(events.ProductViewedV1{ProductID: 1}), id)
		}
	}
	// Likes: u1 likes, cancels, likes product 1; u2 likes product 1 and 2; a
	// poison record in the middle of product 1's stream.
	send("like-events", event(events.LikeCreatedV1{UserID: "u1", ProductID: 1}), uuid.NewString())
	send("like-events", event(events.LikeCanceledV1{UserID: "u1", ProductID: 1}), uuid.NewString())
	poison := events.Record{Type: "loopers.like.exploded.v1", AggregateType: "Product", AggregateID: "1", Data: []byte(`{}`)}
	send("like-events", poison, "00000000-0000-0000-0000-00000000dead")
	if _, _, err := sp.SendMessage(&sarama.ProducerMessage{Topic: f.kafka.Topic("like-events"), Key: sarama.StringEncoder("1"), Value: sarama.StringEncoder("not a cloudevent")}); err != nil {
		t.Fatal(err)
	}
	send("like-events", event(events.LikeCreatedV1{UserID: "u1", ProductID: 1}), uuid.NewString())
	send("like-events", event(events.LikeCreatedV1{UserID: "u2", ProductID: 1}), uuid.NewString())
	send("like-events", event(events.LikeCreatedV1{UserID: "u2", ProductID: 2}), uuid.NewString())
	// Stock.
	send("stock-events", event(events.StockDepletedV1{ProductID: 3}), uuid.NewString())

	admin, done, stop := f.start(t, nil)
	conn := f.conn(t)
	type m struct{ Likes, Sales, Amount, Views int64 }
	want := map[int64]m{1: {Likes: 2, Sales: 3, Amount: 600, Views: 3}, 2: {Likes: 1, Sales: 3, Amount: 300, Views: 2}}
	var got map[int64]m
	deadline := time.Now().Add(60 * time.Second)
	for {
		got = map[int64]m{}
		rows, err := conn.Query(ctx, `SELECT product_id, like_count, sales_count, sales_amount, view_count FROM product_metrics`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id int64
			var v m
			if err := rows.Scan(&id, &v.Likes, &v.Sales, &v.Amount, &v.Views); err != nil {
				t.Fatal(err)
			}
			got[id] = v
		}
		if cmp.Equal(want, got) || time.Now().After(deadline) {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("Run returned early: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("product_metrics mismatch (-want +got):\n%s", diff)
	}
	pages, err := productcache.Open(f.redisURL, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer pages.Close()
	for _, id := range []int64{1, 2, 3} {
		for {
			e, err := pages.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if !e.Hit {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("product %d's cached page was never invalidated", id)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	// Both bad records are in the dead-letter topic with their origin.
	// The origin is named as on the cluster: that is where a re-drive
	// sends it back.
	dlt := testenv.ReadTopic(t, f.brokers, f.kafka.Topic("like-events.DLT"), 2, 30*time.Second)
	var sawPoison, sawGarbage bool
	for _, r := range dlt {
		h := testenv.Headers(r)
		if h[pcon.HeaderOriginalTopic] != f.kafka.Topic("like-events") || h[pcon.HeaderConsumerGroup] != f.kafka.Group("product-like-consumer") || h[pcon.HeaderError] == "" {
			t.Errorf("dead letter lacks origin headers: %v", h)
		}
		if h[pcon.HeaderAttempts] != "1" {
			t.Errorf("a permanent failure was tried %s times, want 1", h[pcon.HeaderAttempts])
		}
		sawPoison = sawPoison || h["ce_type"] == "loopers.like.exploded.v1"
		sawGarbage = sawGarbage || string(r.Value) == "not a cloudevent"
	}
	if !sawPoison || !sawGarbage {
		t.Errorf("dead letters: unknown type %v, not a CloudEvent %v; want both", sawPoison, sawGarbage)
	}

	resp := testenv.Get(t, "http://"+admin+"/metrics")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, series := range []string{
		`pcon_processed_total{consumer="order",group="` + f.kafka.Group("product-order-consumer") + `",partition=`,
		`pcon_dead_lettered_total{consumer="like",group="` + f.kafka.Group("product-like-consumer") + `",partition=`,
		`product_consumer_events_total{consumer="order",outcome="duplicate"} 1`,
		`product_consumer_events_total{consumer="view",outcome="applied"} 5`,
		// Every event handled, redeliveries included, is timed once
		// through the broker and once to its commit; dead letters are not.
		`event_stage_seconds_count{stage="broker",type="loopers.order.paid.v1"} 3`,
		`event_stage_seconds_count{stage="apply",type="loopers.order.paid.v1"} 3`,
		`event_stage_seconds_count{stage="apply",type="loopers.product.viewed.v1"} 6`,
		`event_stage_seconds_count{stage="apply",type="loopers.like.created.v1"} 4`,
		`event_stage_seconds_count{stage="apply",type="loopers.like.canceled.v1"} 1`,
		`event_stage_seconds_count{stage="apply",type="loopers.stock.depleted.v1"} 1`,
		`event_stage_seconds_count{stage="apply",type="other"} 0`,
	} {
		if !strings.Contains(string(body), series) {
			t.Errorf("/metrics lacks %s", series)
		}
	}

	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v after shutdown, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after shutdown")
	}
}
