package app

import (
	"time"

	"github.com/loopers/commerce-pipeline/internal/cluster"
	"github.com/loopers/commerce-pipeline/internal/config"
	"github.com/loopers/commerce-pipeline/internal/kafka"
	"github.com/loopers/commerce-pipeline/internal/pg"
	"github.com/loopers/commerce-pipeline/services/outbox-relay/internal/relay"
)

// Config is every setting of outbox-relay, read from the environment.
type Config struct {
	DatabaseURL string         // DATABASE_URL
	DB          pg.Options     // DB_MAX_CONNS, DB_STATEMENT_TIMEOUT
	Kafka       kafka.Settings // KAFKA_*
	AdminAddr   string         // ADMIN_ADDR: /healthz, /readyz, /metrics
	// GCPercent (OUTBOX_RELAY_GC_PERCENT) is the garbage collector's target
	// percentage: the CloudEvents mapping allocates a lot per record while
	// the live heap stays small (a few batches), so collecting less often
	// than Go's 100 buys drain throughput for a few MB of memory.
	GCPercent int
	// Relay (OUTBOX_RELAY_*, OUTBOX_RETENTION) is the relay node itself.
	Relay relay.Config
	// Cluster (CLUSTER_*) is this node in the cluster registry, under
	// Relay.NodeID: the lease owner and the registry's node are one name.
	Cluster cluster.Config
}

// Load reads the Config through l, which collects the problems.
func Load(l *config.Loader) Config {
	c := Config{
		DatabaseURL: l.URL("DATABASE_URL", "postgres", "postgresql"),
		DB:          pg.LoadOptions(l, pg.Options{MaxConns: 4}),
		Kafka:       kafka.Load(l),
		AdminAddr:   l.String("ADMIN_ADDR", "127.0.0.1:8081"), // loopback: operators only
		Relay: relay.Config{
			NodeID:        l.Computed("OUTBOX_RELAY_NODE_ID", "defaultNodeID()", cluster.DefaultNodeID),
			BatchSize:     l.PositiveInt("OUTBOX_RELAY_BATCH_SIZE", 500),
			Window:        l.PositiveInt("OUTBOX_RELAY_WINDOW", 20_000),
			WindowBytes:   l.PositiveInt("OUTBOX_RELAY_WINDOW_BYTES", 32<<20),
			SendTimeout:   l.Duration("OUTBOX_RELAY_SEND_TIMEOUT", 5*time.Second),
			RetryInterval: l.Duration("OUTBOX_RELAY_RETRY_INTERVAL", 10*time.Second),
			MaxAge:        l.Duration("OUTBOX_RELAY_MAX_AGE", 5*time.Minute),
			Interval:      l.Duration("OUTBOX_RELAY_INTERVAL", time.Second),
			LeaseTTL:      l.Duration("OUTBOX_RELAY_LEASE_TTL", 10*time.Second),
			Retention:     l.Duration("OUTBOX_RETENTION", 7*24*time.Hour),
		},
		GCPercent: l.PositiveInt("OUTBOX_RELAY_GC_PERCENT", 400),
	}
	if len(c.Relay.NodeID) > 200 {
		l.Fail("OUTBOX_RELAY_NODE_ID", "must be at most 200 characters, got %d", len(c.Relay.NodeID))
	}
	c.Cluster = cluster.Load(l, c.Relay.NodeID)
	return c
}
