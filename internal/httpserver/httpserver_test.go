package httpserver_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/loopers/commerce-pipeline/internal/httpserver"
	"github.com/loopers/commerce-pipeline/internal/testenv"
)

// TestOps: the admin endpoints (Ops) and the public probes (Probes) on
// the same checks. Neither tells a dependency's address or error; only the
// admin /readyz names the failed check, and only the admin side has
// /metrics and the profiles.
//
//nolint:paralleltest // the cases run in turn: each sets the one check's error the shared servers answer with
func TestOps(t *testing.T) {
	t.Parallel()
	var dbErr error
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "things_total", Help: "things"})
	reg.MustRegister(c)
	checks := map[string]httpserver.Check{"db": func(context.Context) error { return dbErr }}
	admin, public := http.NewServeMux(), http.NewServeMux()
	httpserver.Ops(admin, reg, checks)
	httpserver.Probes(public, checks)
	srv := map[string]*httptest.Server{"admin": httptest.NewServer(admin), "public": httptest.NewServer(public)}
	for _, s := range srv {
		defer s.Close()
	}
	refused := errors.New(`failed to connect to user=commerce database=commerce: 10.0.0.7:5432: connection refused`)

	tests := []struct {
		name, listener, path string
		dbErr                error
		wantStatus           int
		wantBody             string
	}{
		{"alive", "admin", "/healthz", nil, 200, `"ok"`},
		{"ready", "admin", "/readyz", nil, 200, `"ready"`},
		{"not ready names the failed check, not its error", "admin", "/readyz", refused, 503, `"db":"unavailable"`},
		{"a check that times out", "admin", "/readyz", context.DeadlineExceeded, 503, `"db":"timeout"`},
		{"alive while not ready", "admin", "/healthz", errors.New("down"), 200, `"ok"`},
		{"metrics", "admin", "/metrics", nil, 200, "things_total 0"},
		{"public alive", "public", "/healthz", nil, 200, `{"status":"ok"}`},
		{"public ready", "public", "/readyz", nil, 200, `{"status":"ready"}`},
		{"public not ready names nothing", "public", "/readyz", refused, 503, `{"status":"unavailable"}` + "\n"},
		{"no public metrics", "public", "/metrics", nil, 404, "404 page not found"},
		{"profiles", "admin", "/debug/pprof/", nil, 200, "goroutine"},
		{"no public profiles", "public", "/debug/pprof/", nil, 404, "404 page not found"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dbErr = tc.dbErr
			resp := testenv.Get(t, srv[tc.listener].URL+tc.path)
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.wantStatus || !strings.Contains(string(body), tc.wantBody) {
				t.Fatalf("GET %s = %d %s; want %d containing %s", tc.path, resp.StatusCode, body, tc.wantStatus, tc.wantBody)
			}
			if tc.listener == "public" && strings.Contains(string(body), `"db"`) {
				t.Errorf("the public %s names the check: %s", tc.path, body)
			}
			for _, secret := range []string{"10.0.0.7", "commerce", "5432", "refused"} {
				if strings.Contains(string(body), secret) {
					t.Errorf("GET %s tells %q: %s", tc.path, secret, body)
				}
			}
		})
	}
}

// TestOpsReadOnly: the probes and /metrics answer GET and HEAD, and any
// other method 405 with the Allow header RFC 9110 requires and a problem.
func TestOpsReadOnly(t *testing.T) {
	t.Parallel()
	admin, public := http.NewServeMux(), http.NewServeMux()
	httpserver.Ops(admin, prometheus.NewRegistry(), nil)
	httpserver.Probes(public, nil)
	srv := map[string]*httptest.Server{"admin": httptest.NewServer(admin), "public": httptest.NewServer(public)}
	for _, s := range srv {
		t.Cleanup(s.Close) // after the parallel subtests
	}
	type answer struct {
		Status             int
		Allow, ContentType string
	}
	allowed := answer{200, "", ""}
	refused := answer{405, "GET, HEAD", "application/problem+json"}
	tests := []struct {
		listener, method, path string
		want                   answer
	}{
		{"admin", "HEAD", "/healthz", allowed},
		{"admin", "HEAD", "/metrics", allowed},
		{"admin", "POST", "/healthz", refused},
		{"admin", "DELETE", "/readyz", refused},
		{"admin", "PUT", "/metrics", refused},
		{"public", "HEAD", "/readyz", allowed},
		{"public", "TRACE", "/healthz", refused},
		{"public", "POST", "/readyz", refused},
	}
	for _, tc := range tests {
		t.Run(tc.listener+" "+tc.method+" "+tc.path, func(t *testing.T) {
			t.Parallel()
			req, err := http.NewRequestWithContext(t.Context(), tc.method, srv[tc.listener].URL+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			got := answer{resp.StatusCode, resp.Header.Get("Allow"), ""}
			if resp.StatusCode != http.StatusOK {
				got.ContentType = resp.Header.Get("Content-Type")
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s %s (-want +got):\n%s", tc.method, tc.path, diff)
			}
		})
	}
}

func TestServeStopsOnCancel(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	srv := httpserver.New("127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "hi") }))
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- httpserver.Serve(ctx, slog.New(slog.DiscardHandler), srv, ready) }()
	addr := <-ready
	resp := testenv.Get(t, "http://"+addr)
	resp.Body.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve returned %v after cancel, want nil", err)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatal("server still answers after shutdown")
	}
}
