package app

import (
	"log/slog"
	"runtime/debug"
	"strconv"
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
	// GC is the garbage collector's target: GOGC when set, else the
	// relay's own default.
	GC GC
	// Relay (OUTBOX_RELAY_*) is the relay node itself.
	Relay relay.Config
	// Cluster (CLUSTER_*) is this node in the cluster registry, under
	// Relay.NodeID: the lease owner and the registry's node are one name
	// (CLUSTER_NODE_ID).
	Cluster cluster.Config
}

// DefaultGCPercent is the relay's garbage collector target when GOGC is
// unset: the CloudEvents mapping allocates a lot per record while the live
// heap stays small (a few batches), so collecting less often than Go's 100
// buys drain throughput for a few MB of memory.
const DefaultGCPercent = 400

// GC is the garbage collector's target percentage and where it came from.
// GOGC, Go's own variable, always wins: the runtime applied it before main,
// and the relay only replaces Go's default of 100 with its own when GOGC is
// unset. GOMEMLIMIT is the runtime's alone.
type GC struct {
	Percent int    // debug.SetGCPercent's argument; -1 is off
	From    string // the variable it came from, or "default" when GOGC is unset
}

// Apply sets the target and logs it with where it came from, so that an
// operator who set GOGC sees it took effect.
func (g GC) Apply(logger *slog.Logger) {
	debug.SetGCPercent(g.Percent)
	logger.Info("garbage collector target", "gcPercent", g.Percent, "from", g.From)
}

// renamed are the names the variables had before the naming scheme of
// docs/configuration.md, still read for one release with a warning.
var renamed = []config.Rename{
	{Old: "OUTBOX_RELAY_NODE_ID", New: cluster.VarNodeID},
	{Old: "OUTBOX_RETENTION", New: "OUTBOX_RELAY_RETENTION"},
	// It set the target whatever GOGC said; as GOGC's old name it yields
	// to GOGC, and the two set apart stop the start.
	{Old: "OUTBOX_RELAY_GC_PERCENT", New: "GOGC"},
}

// loadGC reads GOGC ("off" or a percentage, as the runtime reads it).
func loadGC(l *config.Loader) GC {
	g := GC{From: "GOGC"}
	v := l.Computed("GOGC", strconv.Itoa(DefaultGCPercent), func() string { g.From = "default"; return strconv.Itoa(DefaultGCPercent) })
	for _, d := range l.Deprecations() {
		if d.New == "GOGC" && !d.Both {
			g.From = d.Old
		}
	}
	if v == "off" {
		g.Percent = -1
		return g
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		l.Fail("GOGC", "must be off or a percentage (an integer, 0 or more), got %q", v)
		return GC{Percent: DefaultGCPercent, From: "default"}
	}
	g.Percent = n
	return g
}

// Load reads the Config through l, which collects the problems.
func Load(l *config.Loader) Config {
	l.Renamed(renamed...)
	c := Config{
		DatabaseURL: l.URL("DATABASE_URL", "postgres", "postgresql"),
		DB:          pg.LoadOptions(l, pg.Options{MaxConns: 4}),
		Kafka:       kafka.Load(l),
		AdminAddr:   l.String("ADMIN_ADDR", "127.0.0.1:8081"), // loopback: operators only
		Relay: relay.Config{
			BatchSize:     l.PositiveInt("OUTBOX_RELAY_BATCH_SIZE", 500),
			Window:        l.PositiveInt("OUTBOX_RELAY_WINDOW", 20_000),
			WindowBytes:   l.PositiveInt("OUTBOX_RELAY_WINDOW_BYTES", 32<<20),
			SendTimeout:   l.Duration("OUTBOX_RELAY_SEND_TIMEOUT", 5*time.Second),
			RetryInterval: l.Duration("OUTBOX_RELAY_RETRY_INTERVAL", 10*time.Second),
			MaxAge:        l.Duration("OUTBOX_RELAY_MAX_AGE", 5*time.Minute),
			Interval:      l.Duration("OUTBOX_RELAY_INTERVAL", time.Second),
			LeaseTTL:      l.Duration("OUTBOX_RELAY_LEASE_TTL", 10*time.Second),
			Retention:     l.Duration("OUTBOX_RELAY_RETENTION", 7*24*time.Hour),
		},
		GC: loadGC(l),
	}
	// The lease owner is the registry's node: CLUSTER_NODE_ID, checked
	// there (at most 200 characters, what the lease's column holds).
	c.Cluster = cluster.Load(l, "")
	c.Relay.NodeID = c.Cluster.NodeID
	return c
}
