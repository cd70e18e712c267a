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
	// Concurrency is the most InFlight may reach: MaxConcurrency with a
	// RecordHandler, MaxInFlight with a BatchHandler (whose calls
	// Batch.Concurrency bounds).
	Concurrency int
	Capacity    int // MaxInFlight: records held, in flight or buffered
	Paused      bool
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

	// Committable is the offset committed next: every record below it is
	// complete. (It is not Kafka's high watermark, the log end: that is
	// LogEnd.)
	Committable  int64
	LogEnd       int64         // log end offset, as last fetched or, while not fetching, asked for
	TrueLag      int64         // LogEnd - Committable: records not complete yet
	GapSize      int           // complete records above Committable, waiting on it
	Blocking     int64         // the incomplete offset holding Committable back, -1 if none
	BlockedFor   time.Duration // how long Blocking has held it
	InFlight     int
	Queued       int
	ActiveKeys   int  // keys with records running, waiting for a retry or queued
	LongestKey   int  // records queued behind the busiest key
	BlockedOnKey bool // fetching stopped until a full key queue drains (Block policy)

	Processed    uint64 // handled successfully
	Retried      uint64 // failed attempts that were retried
	DeadLettered uint64 // published to the dead-letter topic
	DLTFailures  uint64 // failed dead-letter publishes (the record stays uncommitted)
	StaleDropped uint64 // completions from an earlier assignment, discarded
	Skipped      uint64 // records a previous owner completed, skipped on hydration
	KeyBlocks    uint64 // times fetching stopped on a full key queue (Block)
	Dropped      uint64 // records completed without running (DropOldest)
	Overflowed   uint64 // records dead-lettered on a full key queue (DeadLetter)
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
	out := Stats{Group: c.cfg.Group, InFlight: s.InFlight, Concurrency: s.Running, Capacity: s.Capacity, Paused: paused}
	for _, p := range s.Partitions {
		ps := PartitionStats{
			Topic: p.TP.Topic, Partition: p.TP.Partition, Assigned: p.Assigned,
			Blocking:  -1,
			Processed: p.Counters.Processed, Retried: p.Counters.Retried, DeadLettered: p.Counters.DeadLettered,
			DLTFailures: p.Counters.DLTFailures, StaleDropped: p.Counters.StaleDropped, Skipped: p.Counters.Skipped,
			KeyBlocks: p.Counters.KeyBlocks, Dropped: p.Counters.Dropped, Overflowed: p.Counters.Overflowed,
		}
		if p.Assigned {
			ps.Paused = paused
			ps.Committable = p.Committable
			ps.LogEnd = p.LogEnd
			// A committable offset below zero is a start sentinel the broker
			// could not resolve: nothing was received, count from 0.
			ps.TrueLag = max(p.LogEnd-max(p.Committable, 0), 0)
			ps.GapSize = p.Gap
			ps.Blocking = p.Blocking
			ps.BlockedFor = p.BlockedFor
			ps.InFlight = p.InFlight
			ps.Queued = p.Queued
			ps.ActiveKeys = p.ActiveKeys
			ps.LongestKey = p.LongestKey
			ps.BlockedOnKey = p.BlockedOnKey
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
