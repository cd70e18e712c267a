// Package configtest checks a service's configuration loader the way its
// table tests do: a good environment gives the config wanted, a bad one an
// error that names every variable at fault.
package configtest

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/loopers/commerce-pipeline/internal/config"
)

// Check parses env with load. With no wantErr the result must equal want;
// otherwise parsing must fail with an error naming each of wantErr.
func Check[C any](t *testing.T, env map[string]string, load func(*config.Loader) C, want C, wantErr []string) {
	t.Helper()
	got, err := config.Parse(config.FromMap(env), load)
	if wantErr == nil {
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("config (-want +got):\n%s", diff)
		}
		return
	}
	if err == nil {
		t.Fatalf("no error; want one naming %v", wantErr)
	}
	for _, name := range wantErr {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error %q does not name %s", err, name)
		}
	}
}
