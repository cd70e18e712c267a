package app

import (
	"os"
	"strconv"
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

// Load reads the configuration through l, which collects the problems.
func Load(l *config.Loader) Config {
	c := Config{
		DatabaseURL:      l.URL("DATABASE_URL", "postgres", "postgresql"),
		DB:               pg.LoadOptions(l, pg.Options{MaxConns: 16}),
		Kafka:            kafka.Load(l),
		AdminAddr:        l.String("ADMIN_ADDR", "127.0.0.1:8082"), // loopback: operators only
		Consumers:        l.List("CONSUMERS", consumer.Names, consumer.Names...),
		MaxInFlight:      l.PositiveInt("CONSUMER_MAX_IN_FLIGHT", 1000),
		InstanceID:       l.Computed("CONSUMER_INSTANCE_ID", "defaultInstanceID()", defaultInstanceID),
		HandlerTimeout:   l.Duration("CONSUMER_HANDLER_TIMEOUT", 30*time.Second),
		MaxAttempts:      l.PositiveInt("CONSUMER_MAX_ATTEMPTS", 3),
		RetryBackoff:     l.Duration("CONSUMER_RETRY_BACKOFF", time.Second),
		HandledRetention: l.Duration("EVENT_HANDLED_RETENTION", 7*24*time.Hour),
		HorizonMargin:    l.Duration("EVENT_HORIZON_MARGIN", time.Hour),
		PurgeInterval:    l.Duration("EVENT_HANDLED_PURGE_INTERVAL", time.Hour),
		SessionTimeout:   l.Duration("KAFKA_SESSION_TIMEOUT", 10*time.Second),
		RebalanceTimeout: l.Duration("KAFKA_REBALANCE_TIMEOUT", 15*time.Second),
		Cluster:          cluster.Load(l, ""),
	}
	if c.HorizonMargin >= c.HandledRetention {
		l.Fail("EVENT_HORIZON_MARGIN", "must be shorter than EVENT_HANDLED_RETENTION (%s), got %s", c.HandledRetention, c.HorizonMargin)
	}
	enabled := l.String("RECLAIM_ENABLED", "true")
	var err error
	if c.Reclaim.Enabled, err = strconv.ParseBool(enabled); err != nil {
		l.Fail("RECLAIM_ENABLED", "must be true or false, got %q", enabled)
	}
	c.Reclaim.Interval = l.Duration("RECLAIM_INTERVAL", time.Minute)
	c.Reclaim.MinIdle = l.Duration("RECLAIM_MIN_IDLE", 5*time.Minute)
	c.Reclaim.Count = l.PositiveInt("RECLAIM_COUNT", 100)
	c.Reclaim.MaxRedrives = l.PositiveInt("RECLAIM_MAX_REDRIVES", 3)
	if c.RebalanceTimeout <= revokeGrace {
		l.Fail("KAFKA_REBALANCE_TIMEOUT", "must be longer than the %s revoke grace period, got %s", revokeGrace, c.RebalanceTimeout)
	}
	if !validInstanceID(c.InstanceID) {
		l.Fail("CONSUMER_INSTANCE_ID", "must be at most 249 of the characters a-z A-Z 0-9 . _ -, got %q", c.InstanceID)
	}
	// Where identities do not survive a restart (a Deployment's pods get new
	// names), a static member that does not come back holds its partitions
	// idle for the session timeout at every rollout: turn it off there.
	static := l.String("CONSUMER_STATIC_MEMBERSHIP", "true")
	if on, err := strconv.ParseBool(static); err != nil {
		l.Fail("CONSUMER_STATIC_MEMBERSHIP", "must be true or false, got %q", static)
	} else if !on {
		c.InstanceID = ""
	}
	c.RedisURL = l.URL("REDIS_URL", "redis", "rediss")
	c.Reclaimer = kafka.LoadRole(l, c.Kafka, "RECLAIMER")
	return c
}

// defaultInstanceID is the host name, which is stable per replica where
// static membership pays off (a StatefulSet pod keeps its name across
// restarts and rollouts; a Deployment's pod does not, so there
// CONSUMER_STATIC_MEMBERSHIP=false). Two instances on one host must set
// CONSUMER_INSTANCE_ID apart.
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
