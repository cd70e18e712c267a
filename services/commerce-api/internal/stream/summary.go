package stream

import (
	"context"
	"time"
)

// Cluster supplies what only the running nodes know: which are alive, and
// per consumer group the true lag and the dead letters. commerce-api wires it
// to the cluster view; without it the summary carries the database's part.
type Cluster interface {
	Summary(ctx context.Context) (ClusterSummary, error)
}

// ClusterSummary is the nodes' part of the pipeline summary.
type ClusterSummary struct {
	Nodes  []Node  `json:"nodes"`
	Groups []Group `json:"groups"`
}

// Node is one running service instance.
type Node struct {
	ID      string `json:"id"`
	Service string `json:"service"`
	Alive   bool   `json:"alive"`
}

// Group is one consumer group's progress.
type Group struct {
	Name       string  `json:"name"`
	Lag        int64   `json:"lag"` // records not yet completed, gaps included (pcon's TrueLag)
	Partitions int     `json:"partitions"`
	DeadLetter int64   `json:"deadLetters"`
	PerSec     float64 `json:"eventsPerSec"`
}

// Summary is the payload of a summary event.
type Summary struct {
	At                  time.Time `json:"at"`
	OutboxBacklog       int64     `json:"outboxBacklog"`
	OldestUnpublishedMs int64     `json:"oldestUnpublishedMs"`
	OutboxFailed        int64     `json:"outboxFailed"`
	Leader              string    `json:"leader"` // "" when no relay holds the lease
	LeaderToken         int64     `json:"leaderToken"`
	// EventsPerSec is the rate of events applied to the aggregates.
	EventsPerSec float64 `json:"eventsPerSec"`
	// LagAvgMs and LagMaxMs are the end-to-end lag (API commit to
	// aggregate commit) of recently applied events; null when none was.
	LagAvgMs *int64 `json:"lagAvgMs"`
	LagMaxMs *int64 `json:"lagMaxMs"`
	// Cluster is null when no cluster view is wired or it failed.
	Cluster *ClusterSummary `json:"cluster"`
	Streams int             `json:"streams"`
}

func (h *Hub) summary(ctx context.Context) (Summary, error) {
	p, err := h.src.PipelineStats(ctx)
	if err != nil {
		return Summary{}, err
	}
	s := Summary{
		At: time.Now().UTC(), OutboxBacklog: p.OutboxBacklog, OldestUnpublishedMs: p.OldestUnpublished.Milliseconds(),
		OutboxFailed: p.OutboxFailed, Leader: p.Leader, LeaderToken: p.LeaderToken,
		EventsPerSec: p.AppliedPerSec, Streams: h.Open(),
	}
	if p.E2ELagAvg != nil && p.E2ELagMax != nil {
		a, m := p.E2ELagAvg.Milliseconds(), p.E2ELagMax.Milliseconds()
		s.LagAvgMs, s.LagMaxMs = &a, &m
	}
	if h.cluster != nil {
		cs, err := h.cluster.Summary(ctx)
		if err != nil {
			h.log.WarnContext(ctx, "stream: read the cluster view", "err", err)
		} else {
			s.Cluster = &cs
		}
	}
	return s, nil
}
