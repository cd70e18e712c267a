package app

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/loopers/commerce-pipeline/internal/cluster"
	"github.com/loopers/commerce-pipeline/internal/config"
	"github.com/loopers/commerce-pipeline/internal/kafka"
	"github.com/loopers/commerce-pipeline/internal/pg"
	"github.com/loopers/commerce-pipeline/internal/service"
	"github.com/loopers/commerce-pipeline/services/outbox-relay/internal/relay"
)

func TestLoadConfig(t *testing.T) {
	t.Parallel()
	base := map[string]string{
		"DATABASE_URL":  "postgres://u:p@db:5432/commerce?sslmode=disable",
		"KAFKA_BROKERS": "k1:9092, k2:9092",
	}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	without := func(k string) map[string]string {
		m := with()
		delete(m, k)
		return m
	}

	t.Run("defaults", func(t *testing.T) {
		t.Parallel()
		got, err := config.Parse(config.FromMap(with("CLUSTER_NODE_ID", "n1")), Load)
		if err != nil {
			t.Fatal(err)
		}
		want := Config{
			DatabaseURL: base["DATABASE_URL"], Kafka: kafka.Settings{Brokers: []string{"k1:9092", "k2:9092"}}, AdminAddr: "127.0.0.1:8081",
			DB: pg.Options{MaxConns: 4, StatementTimeout: 30 * time.Second},
			Relay: relay.Config{
				NodeID: "n1", BatchSize: 500, Window: 20_000, WindowBytes: 32 << 20, SendTimeout: 5 * time.Second, RetryInterval: 10 * time.Second, MaxAge: 5 * time.Minute,
				Interval: time.Second, LeaseTTL: 10 * time.Second, Retention: 168 * time.Hour,
			},
			GC:      GC{Percent: 400, From: "default"},
			Cluster: cluster.Defaults("n1"),
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("config (-want +got):\n%s", diff)
		}
	})
	t.Run("node id defaults to host and pid", func(t *testing.T) {
		t.Parallel()
		got, err := config.Parse(config.FromMap(with()), Load)
		if err != nil {
			t.Fatal(err)
		}
		if want := cluster.DefaultNodeID(); got.Relay.NodeID != want || got.Cluster.NodeID != want {
			t.Errorf("node ids %q (lease) and %q (cluster), want %q", got.Relay.NodeID, got.Cluster.NodeID, want)
		}
	})

	t.Run("the garbage collector's target", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			name string
			env  map[string]string
			want GC
		}{
			{"GOGC unset: the relay's default", with(), GC{Percent: DefaultGCPercent, From: "default"}},
			{"GOGC set: it wins", with("GOGC", "150"), GC{Percent: 150, From: "GOGC"}},
			{"GOGC off", with("GOGC", "off"), GC{Percent: -1, From: "GOGC"}},
			{"the deprecated name alone", with("OUTBOX_RELAY_GC_PERCENT", "250"), GC{Percent: 250, From: "OUTBOX_RELAY_GC_PERCENT"}},
			{"the deprecated name equal to GOGC", with("GOGC", "250", "OUTBOX_RELAY_GC_PERCENT", "250"), GC{Percent: 250, From: "GOGC"}},
		} {
			got, err := config.Parse(config.FromMap(tc.env), Load)
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if diff := cmp.Diff(tc.want, got.GC); diff != "" {
				t.Errorf("%s: (-want +got):\n%s", tc.name, diff)
			}
		}
	})

	bad := []struct {
		name string
		env  map[string]string
		want string // the variable the error must name
	}{
		{"missing database URL", without("DATABASE_URL"), "DATABASE_URL"},
		{"database URL of another scheme", with("DATABASE_URL", "mysql://db/x"), "DATABASE_URL"},
		{"missing brokers", without("KAFKA_BROKERS"), "KAFKA_BROKERS"},
		{"brokers without a host", with("KAFKA_BROKERS", " , "), "KAFKA_BROKERS"},
		{"batch size zero", with("OUTBOX_RELAY_BATCH_SIZE", "0"), "OUTBOX_RELAY_BATCH_SIZE"},
		{"batch size not a number", with("OUTBOX_RELAY_BATCH_SIZE", "many"), "OUTBOX_RELAY_BATCH_SIZE"},
		{"send timeout negative", with("OUTBOX_RELAY_SEND_TIMEOUT", "-5s"), "OUTBOX_RELAY_SEND_TIMEOUT"},
		{"retry interval unparsable", with("OUTBOX_RELAY_RETRY_INTERVAL", "10"), "OUTBOX_RELAY_RETRY_INTERVAL"},
		{"max age zero", with("OUTBOX_RELAY_MAX_AGE", "0s"), "OUTBOX_RELAY_MAX_AGE"},
		{"interval unparsable", with("OUTBOX_RELAY_INTERVAL", "soon"), "OUTBOX_RELAY_INTERVAL"},
		{"lease TTL negative", with("OUTBOX_RELAY_LEASE_TTL", "-1m"), "OUTBOX_RELAY_LEASE_TTL"},
		{"retention zero", with("OUTBOX_RELAY_RETENTION", "0h"), "OUTBOX_RELAY_RETENTION"},
		{"node id too long", with("CLUSTER_NODE_ID", strings.Repeat("n", 201)), "CLUSTER_NODE_ID"},
		{"GOGC not a percentage", with("GOGC", "fast"), "GOGC: must be off or a percentage"},
		{"GOGC and its deprecated name apart", with("GOGC", "100", "OUTBOX_RELAY_GC_PERCENT", "400"), "GOGC: is set and so is its deprecated name OUTBOX_RELAY_GC_PERCENT"},
		{"the node id and its deprecated name apart", with("CLUSTER_NODE_ID", "a", "OUTBOX_RELAY_NODE_ID", "b"), "CLUSTER_NODE_ID: is set and so is its deprecated name OUTBOX_RELAY_NODE_ID"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := config.Parse(config.FromMap(tt.env), Load)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one naming %s", err, tt.want)
			}
		})
	}
}

// TestRunRefusesBadConfiguration: the process stops before touching anything
// and the error names the variable.
func TestRunRefusesBadConfiguration(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"DATABASE_URL":            "postgres://localhost:1/none",
		"KAFKA_BROKERS":           "localhost:1",
		"OUTBOX_RELAY_BATCH_SIZE": "-3",
	}
	var stderr strings.Builder
	code := service.Run(context.Background(), "outbox-relay", nil, config.FromMap(env), io.Discard, &stderr, Load,
		func(ctx context.Context, cfg Config, logger *slog.Logger) error { return Run(ctx, cfg, logger, nil) })
	if code == 0 || !strings.Contains(stderr.String(), "OUTBOX_RELAY_BATCH_SIZE") {
		t.Fatalf("exit %d, log %q; want a failure naming OUTBOX_RELAY_BATCH_SIZE", code, stderr.String())
	}
}
