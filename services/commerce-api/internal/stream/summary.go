package stream

import (
	"context"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/loopers/commerce-pipeline/internal/cluster"
	"github.com/loopers/commerce-pipeline/internal/logkey"
	"github.com/loopers/commerce-pipeline/internal/stages"
)

// Cluster supplies what only the running nodes know: which are alive, and
// per consumer group the true lag. FromView adapts the cluster registry;
// without it the summary carries the database's part only.
type Cluster interface {
	Summary(ctx context.Context) (ClusterSummary, error)
}

// ClusterSummary is the nodes' part of the pipeline summary.
type ClusterSummary struct {
	Nodes  []Node  `json:"nodes"`
	Groups []Group `json:"groups"`
	// Stages splits an event's path into the stages of package stages, in
	// pipeline order, always all four.
	Stages []Stage `json:"stages"`
}

// Stage is one stage of an event's path over the alive nodes' last
// heartbeat windows (CLUSTER_HEARTBEAT_INTERVAL, 2 s by default), each
// timed by the node that sees it: the relay the outbox and publish stages,
// the consumers broker and apply. The figures are in milliseconds, null
// without events; quantiles are read from histogram buckets (package
// stages' Bounds), so they are as fine as a bucket.
type Stage struct {
	Name          string   `json:"name"`
	Events        uint64   `json:"events"`
	WindowSeconds float64  `json:"windowSeconds"`
	AvgMs         *float64 `json:"avgMs"`
	P50Ms         *float64 `json:"p50Ms"`
	P99Ms         *float64 `json:"p99Ms"`
}

// Node is one registered service instance, anonymous: the stream is
// public, and a node's id carries its host or pod name (the admin
// listener's cluster view names it).
type Node struct {
	Service string `json:"service"`
	Status  string `json:"status"` // ALIVE, SUSPECT or DOWN
	Alive   bool   `json:"alive"`
}

// Group is one consumer group's progress.
type Group struct {
	Name string `json:"name"`
	// Lag sums the owned partitions' true lag (records not yet completed,
	// gaps included) from their owners' last heartbeats.
	Lag        int64 `json:"lag"`
	Partitions int   `json:"partitions"` // partitions with an owner
	// DeadLetters sums what the owning processes dead-lettered since they
	// started; nil until an owner reported. EventsPerSec is the rate of
	// records the owners handled between the two latest summaries; nil on
	// the first, or when a partition changed owner in between (the
	// counters are per process).
	DeadLetters  *int64   `json:"deadLetters"`
	EventsPerSec *float64 `json:"eventsPerSec"`
}

// Viewer reads the cluster registry (cluster.Member and cluster.Store do).
type Viewer interface {
	View(ctx context.Context) (cluster.View, error)
}

// FromView summarises a cluster registry for the stream.
func FromView(v Viewer) Cluster { return &viewCluster{v: v} }

type viewCluster struct {
	v Viewer

	mu   sync.Mutex
	prev *sample // the previous summary's counters, for the rates
}

func (c *viewCluster) Summary(ctx context.Context) (ClusterSummary, error) {
	v, err := c.v.View(ctx)
	if err != nil {
		return ClusterSummary{}, err
	}
	s := Summarize(v)
	cur := sampleOf(v, time.Now())
	c.mu.Lock()
	prev := c.prev
	c.prev = &cur
	c.mu.Unlock()
	if prev != nil {
		rates(s.Groups, *prev, cur)
	}
	return s, nil
}

// sample is the processed counters of the owned partitions at one time,
// keyed by group, and who owned them.
type sample struct {
	at        time.Time
	processed map[string]int64  // per group
	owners    map[string]string // group/topic/partition -> owner
}

func sampleOf(v cluster.View, at time.Time) sample {
	s := sample{at: at, processed: map[string]int64{}, owners: map[string]string{}}
	for _, g := range v.Groups {
		for _, p := range g.Partitions {
			if p.ReleasedAt != nil || p.Processed == nil {
				continue
			}
			s.processed[g.Group] += *p.Processed
			s.owners[g.Group+"/"+p.Topic+"/"+strconv.Itoa(int(p.Partition))] = p.Owner
		}
	}
	return s
}

// rates sets each group's EventsPerSec from two samples, unless one of its
// partitions changed owner (or appeared, or went) in between: the counters
// are per process and would not subtract.
func rates(groups []Group, prev, cur sample) {
	dt := cur.at.Sub(prev.at).Seconds()
	if dt <= 0 {
		return
	}
	moved := map[string]bool{}
	for k, owner := range cur.owners {
		if prev.owners[k] != owner {
			moved[k[:strings.IndexByte(k, '/')]] = true
		}
	}
	for k := range prev.owners {
		if _, ok := cur.owners[k]; !ok {
			moved[k[:strings.IndexByte(k, '/')]] = true
		}
	}
	for i := range groups {
		name := groups[i].Name
		now, ok := cur.processed[name]
		before, had := prev.processed[name]
		if !ok || !had || moved[name] || now < before {
			continue
		}
		r := float64(now-before) / dt
		groups[i].EventsPerSec = &r
	}
}

// Summarize reduces a cluster view to what the summary shows: nodes that
// have not left, per group the owned partitions and their total lag, and
// the stages the alive nodes timed.
func Summarize(v cluster.View) ClusterSummary {
	s := ClusterSummary{Nodes: []Node{}, Groups: []Group{}, Stages: summarizeStages(v.Nodes)}
	for _, n := range v.Nodes {
		if n.Status == "LEFT" {
			continue
		}
		s.Nodes = append(s.Nodes, Node{Service: n.Service, Status: n.Status, Alive: n.Status == "ALIVE"})
	}
	for _, g := range v.Groups {
		out := Group{Name: g.Group}
		for _, p := range g.Partitions {
			if p.ReleasedAt != nil {
				continue
			}
			out.Partitions++
			if p.TrueLag != nil {
				out.Lag += *p.TrueLag
			}
			if p.DeadLettered != nil {
				out.DeadLetters = addTo(out.DeadLetters, *p.DeadLettered)
			}
		}
		s.Groups = append(s.Groups, out)
	}
	return s
}

// Summary is the payload of a summary event.
type Summary struct {
	At                  time.Time `json:"at"`
	OutboxBacklog       int64     `json:"outboxBacklog"`
	OldestUnpublishedMs int64     `json:"oldestUnpublishedMs"`
	OutboxFailed        int64     `json:"outboxFailed"`
	// RelayLeader says whether a relay holds the lease; which one (its node
	// id names its host) is for the admin listener's cluster view.
	RelayLeader bool  `json:"relayLeader"`
	LeaderToken int64 `json:"leaderToken"`
	// EventsPerSec is the rate of order and view events applied to the
	// aggregates (likes keep no idempotency row to count).
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
		OutboxFailed: p.OutboxFailed, RelayLeader: p.Leader != "", LeaderToken: p.LeaderToken,
		EventsPerSec: p.AppliedPerSec, Streams: h.Open(),
	}
	if p.E2ELagAvg != nil && p.E2ELagMax != nil {
		a, m := p.E2ELagAvg.Milliseconds(), p.E2ELagMax.Milliseconds()
		s.LagAvgMs, s.LagMaxMs = &a, &m
	}
	if h.cluster != nil {
		cs, err := h.cluster.Summary(ctx)
		if err != nil {
			h.log.WarnContext(ctx, "stream: read the cluster view", logkey.Err, err)
		} else {
			s.Cluster = &cs
		}
	}
	return s, nil
}

// summarizeStages merges each stage's windows of the alive nodes: a relay
// on standby or a consumer with no partitions adds nothing, and a node
// that stopped heartbeating is left out with its stale window.
func summarizeStages(nodes []cluster.Node) []Stage {
	out := make([]Stage, 0, len(stages.All))
	for _, name := range stages.All {
		var ws []stages.Window
		for _, n := range nodes {
			if n.Status != cluster.StatusAlive {
				continue
			}
			for _, w := range n.Latency {
				if w.Stage == name {
					ws = append(ws, w)
				}
			}
		}
		w := stages.Merge(ws...)
		out = append(out, Stage{
			Name: name, Events: w.Count, WindowSeconds: w.Seconds,
			AvgMs: millis(w.Mean()), P50Ms: millis(w.Quantile(.5)), P99Ms: millis(w.Quantile(.99)),
		})
	}
	return out
}

// millis converts seconds to milliseconds rounded to 0.01 ms; nil for NaN.
func millis(s float64) *float64 {
	if math.IsNaN(s) {
		return nil
	}
	ms := math.Round(s*1e5) / 100
	return &ms
}

func addTo(sum *int64, n int64) *int64 {
	if sum == nil {
		return &n
	}
	*sum += n
	return sum
}
