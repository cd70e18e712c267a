// Package pconprom exposes a pcon.Consumer's state as Prometheus metrics.
// Every metric carries the consumer group; per-partition metrics add topic
// and partition.
package pconprom

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/loopers/commerce-pipeline/pkg/pcon"
)

// Source is what the collector reads; *pcon.Consumer implements it.
type Source interface {
	Stats() pcon.Stats
}

// Collector is a prometheus.Collector reading a Source on every scrape.
type Collector struct {
	src Source

	trueLag, gap, blocking, blockedFor, paused, partInFlight, queued *prometheus.Desc
	inFlight, capacity                                               *prometheus.Desc
	processed, retried, deadLettered, dltFailures, stale, skipped    *prometheus.Desc
	latency                                                          *prometheus.Desc
	activeKeys, longestKey, blockedOnKey, overflow                   *prometheus.Desc
}

// NewCollector returns a collector for src. Register it once per consumer.
func NewCollector(src Source) *Collector {
	part := []string{"group", "topic", "partition"}
	d := func(name, help string, labels []string) *prometheus.Desc {
		return prometheus.NewDesc("pcon_"+name, help, labels, nil)
	}
	return &Collector{
		src:          src,
		trueLag:      d("true_lag", "Records not complete yet: log end offset minus the committable offset.", part),
		gap:          d("gap_size", "Completed records above the committable offset, waiting on a lower one.", part),
		blocking:     d("blocking_offset", "The incomplete offset holding the committable offset back, -1 if none.", part),
		blockedFor:   d("blocked_seconds", "How long the blocking offset has held the committable offset back.", part),
		paused:       d("paused", "1 when fetching the partition is paused by backpressure.", part),
		partInFlight: d("partition_in_flight", "Records of the partition being handled.", part),
		queued:       d("partition_queued", "Records of the partition waiting for their turn or a retry.", part),
		inFlight:     d("in_flight", "Records being handled, retried or dead-lettered.", []string{"group"}),
		capacity:     d("capacity", "MaxInFlight.", []string{"group"}),
		processed:    d("processed_total", "Records handled successfully.", part),
		retried:      d("retried_total", "Failed attempts that were retried.", part),
		deadLettered: d("dead_lettered_total", "Records published to the dead-letter topic.", part),
		dltFailures:  d("dlt_publish_failures_total", "Failed dead-letter publishes; the record stays uncommitted.", part),
		stale:        d("stale_epoch_dropped_total", "Completions from an earlier assignment, discarded.", part),
		skipped:      d("hydration_skipped_total", "Records skipped because a previous owner completed them.", part),
		latency:      d("handler_duration_seconds", "Handler latency.", []string{"group", "topic"}),
		activeKeys:   d("active_keys", "Keys with records running, waiting for a retry, or queued.", part),
		longestKey:   d("longest_key_queue", "Records queued behind the busiest key of the partition.", part),
		blockedOnKey: d("key_blocked", "1 when fetching the partition waits for a full key queue to drain.", part),
		overflow: d("key_overflow_total", "Records that found their key's queue full, by policy: block (fetching stopped), drop-oldest (a queued record dropped), dead-letter.",
			append(part[:3:3], "policy")),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.trueLag, c.gap, c.blocking, c.blockedFor, c.paused, c.partInFlight, c.queued,
		c.inFlight, c.capacity, c.processed, c.retried, c.deadLettered, c.dltFailures, c.stale, c.skipped, c.latency,
		c.activeKeys, c.longestKey, c.blockedOnKey, c.overflow,
	} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.src.Stats()
	ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(s.InFlight), s.Group)
	ch <- prometheus.MustNewConstMetric(c.capacity, prometheus.GaugeValue, float64(s.Capacity), s.Group)
	for _, p := range s.Partitions {
		labels := []string{s.Group, p.Topic, strconv.Itoa(int(p.Partition))}
		counter := func(d *prometheus.Desc, v uint64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
		}
		counter(c.processed, p.Processed)
		counter(c.retried, p.Retried)
		counter(c.deadLettered, p.DeadLettered)
		counter(c.dltFailures, p.DLTFailures)
		counter(c.stale, p.StaleDropped)
		counter(c.skipped, p.Skipped)
		for policy, n := range map[pcon.Overflow]uint64{pcon.Block: p.KeyBlocks, pcon.DropOldest: p.Dropped, pcon.DeadLetter: p.Overflowed} {
			ch <- prometheus.MustNewConstMetric(c.overflow, prometheus.CounterValue, float64(n), append(labels, policy.String())...)
		}
		if !p.Assigned {
			// State gauges of a partition owned elsewhere would mislead.
			continue
		}
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
		}
		gauge(c.trueLag, float64(p.TrueLag))
		gauge(c.gap, float64(p.GapSize))
		gauge(c.blocking, float64(p.Blocking))
		gauge(c.blockedFor, p.BlockedFor.Seconds())
		gauge(c.paused, boolFloat(p.Paused))
		gauge(c.partInFlight, float64(p.InFlight))
		gauge(c.queued, float64(p.Queued))
		gauge(c.activeKeys, float64(p.ActiveKeys))
		gauge(c.longestKey, float64(p.LongestKey))
		gauge(c.blockedOnKey, boolFloat(p.BlockedOnKey))
	}
	for _, l := range s.Latency {
		buckets := make(map[float64]uint64, len(l.Bounds))
		for i, b := range l.Bounds {
			buckets[b] = l.Buckets[i]
		}
		ch <- prometheus.MustNewConstHistogram(c.latency, l.Count, l.Sum, buckets, s.Group, l.Topic)
	}
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
