package config

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"
)

// Secret is a value that must never be printed: a password, a private key.
// Every fmt verb, JSON, text marshalling and slog show [redacted] (or
// nothing when it is empty); Reveal returns the value itself, for the one
// place that needs it.
type Secret string

const redacted = "[redacted]"

// Reveal returns the secret's value.
func (s Secret) Reveal() string { return string(s) }

func (s Secret) shown() string {
	if s == "" {
		return ""
	}
	return redacted
}

// String implements fmt.Stringer.
func (s Secret) String() string { return s.shown() }

// GoString implements fmt.GoStringer.
func (s Secret) GoString() string { return strconv.Quote(s.shown()) }

// Format implements fmt.Formatter: whatever the verb, the value stays
// hidden (%x or %q of a plain string type would print it).
func (s Secret) Format(f fmt.State, verb rune) {
	if verb == 'q' || verb == 'v' && f.Flag('#') {
		_, _ = f.Write([]byte(strconv.Quote(s.shown())))
		return
	}
	_, _ = f.Write([]byte(s.shown()))
}

// MarshalText implements encoding.TextMarshaler (and so JSON).
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.shown()), nil }

// LogValue implements slog.LogValuer.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.shown()) }

// Secret returns the variable as a Secret, "" when it is unset or empty. Its
// value is taken as it is, but for one trailing newline (as a file or a
// Kubernetes secret often ends), so that spaces a password holds survive.
// Vars reports it with kind Secret and never a value; errors about it never
// quote it.
func (l *Loader) Secret(name string) Secret {
	l.vars = append(l.vars, Var{Name: name, Kind: "Secret"})
	v, _ := l.lookup(name)
	return Secret(TrimNewline(v))
}

// TrimNewline removes one trailing line ending (\n or \r\n) from v.
func TrimNewline(v string) string {
	if v, ok := strings.CutSuffix(v, "\n"); ok {
		return strings.TrimSuffix(v, "\r")
	}
	return v
}
