package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/loopers/commerce-pipeline/internal/logkey"
)

// notifyQueue exposes pg_notification_queue_usage() at each scrape.
type notifyQueue struct {
	usage func(ctx context.Context) (float64, error)
	log   *slog.Logger
	desc  *prometheus.Desc
}

func newNotifyQueue(usage func(ctx context.Context) (float64, error), log *slog.Logger) *notifyQueue {
	return &notifyQueue{usage: usage, log: log, desc: prometheus.NewDesc(
		"commerce_api_pg_notify_queue_usage",
		"Fraction of PostgreSQL's NOTIFY queue in use (pg_notification_queue_usage()); at 1 the relay's wake-ups fail and it reads new events by its poll only.",
		nil, nil)}
}

func (n *notifyQueue) Describe(ch chan<- *prometheus.Desc) { ch <- n.desc }

func (n *notifyQueue) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	u, err := n.usage(ctx)
	if err != nil {
		// No sample rather than a wrong one; the scrape goes on.
		n.log.Warn("metrics: read the notify queue usage", logkey.Err, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(n.desc, prometheus.GaugeValue, u)
}
