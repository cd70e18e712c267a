package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/loopers/commerce-pipeline/internal/config"
)

func TestLoader(t *testing.T) {
	t.Parallel()
	type got struct {
		URL   string
		D     time.Duration
		N     int
		Items []string
	}
	tests := []struct {
		name    string
		env     map[string]string
		want    got
		wantErr []string // substrings, each naming a variable
	}{
		{
			name: "defaults",
			env:  map[string]string{"DB": "postgres://h/db"},
			want: got{URL: "postgres://h/db", D: 5 * time.Second, N: 100, Items: []string{"a", "b"}},
		},
		{
			name: "set values",
			env:  map[string]string{"DB": "postgres://h/db", "D": "1m", "N": "7", "ITEMS": " b , ,a"},
			want: got{URL: "postgres://h/db", D: time.Minute, N: 7, Items: []string{"b", "a"}},
		},
		{
			name:    "everything wrong at once",
			env:     map[string]string{"D": "soon", "N": "-1", "ITEMS": "c"},
			wantErr: []string{"DB: is required", "D: must be a duration", "N: must be positive", `ITEMS: unknown item "c"`},
		},
		{
			name:    "zero duration and bad scheme",
			env:     map[string]string{"DB": "mysql://u:secret@h/db", "D": "0s", "N": "x"},
			wantErr: []string{"DB: scheme must be one of postgres", "D: must be positive", "N: must be an integer"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := config.New(config.FromMap(tc.env))
			g := got{
				URL:   l.URL("DB", "postgres", "postgresql"),
				D:     l.Duration("D", 5*time.Second),
				N:     l.PositiveInt("N", 100),
				Items: l.List("ITEMS", []string{"a", "b"}, "a", "b"),
			}
			err := l.Err()
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("Err() = %v", err)
				}
				if diff := cmp.Diff(tc.want, g); diff != "" {
					t.Errorf("values mismatch (-want +got):\n%s", diff)
				}
				return
			}
			if err == nil {
				t.Fatal("Err() = nil, want errors")
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("error leaks a password: %v", err)
			}
		})
	}
}

func TestVarsRecordsWhatWasRead(t *testing.T) {
	t.Parallel()
	l := config.New(config.FromMap(nil))
	l.Required("A")
	l.Duration("B", time.Second)
	l.List("C", nil)
	l.URL("D", "postgres", "postgresql")
	l.List("E", []string{"x"}, "x", "y")
	l.Computed("F", "hostname()", func() string { return "h" })
	l.PositiveInt("G", 3)
	l.String("H", "h")
	want := []config.Var{{Name: "A", Kind: "Required", Required: true}, {Name: "B", Kind: "Duration", Default: "1s"}, {Name: "C", Kind: "List", Required: true},
		{Name: "D", Kind: "URL", Required: true, Allowed: []string{"postgres", "postgresql"}}, {Name: "E", Kind: "List", Default: "x", Allowed: []string{"x", "y"}},
		{Name: "F", Kind: "String", Default: "hostname()"}, {Name: "G", Kind: "PositiveInt", Default: "3"}, {Name: "H", Kind: "String", Default: "h"}}
	if diff := cmp.Diff(want, l.Vars()); diff != "" {
		t.Errorf("Vars() mismatch (-want +got):\n%s", diff)
	}
}
