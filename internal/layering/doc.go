// Package layering holds no code: its test checks the import rules that keep
// the repository's layers apart, with the go command's own view of every
// package's imports (go list), so a violating import fails `go test` (and
// `go test -short`: the test needs nothing but Go).
package layering
