package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/loopers/commerce-pipeline/internal/cluster"
	"github.com/loopers/commerce-pipeline/internal/config"
	"github.com/loopers/commerce-pipeline/internal/testenv"
)

// TestCluster: `pipelinectl cluster` prints the registry as tables, and with
// -o json the same view the API serves.
func TestCluster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testenv.DatabaseURL(t)
	db, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	for _, q := range []string{
		`INSERT INTO cluster_nodes (node_id, service, roles, host, version, started_at, last_heartbeat, suspect_after, down_after)
		 VALUES ('c-1', 'product-consumers', '{like}', 'h', 'v', now(), now(), '6s', '20s')`,
		`INSERT INTO relay_lease (name, owner, token, lease_until, acquired_at) VALUES ('outbox-relay', 'relay-1', 1, now() + interval '10s', now())`,
		`INSERT INTO cluster_assignments (group_id, topic, partition, node_id, epoch, version, assigned_at, start_offset, true_lag)
		 VALUES ('product-like-consumer', 'like-events', 2, 'c-1', 1, 1, now(), 0, 42)`,
	} {
		if _, err := db.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	ctl := func(args ...string) string {
		var out, errOut bytes.Buffer
		if code := run(ctx, args, env{lookup: config.FromMap(map[string]string{"DATABASE_URL": url}), stdout: &out, stderr: &errOut}); code != exitOK {
			t.Fatalf("pipelinectl %v: exit %d: %s", args, code, errOut.String())
		}
		return out.String()
	}

	table := ctl("cluster")
	for _, want := range []string{"c-1", "ALIVE", "RELAY LEADER: relay-1 (token 1", "GROUP product-like-consumer", "like-events"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	var v cluster.View
	if err := json.Unmarshal([]byte(ctl("cluster", "-o", "json")), &v); err != nil {
		t.Fatal(err)
	}
	got := []string{v.Nodes[0].ID + " " + v.Nodes[0].Status, v.Leader.NodeID, v.Groups[0].Partitions[0].Owner}
	if diff := cmp.Diff([]string{"c-1 ALIVE", "relay-1", "c-1"}, got); diff != "" {
		t.Errorf("json view (-want +got):\n%s", diff)
	}
}
