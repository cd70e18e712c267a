package service_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/loopers/commerce-pipeline/internal/config"
	"github.com/loopers/commerce-pipeline/internal/logkey"
	"github.com/loopers/commerce-pipeline/internal/service"
)

type cfg struct{ URL string }

func load(l *config.Loader) cfg { return cfg{URL: l.URL("DATABASE_URL", "postgres")} }

func TestRun(t *testing.T) {
	t.Parallel()
	good := map[string]string{"DATABASE_URL": "postgres://h/db"}
	tests := []struct {
		name     string
		env      map[string]string
		runErr   error
		wantCode int
		wantLog  map[string]any // the attributes of the one record logged; nil for none
	}{
		{"success", good, nil, 0, nil},
		{"run fails", good, errors.New("boom"), 1, map[string]any{"level": "ERROR", "msg": "svc failed", "service": "svc", logkey.Err: "boom"}},
		{"bad configuration", map[string]string{}, nil, 1, map[string]any{"level": "ERROR", "msg": "svc failed", "service": "svc",
			logkey.Err: "svc configuration: DATABASE_URL: is required (or DATABASE_URL_FILE, a file holding it)"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr strings.Builder
			ran := false
			code := service.Run(context.Background(), "svc", nil, config.FromMap(tc.env), &stdout, &stderr, load,
				func(_ context.Context, c cfg, _ *slog.Logger) error {
					ran = true
					if c.URL != "postgres://h/db" {
						t.Errorf("run got %+v", c)
					}
					return tc.runErr
				})
			if code != tc.wantCode {
				t.Errorf("exit code %d, want %d", code, tc.wantCode)
			}
			if want := tc.env["DATABASE_URL"] != ""; ran != want {
				t.Errorf("run called: %v, want %v", ran, want)
			}
			var got map[string]any
			if stderr.Len() > 0 {
				if err := json.Unmarshal([]byte(stderr.String()), &got); err != nil {
					t.Fatalf("stderr is not one JSON record: %q", stderr.String())
				}
				delete(got, "time")
			}
			if diff := cmp.Diff(tc.wantLog, got); diff != "" {
				t.Errorf("log record (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRunWarnsOfDeprecatedNames: a service configured through an old name
// starts, and logs one warning naming the name to set instead.
func TestRunWarnsOfDeprecatedNames(t *testing.T) {
	t.Parallel()
	renamed := func(l *config.Loader) cfg {
		l.Renamed(config.Rename{Old: "OLD_DATABASE_URL", New: "DATABASE_URL"})
		return load(l)
	}
	var stdout, stderr strings.Builder
	var got cfg
	code := service.Run(context.Background(), "svc", nil, config.FromMap(map[string]string{"OLD_DATABASE_URL": "postgres://h/db"}), &stdout, &stderr, renamed,
		func(_ context.Context, c cfg, _ *slog.Logger) error { got = c; return nil })
	if code != 0 || got.URL != "postgres://h/db" {
		t.Fatalf("exit %d, config %+v; log:\n%s", code, got, stderr.String())
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(stderr.String()), &rec); err != nil {
		t.Fatalf("stderr is not one JSON record: %q", stderr.String())
	}
	delete(rec, "time")
	want := map[string]any{"level": "WARN", "service": "svc", "variable": "OLD_DATABASE_URL", "replacement": "DATABASE_URL",
		"msg": "OLD_DATABASE_URL is deprecated and will stop working in the next release: set DATABASE_URL instead"}
	if diff := cmp.Diff(want, rec); diff != "" {
		t.Errorf("log record (-want +got):\n%s", diff)
	}
}

func TestRunPrintsConfigVars(t *testing.T) {
	t.Parallel()
	var stdout, stderr strings.Builder
	code := service.Run(context.Background(), "svc", []string{service.ConfigVarsFlag}, config.FromMap(nil), &stdout, &stderr, load,
		func(context.Context, cfg, *slog.Logger) error { t.Error("run called"); return nil })
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var got []config.Var
	if err := json.Unmarshal([]byte(stdout.String()), &got); err != nil {
		t.Fatal(err)
	}
	want := []config.Var{{Name: "DATABASE_URL", Kind: "URL", Required: true, Allowed: []string{"postgres"}}, {Name: "DATABASE_URL_FILE", Kind: "File"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("vars (-want +got):\n%s", diff)
	}
}
