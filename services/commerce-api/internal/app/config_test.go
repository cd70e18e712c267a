package app

import (
	"testing"
	"time"

	"github.com/loopers/commerce-pipeline/internal/cluster"
	"github.com/loopers/commerce-pipeline/internal/config/configtest"
	"github.com/loopers/commerce-pipeline/internal/pg"
	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/api/auth"
)

func TestLoadConfig(t *testing.T) {
	t.Parallel()
	const db = "postgres://u@localhost:5432/commerce"
	headerAuth := auth.Config{Mode: auth.ModeHeader, JWKSRefresh: 15 * time.Minute, JWKSMinRefresh: 10 * time.Second, Leeway: 30 * time.Second,
		AdminRole: "catalog-admin", RoleClaims: []string{"roles", "realm_access.roles"}}
	jwtAuth := headerAuth
	jwtAuth.Mode, jwtAuth.Issuer, jwtAuth.Audience, jwtAuth.JWKSURL, jwtAuth.Leeway = auth.ModeJWT, "https://idp/realms/c", "commerce-api",
		"https://idp/realms/c/protocol/openid-connect/certs", 10*time.Second
	tests := []struct {
		name    string
		env     map[string]string
		want    Config
		wantErr []string // variables the error must name
	}{
		{"defaults", map[string]string{"DATABASE_URL": db},
			Config{DatabaseURL: db, HTTPAddr: ":8080", AdminAddr: "127.0.0.1:8090", DB: pg.Options{MaxConns: 20, StatementTimeout: 3 * time.Second}, ProductCacheTTL: 30 * time.Second,
				RequestTimeout: 5 * time.Second, StreamMaxClients: 100, Cluster: cluster.Defaults(cluster.DefaultNodeID()), Auth: headerAuth}, nil},
		{"jwt mode", map[string]string{"DATABASE_URL": db, "COMMERCE_API_AUTH_MODE": "jwt", "COMMERCE_API_AUTH_ISSUER": "https://idp/realms/c", "COMMERCE_API_AUTH_AUDIENCE": "commerce-api",
			"COMMERCE_API_AUTH_JWKS_URL": "https://idp/realms/c/protocol/openid-connect/certs", "COMMERCE_API_AUTH_LEEWAY": "10s"},
			Config{DatabaseURL: db, HTTPAddr: ":8080", AdminAddr: "127.0.0.1:8090", DB: pg.Options{MaxConns: 20, StatementTimeout: 3 * time.Second}, ProductCacheTTL: 30 * time.Second,
				RequestTimeout: 5 * time.Second, StreamMaxClients: 100, Cluster: cluster.Defaults(cluster.DefaultNodeID()), Auth: jwtAuth}, nil},
		{"jwt mode under the deprecated names", map[string]string{"DATABASE_URL": db, "AUTH_MODE": "jwt", "AUTH_ISSUER": "https://idp/realms/c", "AUTH_AUDIENCE": "commerce-api",
			"AUTH_JWKS_URL": "https://idp/realms/c/protocol/openid-connect/certs", "AUTH_LEEWAY": "10s", "REQUEST_TIMEOUT": "5s"},
			Config{DatabaseURL: db, HTTPAddr: ":8080", AdminAddr: "127.0.0.1:8090", DB: pg.Options{MaxConns: 20, StatementTimeout: 3 * time.Second}, ProductCacheTTL: 30 * time.Second,
				RequestTimeout: 5 * time.Second, StreamMaxClients: 100, Cluster: cluster.Defaults(cluster.DefaultNodeID()), Auth: jwtAuth}, nil},
		{"a mode and its deprecated name apart", map[string]string{"DATABASE_URL": db, "COMMERCE_API_AUTH_MODE": "header", "AUTH_MODE": "jwt"}, Config{},
			[]string{"COMMERCE_API_AUTH_MODE: is set and so is its deprecated name AUTH_MODE"}},
		{"jwt mode without its settings", map[string]string{"DATABASE_URL": db, "COMMERCE_API_AUTH_MODE": "jwt"}, Config{},
			[]string{"COMMERCE_API_AUTH_ISSUER", "COMMERCE_API_AUTH_AUDIENCE", "COMMERCE_API_AUTH_JWKS_URL"}},
		{"everything set", map[string]string{"DATABASE_URL": db, "HTTP_ADDR": "127.0.0.1:9000", "ADMIN_ADDR": ":9001", "DB_MAX_CONNS": "64",
			"REDIS_URL": "redis://localhost:6379/2", "COMMERCE_API_PRODUCT_CACHE_TTL": "5s", "COMMERCE_API_REQUEST_TIMEOUT": "2s", "DB_STATEMENT_TIMEOUT": "1500ms", "COMMERCE_API_STREAM_MAX_CLIENTS": "7"},
			Config{DatabaseURL: db, HTTPAddr: "127.0.0.1:9000", AdminAddr: ":9001", DB: pg.Options{MaxConns: 64, StatementTimeout: 1500 * time.Millisecond},
				RedisURL: "redis://localhost:6379/2", ProductCacheTTL: 5 * time.Second, RequestTimeout: 2 * time.Second, StreamMaxClients: 7,
				Cluster: cluster.Defaults(cluster.DefaultNodeID()), Auth: headerAuth}, nil},
		{"missing database", map[string]string{}, Config{}, []string{"DATABASE_URL"}},
		{"every problem at once", map[string]string{"DATABASE_URL": "mysql://x/y", "DB_MAX_CONNS": "0",
			"REDIS_URL": "localhost:6379", "COMMERCE_API_PRODUCT_CACHE_TTL": "soon", "COMMERCE_API_REQUEST_TIMEOUT": "0s", "DB_STATEMENT_TIMEOUT": "-1s", "COMMERCE_API_STREAM_MAX_CLIENTS": "0"}, Config{},
			[]string{"DATABASE_URL", "DB_MAX_CONNS", "REDIS_URL", "COMMERCE_API_PRODUCT_CACHE_TTL", "COMMERCE_API_REQUEST_TIMEOUT", "DB_STATEMENT_TIMEOUT", "COMMERCE_API_STREAM_MAX_CLIENTS"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			configtest.Check(t, tc.env, Load, tc.want, tc.wantErr)
		})
	}
}
