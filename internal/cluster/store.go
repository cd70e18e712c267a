package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/loopers/commerce-pipeline/internal/outbox"
	"github.com/loopers/commerce-pipeline/internal/pg"
	"github.com/loopers/commerce-pipeline/internal/stages"
)

// ErrSuperseded is returned when a write of a partition's owner is refused
// because the partition was assigned again since (a newer version), or
// released.
var ErrSuperseded = errors.New("cluster: assignment superseded")

// Store reads and writes the cluster tables. It is the only file of the
// package that speaks SQL.
type Store struct {
	db   *pg.DB
	pool *pgxpool.Pool // db's
}

// Open returns a Store on databaseURL with a small pool of its own (the
// registry must not compete with a service's hot path for connections). It
// does not connect yet: a database that is down at start is retried by the
// heartbeat, not fatal.
func Open(databaseURL string) (*Store, error) {
	db, err := pg.Open(context.Background(), databaseURL, pg.Options{MaxConns: 2, StatementTimeout: pg.DefaultStatementTimeout, Lazy: true})
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	return &Store{db: db, pool: db.Pool}, nil
}

// Close closes the pool.
func (s *Store) Close() { s.db.Close() }

func micros(d time.Duration) int64 { return d.Microseconds() }

// heartbeat upserts the node row with the database's now(), as the process
// whose nonce is instance. join resets started_at (the first heartbeat of a
// process); a restarted node with the same id keeps its one row. conflict
// reports that another process wrote the row since this one's last
// heartbeat: two live processes claim the node id. The stage windows
// replace the previous ones; untimed (a node that times no stage) stores
// NULL.
func (s *Store) heartbeat(ctx context.Context, cfg Config, info Info, instance string, join bool, windows []stages.Window, timed bool) (conflict bool, err error) {
	var latency *string
	if timed {
		b, err := json.Marshal(windows)
		if err != nil {
			return false, fmt.Errorf("cluster: heartbeat: %w", err)
		}
		latency = new(string(b))
	}
	err = s.pool.QueryRow(ctx, `
		INSERT INTO cluster_nodes AS n (node_id, service, roles, host, version, started_at, last_heartbeat, suspect_after, down_after,
		                                instance, retention, stage_latency)
		VALUES ($1, $2, $3, $4, $5, now(), now(), $6 * interval '1 microsecond', $7 * interval '1 microsecond',
		        $9, $10 * interval '1 microsecond', $11::jsonb)
		ON CONFLICT (node_id) DO UPDATE SET
			service = EXCLUDED.service, roles = EXCLUDED.roles, host = EXCLUDED.host, version = EXCLUDED.version,
			started_at = CASE WHEN $8 THEN now() ELSE n.started_at END,
			last_heartbeat = now(), suspect_after = EXCLUDED.suspect_after, down_after = EXCLUDED.down_after,
			left_at = NULL, heartbeats = n.heartbeats + 1,
			instance = EXCLUDED.instance, retention = EXCLUDED.retention, stage_latency = EXCLUDED.stage_latency,
			id_conflict_at = CASE WHEN $8 THEN NULL
			                      WHEN n.instance IS DISTINCT FROM EXCLUDED.instance THEN now()
			                      ELSE n.id_conflict_at END
		RETURNING COALESCE(id_conflict_at = now(), false)`,
		cfg.NodeID, info.Service, info.Roles, info.Host, info.Version, micros(cfg.SuspectAfter), micros(cfg.DownAfter), join,
		instance, micros(cfg.Retention), latency).Scan(&conflict)
	if err != nil {
		return false, fmt.Errorf("cluster: heartbeat: %w", err)
	}
	return conflict, nil
}

// leave marks the node LEFT.
func (s *Store) leave(ctx context.Context, nodeID string) error {
	if _, err := s.pool.Exec(ctx, `UPDATE cluster_nodes SET left_at = now() WHERE node_id = $1`, nodeID); err != nil {
		return fmt.Errorf("cluster: leave: %w", err)
	}
	return nil
}

// purged is what one retention purge removed.
type purged struct {
	Nodes  int64 // node rows DOWN or LEFT for longer than the retention
	Groups int64 // consumer groups whose partition rows went
}

// purge removes nodes DOWN or LEFT for longer than the retention, handoff
// and leader history older than it, and the partition rows of consumer
// groups that no longer exist: no partition owned by a live node, nothing
// assigned, released or reported within the retention.
//
// The retention is the longest of retention and every live node's own (each
// writes it with its heartbeat): nodes configured differently purge by one
// retention, and nothing goes before every live node is done with it.
func (s *Store) purge(ctx context.Context, retention time.Duration) (purged, error) {
	var p purged
	err := s.pool.QueryRow(ctx, `
		WITH keep AS (
			SELECT GREATEST($1 * interval '1 microsecond',
			                (SELECT max(retention) FROM cluster_node_status WHERE status IN ('ALIVE', 'SUSPECT'))) AS d),
		gone AS (
			DELETE FROM cluster_nodes
			WHERE COALESCE(left_at, last_heartbeat + down_after) < now() - (SELECT d FROM keep)
			RETURNING 1),
		h AS (DELETE FROM cluster_handoffs WHERE released_at < now() - (SELECT d FROM keep)),
		l AS (DELETE FROM cluster_leader_history WHERE at < now() - (SELECT d FROM keep)),
		dead AS (
			SELECT a.group_id FROM cluster_assignments a
			LEFT JOIN cluster_node_status n ON n.node_id = a.node_id
			GROUP BY a.group_id
			HAVING NOT COALESCE(bool_or(a.released_at IS NULL AND n.status IN ('ALIVE', 'SUSPECT')), false)
			   AND max(GREATEST(a.assigned_at, a.released_at, a.lag_at)) < now() - (SELECT d FROM keep)),
		g AS (DELETE FROM cluster_assignments WHERE group_id IN (SELECT group_id FROM dead) RETURNING 1)
		SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM dead)`, micros(retention)).Scan(&p.Nodes, &p.Groups)
	if err != nil {
		return purged{}, fmt.Errorf("cluster: purge: %w", err)
	}
	return p, nil
}

// claim identifies one partition of one group.
type claim struct {
	Group     string
	Topic     string
	Partition int32
}

// assign records nodeID as the owner of c from now, with a new version. It
// returns that version and whether the partition moved from another node.
//
// A late assignment (a retry after the hook's own write failed) must not
// overwrite a newer owner: it only takes a row that is released, already
// nodeID's, or owned by a node that is no longer ALIVE or SUSPECT; else it
// returns ErrSuperseded. The hook's first write is not late: the group has
// just given nodeID the partition.
func (s *Store) assign(ctx context.Context, c claim, nodeID string, epoch uint64, offset int64, late bool) (version int64, moved bool, err error) {
	err = s.pool.QueryRow(ctx, `
		WITH prev AS (
			SELECT node_id FROM cluster_assignments WHERE group_id = $1 AND topic = $2 AND partition = $3)
		INSERT INTO cluster_assignments AS a (group_id, topic, partition, node_id, epoch, version, assigned_at, start_offset)
		VALUES ($1, $2, $3, $4, $5, 1, now(), $6)
		ON CONFLICT (group_id, topic, partition) DO UPDATE SET
			node_id = EXCLUDED.node_id, epoch = EXCLUDED.epoch, version = a.version + 1,
			assigned_at = now(), start_offset = EXCLUDED.start_offset, released_at = NULL,
			true_lag = NULL, gap_size = NULL, blocking = NULL, lag_at = NULL, first_handled_at = NULL,
			moves = a.moves + CASE WHEN a.node_id <> EXCLUDED.node_id THEN 1 ELSE 0 END
		WHERE NOT $7 OR a.released_at IS NOT NULL OR a.node_id = EXCLUDED.node_id
		   OR NOT EXISTS (SELECT 1 FROM cluster_node_status n
		                  WHERE n.node_id = a.node_id AND n.status IN ('ALIVE', 'SUSPECT'))
		RETURNING a.version, COALESCE((SELECT node_id <> $4 FROM prev), false)`,
		c.Group, c.Topic, c.Partition, nodeID, int64(epoch), offset, late).Scan(&version, &moved)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, ErrSuperseded
	}
	if err != nil {
		return 0, false, fmt.Errorf("cluster: assign %s/%s/%d: %w", c.Group, c.Topic, c.Partition, err)
	}
	return version, moved, nil
}

// release ends nodeID's ownership of c at version and records the handoff.
// The handoff is recorded even when the write is refused (applied false),
// since it is a fact about nodeID's assignment; ErrSuperseded says the row
// belongs to a newer assignment and was left alone.
func (s *Store) release(ctx context.Context, c claim, nodeID string, version int64, epoch uint64, committed int64, completed uint64) error {
	var applied bool
	err := s.pool.QueryRow(ctx, `
		WITH upd AS (
			UPDATE cluster_assignments SET released_at = now()
			WHERE group_id = $1 AND topic = $2 AND partition = $3 AND node_id = $4 AND version = $5 AND released_at IS NULL
			RETURNING 1)
		INSERT INTO cluster_handoffs (group_id, topic, partition, node_id, version, epoch, committed, completed, applied)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, EXISTS (SELECT 1 FROM upd))
		RETURNING applied`,
		c.Group, c.Topic, c.Partition, nodeID, version, int64(epoch), committed, int64(completed)).Scan(&applied)
	if err != nil {
		return fmt.Errorf("cluster: release %s/%s/%d: %w", c.Group, c.Topic, c.Partition, err)
	}
	if !applied {
		return ErrSuperseded
	}
	return nil
}

// lagReport is one owned partition's progress, published with a heartbeat.
type lagReport struct {
	claim
	Version  int64
	TrueLag  int64
	GapSize  int64
	Blocking int64 // -1: nothing blocks
	Handled  bool  // a record was handled during this assignment
	// Processed and DeadLettered are pcon's counters for the partition in
	// this process.
	Processed, DeadLettered int64
}

// publishLag writes the reports whose version still matches and returns the
// claims that were refused (superseded).
func (s *Store) publishLag(ctx context.Context, nodeID string, rs []lagReport) ([]claim, error) {
	if len(rs) == 0 {
		return nil, nil
	}
	var (
		groups, topics                  []string
		parts                           []int32
		versions, lags, gaps, blockings []int64
		processed, deadLettered         []int64
		handled                         []bool
	)
	for _, r := range rs {
		groups, topics, parts = append(groups, r.Group), append(topics, r.Topic), append(parts, r.Partition)
		versions, lags, gaps = append(versions, r.Version), append(lags, r.TrueLag), append(gaps, r.GapSize)
		blockings, handled = append(blockings, r.Blocking), append(handled, r.Handled)
		processed, deadLettered = append(processed, r.Processed), append(deadLettered, r.DeadLettered)
	}
	rows, err := s.pool.Query(ctx, `
		UPDATE cluster_assignments a SET
			true_lag = u.lag, gap_size = u.gap, blocking = NULLIF(u.blocking, -1), lag_at = now(),
			first_handled_at = COALESCE(a.first_handled_at, CASE WHEN u.handled THEN now() END),
			processed = u.processed, dead_lettered = u.dead_lettered
		FROM unnest($2::text[], $3::text[], $4::int[], $5::bigint[], $6::bigint[], $7::bigint[], $8::bigint[], $9::bool[],
		            $10::bigint[], $11::bigint[])
			AS u(group_id, topic, partition, version, lag, gap, blocking, handled, processed, dead_lettered)
		WHERE a.group_id = u.group_id AND a.topic = u.topic AND a.partition = u.partition
		  AND a.node_id = $1 AND a.version = u.version AND a.released_at IS NULL
		RETURNING a.group_id, a.topic, a.partition`,
		nodeID, groups, topics, parts, versions, lags, gaps, blockings, handled, processed, deadLettered)
	if err != nil {
		return nil, fmt.Errorf("cluster: publish lag: %w", err)
	}
	written, err := pgx.CollectRows(rows, pgx.RowToStructByPos[claim])
	if err != nil {
		return nil, fmt.Errorf("cluster: publish lag: %w", err)
	}
	ok := make(map[claim]bool, len(written))
	for _, c := range written {
		ok[c] = true
	}
	var refused []claim
	for _, r := range rs {
		if !ok[r.claim] {
			refused = append(refused, r.claim)
		}
	}
	return refused, nil
}

// leaderTerms is how many terms the relay lease has had: its fencing token
// grows by one per term and, unlike the history, is never purged, so it
// only grows (a Prometheus counter).
func (s *Store) leaderTerms(ctx context.Context) (int64, error) {
	l, err := outbox.ReadLeadership(ctx, s.pool.QueryRow)
	if err != nil {
		return 0, fmt.Errorf("cluster: count leader terms: %w", pg.MapErr(err))
	}
	return l.Terms, nil
}
