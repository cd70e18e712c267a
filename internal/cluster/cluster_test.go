package cluster

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/loopers/commerce-pipeline/internal/testenv"
)

var quiet = slog.New(slog.DiscardHandler)

// fast heartbeats so status changes take a fraction of a second.
func fastConfig(id string) Config {
	return Config{NodeID: id, HeartbeatInterval: 40 * time.Millisecond, SuspectAfter: 200 * time.Millisecond, DownAfter: 600 * time.Millisecond, Retention: time.Hour}
}

func join(t *testing.T, url string, cfg Config, service string) *Member {
	t.Helper()
	m, err := Join(url, cfg, Info{Service: service, Roles: []string{"test"}}, quiet, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func openStore(t *testing.T, url string) *Store {
	t.Helper()
	st, err := Open(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}

// statuses maps node id → status in the current view.
func statuses(t *testing.T, st *Store) map[string]string {
	t.Helper()
	v, err := st.View(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, n := range v.Nodes {
		out[n.ID] = n.Status
	}
	return out
}

func waitStatus(t *testing.T, st *Store, want map[string]string) {
	t.Helper()
	waitEqual(t, "node statuses", want, func() map[string]string { return statuses(t, st) })
}

// waitEqual waits up to 5 s for read to return want.
func waitEqual[T any](t *testing.T, what string, want T, read func() T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		diff := cmp.Diff(want, read())
		if diff == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s (-want +got):\n%s", what, diff)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMembershipLifecycle: a node is ALIVE while it heartbeats, SUSPECT and
// then DOWN once it stops (a frozen process), ALIVE again under the same id
// in the same row after a restart, and LEFT after a graceful leave.
func TestMembershipLifecycle(t *testing.T) {
	t.Parallel()
	url := testenv.DatabaseURL(t)
	st := openStore(t, url)

	a := join(t, url, fastConfig("node-a"), "svc")
	a.Start(context.Background())
	waitStatus(t, st, map[string]string{"node-a": StatusAlive})

	a.Abandon() // heartbeats stop as if the process were frozen
	waitStatus(t, st, map[string]string{"node-a": StatusSuspect})
	waitStatus(t, st, map[string]string{"node-a": StatusDown})

	again := join(t, url, fastConfig("node-a"), "svc")
	again.Start(context.Background())
	waitStatus(t, st, map[string]string{"node-a": StatusAlive})
	again.Leave()
	waitStatus(t, st, map[string]string{"node-a": StatusLeft})
}

// TestHeartbeatSurvivesDatabaseOutage: with a database that refuses
// connections the member keeps running and backs off; it neither stops
// nor panics, and Leave returns.
func TestHeartbeatSurvivesDatabaseOutage(t *testing.T) {
	t.Parallel()
	m := join(t, "postgres://nobody@127.0.0.1:1/none?connect_timeout=1", fastConfig("lonely"), "svc")
	reg := prometheus.NewRegistry()
	mm, err := newMemberMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.metrics = mm
	m.Start(context.Background())
	deadline := time.Now().Add(5 * time.Second)
	for testutilCount(t, reg, "cluster_heartbeat_failures_total") < 2 {
		if time.Now().After(deadline) {
			t.Fatal("no failed heartbeat was retried")
		}
		time.Sleep(20 * time.Millisecond)
	}
	m.Leave()
}

func testutilCount(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

// TestBackoff: the delay doubles per failure up to the limit, with jitter in
// [d/2, d].
func TestBackoff(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		fails    int
		min, max time.Duration
	}{
		{"first failure", 1, time.Second, 2 * time.Second},
		{"third failure", 3, 4 * time.Second, 8 * time.Second},
		{"capped", 20, 5 * time.Second, 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for range 100 {
				d := backoff(time.Second, 10*time.Second, tc.fails)
				if d < tc.min || d > tc.max {
					t.Fatalf("backoff = %s, want in [%s, %s]", d, tc.min, tc.max)
				}
			}
		})
	}
}

// TestRevokedOwnerLateWriteRejected: node A owned a partition, node B was
// assigned it since; A's late release and lag report change nothing, its
// handoff is recorded as not applied, and B's own release applies.
func TestRevokedOwnerLateWriteRejected(t *testing.T) {
	t.Parallel()
	url := testenv.DatabaseURL(t)
	st := openStore(t, url)
	a, b := join(t, url, fastConfig("a"), "consumer"), join(t, url, fastConfig("b"), "consumer")
	t.Cleanup(func() { a.store.Close(); b.store.Close() })
	stats := func() []PartitionProgress {
		return []PartitionProgress{{Topic: "t", Partition: 0, Assigned: true, TrueLag: 7, Blocking: -1, Processed: 3, DeadLettered: 1}}
	}
	a.WatchStats("g", stats)
	b.WatchStats("g", stats)
	ctx := context.Background()

	a.OnAssigned("g", []PartitionEvent{{Topic: "t", Partition: 0, Epoch: 1, Offset: 0}})
	b.OnAssigned("g", []PartitionEvent{{Topic: "t", Partition: 0, Epoch: 1, Offset: 5}})
	if err := a.publishLag(ctx); err != nil { // A still believes it owns p0
		t.Fatal(err)
	}
	a.OnRevoked("g", []PartitionEvent{{Topic: "t", Partition: 0, Epoch: 1, Offset: 9, Completed: 9}})

	p := onlyPartition(t, st)
	if diff := cmp.Diff(partitionSummary{Owner: "b", Version: 2, Moves: 1, Released: false, Lag: nil, HandoffBy: "a", HandoffApplied: false}, summarize(p)); diff != "" {
		t.Fatalf("after A's late writes (-want +got):\n%s", diff)
	}

	if err := b.publishLag(ctx); err != nil {
		t.Fatal(err)
	}
	seven := int64(7)
	b.OnRevoked("g", []PartitionEvent{{Topic: "t", Partition: 0, Epoch: 1, Offset: 12, Completed: 7}})
	p = onlyPartition(t, st)
	if diff := cmp.Diff(partitionSummary{Owner: "b", Version: 2, Moves: 1, Released: true, Lag: &seven, HandoffBy: "b", HandoffApplied: true}, summarize(p)); diff != "" {
		t.Fatalf("after B's release (-want +got):\n%s", diff)
	}
	if p.LastHandoff.Committed != 12 || p.LastHandoff.Completed != 7 {
		t.Errorf("handoff = %+v, want committed 12, completed 7", p.LastHandoff)
	}
	if p.Processed == nil || *p.Processed != 3 || p.DeadLettered == nil || *p.DeadLettered != 1 {
		t.Errorf("counters published with the heartbeat: processed %v, dead-lettered %v; want 3 and 1", p.Processed, p.DeadLettered)
	}
}

type partitionSummary struct {
	Owner          string
	Version, Moves int64
	Released       bool
	Lag            *int64
	HandoffBy      string
	HandoffApplied bool
}

func summarize(p Partition) partitionSummary {
	s := partitionSummary{Owner: p.Owner, Version: p.Version, Moves: p.Moves, Released: p.ReleasedAt != nil, Lag: p.TrueLag}
	if p.LastHandoff != nil {
		s.HandoffBy, s.HandoffApplied = p.LastHandoff.NodeID, p.LastHandoff.Applied
	}
	return s
}

func onlyPartition(t *testing.T, st *Store) Partition {
	t.Helper()
	v, err := st.View(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Groups) != 1 || len(v.Groups[0].Partitions) != 1 {
		t.Fatalf("want one group with one partition, got %+v", v.Groups)
	}
	return v.Groups[0].Partitions[0]
}

// TestRetention: nodes DOWN or LEFT for longer than the retention are
// removed; recent ones, and live ones however old, stay.
func TestRetention(t *testing.T) {
	t.Parallel()
	url := testenv.DatabaseURL(t)
	st := openStore(t, url)
	ctx := context.Background()
	if _, err := st.pool.Exec(ctx, `INSERT INTO cluster_nodes (node_id, service, host, version, started_at, last_heartbeat, suspect_after, down_after, left_at) VALUES
		('left-long-ago', 's', 'h', 'v', now() - interval '3 days', now() - interval '2 days', '6s', '20s', now() - interval '2 days'),
		('down-long-ago', 's', 'h', 'v', now() - interval '3 days', now() - interval '2 days', '6s', '20s', NULL),
		('left-recently', 's', 'h', 'v', now() - interval '3 days', now() - interval '1 minute', '6s', '20s', now() - interval '1 minute'),
		('alive-for-days', 's', 'h', 'v', now() - interval '3 days', now(), '6s', '20s', NULL)`); err != nil {
		t.Fatal(err)
	}
	p, err := st.purge(ctx, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if p.Nodes != 2 {
		t.Errorf("purged %d nodes, want 2", p.Nodes)
	}
	if diff := cmp.Diff(map[string]string{"left-recently": StatusLeft, "alive-for-days": StatusAlive}, statuses(t, st)); diff != "" {
		t.Errorf("nodes after purge (-want +got):\n%s", diff)
	}
}

// TestOneRetention: a node purging with a short retention keeps what a live
// node with a longer one still keeps (nodes, handoffs), until that node is
// gone; partition rows of a group that no longer exists go, those of a
// group with a live owner or recent activity stay.
func TestOneRetention(t *testing.T) {
	t.Parallel()
	url := testenv.DatabaseURL(t)
	st := openStore(t, url)
	ctx := context.Background()
	exec := func(q string) {
		t.Helper()
		if _, err := st.pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	exec(`INSERT INTO cluster_nodes (node_id, service, host, version, started_at, last_heartbeat, suspect_after, down_after, left_at, retention) VALUES
		('patient', 's', 'h', 'v', now(), now(), '6s', '20s', NULL, '72 hours'),
		('left-2-days-ago', 's', 'h', 'v', now() - interval '3 days', now() - interval '2 days', '6s', '20s', now() - interval '2 days', '24 hours'),
		('owner', 's', 'h', 'v', now() - interval '3 days', now(), '6s', '20s', NULL, '24 hours')`)
	exec(`INSERT INTO cluster_handoffs (group_id, topic, partition, node_id, version, epoch, committed, completed, applied, released_at) VALUES
		('gone', 't', 0, 'left-2-days-ago', 1, 1, 5, 5, true, now() - interval '2 days')`)
	exec(`INSERT INTO cluster_assignments (group_id, topic, partition, node_id, epoch, assigned_at, start_offset, released_at, lag_at) VALUES
		('gone', 't', 0, 'left-2-days-ago', 1, now() - interval '3 days', 0, now() - interval '2 days', now() - interval '2 days'),
		('gone', 't', 1, 'purged-long-ago', 1, now() - interval '9 days', 0, NULL, now() - interval '8 days'),
		('owned', 't', 0, 'owner', 1, now() - interval '3 days', 0, NULL, now() - interval '3 days'),
		('recent', 't', 0, 'left-2-days-ago', 1, now() - interval '3 days', 0, now() - interval '1 hour', NULL)`)
	rows := func(q string) int {
		t.Helper()
		var n int
		if err := st.pool.QueryRow(ctx, q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	groups := func() string {
		t.Helper()
		var g string
		if err := st.pool.QueryRow(ctx, `SELECT string_agg(DISTINCT group_id, ',' ORDER BY group_id) FROM cluster_assignments`).Scan(&g); err != nil {
			t.Fatal(err)
		}
		return g
	}

	// One day is short of what "patient" keeps: nothing goes.
	if p, err := st.purge(ctx, 24*time.Hour); err != nil || p != (purged{}) {
		t.Fatalf("purge while a node keeps 72 h: %+v, %v; want nothing", p, err)
	}
	if n := rows(`SELECT count(*) FROM cluster_handoffs`); n != 1 || groups() != "gone,owned,recent" {
		t.Errorf("after a purge inside the longest retention: %d handoffs, groups %s", n, groups())
	}

	exec(`UPDATE cluster_nodes SET left_at = now() WHERE node_id = 'patient'`)
	p, err := st.purge(ctx, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if p != (purged{Nodes: 1, Groups: 1}) {
		t.Errorf("purged %+v, want the node that left 2 days ago and the group gone", p)
	}
	if n := rows(`SELECT count(*) FROM cluster_handoffs`); n != 0 || groups() != "owned,recent" {
		t.Errorf("after the purge: %d handoffs, groups %s; want 0 and owned,recent", n, groups())
	}
}

// TestNodeIDClaimedTwice: two live processes heartbeating under one node id
// both count and log it, and the view shows when; a process restarted
// under its id (the old one gone) reports nothing.
func TestNodeIDClaimedTwice(t *testing.T) {
	t.Parallel()
	url := testenv.DatabaseURL(t)
	st := openStore(t, url)
	view := func() Node {
		t.Helper()
		v, err := st.View(context.Background())
		if err != nil || len(v.Nodes) != 1 {
			t.Fatalf("view: %+v, %v", v.Nodes, err)
		}
		return v.Nodes[0]
	}
	start := func() (*Member, *prometheus.Registry) {
		reg := prometheus.NewRegistry()
		m, err := Join(url, fastConfig("twin"), Info{Service: "svc"}, quiet, reg)
		if err != nil {
			t.Fatal(err)
		}
		m.Start(context.Background())
		return m, reg
	}

	first, reg1 := start()
	waitStatus(t, st, map[string]string{"twin": StatusAlive})
	first.Abandon() // a crash; then a restart under the same id
	again, reg2 := start()
	t.Cleanup(again.Leave)
	// A few heartbeats of the restarted process.
	deadline := time.Now().Add(5 * time.Second)
	for n := view(); n.LastHeartbeat.Sub(n.StartedAt) < 200*time.Millisecond; n = view() {
		if time.Now().After(deadline) {
			t.Fatal("the restarted process does not heartbeat")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := view().IDConflictAt; n != nil || testutilCount(t, reg1, "cluster_node_id_conflicts_total")+testutilCount(t, reg2, "cluster_node_id_conflicts_total") != 0 {
		t.Fatalf("a restart under the same id was reported as a conflict (at %v)", n)
	}

	twin, reg3 := start()
	t.Cleanup(twin.Leave)
	for testutilCount(t, reg2, "cluster_node_id_conflicts_total") == 0 || testutilCount(t, reg3, "cluster_node_id_conflicts_total") == 0 {
		if time.Now().After(deadline.Add(5 * time.Second)) {
			t.Fatalf("conflicts counted: %v and %v; want both processes to report",
				testutilCount(t, reg2, "cluster_node_id_conflicts_total"), testutilCount(t, reg3, "cluster_node_id_conflicts_total"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if view().IDConflictAt == nil {
		t.Error("the view does not show the conflict")
	}
}

// TestLateAssignment: an assignment written late (a retry after the hook's
// write failed) does not take a row another live node owns, and takes it
// once that node has left; a fresh assignment always does.
//
//nolint:paralleltest // the cases run in turn: each starts from the assignment the previous one left
func TestLateAssignment(t *testing.T) {
	t.Parallel()
	url := testenv.DatabaseURL(t)
	st := openStore(t, url)
	ctx := context.Background()
	a, b := join(t, url, fastConfig("a"), "consumer"), join(t, url, fastConfig("b"), "consumer")
	t.Cleanup(func() { b.store.Close() })
	if _, err := a.store.heartbeat(ctx, a.cfg, a.info, a.instance, true, nil, false); err != nil {
		t.Fatal(err)
	}
	p0 := claim{Group: "g", Topic: "t", Partition: 0}
	if _, _, err := st.assign(ctx, p0, "a", 1, 0, false); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name      string
		late      bool
		before    func()
		wantErr   error
		wantOwner string
	}{
		{name: "late, the owner is alive", late: true, wantErr: ErrSuperseded, wantOwner: "a"},
		{name: "late, the owner left", late: true, before: a.Leave, wantOwner: "b"},
		{name: "fresh, whoever owns it", late: false, wantOwner: "b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.before != nil {
				tc.before()
			}
			_, _, err := st.assign(ctx, p0, "b", 1, 0, tc.late)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("assign: %v, want %v", err, tc.wantErr)
			}
			if got := onlyPartition(t, st).Owner; got != tc.wantOwner {
				t.Errorf("owner %s, want %s", got, tc.wantOwner)
			}
		})
	}
}

// TestCollector: the view's metrics count nodes by service and status (every
// status present, zeros included), the relay's terms, and the unreleased
// partitions per group and node.
func TestCollector(t *testing.T) {
	t.Parallel()
	url := testenv.DatabaseURL(t)
	st := openStore(t, url)
	ctx := context.Background()
	for _, q := range []string{
		`INSERT INTO cluster_nodes (node_id, service, host, version, started_at, last_heartbeat, suspect_after, down_after, left_at) VALUES
			('a', 'svc', 'h', 'v', now(), now(), '6s', '20s', NULL),
			('b', 'svc', 'h', 'v', now(), now(), '6s', '20s', now())`,
		`INSERT INTO relay_lease (name, owner, token, lease_until, acquired_at) VALUES ('outbox-relay', 'r', 4, now() + interval '5s', now())`,
		`INSERT INTO cluster_assignments (group_id, topic, partition, node_id, epoch, assigned_at, start_offset, released_at) VALUES
			('g', 't', 0, 'a', 1, now(), 0, NULL), ('g', 't', 1, 'a', 1, now(), 0, NULL), ('g', 't', 2, 'b', 1, now(), 0, now())`,
	} {
		if _, err := st.pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	m := join(t, url, fastConfig("collector"), "svc") // not started: it writes no row
	t.Cleanup(m.Abandon)
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(m, quiet))
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			key := f.GetName()
			for _, l := range m.GetLabel() {
				key += " " + l.GetName() + "=" + l.GetValue()
			}
			got[key] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	want := map[string]float64{
		"cluster_nodes service=svc status=ALIVE": 1, "cluster_nodes service=svc status=SUSPECT": 0,
		"cluster_nodes service=svc status=DOWN": 0, "cluster_nodes service=svc status=LEFT": 1,
		"cluster_leader_changes_total":       4,
		"cluster_assignments group=g node=a": 2,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
}

// TestViewFloodSparesHeartbeat: readers asking for the view as fast as they
// can, 64 at a time, while the database answers it slowly (a lock holds its
// partition table 400 ms at a time), never make the node read SUSPECT, and
// the registry's pool serves them one read a second (ViewEvery): every other
// connection it hands out goes to the heartbeat.
//
//nolint:paralleltest // timing: heartbeats must land within 500 ms during a 64-reader flood, and it counts database reads per second
func TestViewFloodSparesHeartbeat(t *testing.T) {
	url := testenv.DatabaseURL(t)
	st := openStore(t, url)
	cfg := Config{NodeID: "flooded", HeartbeatInterval: 100 * time.Millisecond, SuspectAfter: 500 * time.Millisecond, DownAfter: time.Second, Retention: time.Hour}
	reg := prometheus.NewRegistry()
	m, err := Join(url, cfg, Info{Service: "svc"}, quiet, reg)
	if err != nil {
		t.Fatal(err)
	}
	m.Start(context.Background())
	t.Cleanup(m.Leave)
	waitStatus(t, st, map[string]string{"flooded": StatusAlive})

	beats := func() int64 {
		var n int64
		if err := st.pool.QueryRow(context.Background(), `SELECT heartbeats FROM cluster_nodes WHERE node_id = 'flooded'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	beats0, acquired0, reads0 := beats(), m.store.pool.Stat().AcquireCount(), testutilCount(t, reg, "cluster_view_reads_total")
	start := time.Now()
	const flood = 3 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), flood)
	defer cancel()
	var (
		wg    sync.WaitGroup
		calls atomic.Int64
	)
	for range 64 {
		wg.Go(func() {
			for ctx.Err() == nil {
				if _, err := m.View(ctx); err != nil && ctx.Err() == nil {
					t.Error(err)
					return
				}
				calls.Add(1)
			}
		})
	}
	// The slow database: each view read waits for the lock, holding one of
	// the pool's two connections meanwhile.
	wg.Go(func() {
		for ctx.Err() == nil {
			tx, err := st.pool.Begin(context.Background())
			if err != nil {
				t.Error(err)
				return
			}
			if _, err := tx.Exec(context.Background(), `LOCK TABLE cluster_assignments IN ACCESS EXCLUSIVE MODE`); err != nil {
				t.Error(err)
			}
			time.Sleep(400 * time.Millisecond)
			_ = tx.Commit(context.Background())
			time.Sleep(20 * time.Millisecond)
		}
	})
	var unhealthy []string
	for ctx.Err() == nil {
		if s := statuses(t, st)["flooded"]; s != StatusAlive {
			unhealthy = append(unhealthy, s)
		}
		time.Sleep(20 * time.Millisecond)
	}
	wg.Wait()
	elapsed := time.Since(start)
	if len(unhealthy) > 0 {
		t.Errorf("the node read %v during the flood", unhealthy)
	}
	reads := testutilCount(t, reg, "cluster_view_reads_total") - reads0
	// The other acquisitions are the heartbeats' (one each).
	others := m.store.pool.Stat().AcquireCount() - acquired0 - (beats() - beats0)
	limit := elapsed.Seconds()/ViewEvery.Seconds() + 2
	if reads > limit || float64(others) > limit {
		t.Errorf("%d view calls in %v read the database %v times and took %d connections besides the heartbeats'; want at most %.0f",
			calls.Load(), elapsed.Round(time.Millisecond), reads, others, limit)
	}
	t.Logf("%d view calls in %v: %v database reads", calls.Load(), elapsed.Round(time.Millisecond), reads)
}

// TestAssignmentWrittenOnce: while the hook's write of an assignment waits
// on the database, the heartbeats' retry of unwritten assignments leaves it
// alone. Written twice, the row's version would count two, the answer that
// came back last could set the member's version to one, and every lag report
// after it would be refused as superseded: the partition would never show
// as handled.
func TestAssignmentWrittenOnce(t *testing.T) {
	t.Parallel()
	url := testenv.DatabaseURL(t)
	st := openStore(t, url)
	ctx := t.Context()
	m := join(t, url, fastConfig("a"), "consumer")
	var processed atomic.Uint64
	m.WatchStats("g", func() []PartitionProgress {
		return []PartitionProgress{{Topic: "t", Partition: 0, Assigned: true, Processed: processed.Load()}}
	})
	m.Start(ctx)
	t.Cleanup(m.Leave)
	waitStatus(t, st, map[string]string{"a": StatusAlive})

	// Writes to the registry wait until the lock goes, for less than the
	// heartbeat's timeout (SuspectAfter): several heartbeats come meanwhile.
	tx, err := st.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE cluster_assignments IN EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	hooked := make(chan struct{})
	go func() {
		defer close(hooked)
		m.OnAssigned("g", []PartitionEvent{{Topic: "t", Partition: 0, Epoch: 1}})
	}()
	time.Sleep(fastConfig("a").SuspectAfter * 3 / 4)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	<-hooked
	processed.Store(1)

	type row struct {
		Version int64
		Handled bool
	}
	waitEqual(t, "the assignment's row", row{Version: 1, Handled: true}, func() row {
		var r row
		if err := st.pool.QueryRow(ctx, `SELECT version, first_handled_at IS NOT NULL FROM cluster_assignments
			WHERE group_id = 'g' AND topic = 't' AND partition = 0`).Scan(&r.Version, &r.Handled); err != nil {
			t.Fatal(err)
		}
		return r
	})
}
