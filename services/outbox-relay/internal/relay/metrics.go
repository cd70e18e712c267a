package relay

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/loopers/commerce-pipeline/internal/stages"
	"github.com/loopers/commerce-pipeline/pkg/events"
	"github.com/loopers/commerce-pipeline/services/outbox-relay/internal/lease"
	"github.com/loopers/commerce-pipeline/services/outbox-relay/internal/store"
)

// Metrics are the relay's Prometheus collectors, all named outbox_relay_*.
type Metrics struct {
	published    prometheus.Counter
	failed       prometheus.Counter
	retried      prometheus.Counter
	passDuration prometheus.Histogram
	stages       *stages.Recorder // the outbox and publish stages
}

// NewMetrics registers the relay's collectors on reg. Backlog and the age of
// the oldest unpublished row are measured in the database at scrape time;
// leadership and the fencing token are read from elector.
func NewMetrics(reg prometheus.Registerer, st *store.Store, elector *lease.Elector) (*Metrics, error) {
	m := &Metrics{
		published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_relay_published_total", Help: "Outbox rows published to Kafka and passed by the cursor.",
		}),
		failed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_relay_failed_total", Help: "Outbox rows moved to outbox_failed (expired or permanently failing).",
		}),
		retried: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "outbox_relay_retried_total", Help: "Records sent again after the cluster refused them (each holds back its aggregate until then).",
		}),
		passDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "outbox_relay_pass_duration_seconds", Help: "Duration of relay passes.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
	}
	leader := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "outbox_relay_is_leader", Help: "1 while this node holds the relay lease.",
	}, func() float64 {
		if _, ok := elector.Fence(); ok {
			return 1
		}
		return 0
	})
	token := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "outbox_relay_fencing_token", Help: "Fencing token of this node's latest lease term (0 before the first).",
	}, func() float64 {
		f, _ := elector.Fence()
		return float64(f.Token)
	})
	for _, c := range []prometheus.Collector{m.published, m.failed, m.retried, m.passDuration, leader, token, newBacklog(st)} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register relay metrics: %w", err)
		}
	}
	var err error
	if m.stages, err = stages.NewRecorder(reg, events.NewRegistry().Types(), stages.Outbox, stages.Publish); err != nil {
		return nil, err
	}
	return m, nil
}

// StageWindows returns the outbox and publish stages observed since the
// previous call, for the cluster registry's heartbeat.
func (m *Metrics) StageWindows() []stages.Window { return m.stages.Take() }

// observe times a published row: the outbox stage from its insert to its
// read, both on the database clock; the publish stage from the read being
// sent to the acknowledgement, both on this process's clock. sc is the
// row's stored trace context: a sampled one is the exemplar of both.
func (m *Metrics) observe(eventType string, outbox, publish time.Duration, sc trace.SpanContext) {
	m.stages.ObserveTraced(stages.Outbox, eventType, outbox, sc)
	m.stages.ObserveTraced(stages.Publish, eventType, publish, sc)
}

// backlog measures the unpublished rows in the database on each scrape.
type backlog struct {
	st         *store.Store
	rows, aged *prometheus.Desc
}

func newBacklog(st *store.Store) backlog {
	return backlog{
		st:   st,
		rows: prometheus.NewDesc("outbox_relay_backlog_rows", "Outbox rows not published yet: after the cursor, or held behind it.", nil, nil),
		aged: prometheus.NewDesc("outbox_relay_oldest_unpublished_age_seconds",
			"Age of the oldest outbox row after the cursor; 0 when there is none.", nil, nil),
	}
}

func (b backlog) Describe(ch chan<- *prometheus.Desc) { ch <- b.rows; ch <- b.aged }

func (b backlog) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := b.st.State(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(b.rows, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(b.rows, prometheus.GaugeValue, float64(st.Backlog))
	ch <- prometheus.MustNewConstMetric(b.aged, prometheus.GaugeValue, st.OldestAge.Seconds())
}
