package cluster

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/loopers/commerce-pipeline/internal/logkey"
)

// Collector exposes the cluster view as metrics at each scrape, from the
// Member's cached view: cluster_nodes{service,status},
// cluster_leader_changes_total and cluster_assignments{group,node}. One
// service (commerce-api) registers it, so the cluster is counted once.
type Collector struct {
	member *Member
	logger *slog.Logger

	nodes, changes, assignments *prometheus.Desc
}

// NewCollector returns a Collector reading through m.
func NewCollector(m *Member, logger *slog.Logger) *Collector {
	return &Collector{
		member: m, logger: logger,
		nodes:       prometheus.NewDesc("cluster_nodes", "Registered service instances by service and status (derived from heartbeat age on the database clock).", []string{"service", "status"}, nil),
		changes:     prometheus.NewDesc("cluster_leader_changes_total", "Relay leader terms started (the relay lease's fencing token).", nil, nil),
		assignments: prometheus.NewDesc("cluster_assignments", "Partitions each node owns (not released), by consumer group.", []string{"group", "node"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.nodes
	ch <- c.changes
	ch <- c.assignments
}

// Collect implements prometheus.Collector. A database that does not answer
// yields no cluster series rather than a failed scrape.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	v, err := c.member.View(ctx)
	if err != nil {
		c.logger.Warn("cluster metrics: read view", logkey.Err, err)
		return
	}
	counts := map[string]map[string]int{}
	for _, n := range v.Nodes {
		if counts[n.Service] == nil {
			counts[n.Service] = map[string]int{}
		}
		counts[n.Service][n.Status]++
	}
	for svc, byStatus := range counts {
		for _, st := range Statuses {
			ch <- prometheus.MustNewConstMetric(c.nodes, prometheus.GaugeValue, float64(byStatus[st]), svc, st)
		}
	}
	changes, err := c.member.store.leaderTerms(ctx)
	if err != nil {
		c.logger.Warn("cluster metrics: count leader changes", logkey.Err, err)
	} else {
		ch <- prometheus.MustNewConstMetric(c.changes, prometheus.CounterValue, float64(changes))
	}
	for _, g := range v.Groups {
		owned := map[string]int{}
		for _, p := range g.Partitions {
			if p.ReleasedAt == nil {
				owned[p.Owner]++
			}
		}
		for node, n := range owned {
			ch <- prometheus.MustNewConstMetric(c.assignments, prometheus.GaugeValue, float64(n), g.Group, node)
		}
	}
}
