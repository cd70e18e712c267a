package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/loopers/commerce-pipeline/internal/config"
)

// TestRenamed: a renamed variable is read under its new name, falls back to
// its old one with a deprecation naming the new one, and refuses the two
// set to different values, naming both without quoting either.
func TestRenamed(t *testing.T) {
	t.Parallel()
	type got struct {
		D     time.Duration
		ID    string
		Deps  []config.Deprecation
		Error string
	}
	tests := []struct {
		name string
		env  map[string]string
		want got
	}{
		{name: "neither: the default", env: nil, want: got{D: time.Second, ID: "computed"}},
		{name: "new name only", env: map[string]string{"SVC_WAIT": "2s", "NODE": "n1"}, want: got{D: 2 * time.Second, ID: "n1"}},
		{
			name: "old name only: its value and a deprecation",
			env:  map[string]string{"OLD_WAIT": "3s", "OLD_NODE": "n2"},
			want: got{D: 3 * time.Second, ID: "n2", Deps: []config.Deprecation{{Old: "OLD_WAIT", New: "SVC_WAIT"}, {Old: "OLD_NODE", New: "NODE"}}},
		},
		{
			name: "both, equal: the value, and the old name to remove",
			env:  map[string]string{"SVC_WAIT": "4s", "OLD_WAIT": " 4s "},
			want: got{D: 4 * time.Second, ID: "computed", Deps: []config.Deprecation{{Old: "OLD_WAIT", New: "SVC_WAIT", Both: true}}},
		},
		{
			name: "both, different: an error naming both",
			env:  map[string]string{"NODE": "secret-a", "OLD_NODE": "secret-b"},
			want: got{D: time.Second, ID: "secret-a",
				Error: "NODE: is set and so is its deprecated name OLD_NODE, to a different value: keep NODE only"},
		},
		{
			name: "a second old name of the same variable",
			env:  map[string]string{"OTHER_NODE": "n3"},
			want: got{D: time.Second, ID: "n3", Deps: []config.Deprecation{{Old: "OTHER_NODE", New: "NODE"}}},
		},
		{
			name: "two old names, different: an error naming the three",
			env:  map[string]string{"OLD_NODE": "n4", "OTHER_NODE": "n5"},
			want: got{D: time.Second, ID: "n4", Deps: []config.Deprecation{{Old: "OLD_NODE", New: "NODE"}},
				Error: "NODE: is unset but its deprecated names OLD_NODE and OTHER_NODE are set, to different values: set NODE only"},
		},
		{
			name: "two old names, equal: the value, each deprecated",
			env:  map[string]string{"OLD_NODE": "n6", "OTHER_NODE": "n6"},
			want: got{D: time.Second, ID: "n6", Deps: []config.Deprecation{{Old: "OLD_NODE", New: "NODE"}, {Old: "OTHER_NODE", New: "NODE"}}},
		},
		{
			name: "an old name's bad value is reported under the new name",
			env:  map[string]string{"OLD_WAIT": "soon"},
			want: got{D: time.Second, ID: "computed", Deps: []config.Deprecation{{Old: "OLD_WAIT", New: "SVC_WAIT"}},
				Error: `SVC_WAIT: must be a duration such as 5s or 1m, got "soon"`},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := config.New(config.FromMap(tc.env))
			l.Renamed(config.Rename{Old: "OLD_WAIT", New: "SVC_WAIT"}, config.Rename{Old: "OLD_NODE", New: "NODE"},
				config.Rename{Old: "OTHER_NODE", New: "NODE"})
			g := got{
				D:  l.Duration("SVC_WAIT", time.Second),
				ID: l.Computed("NODE", "node()", func() string { return "computed" }),
			}
			g.Deps = l.Deprecations()
			if err := l.Err(); err != nil {
				g.Error = err.Error()
			}
			if diff := cmp.Diff(tc.want, g); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if strings.Contains(g.Error, "secret-") {
				t.Errorf("the error quotes a value: %s", g.Error)
			}
		})
	}
}

// TestRenamedVars: Vars lists a variable under its new name with its old
// ones, so -config-vars and the document can name them.
func TestRenamedVars(t *testing.T) {
	t.Parallel()
	l := config.New(config.FromMap(nil))
	l.Renamed(config.Rename{Old: "OLD_A", New: "A"}, config.Rename{Old: "OLDER_A", New: "A"})
	l.Bool("A", true)
	l.String("B", "")
	want := []config.Var{{Name: "A", Kind: "Bool", Default: "true", Deprecated: []string{"OLD_A", "OLDER_A"}}, {Name: "B", Kind: "String"}}
	if diff := cmp.Diff(want, l.Vars()); diff != "" {
		t.Errorf("Vars() (-want +got):\n%s", diff)
	}
}

func TestDeprecationMessage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		d    config.Deprecation
		want string
	}{
		{config.Deprecation{Old: "O", New: "N"}, "O is deprecated and will stop working in the next release: set N instead"},
		{config.Deprecation{Old: "O", New: "N", Both: true}, "O is deprecated and N is set to the same value: remove O"},
	} {
		if got := tc.d.Message(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.d, got, tc.want)
		}
	}
}
