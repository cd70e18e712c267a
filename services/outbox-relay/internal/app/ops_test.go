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
	"github.com/loopers/commerce-pipeline/internal/kafkabroker"
	"github.com/loopers/commerce-pipeline/internal/testenv"
	"github.com/loopers/commerce-pipeline/pkg/events"
	"github.com/loopers/commerce-pipeline/services/outbox-relay/internal/relay"
	"github.com/loopers/commerce-pipeline/services/outbox-relay/internal/relaytest"
)

// TestOpsEndpoints runs the node as main does and reads its admin endpoints:
// health, readiness with the node's role, and the relay's metrics; readiness
// fails once Kafka is gone.
func TestOpsEndpoints(t *testing.T) {
	t.Parallel()
	// A broker of its own: the test takes it away.
	broker := testenv.KafkaCluster(t, kafkabroker.Options{})
	env := relaytest.NewOn(t, broker)
	cfg := Config{
		DatabaseURL: env.URL, Kafka: env.Kafka, AdminAddr: "127.0.0.1:0", GC: GC{Percent: 100, From: "GOGC"},
		Relay: relay.Config{
			NodeID: "node-a", BatchSize: 100, Window: 20_000, WindowBytes: 32 << 20, SendTimeout: 3 * time.Second, RetryInterval: 200 * time.Millisecond,
			MaxAge: 5 * time.Minute, Interval: 100 * time.Millisecond, LeaseTTL: time.Second, Retention: time.Hour,
		},
		Cluster: cluster.Defaults("node-a"),
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, slog.New(slog.DiscardHandler), ready) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("relay stopped with %v", err)
		}
	})
	var base string
	select {
	case addr := <-ready:
		base = "http://" + addr
	case err := <-done:
		t.Fatalf("relay stopped at start: %v", err)
	}
	get := func(path string) (int, string) {
		t.Helper()
		res := testenv.Get(t, base+path)
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(body)
	}
	eventually(t, "the node to lead", func() bool {
		_, body := get("/readyz")
		return strings.Contains(body, `"role":"`+RoleLeader+`"`)
	})
	a := env.Insert(t, env.Pool, events.LikeCreatedV1{UserID: "a", ProductID: 1})
	b := env.Insert(t, env.Pool, events.LikeCreatedV1{UserID: "b", ProductID: 1})
	eventually(t, "the rows to be published", func() bool { return env.Cursor(t) == max(a.ID, b.ID) })

	if code, body := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d %s", code, body)
	}
	_, metrics := get("/metrics")
	for _, want := range []string{
		"outbox_relay_published_total 2",
		"outbox_relay_failed_total 0",
		"outbox_relay_retried_total 0",
		"outbox_relay_backlog_rows 0",
		"outbox_relay_oldest_unpublished_age_seconds 0",
		"outbox_relay_pass_duration_seconds_count",
		"outbox_relay_is_leader 1",
		"outbox_relay_fencing_token 1",
		"go_goroutines",
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	if err := broker.Close(); err != nil { // Kafka gone: not ready
		t.Fatal(err)
	}
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "kafka") {
		t.Errorf("/readyz without Kafka: %d %s", code, body)
	}
}

// eventually polls cond until it holds, failing the test after 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
