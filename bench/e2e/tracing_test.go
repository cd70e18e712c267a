package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
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
