package app

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/loopers/commerce-pipeline/internal/cluster"
	"github.com/loopers/commerce-pipeline/internal/pg"
	"github.com/loopers/commerce-pipeline/internal/testenv"
)

// serve runs the service on cfg until cancel is called; done receives
// Run's result.
func serve(t *testing.T, cfg Config) (addrs Addrs, done <-chan error, cancel context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ready := make(chan Addrs, 1)
	ch := make(chan error, 1)
	go func() { ch <- Run(ctx, cfg, slog.New(slog.DiscardHandler), ready) }()
	select {
	case addrs = <-ready:
	case err := <-ch:
		t.Fatalf("Run returned before serving: %v", err)
	}
	return addrs, ch, cancel
}

// get returns the status and body of GET url.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp := testenv.Get(t, url)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestRunServesAndShutsDown starts the whole service, with the cache, and
// checks it serves the public routes on its HTTP address and the operators'
// on its admin address only, is ready, and returns cleanly and promptly
// once its context ends, although a client holds a stream open.
func TestRunServesAndShutsDown(t *testing.T) {
	t.Parallel()
	cfg := Config{
		DatabaseURL:     testenv.DatabaseURL(t),
		HTTPAddr:        "127.0.0.1:0",
		AdminAddr:       "127.0.0.1:0",
		DB:              pg.Options{MaxConns: 4},
		RedisURL:        testenv.RedisURL(t),
		ProductCacheTTL: time.Second,

		StreamMaxClients: 10,
		Cluster:          cluster.Defaults("api-test"),
	}
	addrs, done, cancel := serve(t, cfg)
	public, admin := "http://"+addrs.HTTP, "http://"+addrs.Admin
	for _, path := range []string{"/healthz", "/readyz", "/api/v1/products", "/openapi.yaml", "/", "/static/app.js"} {
		if code, _ := get(t, public+path); code != http.StatusOK {
			t.Errorf("public %s: %d", path, code)
		}
	}
	for _, path := range []string{"/metrics", "/api/v1/cluster"} {
		if code, _ := get(t, public+path); code != http.StatusNotFound {
			t.Errorf("public %s: %d, want 404 (it is the admin listener's)", path, code)
		}
	}
	for _, path := range []string{"/healthz", "/readyz", "/api/v1/cluster"} {
		if code, body := get(t, admin+path); code != http.StatusOK {
			t.Errorf("admin %s: %d %s", path, code, body)
		}
	}
	// The NOTIFY queue is the whole PostgreSQL server's, shared with every
	// other test's listeners: the gauge is there with a fraction, not
	// necessarily 0.
	if _, body := get(t, admin+"/metrics"); !notifyQueueSample.MatchString(body) {
		t.Errorf("admin /metrics has no commerce_api_pg_notify_queue_usage sample from 0 to 1:\n%s", body)
	}
	if code, _ := get(t, admin+"/api/v1/products"); code != http.StatusNotFound {
		t.Errorf("admin /api/v1/products: %d, want 404 (the API is public)", code)
	}
	resp := testenv.Get(t, public+"/api/v1/stream") //nolint:bodyclose // closed by the defer below; a goroutine reads it
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
	cfg := Config{DatabaseURL: "postgres://nobody@127.0.0.1:1/none?connect_timeout=1", HTTPAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", DB: pg.Options{MaxConns: 1}, ProductCacheTTL: time.Second}
	if err := Run(context.Background(), cfg, slog.New(slog.DiscardHandler), nil); err == nil {
		t.Error("Run with an unreachable database returned nil")
	}
}

// notifyQueueSample matches the NOTIFY queue gauge's sample: a fraction of
// the queue in use, from 0 to 1.
var notifyQueueSample = regexp.MustCompile(`\ncommerce_api_pg_notify_queue_usage (0|1|0\.[0-9]+|[0-9](\.[0-9]+)?e-[0-9]+)\n`)
