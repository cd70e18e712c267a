// Package cluster is the cluster registry, built on what the pipeline
// already runs: PostgreSQL is the metadata store, the Kafka group decides
// who owns which partition, and the relay's lease is the one leader outside
// Kafka. No consensus system of its own (Raft) is needed: the row locks, the
// fencing token and the group coordinator already decide every question of
// ownership, and another quorum would only be another one to lose.
//
// Every service instance is a Member: it joins the node registry, heartbeats
// every Config.HeartbeatInterval and leaves (status LEFT) on graceful
// shutdown. Status is never stored: the database derives ALIVE, SUSPECT and
// DOWN from the age of the last heartbeat on its own clock, so a node with a
// wrong clock, or a stopped one, cannot look alive. A failing database never
// stops a service: heartbeats back off with jitter and the node shows as
// SUSPECT, then DOWN, until they succeed again.
//
// A consumer process reports its partitions through OnAssigned/OnRevoked
// (pcon's hooks, copied into this package's PartitionEvent by the service:
// the package links no Kafka client, since every service links it) and
// publishes each owned partition's true lag with its heartbeat
// (WatchStats). Every new assignment of a partition bumps the row's version;
// the owner's later writes carry the version it was given, so a revoked
// owner's late write changes nothing. An assignment whose first write failed
// is retried by the heartbeat, and then only takes a row that is released or
// whose owner is no longer ALIVE or SUSPECT.
//
// The relay's leader history is written by a trigger on relay_lease
// (migration 00005), so the relay needs no code for it.
//
// Readers (the HTTP API, pipelinectl, the live page) call Store.View.
package cluster

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/loopers/commerce-pipeline/internal/config"
)

// Node statuses, derived in SQL from the heartbeat age.
const (
	StatusAlive   = "ALIVE"
	StatusSuspect = "SUSPECT"
	StatusDown    = "DOWN"
	StatusLeft    = "LEFT"
)

// Statuses lists every status, in order of health.
var Statuses = []string{StatusAlive, StatusSuspect, StatusDown, StatusLeft}

// Defaults of Config, also the documented defaults of the CLUSTER_* settings.
const (
	DefaultHeartbeatInterval = 2 * time.Second
	DefaultSuspectAfter      = 3 * DefaultHeartbeatInterval
	DefaultDownAfter         = 10 * DefaultHeartbeatInterval
	DefaultRetention         = 24 * time.Hour
)

// Config is how a Member heartbeats and how others judge it.
type Config struct {
	NodeID            string        // unique per running instance; a restart may reuse it
	HeartbeatInterval time.Duration // between heartbeats while the database answers
	SuspectAfter      time.Duration // heartbeat age at which the node is SUSPECT
	DownAfter         time.Duration // heartbeat age at which the node is DOWN
	Retention         time.Duration // DOWN/LEFT rows older than this are removed
}

// Validate reports what is wrong with c; each problem names its setting.
func (c Config) Validate() error {
	var errs []error
	c.Check(func(name, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", name, fmt.Sprintf(format, args...)))
	})
	return errors.Join(errs...)
}

// Check calls fail for every problem of c, naming the setting (a config
// Loader's Fail).
func (c Config) Check(fail func(name, format string, args ...any)) {
	if c.NodeID == "" || len(c.NodeID) > 200 {
		fail(VarNodeID, "must be 1 to 200 characters, got %d", len(c.NodeID))
	}
	if c.SuspectAfter <= c.HeartbeatInterval {
		fail("CLUSTER_SUSPECT_AFTER", "must be longer than CLUSTER_HEARTBEAT_INTERVAL (%s), got %s", c.HeartbeatInterval, c.SuspectAfter)
	}
	if c.DownAfter <= c.SuspectAfter {
		fail("CLUSTER_DOWN_AFTER", "must be longer than CLUSTER_SUSPECT_AFTER (%s), got %s", c.SuspectAfter, c.DownAfter)
	}
	if c.HeartbeatInterval <= 0 || c.Retention <= 0 {
		fail("CLUSTER_HEARTBEAT_INTERVAL", "and CLUSTER_RETENTION must be positive")
	}
}

// DefaultNodeID is hostname-pid: unique per process on a host, and the
// hostname alone is what a Kubernetes pod restart keeps.
func DefaultNodeID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}

// Info describes the instance a Member registers.
type Info struct {
	Service string   // commerce-api, outbox-relay, product-consumers
	Roles   []string // what the instance does: api, relay, consumer groups…
	Host    string   // defaults to the hostname
	Version string   // build version; defaults to the module build info
}

// VarNodeID is the variable naming the process: its one identity, in the
// registry and wherever else a process needs a stable name of its own (the
// relay's lease owner, a consumer's static group member id).
const VarNodeID = "CLUSTER_NODE_ID"

// Load reads the CLUSTER_* settings through l, and checks them. nodeID, when
// not empty, is the instance's id as the caller read it (VarNodeID, for a
// use of its own); otherwise VarNodeID names it, hostname-pid by default.
func Load(l *config.Loader, nodeID string) Config {
	if nodeID == "" {
		nodeID = l.Computed(VarNodeID, "defaultNodeID()", DefaultNodeID)
	}
	c := Config{
		NodeID:            nodeID,
		HeartbeatInterval: l.Duration("CLUSTER_HEARTBEAT_INTERVAL", DefaultHeartbeatInterval),
		SuspectAfter:      l.Duration("CLUSTER_SUSPECT_AFTER", DefaultSuspectAfter),
		DownAfter:         l.Duration("CLUSTER_DOWN_AFTER", DefaultDownAfter),
		Retention:         l.Duration("CLUSTER_RETENTION", DefaultRetention),
	}
	c.Check(l.Fail)
	return c
}

// Defaults returns the default Config under nodeID.
func Defaults(nodeID string) Config {
	return Config{NodeID: nodeID, HeartbeatInterval: DefaultHeartbeatInterval, SuspectAfter: DefaultSuspectAfter, DownAfter: DefaultDownAfter, Retention: DefaultRetention}
}
