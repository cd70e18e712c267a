package relay

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/loopers/commerce-pipeline/services/outbox-relay/internal/relaytest"
)

func TestOpsEndpoints(t *testing.T) {
	env := relaytest.New(t)
	n := newNode(t, env, testConfig(env, "node-a"))
	n.start(t, true)
	eventually(t, 10*time.Second, "node-a to lead", n.leading)
	rows := insertCommitted(t, env, likes(1, "a", "b")...)
	eventually(t, 10*time.Second, "the rows to be published", func() bool { return env.Cursor(t) == rows[1].ID })

	srv := httptest.NewServer(n.svc.Handler())
	t.Cleanup(srv.Close)
	get := func(path string) (int, string) {
		res, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(body)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := get(path); code != http.StatusOK {
			t.Errorf("%s: %d %s", path, code, body)
		}
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
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	env.Cluster.Close() // Kafka gone: not ready
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "kafka") {
		t.Errorf("/readyz without Kafka: %d %s", code, body)
	}
}
