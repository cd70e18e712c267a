package cluster

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/loopers/commerce-pipeline/internal/logkey"
	"github.com/loopers/commerce-pipeline/internal/stages"
)

// PartitionEvent is one partition assigned to or revoked from a consumer, as
// its assignment hooks report it (the service that wires the consumer
// copies its library's event into it, so that this package, which every
// service links, links no Kafka client).
type PartitionEvent struct {
	Topic     string
	Partition int32
	// Epoch is the consumer's own assignment epoch of the partition; it
	// grows with each assignment of the partition to that consumer.
	Epoch uint64
	// Offset is, on assignment, the committed offset the assignment starts
	// at; on revocation, the offset committed at release.
	Offset int64
	// Completed counts, on revocation, the records completed during the
	// assignment.
	Completed uint64
}

// PartitionProgress is what the heartbeat publishes of one partition a
// consumer has owned: the part of the consumer's stats the registry shows.
type PartitionProgress struct {
	Topic     string
	Partition int32
	Assigned  bool  // owned right now; the lag fields are valid only then
	TrueLag   int64 // records from the committable offset to the log end
	GapSize   int   // complete records above the committable offset, waiting on it
	Blocking  int64 // the incomplete offset holding the commit back, -1 if none
	// Processed and DeadLettered count the partition's records handled and
	// dead-lettered; they keep counting across assignments.
	Processed    uint64
	DeadLettered uint64
}

// hookTimeout bounds a hook's database write: pcon's hooks hold up the
// partition's start or release. A write that does not make it is retried
// by the heartbeat (assignments) or given up (the handoff record).
const hookTimeout = 2 * time.Second

// purgeEvery is how many heartbeats pass between retention purges.
const purgeEvery = 30

// Member is one service instance in the registry. Start it, and Leave on
// graceful shutdown; a Member that is not started still records
// assignments.
type Member struct {
	store   *Store
	cfg     Config
	info    Info
	logger  *slog.Logger
	metrics *memberMetrics
	views   *viewCache
	// instance is this process's nonce in its node row: a heartbeat that
	// finds another there means a second process claims the node id.
	instance string

	mu     sync.Mutex
	owned  map[claim]*owned
	stats  map[string]func() []PartitionProgress // by group
	stages func() []stages.Window                // nil: the node times no stage
	unsent []stages.Window                       // taken, but their heartbeat failed

	stop    context.CancelFunc
	stopped chan struct{}
}

// owned is a partition this node owns, as the assignment hooks said.
type owned struct {
	epoch   uint64
	offset  int64
	version int64 // 0 until the assignment is written
	// writing: a write of the assignment is in flight. The heartbeat's
	// retry leaves it alone: two writes of one assignment would both be
	// applied, the row's version would count two, and whichever answer came
	// back last would set version, so a lower one would have every lag
	// report refused as superseded.
	writing    bool
	assignedAt time.Time
	baseline   uint64 // records handled by the partition before this assignment
	ready      bool   // a record was handled since the assignment
	superseded bool   // the row names a newer assignment: lag is not published
}

// Join returns a Member for the instance described by info, with a store
// of its own on databaseURL. Nothing is written until Start. reg receives
// the heartbeat metrics and the per-group assignment metrics.
func Join(databaseURL string, cfg Config, info Info, logger *slog.Logger, reg prometheus.Registerer) (*Member, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if info.Service == "" {
		return nil, errors.New("cluster: Info.Service is empty")
	}
	if logger == nil || reg == nil {
		return nil, errors.New("cluster: logger and registerer are required")
	}
	if info.Host == "" {
		info.Host, _ = os.Hostname()
	}
	if info.Version == "" {
		info.Version = buildVersion()
	}
	if info.Roles == nil {
		info.Roles = []string{}
	}
	m, err := newMemberMetrics(reg)
	if err != nil {
		return nil, err
	}
	st, err := Open(databaseURL)
	if err != nil {
		return nil, err
	}
	return &Member{
		store: st, cfg: cfg, info: info, logger: logger.With("node", cfg.NodeID), metrics: m,
		views: newViewCache(st.View, ViewEvery, m.viewReads.Inc), instance: rand.Text(),
		owned: map[claim]*owned{}, stats: map[string]func() []PartitionProgress{},
	}, nil
}

// NodeID is the id this Member registers under.
func (m *Member) NodeID() string { return m.cfg.NodeID }

// View returns the whole cluster view (see Store.View), read at most once
// per ViewEvery however often it is called: every reader in the process
// (the HTTP view, the stream summary, the metrics) shares one copy, so no
// request rate can take the registry's connections from the heartbeat.
// View.At says when it was read. Callers must not modify its slices.
func (m *Member) View(ctx context.Context) (View, error) { return m.views.get(ctx) }

// Start joins the registry and heartbeats in the background until Leave.
func (m *Member) Start(ctx context.Context) {
	ctx, m.stop = context.WithCancel(ctx)
	m.stopped = make(chan struct{})
	go func() {
		defer close(m.stopped)
		m.run(ctx)
	}()
}

// Leave stops the heartbeat, marks the node LEFT and closes the store. Call
// it once, after the work that reports assignments has stopped.
func (m *Member) Leave() {
	m.halt()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.store.leave(ctx, m.cfg.NodeID); err != nil {
		m.logger.Warn("cluster leave failed; the node will show as DOWN", logkey.Err, err)
	} else {
		m.logger.Info("left the cluster")
	}
	m.store.Close()
}

// Abandon stops the heartbeat without leaving, as a crash would (the node
// turns SUSPECT, then DOWN), and closes the store. A Member never started
// wrote nothing: Abandon only closes its store (a start-up that failed
// after Join, process.Close).
func (m *Member) Abandon() {
	m.halt()
	m.store.Close()
}

func (m *Member) halt() {
	if m.stop != nil {
		m.stop()
		<-m.stopped
	}
}

// run heartbeats until ctx ends. After a failure the next attempt backs
// off exponentially, with jitter so that many nodes do not retry in step
// against a recovering database, up to SuspectAfter.
func (m *Member) run(ctx context.Context) {
	fails, beats := 0, 0
	joined := false
	for {
		err := m.beat(ctx, !joined, beats%purgeEvery == purgeEvery-1)
		delay := m.cfg.HeartbeatInterval
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			fails++
			m.metrics.failures.Inc()
			delay = backoff(m.cfg.HeartbeatInterval, m.cfg.SuspectAfter, fails)
			m.logger.Warn("cluster heartbeat failed", logkey.Err, err, "failures", fails, "retryIn", delay)
		default:
			if !joined {
				m.logger.Info("joined the cluster", "roles", m.info.Roles)
			} else if fails > 0 {
				m.logger.Info("cluster heartbeat recovered", "failures", fails)
			}
			joined, fails = true, 0
			beats++
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
}

// backoff is interval·2^fails, at most limit, with "equal jitter": a
// random value in [d/2, d].
func backoff(interval, limit time.Duration, fails int) time.Duration {
	d := interval
	for i := 0; i < fails && d < limit; i++ {
		d *= 2
	}
	d = min(d, limit)
	return d/2 + mrand.N(d/2+1)
}

// beat writes one heartbeat, retries assignments whose write failed,
// publishes the owned partitions' lag, and purges when asked.
func (m *Member) beat(ctx context.Context, join, purge bool) error {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.SuspectAfter)
	defer cancel()
	start := time.Now()
	windows, timed := m.stageWindows()
	conflict, err := m.store.heartbeat(ctx, m.cfg, m.info, m.instance, join, windows, timed)
	if err != nil {
		m.mu.Lock()
		m.unsent = windows // the next heartbeat carries them on
		m.mu.Unlock()
		return err
	}
	m.metrics.latency.Observe(time.Since(start).Seconds())
	if conflict {
		m.metrics.idConflicts.Inc()
		m.logger.Error("another live process heartbeats under this node id; give each process its own node id", "host", m.info.Host)
	}
	m.retryAssignments(ctx)
	if err := m.publishLag(ctx); err != nil {
		return err
	}
	if purge {
		p, err := m.store.purge(ctx, m.cfg.Retention)
		if err != nil {
			return err
		}
		if p.Nodes+p.Groups > 0 {
			m.logger.Info("cluster retention removed nodes and groups", "nodes", p.Nodes, "groups", p.Groups, "retention", m.cfg.Retention)
		}
	}
	return nil
}

// WatchStages makes each heartbeat publish what take (a stages.Recorder's
// Take) returns: the stage durations this node observed since the previous
// heartbeat, which the live page reads from the registry. Call it before
// Start.
func (m *Member) WatchStages(take func() []stages.Window) {
	m.mu.Lock()
	m.stages = take
	m.mu.Unlock()
}

// stageWindows takes the stage windows to publish, with those of failed
// heartbeats added in (their spans add up). timed is false when the node
// times no stage.
func (m *Member) stageWindows() (ws []stages.Window, timed bool) {
	m.mu.Lock()
	take, unsent := m.stages, m.unsent
	m.unsent = nil
	m.mu.Unlock()
	if take == nil {
		return nil, false
	}
	fresh := take()
	ws = make([]stages.Window, 0, len(stages.All))
	for _, s := range stages.All {
		var parts []stages.Window
		span := 0.0
		for _, w := range append(unsent, fresh...) {
			if w.Stage == s {
				parts = append(parts, w)
				span += w.Seconds
			}
		}
		if len(parts) > 0 {
			w := stages.Merge(parts...)
			w.Seconds = span
			ws = append(ws, w)
		}
	}
	return ws, true
}

// WatchStats makes the heartbeat publish the true lag, gap and blocking
// offset of the partitions group's consumer owns, from stats (every
// partition the consumer has owned, from its stats: pcon's Consumer.Stats).
// Call it before the consumer runs.
func (m *Member) WatchStats(group string, stats func() []PartitionProgress) {
	m.mu.Lock()
	m.stats[group] = stats
	m.mu.Unlock()
	m.metrics.moves.WithLabelValues(group)
	m.metrics.ready.WithLabelValues(group)
}

// OnAssigned is the consumer's assignment hook (pcon's Config.OnAssigned):
// it records this node as the owner of each partition, with a new version.
func (m *Member) OnAssigned(group string, ps []PartitionEvent) {
	for _, p := range ps {
		c := claim{Group: group, Topic: p.Topic, Partition: p.Partition}
		o := &owned{epoch: p.Epoch, offset: p.Offset, assignedAt: time.Now(), baseline: m.handled(group, c), writing: true}
		m.mu.Lock()
		m.owned[c] = o
		m.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), hookTimeout)
		err := m.writeAssignment(ctx, c, o, false)
		cancel()
		if err != nil {
			m.logger.Warn("record assignment failed; the heartbeat retries it", "group", group, "topic", p.Topic, "partition", p.Partition, logkey.Err, err)
		}
	}
}

// OnRevoked is the consumer's revocation hook (pcon's Config.OnRevoked): it
// releases each partition and records the handoff (committed offset,
// records completed). A release from an owner that was superseded meanwhile
// changes nothing.
func (m *Member) OnRevoked(group string, ps []PartitionEvent) {
	for _, p := range ps {
		c := claim{Group: group, Topic: p.Topic, Partition: p.Partition}
		m.mu.Lock()
		o := m.owned[c]
		delete(m.owned, c)
		var version int64
		if o != nil {
			version = o.version
		}
		m.mu.Unlock()
		if version == 0 {
			continue // never written: nothing in the registry names this node
		}
		ctx, cancel := context.WithTimeout(context.Background(), hookTimeout)
		err := m.store.release(ctx, c, m.cfg.NodeID, version, p.Epoch, p.Offset, p.Completed)
		cancel()
		switch {
		case errors.Is(err, ErrSuperseded):
			m.logger.Info("release refused: the partition was assigned again since", "group", group, "topic", p.Topic, "partition", p.Partition, "version", version)
		case err != nil:
			m.logger.Warn("record handoff failed", "group", group, "topic", p.Topic, "partition", p.Partition, logkey.Err, err)
		}
	}
}

// writeAssignment writes o, unless the partition was revoked meanwhile. A
// late write refused because another live node owns the row drops the
// claim: the group moved the partition on, and that owner's hooks rule.
func (m *Member) writeAssignment(ctx context.Context, c claim, o *owned, late bool) error {
	version, moved, err := m.store.assign(ctx, c, m.cfg.NodeID, o.epoch, o.offset, late)
	m.mu.Lock()
	o.writing = false
	m.mu.Unlock()
	if errors.Is(err, ErrSuperseded) {
		m.mu.Lock()
		if m.owned[c] == o {
			delete(m.owned, c)
		}
		m.mu.Unlock()
		return err
	}
	if err != nil {
		return err
	}
	if moved {
		m.metrics.moves.WithLabelValues(c.Group).Inc()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.owned[c] == o {
		o.version = version
	}
	return nil
}

func (m *Member) retryAssignments(ctx context.Context) {
	m.mu.Lock()
	var (
		pending []claim
		claims  []*owned
	)
	for c, o := range m.owned {
		if o.version == 0 && !o.writing {
			o.writing = true
			pending, claims = append(pending, c), append(claims, o)
		}
	}
	m.mu.Unlock()
	for i, c := range pending {
		if err := m.writeAssignment(ctx, c, claims[i], true); err != nil {
			m.logger.Warn("record assignment failed", "group", c.Group, "topic", c.Topic, "partition", c.Partition, logkey.Err, err)
		}
	}
}

// handled counts the records the partition has handled so far (pcon's
// counters run across assignments).
func (m *Member) handled(group string, c claim) uint64 {
	m.mu.Lock()
	stats := m.stats[group]
	m.mu.Unlock()
	if stats == nil {
		return 0
	}
	for _, p := range stats() {
		if p.Topic == c.Topic && p.Partition == c.Partition {
			return p.Processed + p.DeadLettered
		}
	}
	return 0
}

func (m *Member) publishLag(ctx context.Context) error {
	m.mu.Lock()
	watched := make(map[string]func() []PartitionProgress, len(m.stats))
	for g, f := range m.stats {
		watched[g] = f
	}
	m.mu.Unlock()
	var reports []lagReport
	for group, stats := range watched {
		for _, p := range stats() {
			if !p.Assigned {
				continue
			}
			c := claim{Group: group, Topic: p.Topic, Partition: p.Partition}
			m.mu.Lock()
			o := m.owned[c]
			var r lagReport
			if o != nil && o.version > 0 && !o.superseded {
				if !o.ready && p.Processed+p.DeadLettered > o.baseline {
					o.ready = true
					m.metrics.ready.WithLabelValues(group).Observe(time.Since(o.assignedAt).Seconds())
				}
				r = lagReport{claim: c, Version: o.version, TrueLag: p.TrueLag, GapSize: int64(p.GapSize), Blocking: p.Blocking, Handled: o.ready,
					Processed: int64(p.Processed), DeadLettered: int64(p.DeadLettered)}
			}
			m.mu.Unlock()
			if r.Version > 0 {
				reports = append(reports, r)
			}
		}
	}
	refused, err := m.store.publishLag(ctx, m.cfg.NodeID, reports)
	if err != nil {
		return err
	}
	for _, c := range refused {
		// Assigned again since: stop reporting the partition. The release,
		// when the group revokes it here too, is still recorded as a handoff
		// (refused).
		m.mu.Lock()
		if o := m.owned[c]; o != nil {
			o.superseded = true
		}
		m.mu.Unlock()
		m.logger.Info("lag not published: the partition was assigned again since", "group", c.Group, "topic", c.Topic, "partition", c.Partition)
	}
	return nil
}

func buildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			return s.Value[:12]
		}
	}
	if bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "unknown"
}

// memberMetrics are what a Member measures of itself.
type memberMetrics struct {
	latency     prometheus.Histogram
	failures    prometheus.Counter
	idConflicts prometheus.Counter
	viewReads   prometheus.Counter
	moves       *prometheus.CounterVec
	ready       *prometheus.HistogramVec
}

func newMemberMetrics(reg prometheus.Registerer) (*memberMetrics, error) {
	m := &memberMetrics{
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "cluster_heartbeat_write_seconds",
			Help:    "Time to write one cluster heartbeat to the database.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cluster_heartbeat_failures_total",
			Help: "Cluster heartbeats that failed (the node backs off and shows as SUSPECT).",
		}),
		idConflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cluster_node_id_conflicts_total",
			Help: "Heartbeats that found this node's row written by another process: two live processes claim one node id.",
		}),
		viewReads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cluster_view_reads_total",
			Help: "Reads of the cluster view from the database (at most one a second, whatever the request rate).",
		}),
		moves: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cluster_partition_moves_total",
			Help: "Partitions this node took over from another node, by consumer group.",
		}, []string{"group"}),
		ready: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "cluster_assign_ready_seconds",
			Help:    "Time from a partition's assignment to its first handled record, as seen by the heartbeat (resolution: one heartbeat interval).",
			Buckets: []float64{.5, 1, 2, 5, 10, 30, 60, 300},
		}, []string{"group"}),
	}
	for _, c := range []prometheus.Collector{m.latency, m.failures, m.idConflicts, m.viewReads, m.moves, m.ready} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("cluster metrics: %w", err)
		}
	}
	return m, nil
}
