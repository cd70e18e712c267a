package config_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/loopers/commerce-pipeline/internal/config"
	"github.com/loopers/commerce-pipeline/internal/testenv"
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
		{Name: "D", Kind: "URL", Required: true, Allowed: []string{"postgres", "postgresql"}}, {Name: "D_FILE", Kind: "File"},
		{Name: "E", Kind: "List", Default: "x", Allowed: []string{"x", "y"}},
		{Name: "F", Kind: "String", Default: "hostname()"}, {Name: "G", Kind: "PositiveInt", Default: "3"}, {Name: "H", Kind: "String", Default: "h"}}
	if diff := cmp.Diff(want, l.Vars()); diff != "" {
		t.Errorf("Vars() mismatch (-want +got):\n%s", diff)
	}
}

// TestURLFromFile: a URL, which carries a password, may come from the file
// NAME_FILE names (a mounted Secret), one of the two and not both; errors
// name the variable and never quote the password.
func TestURLFromFile(t *testing.T) {
	t.Parallel()
	write := func(name, content string) string { return testenv.SecretFile(t, name, content) }
	empty := write("empty", "\n")
	good := write("good", "postgres://app:s3cret@db:5432/app?sslmode=verify-full\n")
	for _, tc := range []struct {
		name     string
		env      map[string]string
		optional bool
		want     string
		wantErr  string
	}{
		{name: "from the file", env: map[string]string{"DB_FILE": good}, want: "postgres://app:s3cret@db:5432/app?sslmode=verify-full"},
		{name: "from the variable", env: map[string]string{"DB": "postgres://db/app"}, want: "postgres://db/app"},
		{name: "both", env: map[string]string{"DB": "postgres://db/app", "DB_FILE": good}, wantErr: "DB / DB_FILE: set one of them, not both"},
		{name: "neither", env: map[string]string{}, wantErr: "DB: is required (or DB_FILE, a file holding it)"},
		{name: "neither, optional", env: map[string]string{}, optional: true, want: ""},
		{name: "no such file", env: map[string]string{"DB_FILE": filepath.Join(t.TempDir(), "missing")}, wantErr: "DB_FILE: open"},
		{name: "an empty file", env: map[string]string{"DB_FILE": empty}, wantErr: "DB_FILE: " + empty + " is empty"},
		{name: "a wrong scheme in the file", env: map[string]string{"DB_FILE": write("mysql", "mysql://u:pw@h/db")}, wantErr: `DB_FILE: scheme must be one of postgres, got "mysql"`},
		{name: "not a URL, password hidden", env: map[string]string{"DB_FILE": write("bad", "postgres://u:hunter2@/")}, wantErr: "DB_FILE: must be a URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := config.New(config.FromMap(tc.env))
			var got string
			if tc.optional {
				got = l.OptionalURL("DB", "postgres")
			} else {
				got = l.URL("DB", "postgres")
			}
			err := l.Err()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "s3cret") {
					t.Errorf("the error shows a password: %v", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestErrorsNameTheirVariable: every problem recorded is a *VarError naming
// its variable, and Failed goes by that name, not by the message's text.
func TestErrorsNameTheirVariable(t *testing.T) {
	t.Parallel()
	l := config.New(config.FromMap(map[string]string{"N": "x", "D": "soon"}))
	l.PositiveInt("N", 1)
	l.Duration("D", time.Second)
	l.Fail("C", "N: disagrees with %s", "D") // a message that starts like another variable's
	joined, ok := l.Err().(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("Err() = %v, want the joined problems", l.Err())
	}
	var names []string
	for _, err := range joined.Unwrap() {
		var ve *config.VarError
		if !errors.As(err, &ve) {
			t.Fatalf("%v is not a *config.VarError", err)
		}
		if !strings.HasPrefix(err.Error(), ve.Name+": ") {
			t.Errorf("%q does not start with its variable's name", err.Error())
		}
		names = append(names, ve.Name)
	}
	if diff := cmp.Diff([]string{"N", "D", "C"}, names); diff != "" {
		t.Errorf("variables (-want +got):\n%s", diff)
	}
	failed := map[string]bool{}
	for _, name := range []string{"N", "D", "C", "X", "C: N"} {
		failed[name] = l.Failed(name)
	}
	if diff := cmp.Diff(map[string]bool{"N": true, "D": true, "C": true, "X": false, "C: N": false}, failed); diff != "" {
		t.Errorf("Failed (-want +got):\n%s", diff)
	}
}
