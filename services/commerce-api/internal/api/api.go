// Package api is commerce-api's HTTP layer: the chi router under /api/v1,
// request validation, and the mapping of errors to RFC 9457 problems.
// Handlers return errors; problemFor alone decides the status.
package api

import (
	"context"
	_ "embed"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/loopers/commerce-pipeline/internal/httpserver"
	"github.com/loopers/commerce-pipeline/internal/logkey"
	"github.com/loopers/commerce-pipeline/internal/productcache"
	"github.com/loopers/commerce-pipeline/pkg/events"
	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/api/auth"
	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/store"
	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/stream"
	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/web"
)

// OpenAPI is the OpenAPI 3 document of this API, served at /openapi.yaml.
//
//go:embed openapi.yaml
var OpenAPI []byte

// ProductCache caches product detail bodies (cache-aside, with the
// invalidation protocol of internal/productcache). Its errors never fail a
// request: the database stays the source of truth.
type ProductCache interface {
	Get(ctx context.Context, id int64) (productcache.Entry, error)
	Fill(ctx context.Context, id int64, seen productcache.Entry, body []byte) (bool, error)
	Invalidate(ctx context.Context, ids ...int64) error
}

// cacheTimeout bounds every cache call: a slow cache must cost a request
// little more than a missing one, which is served from the database.
const cacheTimeout = 100 * time.Millisecond

// Deps are the handler's dependencies. Cache may be nil (no caching).
type Deps struct {
	Store   *store.Store
	Cache   ProductCache
	Logger  *slog.Logger
	Metrics *prometheus.Registry
	// Checks decide readiness: the public /readyz says ready or not, the
	// admin one names what failed.
	Checks map[string]httpserver.Check
	// RequestTimeout is the deadline of every request; zero means none.
	RequestTimeout time.Duration
	// Stream serves GET /api/v1/stream; nil answers it with 503.
	Stream *stream.Hub
	// Cluster, when set, serves GET /api/v1/cluster on the admin handler.
	Cluster ClusterView
	// Auth, when set, is jwt mode: the acting user comes from a verified
	// bearer token and creating products needs the admin role. nil is
	// header mode: the acting user is X-User-ID as sent.
	Auth *auth.Verifier
	// TraceUIURL, when set, is the trace UI's URL with {traceId} where a
	// trace id goes: GET /api/v1/config gives it to the live page, which
	// links each action it logs to the action's trace (the traceresponse
	// header, internal/telemetry).
	TraceUIURL string
}

type server struct {
	st    *store.Store
	cache ProductCache
	log   *slog.Logger
	hub   *stream.Hub
	auth  *auth.Verifier // nil in header mode
	trace string         // Deps.TraceUIURL
}

// NewHandler returns the service's public HTTP handler: the API under
// /api/v1, the live page, /openapi.yaml, /asyncapi.yaml, and the bare probes
// /healthz and /readyz. What only operators may see is on NewAdminHandler's.
func NewHandler(d Deps) (http.Handler, error) {
	if d.Store == nil || d.Logger == nil || d.Metrics == nil {
		return nil, errors.New("api: Store, Logger and Metrics are required")
	}
	m, err := newMetrics(d.Metrics)
	if err != nil {
		return nil, err
	}
	s := &server{st: d.Store, cache: d.Cache, log: d.Logger, hub: d.Stream, auth: d.Auth, trace: d.TraceUIURL}
	r := chi.NewRouter()
	r.Use(m.middleware)
	// Set before any route, so that every sub-router inherits them.
	r.NotFound(s.handle(func(w http.ResponseWriter, r *http.Request) error {
		return newRequestError(http.StatusNotFound, "no route for "+quoteShort(r.URL.Path))
	}))
	r.MethodNotAllowed(s.handle(func(w http.ResponseWriter, req *http.Request) error {
		// RFC 9110 §15.5.6: a 405 lists the methods the resource has. chi
		// leaves that to its own default handler, which this one replaces.
		w.Header().Set("Allow", allowed(r, req.URL.Path))
		return newRequestError(http.StatusMethodNotAllowed, "method "+quoteShort(req.Method)+" is not allowed on "+quoteShort(req.URL.Path))
	}))
	// The stream lives as long as its client: it is the one route outside
	// the request deadline (its writes carry their own, per frame). It is
	// registered before the deadline's group, on the same path prefix.
	r.Get("/api/v1/stream", s.handle(s.guard(anyone, s.streamEvents)))
	r.Group(func(r chi.Router) {
		if d.RequestTimeout > 0 {
			// After the metrics middleware, which must see the client's
			// own context to tell an abandoned request from a timed-out one.
			r.Use(deadline(d.RequestTimeout))
		}
		s.routes(r, d)
	})
	return r, nil
}

// NewAdminHandler returns the operators' handler, for a listener that only
// they and Prometheus reach: /metrics, /readyz naming each failed check,
// /healthz, and GET /api/v1/cluster (nodes, hosts, versions, the relay
// leader, every partition's owner) when Deps.Cluster is set.
func NewAdminHandler(d Deps) (http.Handler, error) {
	if d.Logger == nil || d.Metrics == nil {
		return nil, errors.New("api: Logger and Metrics are required")
	}
	s := &server{log: d.Logger}
	r := chi.NewRouter()
	r.NotFound(s.handle(func(w http.ResponseWriter, r *http.Request) error {
		return newRequestError(http.StatusNotFound, "no route for "+quoteShort(r.URL.Path))
	}))
	httpserver.Ops(r, d.Metrics, d.Checks, httpserver.WithLogger(d.Logger))
	if d.Cluster != nil {
		r.Group(func(r chi.Router) {
			if d.RequestTimeout > 0 {
				r.Use(deadline(d.RequestTimeout))
			}
			r.Get("/api/v1/cluster", s.handle(clusterView(d.Cluster)))
		})
	}
	return r, nil
}

// routes registers every route that answers within the request deadline.
func (s *server) routes(r chi.Router, d Deps) {
	httpserver.Probes(r, d.Checks, httpserver.WithLogger(d.Logger))
	r.Get("/openapi.yaml", yamlDoc(OpenAPI))
	// The events this API's outbox publishes: their topics, headers and payloads.
	r.Get("/asyncapi.yaml", yamlDoc(events.AsyncAPI()))
	r.Get("/", web.Index)
	r.Handle("/static/*", web.Static())
	r.Route("/api/v1", func(r chi.Router) {
		r.Get("/config", s.handle(s.guard(anyone, s.publicConfig)))
		r.Post("/products", s.handle(s.guard(admin, s.createProduct)))
		r.Get("/products", s.handle(s.guard(anyone, s.listProducts)))
		r.Get("/products/{id}", s.handle(s.guard(anyone, s.getProduct)))
		r.Post("/products/{id}/likes", s.handle(s.guard(aUser, s.like)))
		r.Delete("/products/{id}/likes", s.handle(s.guard(aUser, s.unlike)))
		r.Post("/orders", s.handle(s.guard(aUser, s.createOrder)))
		r.Get("/orders/{id}", s.handle(s.guard(aUser, s.getOrder)))
		r.Post("/orders/{id}/payments", s.handle(s.guard(aUser, s.pay)))
	})
}

// routeMethods are the methods a route of this API may have, in the order
// Allow lists them.
var routeMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// allowed is the Allow header of path on the router: the methods a request
// to it would be routed with.
func allowed(router chi.Routes, path string) string {
	var ms []string
	for _, m := range routeMethods {
		if router.Match(chi.NewRouteContext(), m, path) {
			ms = append(ms, m)
		}
	}
	return strings.Join(ms, ", ")
}

// yamlDoc serves a YAML document.
func yamlDoc(doc []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		_, _ = w.Write(doc)
	}
}

// handle adapts a handler that returns an error.
func (s *server) handle(h func(http.ResponseWriter, *http.Request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			writeError(w, r, s.log, err)
		}
	}
}

// deadline gives every request a deadline; the store turns a deadline
// that passes into store.ErrUnavailable, answered 503.
func deadline(d time.Duration) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx, cancel := context.WithTimeout(r.Context(), d)
			defer cancel()
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	}
}

// pathID returns the positive integer path parameter id, written in
// canonical decimal: no sign, no leading zeros.
func pathID(r *http.Request) (int64, error) {
	raw := chi.URLParam(r, "id")
	id, ok := parseCanonical(raw)
	if !ok || id <= 0 {
		return 0, &ValidationError{Fields: []FieldError{{Pointer: "id", Detail: "must be a positive integer without sign or leading zeros, got " + quoteShort(raw)}}}
	}
	return id, nil
}

// parseCanonical parses a non-negative decimal integer written as
// strconv.FormatInt writes it, so "+1", "01", " 1" and "1_000" are refused
// (ParseInt alone accepts a sign).
func parseCanonical(s string) (int64, bool) {
	if s == "" || len(s) > 1 && s[0] == '0' {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// invalidate drops cached product details after a committed change.
func (s *server) invalidate(ctx context.Context, ids ...int64) {
	if s.cache == nil || len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cacheTimeout)
	defer cancel()
	if err := s.cache.Invalidate(ctx, ids...); err != nil {
		s.log.WarnContext(ctx, "product cache invalidation failed", "products", ids, logkey.Err, err)
	}
}
