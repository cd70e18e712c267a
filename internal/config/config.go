// Package config reads a service's settings from the environment. A Loader
// collects every problem instead of stopping at the first, and each error
// names the variable, so a misconfigured service says everything wrong with
// it in one start-up error.
package config

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// Var describes one variable a Loader read: what a document or a manifest
// needs to know of it.
type Var struct {
	Name     string
	Kind     string // the Loader method that read it: String, Required, URL, Duration, PositiveInt, List, Bool, OneOf, Secret
	Default  string // as the variable would spell it; "" when there is none
	Required bool
	// Allowed lists the URL schemes (URL), the items (List) or the values
	// (OneOf) accepted; empty when anything is.
	Allowed []string `json:",omitempty"`
	// Deprecated lists the variable's old names (Renamed), still read for
	// one release with a warning; empty when it has none.
	Deprecated []string `json:",omitempty"`
}

// Rename is a variable's deprecated name and the name that replaced it.
type Rename struct{ Old, New string }

// Deprecation is a deprecated name a configuration was read through: the
// process logs each at start, naming the variable to set instead.
type Deprecation struct {
	Old, New string
	// Both is true when New was set too (to the same value): Old does
	// nothing then and should be removed.
	Both bool
}

// Message says what to do about d, naming both variables.
func (d Deprecation) Message() string {
	if d.Both {
		return fmt.Sprintf("%s is deprecated and %s is set to the same value: remove %s", d.Old, d.New, d.Old)
	}
	return fmt.Sprintf("%s is deprecated and will stop working in the next release: set %s instead", d.Old, d.New)
}

// Loader reads variables through a lookup function (os.LookupEnv in services,
// a map in tests).
type Loader struct {
	lookup  func(string) (string, bool)
	errs    []error
	vars    []Var
	renamed map[string][]string // new name → its old names, in declaration order
	used    []Deprecation
}

// New returns a Loader reading through lookup.
func New(lookup func(string) (string, bool)) *Loader {
	return &Loader{lookup: lookup}
}

// FromMap returns a lookup function over m, for tests.
func FromMap(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// Err returns every problem found so far, joined, or nil.
func (l *Loader) Err() error { return errors.Join(l.errs...) }

// Vars lists the variables read, in order.
func (l *Loader) Vars() []Var { return append([]Var(nil), l.vars...) }

// Renamed declares deprecated names: from here on, reading a Rename's New
// name falls back to its Old one when New is unset or empty, and records a
// Deprecation (Deprecations); New and Old both set to different values is
// an error naming both. Vars lists the old names under the new one. A
// service declares its renames before it reads anything, so that shared
// loaders (the cluster's, Kafka's) see them too. Secret reads its variable
// as it is and knows no old names: no credential has been renamed.
func (l *Loader) Renamed(renames ...Rename) {
	if l.renamed == nil {
		l.renamed = map[string][]string{}
	}
	for _, r := range renames {
		l.renamed[r.New] = append(l.renamed[r.New], r.Old)
	}
}

// Deprecations returns the deprecated names read so far, in order.
func (l *Loader) Deprecations() []Deprecation { return append([]Deprecation(nil), l.used...) }

// find returns the variable name, trimmed, and whether it is set (not
// empty), falling back to its deprecated names (Renamed).
func (l *Loader) find(name string) (string, bool) {
	v, _ := l.lookup(name)
	v = strings.TrimSpace(v)
	from := "" // the name v came from, when not name itself
	for _, old := range l.renamed[name] {
		ov, _ := l.lookup(old)
		ov = strings.TrimSpace(ov)
		switch {
		case ov == "":
		case v == "":
			v, from = ov, old
			l.used = append(l.used, Deprecation{Old: old, New: name})
		case ov == v:
			l.used = append(l.used, Deprecation{Old: old, New: name, Both: from == ""})
		case from == "":
			// Neither value is quoted: either may be a credential.
			l.Fail(name, "is set and so is its deprecated name %s, to a different value: keep %s only", old, name)
		default:
			l.Fail(name, "is unset but its deprecated names %s and %s are set, to different values: set %s only", from, old, name)
		}
	}
	return v, v != ""
}

// VarError is a problem with one variable; every error the Loader records
// is one. Find it in Err's result with errors.As.
type VarError struct {
	Name string // the variable
	Err  error  // what is wrong with its value
}

func (e *VarError) Error() string { return e.Name + ": " + e.Err.Error() }

// Unwrap returns what is wrong with the value.
func (e *VarError) Unwrap() error { return e.Err }

// Failed reports whether a problem with the variable name was recorded, so
// that a caller's own checks need not pile a second error on a value the
// Loader refused already.
func (l *Loader) Failed(name string) bool {
	for _, err := range l.errs {
		if ve := (*VarError)(nil); errors.As(err, &ve) && ve.Name == name {
			return true
		}
	}
	return false
}

// Fail records a problem with a variable found by the caller's own checks.
func (l *Loader) Fail(name, format string, args ...any) {
	l.errs = append(l.errs, &VarError{Name: name, Err: fmt.Errorf(format, args...)})
}

func (l *Loader) get(kind, name, def string, required bool, allowed ...string) (string, bool) {
	l.vars = append(l.vars, Var{Name: name, Kind: kind, Default: def, Required: required, Allowed: allowed,
		Deprecated: append([]string(nil), l.renamed[name]...)})
	v, ok := l.find(name)
	if !ok {
		if required {
			l.Fail(name, "is required")
		}
		return def, false
	}
	return v, true
}

// String returns the variable, or def when it is unset or empty.
func (l *Loader) String(name, def string) string {
	v, _ := l.get("String", name, def, false)
	return v
}

// Computed returns the variable, or def() when it is unset or empty. The
// default is only known at run time, so Vars reports it as describe.
func (l *Loader) Computed(name, describe string, def func() string) string {
	if v, ok := l.get("String", name, describe, false); ok {
		return v
	}
	return def()
}

// Required returns the variable and records an error when it is unset.
func (l *Loader) Required(name string) string {
	v, _ := l.get("Required", name, "", true)
	return v
}

// URL returns a required variable that must parse as a URL with one of the
// given schemes. A URL carries credentials, so it may come from a file
// instead: NAME_FILE names a file holding it (a Kubernetes Secret mounted
// as a file; one trailing newline is ignored), and exactly one of the two
// must be set. Errors never quote a password the URL holds.
func (l *Loader) URL(name string, schemes ...string) string {
	return l.url(name, true, schemes)
}

// OptionalURL is URL for a variable that may be left unset (and its file
// too): "" then.
func (l *Loader) OptionalURL(name string, schemes ...string) string {
	return l.url(name, false, schemes)
}

// FileSuffix ends the name of the variable that names a file holding
// another variable's value.
const FileSuffix = "_FILE"

func (l *Loader) url(name string, required bool, schemes []string) string {
	v, ok := l.get("URL", name, "", false, schemes...)
	l.vars[len(l.vars)-1].Required = required
	file := name + FileSuffix
	path, fromFile := l.get("File", file, "", false)
	switch {
	case ok && fromFile:
		l.Fail(name+" / "+file, "set one of them, not both")
		return ""
	case fromFile:
		b, err := os.ReadFile(path)
		if err != nil {
			l.Fail(file, "%v", err)
			return ""
		}
		if v = strings.TrimSpace(TrimNewline(string(b))); v == "" {
			l.Fail(file, "%s is empty", path)
			return ""
		}
		name = file // errors about the value name where it came from
	case !ok:
		if required {
			l.Fail(name, "is required (or %s, a file holding it)", file)
		}
		return ""
	}
	u, err := url.Parse(v)
	if err != nil || u.Host == "" && u.Opaque == "" {
		l.Fail(name, "must be a URL, got %q", redact(v))
		return v
	}
	for _, s := range schemes {
		if u.Scheme == s {
			return v
		}
	}
	l.Fail(name, "scheme must be one of %s, got %q", strings.Join(schemes, ", "), u.Scheme)
	return v
}

// Duration returns a positive duration such as "5s" or "1m30s".
func (l *Loader) Duration(name string, def time.Duration) time.Duration {
	v, ok := l.get("Duration", name, def.String(), false)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		l.Fail(name, "must be a duration such as 5s or 1m, got %q", v)
		return def
	}
	if d <= 0 {
		l.Fail(name, "must be positive, got %s", v)
		return def
	}
	return d
}

// PositiveInt returns an integer ≥ 1.
func (l *Loader) PositiveInt(name string, def int) int {
	v, ok := l.get("PositiveInt", name, strconv.Itoa(def), false)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		l.Fail(name, "must be an integer, got %q", v)
		return def
	}
	if n <= 0 {
		l.Fail(name, "must be positive, got %d", n)
		return def
	}
	return n
}

// List returns a comma-separated list without empty items, or def; with no
// def the variable is required. When allowed is non-empty every item must be
// one of it.
func (l *Loader) List(name string, def []string, allowed ...string) []string {
	v, ok := l.get("List", name, strings.Join(def, ","), len(def) == 0, allowed...)
	if !ok {
		return def
	}
	var out []string
	for item := range strings.SplitSeq(v, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if len(allowed) > 0 && !contains(allowed, item) {
			l.Fail(name, "unknown item %q; allowed: %s", item, strings.Join(allowed, ", "))
			continue
		}
		out = append(out, item)
	}
	if len(out) == 0 {
		l.Fail(name, "must list at least one item")
	}
	return out
}

// Bool returns true or false as strconv.ParseBool reads them (true, false,
// 1, 0, t, f in any case), or def when the variable is unset or empty.
func (l *Loader) Bool(name string, def bool) bool {
	v, ok := l.get("Bool", name, strconv.FormatBool(def), false)
	if !ok {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		l.Fail(name, "must be true or false, got %q", v)
		return def
	}
	return b
}

// OneOf returns the variable, which must be one of allowed, or def when it
// is unset or empty.
func (l *Loader) OneOf(name, def string, allowed ...string) string {
	v, ok := l.get("OneOf", name, def, false, allowed...)
	if !ok {
		return def
	}
	if !contains(allowed, v) {
		l.Fail(name, "must be one of %s, got %q", strings.Join(allowed, ", "), v)
		return def
	}
	return v
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// redact hides a password in a URL so that an error may be logged.
func redact(v string) string {
	if u, err := url.Parse(v); err == nil && u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
			return u.String()
		}
	}
	return v
}

// Parse reads a configuration with load through lookup and returns it, or
// the zero value and every problem found.
func Parse[C any](lookup func(string) (string, bool), load func(*Loader) C) (C, error) {
	l := New(lookup)
	c := load(l)
	if err := l.Err(); err != nil {
		var zero C
		return zero, err
	}
	return c, nil
}
