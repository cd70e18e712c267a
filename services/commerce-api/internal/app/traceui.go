package app

import (
	"net/url"
	"strings"

	"github.com/loopers/commerce-pipeline/internal/config"
	"github.com/loopers/commerce-pipeline/internal/telemetry"
)

// TraceIDPlaceholder marks where COMMERCE_API_TRACE_UI_URL takes a trace
// id (32 hex digits).
const TraceIDPlaceholder = "{traceId}"

// traceUIVar names the trace UI's URL template. It is commerce-api's own:
// the live page is the only reader.
const traceUIVar = "COMMERCE_API_TRACE_UI_URL"

// loadTraceUIURL reads the trace UI's URL template: an http or https URL
// with TraceIDPlaceholder where the trace id goes, such as Jaeger's
// http://localhost:16686/trace/{traceId}; "" when unset.
func loadTraceUIURL(l *config.Loader) string {
	v := l.String(traceUIVar, "")
	if v == "" {
		return ""
	}
	u, err := url.Parse(strings.ReplaceAll(v, TraceIDPlaceholder, "0"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || !strings.Contains(v, TraceIDPlaceholder) {
		l.Fail(traceUIVar, "want an http or https URL with %s where the trace id goes, such as http://localhost:16686/trace/%s", TraceIDPlaceholder, TraceIDPlaceholder)
		return ""
	}
	return v
}

// traceUI is the template the live page links an action's trace with:
// cfg's, while tracing is on (no trace to open otherwise).
func traceUI(cfg Config) string {
	if !telemetry.Enabled() {
		return ""
	}
	return cfg.TraceUIURL
}
