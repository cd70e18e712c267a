package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

func TestParseSamplings(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in      string
		want    []sampling
		wantErr bool
	}{
		{in: "off,0.01,1", want: []sampling{{label: "off"}, {label: "1 % sampled", ratio: 0.01}, {label: "100 % sampled", ratio: 1}}},
		{in: "off", want: []sampling{{label: "off"}}},
		{in: "0.01,off", wantErr: true}, // the baseline must come first
		{in: "off,0", wantErr: true},
		{in: "off,1.5", wantErr: true},
		{in: "off,all", wantErr: true},
	} {
		got, err := parseSamplings(tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("parseSamplings(%q): error %v, want error %t", tc.in, err, tc.wantErr)
			continue
		}
		if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(sampling{})); diff != "" {
			t.Errorf("parseSamplings(%q) (-want +got):\n%s", tc.in, diff)
		}
	}
}

func TestSamplingEnv(t *testing.T) {
	t.Parallel()
	if env := (sampling{label: "off"}).env("http://127.0.0.1:1"); env != nil {
		t.Errorf("off: %v, want no variables (tracing not installed)", env)
	}
	want := map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1",
		"OTEL_TRACES_SAMPLER":         "parentbased_traceidratio",
		"OTEL_TRACES_SAMPLER_ARG":     "0.01",
	}
	if diff := cmp.Diff(want, sampling{ratio: 0.01}.env("http://127.0.0.1:1")); diff != "" {
		t.Errorf("1 %% (-want +got):\n%s", diff)
	}
}

func TestCountSpans(t *testing.T) {
	t.Parallel()
	spans := func(n int) []*tracepb.Span {
		out := make([]*tracepb.Span, n)
		for i := range out {
			out[i] = &tracepb.Span{Name: "s", TraceId: make([]byte, 16), SpanId: make([]byte, 8), Attributes: []*commonpb.KeyValue{{Key: "k"}}}
		}
		return out
	}
	req := &collectortrace.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{
		{Resource: &resourcepb.Resource{Attributes: []*commonpb.KeyValue{{Key: "service.name"}}},
			ScopeSpans: []*tracepb.ScopeSpans{{Scope: &commonpb.InstrumentationScope{Name: "a"}, Spans: spans(3)}, {Spans: spans(1)}}},
		{ScopeSpans: []*tracepb.ScopeSpans{{Spans: spans(2)}}, SchemaUrl: "x"},
	}}
	b, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := countSpans(b); n != 6 || err != nil {
		t.Errorf("countSpans: %d, %v; want 6", n, err)
	}
	if _, err := countSpans(b[:len(b)-3]); err == nil {
		t.Error("countSpans of a truncated request: no error")
	}
}
