package e2e

import (
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/go-cmp/cmp"

	"github.com/loopers/commerce-pipeline/internal/cluster"
	"github.com/loopers/commerce-pipeline/internal/stack"
)

// likeGroup is the group the cluster test runs three instances of (the
// pipeline's name; system.kafka.Group names it on the cluster).
const likeGroup = "product-like-consumer"

// clusterEnv gives every process short cluster timings: ALIVE while it
// heartbeats, SUSPECT after 1 s without one, DOWN after 2.5 s.
func clusterEnv(env map[string]string, node string) map[string]string {
	out := map[string]string{
		"CLUSTER_HEARTBEAT_INTERVAL": "200ms", "CLUSTER_SUSPECT_AFTER": "1s", "CLUSTER_DOWN_AFTER": "2500ms",
	}
	for k, v := range env {
		out[k] = v
	}
	if node != "" {
		out["CLUSTER_NODE_ID"] = node
	}
	return out
}

// TestClusterView runs commerce-api, two relays and three product-consumers
// instances of one group and checks GET /api/v1/cluster against what the
// processes and the broker say, through a frozen process (SIGSTOP/SIGCONT),
// a killed consumer and its return, a killed relay leader, a graceful stop
// and a restart under the same id, which static membership lets take its
// partitions back without a rebalance of the others.
//
//nolint:paralleltest // starts the real service processes, which on 2 shared cores would break the timing bounds of the other end-to-end tests (the live page's 2 s)
func TestClusterView(t *testing.T) {
	s := newSystem(t)
	// newSystem's commerce-api heartbeats every 2 s; this one is the view.
	apiAddr, adminAddr := freeAddr(t), freeAddr(t)
	start(t, "commerce-api-cluster", "commerce-api", clusterEnv(map[string]string{
		"DATABASE_URL": s.dbURL, "HTTP_ADDR": apiAddr, "ADMIN_ADDR": adminAddr,
	}, "api-1"))
	s.api, s.apiAdmin = "http://"+apiAddr, "http://"+adminAddr
	waitHTTP(t, s.api+"/readyz")

	relays := map[string]*stack.Proc{}
	admins := map[string]string{}
	for _, id := range []string{"relay-1", "relay-2"} {
		env := clusterEnv(s.relayEnv(id), "")
		relays[id] = start(t, id, "outbox-relay", env)
		admins[id] = "http://" + env["ADMIN_ADDR"]
	}
	consumers := map[string]*stack.Proc{}
	startConsumer := func(id string) {
		env := clusterEnv(s.consumerEnv, id)
		env["ADMIN_ADDR"], env["PRODUCT_CONSUMERS_GROUPS"] = freeAddr(t), "like"
		if id == "c-1" {
			// c-1 is restarted below and must be back within its session:
			// 20 s outlasts a restart on a loaded machine. c-3's stays
			// 6 s, for its partitions to move soon once it is killed.
			env["PRODUCT_CONSUMERS_SESSION_TIMEOUT"] = "20s"
		}
		consumers[id] = start(t, id+fmt.Sprint(time.Now().UnixNano()), "product-consumers", env)
	}
	for _, id := range []string{"c-1", "c-2", "c-3"} {
		startConsumer(id)
	}

	admin, err := sarama.NewClusterAdmin(s.kafka.Brokers, adminConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()

	// The partition table names, for every partition, the member the broker
	// assigned it to.
	group := s.kafka.Group(likeGroup)
	assignmentsMatch := func(v cluster.View) string {
		return cmp.Diff(brokerAssignment(t, admin, group), viewAssignment(v, group))
	}
	s.waitView("three consumers own the group's partitions as the broker assigned them", func(v cluster.View) string {
		if d := cmp.Diff(map[string]string{"api-1": "ALIVE", "relay-1": "ALIVE", "relay-2": "ALIVE", "c-1": "ALIVE", "c-2": "ALIVE", "c-3": "ALIVE"}, statusesOf(v, "api-1", "relay-", "c-")); d != "" {
			return d
		}
		if owners := ownersOf(v, group); len(owners) != 3 {
			return fmt.Sprintf("want three distinct owners, got %v", owners)
		}
		return assignmentsMatch(v)
	})

	// One relay says it leads, the other that it stands by. A frozen
	// process turns SUSPECT, then DOWN, and ALIVE again once thawed.
	leader, standby := "relay-1", "relay-2"
	if !readyRole(t, admins[leader], "leader") {
		leader, standby = standby, leader
	}
	if !readyRole(t, admins[leader], "leader") || !readyRole(t, admins[standby], "standby") {
		t.Fatalf("/readyz of %s and %s do not say leader and standby", leader, standby)
	}
	if err := relays[standby].Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	s.waitView(standby+" SUSPECT", nodeIs(standby, cluster.StatusSuspect))
	s.waitView(standby+" DOWN", nodeIs(standby, cluster.StatusDown))
	if err := relays[standby].Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	s.waitView(standby+" ALIVE again", nodeIs(standby, cluster.StatusAlive))

	// A killed consumer's partitions move to the others once its session
	// ends; back under its id, it gets partitions again.
	consumers["c-3"].Kill()
	s.waitView("c-3 DOWN and its partitions moved", func(v cluster.View) string {
		if d := nodeIs("c-3", cluster.StatusDown)(v); d != "" {
			return d
		}
		if owners := ownersOf(v, group); owners["c-3"] {
			return "c-3 still owns partitions"
		}
		return assignmentsMatch(v)
	})
	startConsumer("c-3")
	s.waitView("c-3 back with partitions", func(v cluster.View) string {
		if owners := ownersOf(v, group); len(owners) != 3 {
			return fmt.Sprintf("want three distinct owners, got %v", owners)
		}
		return assignmentsMatch(v)
	})

	// Killing the leading relay: the other takes over with a higher token,
	// and the history says so.
	before := s.view()
	if before.Leader == nil {
		t.Fatal("no relay leads")
	}
	old := *before.Leader
	relays[old.NodeID].Kill()
	s.waitView("a new relay leader in the view and its history", func(v cluster.View) string {
		if v.Leader == nil || v.Leader.NodeID == old.NodeID || v.Leader.Token <= old.Token {
			return fmt.Sprintf("leader %+v, want another than %s with a token above %d", v.Leader, old.NodeID, old.Token)
		}
		var got []string
		for _, h := range v.LeaderHistory[:min(2, len(v.LeaderHistory))] {
			got = append(got, fmt.Sprintf("%s %s %d", h.NodeID, h.Reason, h.Token))
		}
		return cmp.Diff([]string{
			fmt.Sprintf("%s acquired %d", v.Leader.NodeID, v.Leader.Token),
			fmt.Sprintf("%s expired %d", old.NodeID, old.Token),
		}, got)
	})
	newLeader := s.view().Leader.NodeID
	if !readyRole(t, admins[newLeader], "leader") {
		t.Errorf("%s leads but its /readyz does not say so", newLeader)
	}

	// A graceful stop leaves the cluster (LEFT) but not the Kafka group: a
	// static member holds its partitions for its session. Back under the
	// same id within it, c-1 is the same one row, ALIVE, gets its own
	// partitions again, and the others keep theirs: no rebalance, which
	// would have assigned theirs again (a new version of each row).
	var beforeStop cluster.View
	s.waitView("the assignment before c-1 stops", func(v cluster.View) string {
		beforeStop = v
		return assignmentsMatch(v)
	})
	consumers["c-1"].Stop(20 * time.Second)
	s.waitView("c-1 LEFT", nodeIs("c-1", cluster.StatusLeft))
	startConsumer("c-1")
	s.waitView("c-1 back, one row", func(v cluster.View) string {
		rows := 0
		for _, n := range v.Nodes {
			if n.ID == "c-1" {
				rows++
			}
		}
		if rows != 1 {
			return fmt.Sprintf("%d rows for c-1", rows)
		}
		return nodeIs("c-1", cluster.StatusAlive)(v)
	})
	s.waitView("c-1 has its own partitions again", func(v cluster.View) string {
		if d := cmp.Diff(viewAssignment(beforeStop, group), viewAssignment(v, group)); d != "" {
			return "the view (-before +now):\n" + d
		}
		return assignmentsMatch(v)
	})
	if diff := cmp.Diff(assignmentsOf(beforeStop, group, "c-1"), assignmentsOf(s.view(), group, "c-1")); diff != "" {
		t.Errorf("the other members' partitions were assigned again while c-1 restarted (-before +after):\n%s", diff)
	}
}

// assignmentsOf lists the version and moves of each of group's partitions
// that a node other than except owns: a rebalance assigns every partition
// again, a new version even where the owner stays.
func assignmentsOf(v cluster.View, group, except string) map[string]string {
	out := map[string]string{}
	for _, g := range v.Groups {
		if g.Group != group {
			continue
		}
		for _, p := range g.Partitions {
			if p.ReleasedAt == nil && p.Owner != except {
				out[fmt.Sprintf("%s/%d", p.Topic, p.Partition)] = fmt.Sprintf("%s version %d moves %d", p.Owner, p.Version, p.Moves)
			}
		}
	}
	return out
}

// view reads GET /api/v1/cluster on commerce-api's admin listener.
func (s *system) view() cluster.View {
	s.t.Helper()
	var v cluster.View
	if code := s.callAt(s.apiAdmin, "GET", "/cluster", "", nil, &v); code != http.StatusOK {
		s.t.Fatalf("GET /api/v1/cluster: %d", code)
	}
	return v
}

// waitView polls the view until check returns "" (or fails the test with
// its last answer after 45 s). Every view read must name one owner per
// partition.
func (s *system) waitView(what string, check func(cluster.View) string) {
	s.t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for {
		v := s.view()
		seen := map[string]bool{}
		for _, g := range v.Groups {
			for _, p := range g.Partitions {
				k := fmt.Sprintf("%s/%s/%d", g.Group, p.Topic, p.Partition)
				if seen[k] {
					s.t.Fatalf("%s listed twice", k)
				}
				seen[k] = true
			}
		}
		msg := check(v)
		if msg == "" {
			s.t.Logf("%s: ok", what)
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s: %s", what, msg)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func nodeIs(id, status string) func(cluster.View) string {
	return func(v cluster.View) string {
		for _, n := range v.Nodes {
			if n.ID == id {
				if n.Status == status {
					return ""
				}
				return fmt.Sprintf("%s is %s, want %s", id, n.Status, status)
			}
		}
		return id + " is not registered"
	}
}

// statusesOf lists the nodes whose id starts with one of prefixes.
func statusesOf(v cluster.View, prefixes ...string) map[string]string {
	out := map[string]string{}
	for _, n := range v.Nodes {
		for _, p := range prefixes {
			if strings.HasPrefix(n.ID, p) {
				out[n.ID] = n.Status
			}
		}
	}
	return out
}

// viewAssignment is partition → owner for group's unreleased rows.
func viewAssignment(v cluster.View, group string) map[string]string {
	out := map[string]string{}
	for _, g := range v.Groups {
		if g.Group != group {
			continue
		}
		for _, p := range g.Partitions {
			if p.ReleasedAt == nil {
				out[fmt.Sprintf("%s/%d", p.Topic, p.Partition)] = p.Owner
			}
		}
	}
	return out
}

func ownersOf(v cluster.View, group string) map[string]bool {
	out := map[string]bool{}
	for _, o := range viewAssignment(v, group) {
		out[o] = true
	}
	return out
}

// brokerAssignment asks the broker who owns group's partitions: the
// members' static instance ids are the node ids.
func brokerAssignment(t *testing.T, admin sarama.ClusterAdmin, group string) map[string]string {
	t.Helper()
	groups, err := admin.DescribeConsumerGroups([]string{group})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, g := range groups {
		if g.State != "Stable" {
			out["state"] = g.State // a rebalance is under way: not comparable yet
		}
		for _, m := range g.Members {
			a, err := m.GetMemberAssignment()
			if err != nil || a == nil {
				continue
			}
			id := "?"
			if m.GroupInstanceId != nil {
				id = *m.GroupInstanceId
			}
			for topic, parts := range a.Topics {
				sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
				for _, p := range parts {
					out[fmt.Sprintf("%s/%d", topic, p)] = id
				}
			}
		}
	}
	return out
}

// readyRole reports whether the relay's /readyz names role.
func readyRole(t *testing.T, admin, role string) bool {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, admin+"/readyz", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strings.Contains(string(b), `"role":"`+role+`"`)
}
