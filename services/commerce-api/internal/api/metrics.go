package api

import (
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "http_requests_total",
			Help: "HTTP requests served, by method, route pattern and status.",
		}, []string{"method", "route", "status"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "http_request_duration_seconds",
			Help:    "HTTP request latency, by method, route pattern and status.",
			Buckets: prometheus.DefBuckets,
		}, []string{"method", "route", "status"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.latency} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// StatusClientClosed is the status label of a request whose client went
// away before the answer.
const StatusClientClosed = 499

// methodLabel keeps the method label's values to a fixed set: any other
// method a client makes up is "OTHER", or each would add series.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "OTHER"
}

// middleware records every request under its route pattern (never the raw
// path, which would make one series per id).
func (m *metrics) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r)
		route := "unmatched"
		if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" {
			route = rc.RoutePattern()
		}
		status := ww.Status()
		if status == 0 {
			status = http.StatusOK
		}
		if status >= http.StatusInternalServerError && r.Context().Err() != nil {
			// The client left first; whatever failed after that is not a
			// server error (nginx's convention: 499 Client Closed Request).
			status = StatusClientClosed
		}
		labels := prometheus.Labels{"method": methodLabel(r.Method), "route": route, "status": strconv.Itoa(status)}
		m.requests.With(labels).Inc()
		// A stream lasts as long as its client stays; its "latency" would
		// swamp the histogram. Streams are counted by the hub's metrics.
		if ww.Header().Get("Content-Type") != "text/event-stream" {
			m.latency.With(labels).Observe(time.Since(start).Seconds())
		}
	})
}
