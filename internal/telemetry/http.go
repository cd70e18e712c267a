package telemetry

import (
	"context"
	"net/http"

	"github.com/go-chi/chi/v5"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// TraceResponseHeader is the response header naming a traced request's
// server span.
const TraceResponseHeader = "traceresponse"

// HTTPHandler wraps a chi router in a server span per request, named by
// its method and route template ("POST /api/v1/products/{id}/likes"), never
// the raw path, which would make every product a span name of its own. The
// probes are not traced. otelhttp writes the HTTP attributes and honours
// OTEL_SEMCONV_STABILITY_OPT_IN=http/dup itself.
//
// A sampled request's response names its server span in the
// traceresponse header (W3C Trace Context Level 2, version 00:
// 00-<trace id>-<span id>-<flags>), so that a client can open the trace it
// caused: the live page links each action to it.
func HTTPHandler(router http.Handler) http.Handler {
	named := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if sc := trace.SpanContextFromContext(r.Context()); sc.IsSampled() {
			w.Header().Set(TraceResponseHeader, "00-"+sc.TraceID().String()+"-"+sc.SpanID().String()+"-"+sc.TraceFlags().String())
		}
		// chi uses a route context found in the request instead of its
		// pooled one, so the pattern it matched is still here afterwards.
		rctx := chi.NewRouteContext()
		r = r.WithContext(context.WithValue(r.Context(), chi.RouteCtxKey, rctx))
		router.ServeHTTP(w, r)
		route := rctx.RoutePattern()
		if route == "" {
			return // unmatched: otelhttp's name (the method) stays
		}
		span := trace.SpanFromContext(r.Context())
		span.SetName(r.Method + " " + route)
		span.SetAttributes(semconv.HTTPRoute(route))
	})
	return otelhttp.NewHandler(named, "http",
		otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method }),
		otelhttp.WithFilter(func(r *http.Request) bool { return r.URL.Path != "/healthz" && r.URL.Path != "/readyz" }),
	)
}
