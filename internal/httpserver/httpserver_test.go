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

	"github.com/prometheus/client_golang/prometheus"

	"github.com/loopers/commerce-pipeline/internal/httpserver"
)

func TestOps(t *testing.T) {
	var dbErr error
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "things_total", Help: "things"})
	reg.MustRegister(c)
	mux := http.NewServeMux()
	httpserver.Ops(mux, reg, map[string]httpserver.Check{"db": func(context.Context) error { return dbErr }})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	tests := []struct {
		name, path string
		dbErr      error
		wantStatus int
		wantBody   string
	}{
		{"alive", "/healthz", nil, 200, `"ok"`},
		{"ready", "/readyz", nil, 200, `"ready"`},
		{"not ready names the failed check, not its error", "/readyz",
			errors.New(`failed to connect to user=commerce database=commerce: 10.0.0.7:5432: connection refused`), 503, `"db":"unavailable"`},
		{"a check that times out", "/readyz", context.DeadlineExceeded, 503, `"db":"timeout"`},
		{"alive while not ready", "/healthz", errors.New("down"), 200, `"ok"`},
		{"metrics", "/metrics", nil, 200, "things_total 0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dbErr = tc.dbErr
			resp, err := http.Get(srv.URL + tc.path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.wantStatus || !strings.Contains(string(body), tc.wantBody) {
				t.Fatalf("GET %s = %d %s; want %d containing %s", tc.path, resp.StatusCode, body, tc.wantStatus, tc.wantBody)
			}
			for _, secret := range []string{"10.0.0.7", "commerce", "5432", "refused"} {
				if strings.Contains(string(body), secret) {
					t.Errorf("GET %s tells %q: %s", tc.path, secret, body)
				}
			}
		})
	}
}

func TestServeStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	srv := httpserver.New("127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "hi") }))
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- httpserver.Serve(ctx, slog.New(slog.DiscardHandler), srv, ready) }()
	addr := <-ready
	resp, err := http.Get("http://" + addr)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve returned %v after cancel, want nil", err)
	}
	if _, err := http.Get("http://" + addr); err == nil {
		t.Fatal("server still answers after shutdown")
	}
}
