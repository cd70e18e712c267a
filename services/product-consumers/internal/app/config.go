package app

import (
	"time"

	"github.com/loopers/commerce-pipeline/internal/config"
	"github.com/loopers/commerce-pipeline/internal/pg"
	"github.com/loopers/commerce-pipeline/services/product-consumers/internal/consumer"
)

// Config is product-consumers' configuration, read from the environment.
type Config struct {
	DatabaseURL      string
	DB               pg.Options // DB_MAX_CONNS, DB_STATEMENT_TIMEOUT
	KafkaBrokers     []string
	RedisURL         string
	AdminAddr        string
	Consumers        []string
	MaxInFlight      int
	MaxAttempts      int
	RetryBackoff     time.Duration
	HandledRetention time.Duration
	PurgeInterval    time.Duration
	SessionTimeout   time.Duration
	RebalanceTimeout time.Duration
}

// LoadConfig reads and validates the configuration; the error names every
// invalid variable.
func LoadConfig(lookup func(string) (string, bool)) (Config, error) {
	return config.Parse(lookup, Load)
}

// Load reads the configuration through l, which collects the problems.
func Load(l *config.Loader) Config {
	c := Config{
		DatabaseURL:      l.URL("DATABASE_URL", "postgres", "postgresql"),
		DB:               pg.LoadOptions(l, 16),
		KafkaBrokers:     l.List("KAFKA_BROKERS", nil),
		AdminAddr:        l.String("ADMIN_ADDR", ":8082"),
		Consumers:        l.List("CONSUMERS", consumer.Names, consumer.Names...),
		MaxInFlight:      l.PositiveInt("CONSUMER_MAX_IN_FLIGHT", 1000),
		MaxAttempts:      l.PositiveInt("CONSUMER_MAX_ATTEMPTS", 3),
		RetryBackoff:     l.Duration("CONSUMER_RETRY_BACKOFF", time.Second),
		HandledRetention: l.Duration("EVENT_HANDLED_RETENTION", 7*24*time.Hour),
		PurgeInterval:    l.Duration("EVENT_HANDLED_PURGE_INTERVAL", time.Hour),
		SessionTimeout:   l.Duration("KAFKA_SESSION_TIMEOUT", 10*time.Second),
		RebalanceTimeout: l.Duration("KAFKA_REBALANCE_TIMEOUT", 15*time.Second),
	}
	if c.RebalanceTimeout <= revokeGrace {
		l.Fail("KAFKA_REBALANCE_TIMEOUT", "must be longer than the %s revoke grace period, got %s", revokeGrace, c.RebalanceTimeout)
	}
	c.RedisURL = l.URL("REDIS_URL", "redis", "rediss")
	return c
}
