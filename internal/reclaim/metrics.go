package reclaim

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	messages *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	pending  *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reclaim_messages_total",
			Help: "DLT records a reclaim pass took, by domain, shard (partition) and outcome (redriven, parked, skipped, failed, expired).",
		}, []string{"domain", "shard", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "reclaim_latency_seconds",
			Help:    "Time one reclaim pass spent on one DLT partition.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"domain", "shard"}),
		pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "reclaim_pending",
			Help: "DLT records after the reclaimer's committed offset after its last pass: not yet old enough, over the per-pass count, or failed.",
		}, []string{"domain", "shard"}),
	}
	for _, c := range []prometheus.Collector{m.messages, m.latency, m.pending} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// touch creates a partition's series, so dashboards see zeros rather than
// nothing before the first dead letter.
func (m *metrics) touch(domain, shard string) {
	if m == nil {
		return
	}
	for _, o := range outcomes {
		m.messages.WithLabelValues(domain, shard, string(o))
	}
}

func (m *metrics) observe(domain, shard string, pr PartitionResult, elapsed time.Duration) {
	if m == nil {
		return
	}
	for o, n := range pr.Counts {
		m.messages.WithLabelValues(domain, shard, string(o)).Add(float64(n))
	}
	m.latency.WithLabelValues(domain, shard).Observe(elapsed.Seconds())
	if pr.Err == nil && !pr.Busy {
		m.pending.WithLabelValues(domain, shard).Set(float64(pr.End - pr.Committed))
	}
}
