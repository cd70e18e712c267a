package app

import (
	"strings"
	"testing"

	"github.com/loopers/commerce-pipeline/internal/config"
)

func TestTraceUIURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, value, want string
		wantErr           bool
	}{
		{name: "unset"},
		{name: "Jaeger", value: "http://localhost:16686/trace/{traceId}", want: "http://localhost:16686/trace/{traceId}"},
		{name: "in the query", value: "https://grafana.example/explore?traceId={traceId}", want: "https://grafana.example/explore?traceId={traceId}"},
		{name: "no placeholder", value: "http://localhost:16686/trace/", wantErr: true},
		{name: "not http", value: "javascript:alert('{traceId}')", wantErr: true},
		{name: "no host", value: "/trace/{traceId}", wantErr: true},
	} {
		got, err := config.Parse(config.FromMap(map[string]string{traceUIVar: tc.value}), loadTraceUIURL)
		if tc.wantErr {
			if err == nil || !strings.Contains(err.Error(), traceUIVar) {
				t.Errorf("%s: error %v, want one naming %s", tc.name, err, traceUIVar)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
}
