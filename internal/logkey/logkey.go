// Package logkey holds the attribute keys that log records across the
// repository share, so that one query over the logs finds a thing whichever
// package logged it. It imports nothing, so any package may use it; the
// process bootstrap (internal/service) is not one that infrastructure
// packages may import for a key.
package logkey

// Err is the attribute key of an error in every log record. pcon, a module
// of its own, logs errors under the same key through its own constant (its
// repository test TestErrKeyIsTheServices checks that they agree).
const Err = "error"
