package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/loopers/commerce-pipeline/internal/stages"
	"github.com/loopers/commerce-pipeline/internal/testenv"
)

// latency returns each node's published stage windows as stage → count.
func latency(t *testing.T, st *Store) map[string]map[string]uint64 {
	t.Helper()
	v, err := st.View(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]uint64{}
	for _, n := range v.Nodes {
		out[n.ID] = map[string]uint64{}
		for _, w := range n.Latency {
			out[n.ID][w.Stage] = w.Count
		}
	}
	return out
}

// TestStageWindowsPublished: a node's heartbeat publishes the stage windows
// it observed since the previous one, and the next heartbeat replaces them
// (empty once nothing more was seen); a node that times no stage shows none.
//
// The heartbeats come a second apart (not fastConfig's 40 ms): each window
// must be read before the next heartbeat replaces it, and a loaded machine
// can stall a reader for longer than 40 ms.
func TestStageWindowsPublished(t *testing.T) {
	t.Parallel()
	url := testenv.DatabaseURL(t)
	st := openStore(t, url)
	rec, err := stages.NewRecorder(prometheus.NewRegistry(), []string{"t.v1"}, stages.Broker, stages.Apply)
	if err != nil {
		t.Fatal(err)
	}
	rec.Observe(stages.Apply, "t.v1", 3*time.Millisecond)
	rec.Observe(stages.Apply, "t.v1", 5*time.Millisecond)
	rec.Observe(stages.Broker, "t.v1", time.Millisecond)

	slow := func(id string) Config {
		return Config{NodeID: id, HeartbeatInterval: time.Second, SuspectAfter: 3 * time.Second, DownAfter: 6 * time.Second, Retention: time.Hour}
	}
	timer := join(t, url, slow("timer"), "svc")
	timer.WatchStages(rec.Take)
	plain := join(t, url, slow("plain"), "svc")
	timer.Start(context.Background())
	plain.Start(context.Background())
	defer timer.Leave()
	defer plain.Leave()

	waitLatency := func(want map[string]map[string]uint64) {
		t.Helper()
		waitEqual(t, "published stage counts", want, func() map[string]map[string]uint64 { return latency(t, st) })
	}
	// The first heartbeat carries what was observed before it; a later one
	// what came after, alone.
	waitLatency(map[string]map[string]uint64{"timer": {stages.Apply: 2, stages.Broker: 1}, "plain": {}})
	rec.Observe(stages.Apply, "t.v1", 4*time.Millisecond)
	waitLatency(map[string]map[string]uint64{"timer": {stages.Apply: 1}, "plain": {}})
	waitLatency(map[string]map[string]uint64{"timer": {}, "plain": {}})
}

// TestStageWindowsCarriedOver: windows taken for a heartbeat that failed are
// added to the next one, spans included.
func TestStageWindowsCarriedOver(t *testing.T) {
	t.Parallel()
	rec, err := stages.NewRecorder(prometheus.NewRegistry(), nil, stages.Apply)
	if err != nil {
		t.Fatal(err)
	}
	m := &Member{}
	m.WatchStages(rec.Take)
	rec.Observe(stages.Apply, "x", 2*time.Millisecond)
	first, timed := m.stageWindows()
	if !timed || len(first) != 1 {
		t.Fatalf("first windows: %+v (timed %v)", first, timed)
	}
	m.unsent = first // as beat does when the heartbeat fails
	rec.Observe(stages.Apply, "x", 8*time.Millisecond)
	got, _ := m.stageWindows()
	if len(got) != 1 || got[0].Count != 2 || got[0].Max != .008 || got[0].Seconds < first[0].Seconds {
		t.Errorf("carried-over window: %+v, after %+v", got, first)
	}
	if ws, timed := (&Member{}).stageWindows(); timed || ws != nil {
		t.Errorf("a node that times nothing publishes %+v (timed %v)", ws, timed)
	}
}
