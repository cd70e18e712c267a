package core

import (
	"sort"
	"time"

	"github.com/loopers/commerce-pipeline/pkg/pcon/internal/engine"
)

// Counters are monotonic per-partition counts; they survive reassignment.
type Counters struct {
	Processed    uint64 // handled successfully
	Retried      uint64 // failed attempts followed by a retry
	DeadLettered uint64 // published to the dead-letter topic
	DLTFailures  uint64 // failed dead-letter publishes
	StaleDropped uint64 // completions discarded for belonging to an old epoch
	Skipped      uint64 // not processed because a previous owner completed them
	KeyBlocks    uint64 // times feeding stopped on a full key queue (OverflowBlock)
	Dropped      uint64 // completed without running (OverflowDropOldest)
	Overflowed   uint64 // dead-lettered on arrival (OverflowDeadLetter)
}

// LatencyBuckets are the upper bounds, in seconds, of the handler latency
// histogram.
var LatencyBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// Histogram is a cumulative-bucket latency histogram.
type Histogram struct {
	Counts []uint64 // per bucket of LatencyBuckets, not cumulative
	Count  uint64
	Sum    float64 // seconds
}

// Observe adds one observation.
func (h *Histogram) Observe(d time.Duration) {
	s := d.Seconds()
	// A linear scan beats a binary search here: most handlers are fast and
	// land in the first buckets.
	for i, b := range LatencyBuckets {
		if s <= b {
			h.Counts[i]++
			break
		}
	}
	h.Count++
	h.Sum += s
}

func (c *Core) latencyLocked(topic string) *Histogram {
	h := c.latency[topic]
	if h == nil {
		h = &Histogram{Counts: make([]uint64, len(LatencyBuckets))}
		c.latency[topic] = h
	}
	return h
}

func (c *Core) countersLocked(tp engine.TP) *Counters {
	cs := c.stats[tp]
	if cs == nil {
		cs = &Counters{}
		c.stats[tp] = cs
	}
	if p := c.parts[tp]; p != nil {
		p.counters = cs
	}
	return cs
}

// PartitionStats describes one partition.
type PartitionStats struct {
	TP       engine.TP
	Assigned bool
	Counters Counters
	// The rest is meaningful only while Assigned.
	Committable  int64         // the offset committed next: everything below is complete
	LogEnd       int64         // log end offset last seen by the fetcher
	Gap          int           // completed records above Committable
	Blocking     int64         // lowest incomplete offset, -1 if none
	BlockedFor   time.Duration // how long Blocking has been the blocking offset
	Queued       int
	InFlight     int
	ActiveKeys   int  // keys with a record running, waiting for a retry, or queued
	LongestKey   int  // records queued behind the busiest key
	BlockedOnKey bool // feeding stopped until a full key queue drains
}

// Stats is a snapshot of the control plane.
type Stats struct {
	InFlight   int
	Running    int // MaxRunning, the bound of InFlight
	Capacity   int
	Paused     bool
	Partitions []PartitionStats
	Latency    map[string]Histogram // per topic
}

// Stats returns a snapshot.
func (c *Core) Stats() Stats {
	c.lock()
	defer c.mu.Unlock()
	now := c.now()
	s := Stats{InFlight: c.inflight, Running: c.cfg.MaxRunning, Capacity: c.cfg.MaxInFlight, Paused: c.paused, Latency: make(map[string]Histogram, len(c.latency))}
	for tp, cs := range c.stats {
		ps := PartitionStats{TP: tp, Counters: *cs, Blocking: -1}
		if p := c.parts[tp]; p != nil {
			ps.Assigned = true
			ps.Committable = p.tr.Committable()
			ps.LogEnd = p.logEnd
			ps.Gap = p.tr.Gap()
			ps.Queued = p.queued + p.waiting
			ps.InFlight = p.inflight
			ps.BlockedOnKey = p.blockedLane != nil
			for _, l := range p.lanes {
				if l.busy {
					ps.ActiveKeys++
					ps.LongestKey = max(ps.LongestKey, l.queue.len())
				}
			}
			if b, ok := p.tr.Blocking(); ok {
				ps.Blocking = b
				if b == p.blockOff {
					ps.BlockedFor = now - p.blockSince
				}
			}
		}
		s.Partitions = append(s.Partitions, ps)
	}
	sort.Slice(s.Partitions, func(i, j int) bool {
		a, b := s.Partitions[i].TP, s.Partitions[j].TP
		return a.Topic < b.Topic || a.Topic == b.Topic && a.Partition < b.Partition
	})
	for topic, h := range c.latency {
		s.Latency[topic] = Histogram{Counts: append([]uint64(nil), h.Counts...), Count: h.Count, Sum: h.Sum}
	}
	return s
}
