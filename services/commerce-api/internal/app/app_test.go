package app

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/loopers/commerce-pipeline/internal/cluster"
	"github.com/loopers/commerce-pipeline/internal/pg"
	"github.com/loopers/commerce-pipeline/internal/testenv"
)

// TestRunServesAndShutsDown starts the whole service, with the cache, and
// checks it serves, is ready, and returns cleanly and promptly once its
// context ends, although a client holds a stream open.
func TestRunServesAndShutsDown(t *testing.T) {
	t.Parallel()
	cfg := Config{
		DatabaseURL:     testenv.DatabaseURL(t),
		HTTPAddr:        "127.0.0.1:0",
		DB:              pg.Options{MaxConns: 4},
		RedisURL:        testenv.RedisURL(t),
		ProductCacheTTL: time.Second,

		StreamMaxClients: 10,
		Cluster:          cluster.Defaults("api-test"),
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
	for _, path := range []string{"/readyz", "/api/v1/products", "/openapi.yaml", "/", "/static/app.js"} {
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
	metrics, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(metrics.Body)
	metrics.Body.Close()
	if !strings.Contains(string(body), "\ncommerce_api_pg_notify_queue_usage 0\n") {
		t.Errorf("/metrics has no commerce_api_pg_notify_queue_usage of 0:\n%s", body)
	}
	resp, err := http.Get("http://" + addr + "/api/v1/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	first := make([]byte, 64)
	if _, err := resp.Body.Read(first); err != nil {
		t.Fatalf("read the stream's first frame: %v", err)
	}
	streamEnded := make(chan error, 1)
	go func() { _, err := io.Copy(io.Discard, resp.Body); streamEnded <- err }()

	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run after shutdown: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return within 5 s of its context ending with a stream open")
	}
	if err := <-streamEnded; err != nil {
		t.Errorf("the open stream did not end cleanly: %v", err)
	}
	t.Logf("shut down in %v with a stream open", time.Since(start).Round(time.Millisecond))
}

func TestRunFailsWithoutDatabase(t *testing.T) {
	t.Parallel()
	cfg := Config{DatabaseURL: "postgres://nobody@127.0.0.1:1/none?connect_timeout=1", HTTPAddr: "127.0.0.1:0", DB: pg.Options{MaxConns: 1}, ProductCacheTTL: time.Second}
	if err := Run(context.Background(), cfg, slog.New(slog.DiscardHandler), nil); err == nil {
		t.Error("Run with an unreachable database returned nil")
	}
}
