// Package httpserver holds the HTTP plumbing every service shares: a server
// with timeouts, graceful shutdown, the operators' endpoints /healthz,
// /readyz and /metrics for an admin listener (Ops), and the bare probes for
// a public one (Probes).
package httpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/loopers/commerce-pipeline/internal/logkey"
)

// ShutdownTimeout bounds how long in-flight requests may take to finish once
// shutdown starts.
const ShutdownTimeout = 10 * time.Second

// New returns a server for h with read-header, read, write and idle timeouts,
// so slow or stuck clients cannot hold connections forever.
func New(addr string, h http.Handler) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
	}
}

// Serve listens on srv.Addr and serves until ctx ends, then stops accepting
// connections and waits up to ShutdownTimeout for in-flight requests. ready,
// when not nil, receives the bound address once the listener is open (useful
// with port 0).
func Serve(ctx context.Context, logger *slog.Logger, srv *http.Server, ready chan<- string) error {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", srv.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", srv.Addr, err)
	}
	logger.Info("http server listening", "addr", ln.Addr().String())
	if ready != nil {
		ready <- ln.Addr().String()
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", srv.Addr, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shut down %s: %w", srv.Addr, err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Check is a readiness probe: nil when the dependency is usable.
type Check func(ctx context.Context) error

// DatabaseCheck is the name of every service's PostgreSQL readiness check.
const DatabaseCheck = "database"

// OpsOption adjusts [Ops].
type OpsOption func(*opsConfig)

type opsConfig struct{ logger *slog.Logger }

// WithLogger logs the error of each failed readiness check, which /readyz
// itself does not show.
func WithLogger(l *slog.Logger) OpsOption {
	return func(c *opsConfig) { c.logger = l }
}

// ReadyTimeout bounds all of /readyz's checks together.
const ReadyTimeout = 2 * time.Second

// Ops registers the operators' endpoints on mux, for an admin listener that
// only operators and Prometheus reach: /healthz (the process is alive),
// /readyz (every check passes) and /metrics (the registry's collectors).
//
// /readyz names each failed check and says only "unavailable" or "timeout"
// about it: a dependency's error names its host, user and database (or
// brokers), which belongs in the log (given a logger), not in a response.
func Ops(mux interface {
	Handle(pattern string, h http.Handler)
}, reg *prometheus.Registry, checks map[string]Check, opts ...OpsOption) {
	mux.Handle("/healthz", readOnly(http.HandlerFunc(healthz)))
	mux.Handle("/readyz", readOnly(readyz(checks, true, opts)))
	// OpenMetrics to a scraper that asks for it (Prometheus does): the
	// only exposition format that carries exemplars, the trace ids on the
	// stage histograms (internal/stages).
	mux.Handle("/metrics", readOnly(promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, EnableOpenMetrics: true})))
	// Go's profiles, for the operators who can reach this listener: where
	// a node's CPU and memory go under real load (`go tool pprof
	// http://<admin>/debug/pprof/profile?seconds=30`).
	mux.Handle("/debug/pprof/", http.HandlerFunc(pprof.Index))
	mux.Handle("/debug/pprof/cmdline", http.HandlerFunc(pprof.Cmdline))
	mux.Handle("/debug/pprof/profile", http.HandlerFunc(pprof.Profile))
	mux.Handle("/debug/pprof/symbol", http.HandlerFunc(pprof.Symbol))
	mux.Handle("/debug/pprof/trace", http.HandlerFunc(pprof.Trace))
}

// Probes registers /healthz and /readyz for a public listener (a load
// balancer's probes): /readyz answers ready or unavailable and names no
// check. Which dependency failed is the admin listener's (Ops) to tell.
func Probes(mux interface {
	Handle(pattern string, h http.Handler)
}, checks map[string]Check, opts ...OpsOption) {
	mux.Handle("/healthz", readOnly(http.HandlerFunc(healthz)))
	mux.Handle("/readyz", readOnly(readyz(checks, false, opts)))
}

// readOnly answers GET and HEAD with h and any other method 405 with the
// Allow header RFC 9110 requires: a probe or a scrape changes nothing, so
// a POST to one is a client's mistake, not a read.
func readOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusMethodNotAllowed)
			// An RFC 9457 problem, as the services' APIs answer errors.
			_ = json.NewEncoder(w).Encode(map[string]any{
				"type": "about:blank", "title": http.StatusText(http.StatusMethodNotAllowed), "status": http.StatusMethodNotAllowed,
				"detail": "method " + strconv.Quote(r.Method) + " is not allowed on " + r.URL.Path + "; it allows GET and HEAD",
			})
			return
		}
		h.ServeHTTP(w, r)
	})
}

func healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyz runs every check within ReadyTimeout; detail names the failed ones.
func readyz(checks map[string]Check, detail bool, opts []OpsOption) http.Handler {
	var cfg opsConfig
	for _, o := range opts {
		o(&cfg)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), ReadyTimeout)
		defer cancel()
		failed := map[string]string{}
		for name, check := range checks {
			err := check(ctx)
			if err == nil {
				continue
			}
			failed[name] = "unavailable"
			if errors.Is(err, context.DeadlineExceeded) {
				failed[name] = "timeout"
			}
			if cfg.logger != nil {
				cfg.logger.WarnContext(r.Context(), "readiness check failed", "check", name, logkey.Err, err)
			}
		}
		switch {
		case len(failed) == 0:
			writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
		case detail:
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "unavailable", "failed": failed})
		default:
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable"})
		}
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
