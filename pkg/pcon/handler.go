package pcon

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Record is one Kafka record handed to a handler. Each handler call gets
// Records of its own, never reused: a handler may keep a Record, or slices
// of it, after returning, and it keeps that record's data.
type Record struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte
	Headers   []Header
	Timestamp time.Time
	// Received is when the consumer took the record from the client's
	// fetch, on this process's clock. Against Timestamp (the producer's or
	// the broker's clock) it says how long the record took to arrive;
	// against the time a handler finishes, how long it waited and ran here.
	// It stays the same across the record's retries.
	Received time.Time
}

// Header is a record header.
type Header struct {
	Key   []byte
	Value []byte
}

// Handler is implemented by RecordHandler and BatchHandler only. The type of
// handler given to New selects the execution engine.
type Handler interface{ engineKind() string }

// RecordHandler processes one record. It selects the per-record engine:
// every record gets a call of its own, at most Config.MaxConcurrency at a
// time. Returning an error (or panicking) fails the record; see Config for
// retries and dead-lettering.
//
// While calls take long enough to wait on anything (on average 5 µs or
// more), every record gets a goroutine of its own at once. Faster calls
// cost less than handing a record to another goroutine, so then at most
// GOMAXPROCS goroutines take the ready records a few at a time and run
// them one after another. A record may then wait behind another record's
// call, for 1 ms at most: a call still running after that has the records
// queued behind it handed to other goroutines.
type RecordHandler func(ctx context.Context, r *Record) error

// BatchHandler processes a micro-batch. It selects the micro-batch engine,
// tuned by Config.Batch.
//
// A batch mixes keys and partitions freely and may hold a run of several
// records of one ordering key (of one partition, in PartitionOrder): the
// key's consecutive records that were ready, in offset order in the slice.
// A key's next run starts only after its previous run completed, so records
// of a key are handled in offset order within and across batches. A hot key
// is therefore handled up to Batch.MaxRecords records per call, not one.
//
// The return value decides each record's fate:
//   - nil: every record succeeded;
//   - a *BatchError: the records it names failed with their errors, all
//     others succeeded, except as below;
//   - any other error, or a panic: every record of the batch failed. Such
//     an error names no record, so even if Permanent it only fails the
//     attempt (of a batch of more than one record): the records are
//     retried.
//
// When record i fails, the records of the same key after i in the batch are
// not complete either, whatever was returned for them: they run again, in
// order, after i has succeeded or been dead-lettered. A handler may skip
// them once i failed. Records of other keys are unaffected.
//
// A failed record is retried in a batch of its own, holding only its own
// key, with its own attempt count: a poison record that fails its whole
// batch is isolated on the retry, and only it reaches the dead-letter
// topic. Permanent on one record's error (in a BatchError, or on the error
// of a batch of one record) skips the retries.
type BatchHandler func(ctx context.Context, rs []*Record) error

func (RecordHandler) engineKind() string { return "record" }
func (BatchHandler) engineKind() string  { return "batch" }

// BatchError attributes a batch failure to records: Failed maps an index in
// the batch slice to that record's error.
type BatchError struct {
	Failed map[int]error
}

func (e *BatchError) Error() string {
	idx := make([]int, 0, len(e.Failed))
	for i := range e.Failed {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	var sb strings.Builder
	fmt.Fprintf(&sb, "pcon: %d records of the batch failed", len(idx))
	for n, i := range idx {
		if n == 3 {
			sb.WriteString("; ...")
			break
		}
		fmt.Fprintf(&sb, "; [%d]: %v", i, e.Failed[i])
	}
	return sb.String()
}

// Permanent marks err as not worth retrying: the record goes to the
// dead-letter topic after this attempt.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return "permanent: " + e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

func isPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// KeyResolver returns the ordering key of a record in KeyOrder. An empty key
// means "no key": such records run unordered unless Config.OrderEmptyKeys is
// set. Any func(*Record) string converts to a KeyResolver. Unlike a
// handler, it must not keep the Record: it runs once per fetched record on
// the partition's feeder, which reads every record through the same one.
type KeyResolver func(r *Record) string

// RecordKey is the default KeyResolver: the record's own key.
func RecordKey(r *Record) string { return string(r.Key) }

// HeaderKey returns a KeyResolver that uses the value of the first header
// named name.
func HeaderKey(name string) KeyResolver {
	return func(r *Record) string {
		for _, h := range r.Headers {
			if string(h.Key) == name {
				return string(h.Value)
			}
		}
		return ""
	}
}
