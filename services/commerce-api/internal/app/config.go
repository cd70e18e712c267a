package app

import (
	"net/url"
	"time"

	"github.com/loopers/commerce-pipeline/internal/cluster"
	"github.com/loopers/commerce-pipeline/internal/config"
)

// Config is commerce-api's configuration, read from the environment.
type Config struct {
	DatabaseURL string // DATABASE_URL, required
	HTTPAddr    string // HTTP_ADDR, default :8080
	DBPoolSize  int    // DB_POOL_SIZE, default 20: the most connections open at once
	// RedisURL (REDIS_URL) enables the product detail cache when set.
	RedisURL string
	// StreamMaxClients (STREAM_MAX_CLIENTS, default 100) bounds the open
	// GET /api/v1/stream connections; more are answered 503.
	StreamMaxClients int
	ProductCacheTTL  time.Duration  // PRODUCT_CACHE_TTL, default 30s
	Cluster          cluster.Config // CLUSTER_*: this node in the cluster registry
}

// LoadConfig reads and validates the configuration; the error names every
// variable that is wrong.
func LoadConfig(lookup func(string) (string, bool)) (Config, error) {
	l := config.New(lookup)
	c := Config{
		DatabaseURL:     l.URL("DATABASE_URL", "postgres", "postgresql"),
		HTTPAddr:        l.String("HTTP_ADDR", ":8080"),
		DBPoolSize:      l.PositiveInt("DB_POOL_SIZE", 20),
		RedisURL:        l.String("REDIS_URL", ""),
		ProductCacheTTL: l.Duration("PRODUCT_CACHE_TTL", 30*time.Second),

		StreamMaxClients: l.PositiveInt("STREAM_MAX_CLIENTS", 100),
		Cluster: cluster.Config{
			NodeID:            l.String("CLUSTER_NODE_ID", cluster.DefaultNodeID()),
			HeartbeatInterval: l.Duration("CLUSTER_HEARTBEAT_INTERVAL", cluster.DefaultHeartbeatInterval),
			SuspectAfter:      l.Duration("CLUSTER_SUSPECT_AFTER", cluster.DefaultSuspectAfter),
			DownAfter:         l.Duration("CLUSTER_DOWN_AFTER", cluster.DefaultDownAfter),
			Retention:         l.Duration("CLUSTER_RETENTION", cluster.DefaultRetention),
		},
	}
	if c.RedisURL != "" {
		if u, err := url.Parse(c.RedisURL); err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") || u.Host == "" {
			l.Fail("REDIS_URL", "must be a redis:// or rediss:// URL")
		}
	}
	c.Cluster.Check(l.Fail)
	return c, l.Err()
}
