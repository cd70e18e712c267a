package api_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/loopers/commerce-pipeline/internal/cluster"
	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/api"
)

// lateView lets a test open the cluster store once the environment's
// database exists.
type lateView struct{ st *cluster.Store }

func (v *lateView) View(ctx context.Context) (cluster.View, error) { return v.st.View(ctx) }

// TestClusterView: GET /api/v1/cluster, on the admin handler only, matches
// the OpenAPI schema both when
// the registry is empty and when every optional part is filled in (a left
// node, a leader change after expiry, a released partition with a handoff,
// one with lag), and says what the tables hold.
func TestClusterView(t *testing.T) {
	t.Parallel()
	var cv lateView
	e := newEnv(t, func(d *api.Deps) { d.Cluster = &cv })
	st, err := cluster.Open(e.url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	cv.st = st

	if r := e.do(t, "GET", "/api/v1/cluster", "", ""); r.Status != http.StatusNotFound {
		t.Errorf("the public handler answers the cluster view: %d", r.Status)
	}
	empty := decode[cluster.View](t, e.adminGet(t, "/api/v1/cluster"), http.StatusOK)
	if len(empty.Nodes)+len(empty.Groups)+len(empty.LeaderHistory) != 0 || empty.Leader != nil {
		t.Fatalf("empty registry gave %+v", empty)
	}

	e.db.Exec(t, `INSERT INTO cluster_nodes (node_id, service, roles, host, version, started_at, last_heartbeat, suspect_after, down_after, left_at) VALUES
		('api-1', 'commerce-api', '{api}', 'h1', 'v1', now(), now(), '6s', '20s', NULL),
		('c-1', 'product-consumers', '{like}', 'h2', 'v1', now(), now() - interval '1 minute', '6s', '20s', NULL),
		('c-2', 'product-consumers', '{like}', 'h3', 'v1', now(), now(), '6s', '20s', now())`)
	e.db.Exec(t, `INSERT INTO relay_lease (name, owner, token, lease_until, acquired_at) VALUES ('outbox-relay', 'r-1', 1, now() - interval '1s', now() - interval '5s')`)
	e.db.Exec(t, `UPDATE relay_lease SET owner = 'r-2', token = 2, lease_until = now() + interval '10s', acquired_at = now()`)
	e.db.Exec(t, `INSERT INTO cluster_assignments (group_id, topic, partition, node_id, epoch, version, assigned_at, start_offset, released_at, true_lag, gap_size, blocking, lag_at, moves) VALUES
		('product-like-consumer', 'like-events', 0, 'c-1', 2, 3, now(), 10, NULL, 4, 1, 12, now(), 1),
		('product-like-consumer', 'like-events', 1, 'c-2', 1, 1, now(), 0, now(), NULL, NULL, NULL, NULL, 0)`)
	e.db.Exec(t, `INSERT INTO cluster_handoffs (group_id, topic, partition, node_id, version, epoch, committed, completed, applied) VALUES
		('product-like-consumer', 'like-events', 1, 'c-2', 1, 1, 40, 40, true)`)

	v := decode[cluster.View](t, e.adminGet(t, "/api/v1/cluster"), http.StatusOK)
	type summary struct {
		Nodes   map[string]string
		Leader  string
		Token   int64
		History []string
		Owners  []string
	}
	got := summary{Nodes: map[string]string{}}
	for _, n := range v.Nodes {
		got.Nodes[n.ID] = n.Status
	}
	if v.Leader != nil {
		got.Leader, got.Token = v.Leader.NodeID, v.Leader.Token
	}
	for _, h := range v.LeaderHistory {
		got.History = append(got.History, h.NodeID+" "+h.Reason)
	}
	for _, g := range v.Groups {
		for _, p := range g.Partitions {
			got.Owners = append(got.Owners, g.Group+"/"+p.Owner+"/"+p.OwnerStatus)
		}
	}
	want := summary{
		Nodes:  map[string]string{"api-1": "ALIVE", "c-1": "DOWN", "c-2": "LEFT"},
		Leader: "r-2", Token: 2,
		History: []string{"r-2 acquired", "r-1 expired", "r-1 acquired"},
		Owners:  []string{"product-like-consumer/c-1/DOWN", "product-like-consumer/c-2/LEFT"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("cluster view (-want +got):\n%s", diff)
	}
}
