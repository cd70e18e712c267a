package reclaim

import (
	"errors"
	"time"
)

// Options narrows or overrides one pass. The zero value takes the Config's.
type Options struct {
	Topics  []string      // a subset of Config.Topics; nil: all
	MinIdle time.Duration // 0: Config.MinIdle
	Count   int           // 0: Config.Count
	// DryRun reads and classifies records but republishes and commits
	// nothing, and records no metrics.
	DryRun bool
	// Force re-drives records dead-lettered for a permanent reason too
	// (an operator who fixed the code that refused them).
	Force bool
	// Total, when positive, bounds the records the whole pass takes, over
	// every partition together (an operator's call: at most MaxTotal).
	Total int
	// Only, when not nil, takes just these records (an operator's choice),
	// by the "partition:offset" of the topic the pass reads; the others are
	// passed over and nothing is committed, so they stay pending.
	Only map[string]bool
}

// Record is one record a pass took, reported only by a dry run.
type Record struct {
	Offset    int64     `json:"offset"`
	Outcome   Outcome   `json:"outcome"`
	Key       string    `json:"key"`
	Redrives  int       `json:"redrives"`
	DeadSince time.Time `json:"deadLetteredAt"`
	Error     string    `json:"error,omitempty"`
	// EventTime is when the event happened (its CloudEvents time), zero
	// when the record does not say.
	EventTime time.Time `json:"eventTime,omitzero"`
	// Why says why a record is parked, expired or skipped.
	Why string `json:"why,omitempty"`
}

// PartitionResult is what a pass did in one DLT partition.
type PartitionResult struct {
	Topic     string          `json:"topic"` // the DLT topic
	Partition int32           `json:"partition"`
	From      int64           `json:"from"`      // the first offset taken
	Committed int64           `json:"committed"` // the offset committed (From when none)
	End       int64           `json:"end"`       // the high water mark when the pass began
	Counts    map[Outcome]int `json:"counts"`
	// Busy says another re-driver held the partition: this pass left it.
	Busy    bool          `json:"busy,omitempty"`
	Records []Record      `json:"records,omitempty"`
	Elapsed time.Duration `json:"elapsedNs"`
	Err     error         `json:"-"`
	ErrText string        `json:"error,omitempty"`
}

// DomainResult is what a pass did in one domain.
type DomainResult struct {
	Domain     string            `json:"domain"`
	Topic      string            `json:"topic"`
	Partitions []PartitionResult `json:"partitions"`
	Err        error             `json:"-"`
	ErrText    string            `json:"error,omitempty"`
}

// Result is what one pass did, domains in Config.Topics order.
type Result struct {
	Domains []DomainResult `json:"domains"`
}

// Totals sums the outcomes over every partition.
func (r Result) Totals() map[Outcome]int {
	t := map[Outcome]int{}
	for _, d := range r.Domains {
		for _, p := range d.Partitions {
			for o, n := range p.Counts {
				t[o] += n
			}
		}
	}
	return t
}

// Err joins the errors of every domain and partition.
func (r Result) Err() error {
	var errs []error
	for _, d := range r.Domains {
		if d.Err != nil {
			errs = append(errs, d.Err)
		}
		for _, p := range d.Partitions {
			if p.Err != nil {
				errs = append(errs, p.Err)
			}
		}
	}
	return errors.Join(errs...)
}
