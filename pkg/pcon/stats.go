package pcon

import (
	"slices"
	"strings"
	"time"

	"github.com/loopers/commerce-pipeline/pkg/pcon/internal/core"
)

// Stats is a point-in-time view of a Consumer, for metrics (see the
// pconprom package) and debugging.
type Stats struct {
	Group    string
	InFlight int // records being handled, retried or dead-lettered
	Capacity int // MaxInFlight
	Paused   bool
	// Partitions lists every partition this Consumer has owned; counters
	// keep counting across reassignments.
	Partitions []PartitionStats
	// Latency holds one handler latency histogram per topic.
	Latency []LatencyStats
}

// PartitionStats describes one partition.
type PartitionStats struct {
	Topic     string
	Partition int32
	Assigned  bool // owned right now; the fields up to Counters are valid only then
	Paused    bool // fetching paused by backpressure

	HighWaterMark int64         // everything below is complete; the offset committed next
	LogEnd        int64         // log end offset as last fetched
	TrueLag       int64         // LogEnd - HighWaterMark: records not complete yet
	GapSize       int           // complete records above HighWaterMark, waiting on it
	Blocking      int64         // the incomplete offset holding HighWaterMark back, -1 if none
	BlockedFor    time.Duration // how long Blocking has held it
	InFlight      int
	Queued        int

	Processed    uint64 // handled successfully
	Retried      uint64 // failed attempts that were retried
	DeadLettered uint64 // published to the dead-letter topic
	DLTFailures  uint64 // failed dead-letter publishes (the record stays uncommitted)
	StaleDropped uint64 // completions from an earlier assignment, discarded
	Skipped      uint64 // records a previous owner completed, skipped on hydration
}

// LatencyStats is a histogram of handler latency for one topic. For a
// BatchHandler each record of a batch observes the batch's duration.
type LatencyStats struct {
	Topic   string
	Bounds  []float64 // bucket upper bounds in seconds
	Buckets []uint64  // cumulative counts per bound
	Count   uint64
	Sum     float64 // seconds
}

// Stats returns a snapshot of the Consumer's state and counters.
func (c *Consumer) Stats() Stats {
	s := c.core.Stats()
	paused := c.pause.isPaused()
	out := Stats{Group: c.cfg.Group, InFlight: s.InFlight, Capacity: s.Capacity, Paused: paused}
	for _, p := range s.Partitions {
		ps := PartitionStats{
			Topic: p.TP.Topic, Partition: p.TP.Partition, Assigned: p.Assigned,
			Blocking:  -1,
			Processed: p.Counters.Processed, Retried: p.Counters.Retried, DeadLettered: p.Counters.DeadLettered,
			DLTFailures: p.Counters.DLTFailures, StaleDropped: p.Counters.StaleDropped, Skipped: p.Counters.Skipped,
		}
		if p.Assigned {
			ps.Paused = paused
			ps.HighWaterMark = p.Committable
			ps.LogEnd = p.LogEnd
			ps.TrueLag = max(p.LogEnd-p.Committable, 0)
			ps.GapSize = p.Gap
			ps.Blocking = p.Blocking
			ps.BlockedFor = p.BlockedFor
			ps.InFlight = p.InFlight
			ps.Queued = p.Queued
		}
		out.Partitions = append(out.Partitions, ps)
	}
	for topic, h := range s.Latency {
		ls := LatencyStats{Topic: topic, Bounds: core.LatencyBuckets, Buckets: make([]uint64, len(h.Counts)), Count: h.Count, Sum: h.Sum}
		var cum uint64
		for i, n := range h.Counts {
			cum += n
			ls.Buckets[i] = cum
		}
		out.Latency = append(out.Latency, ls)
	}
	slices.SortFunc(out.Latency, func(a, b LatencyStats) int { return strings.Compare(a.Topic, b.Topic) })
	return out
}
