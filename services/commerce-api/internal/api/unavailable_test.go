package api_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/loopers/commerce-pipeline/internal/httpserver"
	"github.com/loopers/commerce-pipeline/internal/testenv"

	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/api"
)

// lockProduct holds FOR UPDATE on a product from another connection until
// the test ends, so that a request touching it waits.
func (e *env) lockProduct(t *testing.T, id int64) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, e.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	if _, err := tx.Exec(ctx, `SELECT 1 FROM products WHERE id = $1 FOR UPDATE`, id); err != nil {
		t.Fatal(err)
	}
}

// waitForLockWaiter returns the pid of a backend of this database waiting
// for a lock.
func (e *env) waitForLockWaiter(t *testing.T) int64 {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		pid := e.db.Int(t, `SELECT COALESCE(max(pid), 0) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`)
		if pid != 0 {
			return int64(pid)
		}
	}
	t.Fatal("no request waits on the product lock")
	return 0
}

// TestDatabaseUnavailable takes the database away in each way seen or
// possible (terminated, unreachable, too slow) while requests run: each gets
// a 503 with Retry-After and a problem that does not quote the driver, and
// writes nothing.
func TestDatabaseUnavailable(t *testing.T) {
	t.Parallel()
	unavailable := func(path string) hostileCase {
		return hostileCase{method: "POST", path: path, header: hdr("Content-Type", "application/json", api.UserHeader, "alice"),
			status: http.StatusServiceUnavailable, detail: "retry after"}
	}

	t.Run("connection terminated by an administrator (restart)", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		p := e.createProduct(t, "lamp", 1, 1)
		e.lockProduct(t, p)
		done := make(chan problemBody)
		go func() { done <- e.checkProblem(t, unavailable(fmt.Sprintf("/api/v1/products/%d/likes", p))) }()
		pid := e.waitForLockWaiter(t)
		e.db.Exec(t, `SELECT pg_terminate_backend($1)`, pid)
		checkNoDriverText(t, <-done)
	})

	t.Run("request deadline", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, func(d *api.Deps) { d.RequestTimeout = 200 * time.Millisecond })
		p := e.createProduct(t, "lamp", 1, 1)
		e.lockProduct(t, p)
		checkNoDriverText(t, e.checkProblem(t, unavailable(fmt.Sprintf("/api/v1/products/%d/likes", p))))
	})

	t.Run("statement timeout", func(t *testing.T) {
		t.Parallel()
		e := newEnvStore(t, func(c *storeConfig) { c.Options.StatementTimeout = 200 * time.Millisecond })
		p := e.createProduct(t, "lamp", 1, 1)
		e.lockProduct(t, p)
		checkNoDriverText(t, e.checkProblem(t, unavailable(fmt.Sprintf("/api/v1/products/%d/likes", p))))
	})

	t.Run("database unreachable", func(t *testing.T) {
		t.Parallel()
		var px *testenv.Proxy
		e := newEnvStore(t, func(c *storeConfig) { c.URL, px = testenv.ProxyURL(t, c.URL) })
		p := e.createProduct(t, "lamp", 1, 1)
		px.Close()
		for _, path := range []string{fmt.Sprintf("/api/v1/products/%d/likes", p), "/api/v1/orders"} {
			tc := unavailable(path)
			if path == "/api/v1/orders" {
				tc.body = fmt.Sprintf(`{"items":[{"productId":%d,"quantity":1}]}`, p)
			}
			checkNoDriverText(t, e.checkProblem(t, tc))
		}
		// The public /readyz says no more than "unavailable"; the admin one
		// names the check, but neither its address nor its error.
		r := e.do(t, "GET", "/readyz", "", "")
		if r.Status != http.StatusServiceUnavailable || strings.TrimSpace(string(r.Body)) != `{"status":"unavailable"}` {
			t.Errorf("public /readyz = %d %s", r.Status, r.Body)
		}
		a := e.adminGet(t, "/readyz")
		if a.Status != http.StatusServiceUnavailable || !strings.Contains(string(a.Body), `"`+httpserver.DatabaseCheck+`":"unavailable"`) {
			t.Errorf("admin /readyz = %d %s", a.Status, a.Body)
		}
		u, _ := url.Parse(e.url)
		for _, secret := range []string{px.Addr(), u.Hostname(), u.User.Username(), strings.TrimPrefix(u.Path, "/")} {
			if secret != "" && strings.Contains(string(a.Body), secret) {
				t.Errorf("/readyz tells %q: %s", secret, a.Body)
			}
		}
	})
}

func checkNoDriverText(t *testing.T, pb problemBody) {
	t.Helper()
	for _, leak := range []string{"terminating", "SQLSTATE", "dial", "connect", "127.0.0.1", "context"} {
		if strings.Contains(pb.Detail, leak) {
			t.Errorf("the problem quotes the driver (%q): %s", leak, pb.Detail)
		}
	}
}

// TestMetricsLabels sends made-up methods and a request its client
// abandons: the method label stays within the standard methods plus OTHER,
// and the abandoned request is not counted as a server error.
func TestMetricsLabels(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.createProduct(t, "lamp", 1, 1)
	for i := range 50 {
		req, err := http.NewRequestWithContext(t.Context(), fmt.Sprintf("M%d", i), e.srv.URL+"/api/v1/products", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}

	e.lockProduct(t, p)
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "POST", fmt.Sprintf("%s/api/v1/products/%d/likes", e.srv.URL, p), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(api.UserHeader, "alice")
	errc := make(chan error, 1)
	go func() {
		resp, err := e.srv.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	e.waitForLockWaiter(t)
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("the abandoned request completed")
	}

	const abandoned = `http_requests_total{method="POST",route="/api/v1/products/{id}/likes",status="499"} 1`
	var body string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		body = string(e.adminGet(t, "/metrics").Body)
		if strings.Contains(body, abandoned) {
			break
		}
	}
	if !strings.Contains(body, abandoned) {
		t.Errorf("/metrics lacks %s", abandoned)
	}
	if !strings.Contains(body, `http_requests_total{method="OTHER",route="unmatched",status="405"} 50`) &&
		!strings.Contains(body, `http_requests_total{method="OTHER",route="/api/v1/products",status="405"} 50`) {
		t.Errorf("made-up methods are not counted as OTHER:\n%s", grepLines(body, "http_requests_total"))
	}
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "http_requests_total") && (strings.Contains(line, `method="M`) || strings.Contains(line, `status="5`)) {
			t.Errorf("series %s", line)
		}
	}
}

func grepLines(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
