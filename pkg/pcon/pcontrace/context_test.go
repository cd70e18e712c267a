package pcontrace_test

import (
	"testing"

	"github.com/loopers/commerce-pipeline/pkg/pcon"
	"github.com/loopers/commerce-pipeline/pkg/pcon/pcontrace"
)

func TestRecordContext(t *testing.T) {
	t.Parallel()
	const (
		tp      = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		ceTP    = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
		traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	)
	h := func(kv ...string) []pcon.Header {
		var out []pcon.Header
		for i := 0; i < len(kv); i += 2 {
			out = append(out, pcon.Header{Key: []byte(kv[i]), Value: []byte(kv[i+1])})
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		headers []pcon.Header
		trace   string // "" for an invalid context
		sampled bool
	}{
		{"none", nil, "", false},
		{"traceparent", h("traceparent", tp), traceID, true},
		{"the plain header wins", h("ce_traceparent", ceTP, "traceparent", tp), traceID, true},
		{"ce_ when the plain one is missing, unsampled", h("ce_traceparent", ceTP), "0af7651916cd43dd8448eb211c80319c", false},
		{"malformed", h("traceparent", "00-zz"), "", false},
	} {
		sc := pcontrace.RecordContext(&pcon.Record{Headers: tc.headers})
		got := ""
		if sc.IsValid() {
			got = sc.TraceID().String()
		}
		if got != tc.trace || sc.IsSampled() != tc.sampled {
			t.Errorf("%s: trace %q sampled %t, want %q %t", tc.name, got, sc.IsSampled(), tc.trace, tc.sampled)
		}
	}
}
