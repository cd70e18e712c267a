package core

// ErrKey is the attribute key of an error in every log record of pcon (its
// package and internals): "error", the key the pipeline's services log
// errors under (internal/logkey.Err), so one query finds them all.
const ErrKey = "error"
