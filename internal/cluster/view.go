package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/loopers/commerce-pipeline/internal/outbox"
	"github.com/loopers/commerce-pipeline/internal/stages"
)

// historyLimit is how many leader changes the view carries.
const historyLimit = 20

// View is the whole cluster at one instant of the database clock. It is the
// stable shape behind GET /api/v1/cluster and `pipelinectl cluster`: fields
// are added, never renamed or removed. Slices are never nil.
type View struct {
	// At is the database's now() when the view was read; heartbeat ages
	// and statuses are relative to it.
	At time.Time `json:"at"`
	// Nodes lists every registered instance, by service then id.
	Nodes []Node `json:"nodes"`
	// Leader is the relay's current lease holder; nil when no relay holds a
	// live lease.
	Leader *Leader `json:"leader"`
	// LeaderHistory is the relay's most recent leader changes, newest first.
	LeaderHistory []LeaderChange `json:"leaderHistory"`
	// Groups lists each consumer group's partitions, by group name.
	Groups []Group `json:"groups"`
}

// Node is one registered service instance.
type Node struct {
	ID                  string     `json:"id"`
	Service             string     `json:"service"`
	Roles               []string   `json:"roles"`
	Host                string     `json:"host"`
	Version             string     `json:"version"`
	Status              string     `json:"status"` // ALIVE, SUSPECT, DOWN or LEFT
	StartedAt           time.Time  `json:"startedAt"`
	LastHeartbeat       time.Time  `json:"lastHeartbeat"`
	HeartbeatAgeSeconds float64    `json:"heartbeatAgeSeconds"`
	LeftAt              *time.Time `json:"leftAt"`
	// IDConflictAt is when a heartbeat of this node last found its row
	// written by another process since its own previous one: two live
	// processes claim the id. nil when none did since the node joined.
	IDConflictAt *time.Time `json:"idConflictAt"`
	// Latency is what the node timed of the stages it sees (package
	// stages) over its last heartbeat's window, one entry per stage that
	// saw events; empty for a node that times none or saw nothing.
	Latency []stages.Window `json:"latency"`
}

// Leader is the holder of the relay lease.
type Leader struct {
	NodeID     string    `json:"nodeId"`
	Token      int64     `json:"token"` // fencing token; grows with every term
	AcquiredAt time.Time `json:"acquiredAt"`
	LeaseUntil time.Time `json:"leaseUntil"`
}

// LeaderChange is one entry of the relay's leader history.
type LeaderChange struct {
	NodeID string    `json:"nodeId"`
	Token  int64     `json:"token"`
	At     time.Time `json:"at"`
	Reason string    `json:"reason"` // acquired, expired or released
}

// Group is one consumer group's partition table.
type Group struct {
	Group      string      `json:"group"`
	Partitions []Partition `json:"partitions"`
}

// Partition is one partition's owner and progress. Owner fields describe
// the latest assignment the owners reported; the Kafka group is the
// authority, this is its record.
type Partition struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Owner     string `json:"owner"`
	// OwnerStatus is the owner node's status; "" when its row is gone.
	OwnerStatus string `json:"ownerStatus"`
	// Epoch is the owner's own assignment epoch (pcon's); Version grows
	// with every assignment of the partition to any node.
	Epoch      int64      `json:"epoch"`
	Version    int64      `json:"version"`
	AssignedAt time.Time  `json:"assignedAt"`
	ReleasedAt *time.Time `json:"releasedAt"` // set once the owner released it
	// Moves counts assignments that moved the partition between nodes.
	Moves int64 `json:"moves"`
	// TrueLag, GapSize and Blocking are from the owner's last heartbeat
	// (LagAt); nil until it published one. Blocking is nil when nothing
	// holds the committable offset back.
	TrueLag        *int64     `json:"trueLag"`
	GapSize        *int64     `json:"gapSize"`
	Blocking       *int64     `json:"blocking"`
	LagAt          *time.Time `json:"lagAt"`
	FirstHandledAt *time.Time `json:"firstHandledAt"`
	// Processed and DeadLettered are the owner process's counts of records
	// of the partition handled and dead-lettered since that process
	// started, from its last heartbeat; nil until it published one.
	Processed    *int64 `json:"processed"`
	DeadLettered *int64 `json:"deadLettered"`
	// LastHandoff is the latest release of the partition, nil if none.
	LastHandoff *Handoff `json:"lastHandoff"`
}

// Handoff is a release of a partition by its owner.
type Handoff struct {
	NodeID     string    `json:"nodeId"`
	Version    int64     `json:"version"`
	Committed  int64     `json:"committed"` // offset committed at release
	Completed  int64     `json:"completed"` // records completed during the assignment
	Applied    bool      `json:"applied"`   // false: refused, a newer assignment had the row
	ReleasedAt time.Time `json:"releasedAt"`
}

// View reads the whole cluster view in one repeatable-read transaction, so
// its parts agree with each other.
func (s *Store) View(ctx context.Context) (View, error) {
	v := View{Nodes: []Node{}, LeaderHistory: []LeaderChange{}, Groups: []Group{}}
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&v.At); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `
			SELECT s.node_id, s.service, s.roles, s.host, s.version, s.status, s.started_at, s.last_heartbeat,
			       extract(epoch FROM s.heartbeat_age)::float8, s.left_at, s.id_conflict_at, COALESCE(n.stage_latency, '[]'::jsonb)
			FROM cluster_node_status s JOIN cluster_nodes n USING (node_id)
			ORDER BY s.service, s.node_id`)
		if err != nil {
			return err
		}
		if v.Nodes, err = pgx.CollectRows(rows, pgx.RowToStructByPos[Node]); err != nil {
			return err
		}
		lead, err := outbox.ReadLeadership(ctx, tx.QueryRow)
		if err != nil {
			return err
		}
		if l := lead.Leader; l != nil {
			v.Leader = &Leader{NodeID: l.Owner, Token: l.Token, AcquiredAt: l.AcquiredAt, LeaseUntil: l.Until}
		}
		rows, err = tx.Query(ctx, `
			SELECT owner, token, at, reason FROM cluster_leader_history
			WHERE lease = $1 ORDER BY id DESC LIMIT $2`, outbox.RelayLease, historyLimit)
		if err != nil {
			return err
		}
		if v.LeaderHistory, err = pgx.CollectRows(rows, pgx.RowToStructByPos[LeaderChange]); err != nil {
			return err
		}
		return s.readGroups(ctx, tx, &v)
	})
	if err != nil {
		return View{}, fmt.Errorf("cluster: read view: %w", err)
	}
	return v, nil
}

func (s *Store) readGroups(ctx context.Context, tx pgx.Tx, v *View) error {
	rows, err := tx.Query(ctx, `
		SELECT a.group_id, a.topic, a.partition, a.node_id, COALESCE(n.status, ''), a.epoch, a.version,
		       a.assigned_at, a.released_at, a.moves, a.true_lag, a.gap_size, a.blocking, a.lag_at, a.first_handled_at,
		       a.processed, a.dead_lettered,
		       h.node_id, h.version, h.committed, h.completed, h.applied, h.released_at
		FROM cluster_assignments a
		LEFT JOIN cluster_node_status n ON n.node_id = a.node_id
		LEFT JOIN LATERAL (
			SELECT * FROM cluster_handoffs h
			WHERE h.group_id = a.group_id AND h.topic = a.topic AND h.partition = a.partition
			ORDER BY h.id DESC LIMIT 1) h ON true
		ORDER BY a.group_id, a.topic, a.partition`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			group                    string
			p                        Partition
			hNode                    *string
			hVer, hCommit, hComplete *int64
			hApplied                 *bool
			hAt                      *time.Time
		)
		if err := rows.Scan(&group, &p.Topic, &p.Partition, &p.Owner, &p.OwnerStatus, &p.Epoch, &p.Version,
			&p.AssignedAt, &p.ReleasedAt, &p.Moves, &p.TrueLag, &p.GapSize, &p.Blocking, &p.LagAt, &p.FirstHandledAt,
			&p.Processed, &p.DeadLettered,
			&hNode, &hVer, &hCommit, &hComplete, &hApplied, &hAt); err != nil {
			return err
		}
		if hNode != nil {
			p.LastHandoff = &Handoff{NodeID: *hNode, Version: *hVer, Committed: *hCommit, Completed: *hComplete, Applied: *hApplied, ReleasedAt: *hAt}
		}
		if n := len(v.Groups); n == 0 || v.Groups[n-1].Group != group {
			v.Groups = append(v.Groups, Group{Group: group, Partitions: []Partition{}})
		}
		g := &v.Groups[len(v.Groups)-1]
		g.Partitions = append(g.Partitions, p)
	}
	return rows.Err()
}
