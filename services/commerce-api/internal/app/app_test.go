package app

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/loopers/commerce-pipeline/internal/pg"
	"github.com/loopers/commerce-pipeline/internal/cluster"
	"github.com/loopers/commerce-pipeline/internal/testenv"
)

// TestRunServesAndShutsDown starts the whole service, with the cache, and
// checks it serves, is ready, and returns cleanly once its context ends.
func TestRunServesAndShutsDown(t *testing.T) {
	t.Parallel()
	cfg := Config{
		DatabaseURL:     testenv.DatabaseURL(t),
		HTTPAddr:        "127.0.0.1:0",
		DB:              pg.Options{MaxConns: 4},
		RedisURL:        testenv.RedisURL(t),
		ProductCacheTTL: time.Second,
		Cluster:         cluster.Defaults("api-test"),
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, slog.New(slog.DiscardHandler), ready) }()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("Run returned before serving: %v", err)
	}
	for _, path := range []string{"/readyz", "/api/v1/products", "/openapi.yaml"} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %d", path, resp.StatusCode)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run after shutdown: %v", err)
	}
}

func TestRunFailsWithoutDatabase(t *testing.T) {
	t.Parallel()
	cfg := Config{DatabaseURL: "postgres://nobody@127.0.0.1:1/none?connect_timeout=1", HTTPAddr: "127.0.0.1:0", DB: pg.Options{MaxConns: 1}, ProductCacheTTL: time.Second}
	if err := Run(context.Background(), cfg, slog.New(slog.DiscardHandler), nil); err == nil {
		t.Error("Run with an unreachable database returned nil")
	}
}
