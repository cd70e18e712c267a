package app

import (
	"time"

	"github.com/loopers/commerce-pipeline/internal/cluster"
	"github.com/loopers/commerce-pipeline/internal/config"
	"github.com/loopers/commerce-pipeline/internal/pg"
	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/api/auth"
)

// DefaultAdminAddr is ADMIN_ADDR's default: loopback, so a bare binary
// shows its operators' endpoints to its own host only.
const DefaultAdminAddr = "127.0.0.1:8090"

// Config is commerce-api's configuration, read from the environment.
type Config struct {
	DatabaseURL string // DATABASE_URL, required
	HTTPAddr    string // HTTP_ADDR, default :8080: the API, the page, the stream
	// AdminAddr (ADMIN_ADDR, default 127.0.0.1:8090) serves /metrics, the
	// detailed /readyz and GET /api/v1/cluster: operators only, so loopback
	// unless a deployment opens it to its own network.
	AdminAddr string
	// DB: DB_MAX_CONNS (default 20) and DB_STATEMENT_TIMEOUT (default 3s,
	// a backstop under the request deadline).
	DB pg.Options
	// RedisURL (REDIS_URL) enables the product detail cache when set.
	RedisURL        string
	ProductCacheTTL time.Duration // COMMERCE_API_PRODUCT_CACHE_TTL, default 30s
	// RequestTimeout (COMMERCE_API_REQUEST_TIMEOUT, default 5s) is the
	// deadline of every request; one that runs out answers 503.
	RequestTimeout time.Duration
	// StreamMaxClients (COMMERCE_API_STREAM_MAX_CLIENTS, default 100) bounds
	// the open GET /api/v1/stream connections; more are answered 503.
	StreamMaxClients int
	Cluster          cluster.Config // CLUSTER_*: this node in the cluster registry
	// Auth (COMMERCE_API_AUTH_*) is how the API learns who calls: header (default:
	// X-User-ID as sent, for a gateway that sets it) or jwt (verified
	// bearer tokens). See docs/security-api.md.
	Auth auth.Config
	// TraceUIURL (COMMERCE_API_TRACE_UI_URL) links the live page's actions
	// to their traces while tracing is on: a URL with {traceId}.
	TraceUIURL string
}

// renamed are the names the variables had before the naming scheme of
// docs/configuration.md (the service's own take its name, COMMERCE_API_),
// still read for one release with a warning.
var renamed = []config.Rename{
	{Old: "PRODUCT_CACHE_TTL", New: "COMMERCE_API_PRODUCT_CACHE_TTL"},
	{Old: "REQUEST_TIMEOUT", New: "COMMERCE_API_REQUEST_TIMEOUT"},
	{Old: "STREAM_MAX_CLIENTS", New: "COMMERCE_API_STREAM_MAX_CLIENTS"},
	{Old: "AUTH_MODE", New: "COMMERCE_API_AUTH_MODE"},
	{Old: "AUTH_ISSUER", New: "COMMERCE_API_AUTH_ISSUER"},
	{Old: "AUTH_AUDIENCE", New: "COMMERCE_API_AUTH_AUDIENCE"},
	{Old: "AUTH_JWKS_URL", New: "COMMERCE_API_AUTH_JWKS_URL"},
	{Old: "AUTH_JWKS_FILE", New: "COMMERCE_API_AUTH_JWKS_FILE"},
	{Old: "AUTH_JWKS_REFRESH", New: "COMMERCE_API_AUTH_JWKS_REFRESH"},
	{Old: "AUTH_JWKS_MIN_REFRESH", New: "COMMERCE_API_AUTH_JWKS_MIN_REFRESH"},
	{Old: "AUTH_LEEWAY", New: "COMMERCE_API_AUTH_LEEWAY"},
	{Old: "AUTH_ADMIN_ROLE", New: "COMMERCE_API_AUTH_ADMIN_ROLE"},
	{Old: "AUTH_ROLE_CLAIMS", New: "COMMERCE_API_AUTH_ROLE_CLAIMS"},
}

// Load reads the configuration through l, which collects the problems.
func Load(l *config.Loader) Config {
	l.Renamed(renamed...)
	c := Config{
		DatabaseURL: l.URL("DATABASE_URL", "postgres", "postgresql"),
		HTTPAddr:    l.String("HTTP_ADDR", ":8080"),
		AdminAddr:   l.String("ADMIN_ADDR", DefaultAdminAddr),
		// A request's statements are short; one running for seconds is
		// stuck and holds a pool connection from the others.
		DB:               pg.LoadOptions(l, pg.Options{MaxConns: 20, StatementTimeout: 3 * time.Second}),
		RedisURL:         l.OptionalURL("REDIS_URL", "redis", "rediss"),
		ProductCacheTTL:  l.Duration("COMMERCE_API_PRODUCT_CACHE_TTL", 30*time.Second),
		RequestTimeout:   l.Duration("COMMERCE_API_REQUEST_TIMEOUT", 5*time.Second),
		StreamMaxClients: l.PositiveInt("COMMERCE_API_STREAM_MAX_CLIENTS", 100),
		Cluster:          cluster.Load(l, ""),
		Auth:             auth.Load(l),
		TraceUIURL:       loadTraceUIURL(l),
	}
	return c
}
