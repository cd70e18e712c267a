package app

import (
	"os"
	"time"

	"github.com/loopers/commerce-pipeline/internal/cluster"
	"github.com/loopers/commerce-pipeline/internal/config"
	"github.com/loopers/commerce-pipeline/internal/kafka"
	"github.com/loopers/commerce-pipeline/internal/pg"
	"github.com/loopers/commerce-pipeline/services/product-consumers/internal/consumer"
)

// Config is product-consumers' configuration, read from the environment.
type Config struct {
	DatabaseURL string
	DB          pg.Options     // DB_MAX_CONNS, DB_STATEMENT_TIMEOUT
	Kafka       kafka.Settings // KAFKA_*
	// Reclaimer is how the DLT reclaimer reaches Kafka: the consumers'
	// settings, with credentials of its own when KAFKA_RECLAIMER_* are set
	// (it writes the event topics, which the consumers' principal may not).
	Reclaimer        kafka.Settings
	RedisURL         string
	AdminAddr        string
	Consumers        []string
	MaxInFlight      int
	InstanceID       string
	HandlerTimeout   time.Duration
	MaxAttempts      int
	RetryBackoff     time.Duration
	HandledRetention time.Duration
	HorizonMargin    time.Duration
	PurgeInterval    time.Duration
	SessionTimeout   time.Duration
	RebalanceTimeout time.Duration
	Cluster          cluster.Config // CLUSTER_*: this node in the cluster registry
	Reclaim          Reclaim
}

// Reclaim configures the DLT reclaimer that runs inside product-consumers.
type Reclaim struct {
	Enabled     bool
	Interval    time.Duration // between passes
	MinIdle     time.Duration // how long a record rests in the DLT first
	Count       int           // records per partition per pass
	MaxRedrives int           // re-drives per record before it stays parked
}

// renamed are the names the variables had before the naming scheme of
// docs/configuration.md (the service's own take its name,
// PRODUCT_CONSUMERS_; CLUSTER_NODE_ID is the process's one identity), still
// read for one release with a warning.
var renamed = []config.Rename{
	{Old: "CONSUMERS", New: "PRODUCT_CONSUMERS_GROUPS"},
	{Old: "CONSUMER_MAX_IN_FLIGHT", New: "PRODUCT_CONSUMERS_MAX_IN_FLIGHT"},
	{Old: "CONSUMER_INSTANCE_ID", New: "CLUSTER_NODE_ID"},
	{Old: "CONSUMER_HANDLER_TIMEOUT", New: "PRODUCT_CONSUMERS_HANDLER_TIMEOUT"},
	{Old: "CONSUMER_MAX_ATTEMPTS", New: "PRODUCT_CONSUMERS_MAX_ATTEMPTS"},
	{Old: "CONSUMER_RETRY_BACKOFF", New: "PRODUCT_CONSUMERS_RETRY_BACKOFF"},
	{Old: "CONSUMER_STATIC_MEMBERSHIP", New: "PRODUCT_CONSUMERS_STATIC_MEMBERSHIP"},
	{Old: "EVENT_HANDLED_RETENTION", New: "PRODUCT_CONSUMERS_HANDLED_RETENTION"},
	{Old: "EVENT_HORIZON_MARGIN", New: "PRODUCT_CONSUMERS_HORIZON_MARGIN"},
	{Old: "EVENT_HANDLED_PURGE_INTERVAL", New: "PRODUCT_CONSUMERS_HANDLED_PURGE_INTERVAL"},
	{Old: "KAFKA_SESSION_TIMEOUT", New: "PRODUCT_CONSUMERS_SESSION_TIMEOUT"},
	{Old: "KAFKA_REBALANCE_TIMEOUT", New: "PRODUCT_CONSUMERS_REBALANCE_TIMEOUT"},
	{Old: "RECLAIM_ENABLED", New: "PRODUCT_CONSUMERS_RECLAIM_ENABLED"},
	{Old: "RECLAIM_INTERVAL", New: "PRODUCT_CONSUMERS_RECLAIM_INTERVAL"},
	{Old: "RECLAIM_MIN_IDLE", New: "PRODUCT_CONSUMERS_RECLAIM_MIN_IDLE"},
	{Old: "RECLAIM_COUNT", New: "PRODUCT_CONSUMERS_RECLAIM_COUNT"},
	{Old: "RECLAIM_MAX_REDRIVES", New: "PRODUCT_CONSUMERS_RECLAIM_MAX_REDRIVES"},
}

// Load reads the configuration through l, which collects the problems.
func Load(l *config.Loader) Config {
	l.Renamed(renamed...)
	// CLUSTER_NODE_ID names this process in the cluster registry and, as
	// its static member id, in every consumer group. Unset, the registry
	// gets host-pid and the groups the host name, which a restarted
	// container keeps where the pid may not.
	unset := false
	nodeID := l.Computed(cluster.VarNodeID, "defaultNodeID()", func() string { unset = true; return cluster.DefaultNodeID() })
	c := Config{
		DatabaseURL:      l.URL("DATABASE_URL", "postgres", "postgresql"),
		DB:               pg.LoadOptions(l, pg.Options{MaxConns: 16}),
		Kafka:            kafka.Load(l),
		AdminAddr:        l.String("ADMIN_ADDR", "127.0.0.1:8082"), // loopback: operators only
		Consumers:        l.List("PRODUCT_CONSUMERS_GROUPS", consumer.Names, consumer.Names...),
		MaxInFlight:      l.PositiveInt("PRODUCT_CONSUMERS_MAX_IN_FLIGHT", 1000),
		InstanceID:       nodeID,
		HandlerTimeout:   l.Duration("PRODUCT_CONSUMERS_HANDLER_TIMEOUT", 30*time.Second),
		MaxAttempts:      l.PositiveInt("PRODUCT_CONSUMERS_MAX_ATTEMPTS", 3),
		RetryBackoff:     l.Duration("PRODUCT_CONSUMERS_RETRY_BACKOFF", time.Second),
		HandledRetention: l.Duration("PRODUCT_CONSUMERS_HANDLED_RETENTION", 7*24*time.Hour),
		HorizonMargin:    l.Duration("PRODUCT_CONSUMERS_HORIZON_MARGIN", time.Hour),
		PurgeInterval:    l.Duration("PRODUCT_CONSUMERS_HANDLED_PURGE_INTERVAL", time.Hour),
		SessionTimeout:   l.Duration("PRODUCT_CONSUMERS_SESSION_TIMEOUT", 10*time.Second),
		RebalanceTimeout: l.Duration("PRODUCT_CONSUMERS_REBALANCE_TIMEOUT", 15*time.Second),
		Cluster:          cluster.Load(l, nodeID),
	}
	if unset {
		c.InstanceID = defaultInstanceID()
	}
	if c.HorizonMargin >= c.HandledRetention {
		l.Fail("PRODUCT_CONSUMERS_HORIZON_MARGIN", "must be shorter than PRODUCT_CONSUMERS_HANDLED_RETENTION (%s), got %s", c.HandledRetention, c.HorizonMargin)
	}
	c.Reclaim.Enabled = l.Bool("PRODUCT_CONSUMERS_RECLAIM_ENABLED", true)
	c.Reclaim.Interval = l.Duration("PRODUCT_CONSUMERS_RECLAIM_INTERVAL", time.Minute)
	c.Reclaim.MinIdle = l.Duration("PRODUCT_CONSUMERS_RECLAIM_MIN_IDLE", 5*time.Minute)
	c.Reclaim.Count = l.PositiveInt("PRODUCT_CONSUMERS_RECLAIM_COUNT", 100)
	c.Reclaim.MaxRedrives = l.PositiveInt("PRODUCT_CONSUMERS_RECLAIM_MAX_REDRIVES", 3)
	if c.RebalanceTimeout <= revokeGrace {
		l.Fail("PRODUCT_CONSUMERS_REBALANCE_TIMEOUT", "must be longer than the %s revoke grace period, got %s", revokeGrace, c.RebalanceTimeout)
	}
	// Where identities do not survive a restart (a Deployment's pods get new
	// names), a static member that does not come back holds its partitions
	// idle for the session timeout at every rollout: turn it off there.
	if !l.Bool("PRODUCT_CONSUMERS_STATIC_MEMBERSHIP", true) {
		c.InstanceID = ""
	}
	if !validInstanceID(c.InstanceID) {
		l.Fail(cluster.VarNodeID, "must be at most 249 of the characters a-z A-Z 0-9 . _ - to be a static group member id "+
			"(or PRODUCT_CONSUMERS_STATIC_MEMBERSHIP=false), got %q", c.InstanceID)
	}
	c.RedisURL = l.URL("REDIS_URL", "redis", "rediss")
	c.Reclaimer = kafka.LoadRole(l, c.Kafka, "RECLAIMER")
	return c
}

// defaultInstanceID is the host name, which is stable per replica where
// static membership pays off (a StatefulSet pod keeps its name across
// restarts and rollouts; a Deployment's pod does not, so there
// PRODUCT_CONSUMERS_STATIC_MEMBERSHIP=false). Two instances on one host must
// set CLUSTER_NODE_ID apart.
func defaultInstanceID() string {
	h, err := os.Hostname()
	if err != nil || !validInstanceID(h) {
		return ""
	}
	return h
}

// validInstanceID accepts what Kafka accepts as a group instance id; empty
// means a dynamic member.
func validInstanceID(id string) bool {
	if len(id) > 249 {
		return false
	}
	for _, r := range id {
		if !instanceIDRune(r) {
			return false
		}
	}
	return true
}

func instanceIDRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-'
}
