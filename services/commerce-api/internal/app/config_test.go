package app

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/loopers/commerce-pipeline/internal/cluster"
	"github.com/loopers/commerce-pipeline/internal/config"
)

func TestLoadConfig(t *testing.T) {
	const db = "postgres://u@localhost:5432/commerce"
	tests := []struct {
		name    string
		env     map[string]string
		want    Config
		wantErr []string // variables the error must name
	}{
		{"defaults", map[string]string{"DATABASE_URL": db},
			Config{DatabaseURL: db, HTTPAddr: ":8080", DBPoolSize: 20, ProductCacheTTL: 30 * time.Second, StreamMaxClients: 100, Cluster: cluster.Defaults(cluster.DefaultNodeID())}, nil},
		{"everything set", map[string]string{"DATABASE_URL": db, "HTTP_ADDR": "127.0.0.1:9000", "DB_POOL_SIZE": "64",
			"REDIS_URL": "redis://localhost:6379/2", "PRODUCT_CACHE_TTL": "5s", "STREAM_MAX_CLIENTS": "7"},
			Config{DatabaseURL: db, HTTPAddr: "127.0.0.1:9000", DBPoolSize: 64, RedisURL: "redis://localhost:6379/2", ProductCacheTTL: 5 * time.Second, StreamMaxClients: 7, Cluster: cluster.Defaults(cluster.DefaultNodeID())}, nil},
		{"missing database", map[string]string{}, Config{}, []string{"DATABASE_URL"}},
		{"every problem at once", map[string]string{"DATABASE_URL": "mysql://x/y", "DB_POOL_SIZE": "0",
			"REDIS_URL": "localhost:6379", "PRODUCT_CACHE_TTL": "soon", "STREAM_MAX_CLIENTS": "0"}, Config{},
			[]string{"DATABASE_URL", "DB_POOL_SIZE", "REDIS_URL", "PRODUCT_CACHE_TTL", "STREAM_MAX_CLIENTS"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := LoadConfig(config.FromMap(tc.env))
			if tc.wantErr == nil {
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("config (-want +got):\n%s", diff)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error; want one naming %v", tc.wantErr)
			}
			for _, name := range tc.wantErr {
				if !strings.Contains(err.Error(), name) {
					t.Errorf("error %q does not name %s", err, name)
				}
			}
		})
	}
}
