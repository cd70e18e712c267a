package config_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/loopers/commerce-pipeline/internal/config"
)

// TestSecret: a Secret is read as it is but for one trailing newline, and
// shows [redacted] however it is printed, marshalled or logged.
func TestSecret(t *testing.T) {
	t.Parallel()
	l := config.New(config.FromMap(map[string]string{"PW": " pass word\r\n", "UNSET": ""}))
	pw := l.Secret("PW")
	if pw.Reveal() != " pass word" {
		t.Errorf("Reveal() = %q, want the value without its newline", pw.Reveal())
	}
	if got := l.Secret("UNSET"); got != "" {
		t.Errorf("an empty variable reads %q", got.Reveal())
	}
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("x", "pw", pw)
	j, err := json.Marshal(struct{ PW config.Secret }{pw})
	if err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{fmt.Sprint(pw), fmt.Sprintf("%s %v %+v %#v %q %x %X %d", pw, pw, pw, pw, pw, pw, pw, pw),
		fmt.Sprintf("%+v", struct{ PW config.Secret }{pw}), fmt.Sprintf("%#v", struct{ PW config.Secret }{pw}), string(j), logged.String()} {
		if strings.Contains(out, "pass") || strings.Contains(out, fmt.Sprintf("%x", "pass")) || !strings.Contains(out, "[redacted]") {
			t.Errorf("%q: want [redacted] and no password", out)
		}
	}
	if fmt.Sprint(config.Secret("")) != "" {
		t.Error("an empty secret should print as nothing, telling it apart from a set one")
	}
}

// TestBoolAndOneOf: the values each accepts, and an error naming the
// variable for any other.
func TestBoolAndOneOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		env     map[string]string
		want    [2]any
		wantErr []string
	}{
		{name: "defaults", env: map[string]string{}, want: [2]any{true, "b"}},
		{name: "set", env: map[string]string{"B": "FALSE", "O": "c"}, want: [2]any{false, "c"}},
		{name: "numeric bool", env: map[string]string{"B": "0"}, want: [2]any{false, "b"}},
		{name: "wrong", env: map[string]string{"B": "maybe", "O": "d"},
			wantErr: []string{`B: must be true or false, got "maybe"`, `O: must be one of a, b, c, got "d"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := config.New(config.FromMap(tc.env))
			got := [2]any{l.Bool("B", true), l.OneOf("O", "b", "a", "b", "c")}
			err := l.Err()
			if tc.wantErr != nil {
				for _, w := range tc.wantErr {
					if err == nil || !strings.Contains(err.Error(), w) {
						t.Errorf("error %v, want %q", err, w)
					}
				}
				if !l.Failed("B") || !l.Failed("O") || l.Failed("X") {
					t.Errorf("Failed: B %v, O %v, X %v", l.Failed("B"), l.Failed("O"), l.Failed("X"))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("values (-want +got):\n%s", diff)
			}
		})
	}
}

// TestVarsOfNewKinds: Vars reports the new kinds, a Secret without a
// default or a value.
func TestVarsOfNewKinds(t *testing.T) {
	t.Parallel()
	l := config.New(config.FromMap(map[string]string{"S": "hunter2"}))
	l.Bool("B", false)
	l.OneOf("O", "", "x", "y")
	l.Secret("S")
	want := []config.Var{{Name: "B", Kind: "Bool", Default: "false"}, {Name: "O", Kind: "OneOf", Allowed: []string{"x", "y"}}, {Name: "S", Kind: "Secret"}}
	if diff := cmp.Diff(want, l.Vars()); diff != "" {
		t.Errorf("Vars() (-want +got):\n%s", diff)
	}
}
