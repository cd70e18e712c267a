package store

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/loopers/commerce-pipeline/internal/outbox"
)

// ProductChange is a product's aggregates as committed.
type ProductChange struct {
	ID          int64     `json:"id"`
	Name        string    `json:"name"`
	LikeCount   int64     `json:"likeCount"`
	SalesCount  int64     `json:"salesCount"`
	SalesAmount int64     `json:"salesAmount"`
	ViewCount   int64     `json:"viewCount"`
	UpdatedAt   time.Time `json:"updatedAt"`
	// XID is the id of the transaction that wrote the row last; a read
	// from watermark W returns the row again as long as XID >= W.
	XID uint64 `json:"-"`
}

// Changes is one read of the aggregates' changes.
type Changes struct {
	// Watermark is the snapshot's xmin: pass it as since next time.
	Watermark uint64
	// Products are the changed rows, in change_xid order.
	Products []ProductChange
	// Complete is false when more than the limit changed since since: then
	// Products is empty, and the caller must start over from a snapshot.
	Complete bool
}

const changeColumns = `p.id, p.name, COALESCE(l.like_count, 0), COALESCE(s.sales_count, 0), COALESCE(s.sales_amount, 0),
	COALESCE(v.view_count, 0), COALESCE(GREATEST(l.updated_at, s.updated_at, v.updated_at), p.updated_at),
	COALESCE(GREATEST(l.change_xid, s.change_xid, v.change_xid), '0')::text::bigint
	FROM products p` + withAggregates

// aggregateTables are the tables of the aggregates, one writer each; each
// stamps its rows with the writer's transaction id (change_xid, indexed).
var aggregateTables = []string{"product_likes", "product_sales", "product_views"}

// ChangesSince returns, from one snapshot, the products whose aggregates
// were last written by a transaction with id >= since, and the snapshot's
// xmin as the watermark to pass next time. Every transaction below the
// watermark has ended, so a change not returned now is returned by a later
// call with the watermark. A since of 0 returns no rows, only the watermark.
//
// It reads at most limit+1 entries along each aggregate table's change_xid
// index, and the rows of at most limit products, whatever the catalogue's
// size: when more than limit products changed, it returns none of them and
// Complete false.
func (s *Store) ChangesSince(ctx context.Context, since uint64, limit int) (Changes, error) {
	out := Changes{Complete: true}
	err := s.readSnapshot(ctx, &out.Watermark, func(tx *gorm.DB) error {
		if since == 0 {
			return nil
		}
		// First the products changed in any aggregate since since, each
		// table read along its change_xid index and bounded alike; only
		// when they are few, their rows.
		var changed strings.Builder
		args := []any{}
		for i, table := range aggregateTables {
			if i > 0 {
				changed.WriteString(" UNION ")
			}
			// table is one of aggregateTables' constants, never input.
			changed.WriteString(`(SELECT product_id FROM ` + table + ` WHERE change_xid >= ?::text::xid8 ORDER BY change_xid LIMIT ?)`)
			args = append(args, strconv.FormatUint(since, 10), limit+1)
		}
		var ids []int64
		if err := tx.Raw(changed.String()+` LIMIT ?`, append(args, limit+1)...).Scan(&ids).Error; err != nil {
			return err
		}
		if len(ids) > limit {
			out.Complete = false
			return nil
		}
		if len(ids) == 0 {
			return nil
		}
		// Rows a consumer wrote for an id that is no product are left out.
		rows, err := scanChanges(tx, `SELECT `+changeColumns+`
			WHERE p.id IN ? ORDER BY 8, 1`, ids)
		if err != nil {
			return err
		}
		out.Products = rows
		return nil
	})
	if err != nil {
		return Changes{}, fmt.Errorf("read product changes since %d: %w", since, mapErr(err))
	}
	return out, nil
}

// Snapshot is the leading products of each aggregate, read from one
// snapshot, and the watermark to follow the changes from.
type Snapshot struct {
	Watermark uint64
	// Products holds, without repeats, the top n products by likes, by
	// sales and by views (ties: the newest product first).
	Products []ProductChange
}

// TopProducts reads the top n products by each aggregate along the listing
// indexes: at most 3n rows, whatever the catalogue's size.
func (s *Store) TopProducts(ctx context.Context, n int) (Snapshot, error) {
	var out Snapshot
	err := s.readSnapshot(ctx, &out.Watermark, func(tx *gorm.DB) error {
		seen := map[int64]bool{}
		for _, key := range []sortKey{sortColumn[SortLikesDesc], sortColumn[SortSalesDesc], sortColumn[SortViewsDesc]} {
			// key is one of sortColumn's constants, never input; each has
			// an index (column DESC, product_id DESC) WHERE listed.
			rows, err := scanChanges(tx, `SELECT `+changeColumns+`
				JOIN (SELECT a.product_id, a.`+key.column+` AS k FROM `+key.table+` a WHERE a.listed
					ORDER BY a.`+key.column+` DESC, a.product_id DESC LIMIT ?) top ON top.product_id = p.id
				ORDER BY top.k DESC, top.product_id DESC`, n)
			if err != nil {
				return err
			}
			for _, c := range rows {
				if !seen[c.ID] {
					seen[c.ID] = true
					out.Products = append(out.Products, c)
				}
			}
		}
		return nil
	})
	if err != nil {
		return Snapshot{}, fmt.Errorf("read the top %d products: %w", n, mapErr(err))
	}
	return out, nil
}

func scanChanges(tx *gorm.DB, query string, args ...any) ([]ProductChange, error) {
	rows, err := tx.Raw(query, args...).Rows()
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []ProductChange
	for rows.Next() {
		var c ProductChange
		if err := rows.Scan(&c.ID, &c.Name, &c.LikeCount, &c.SalesCount, &c.SalesAmount, &c.ViewCount, &c.UpdatedAt, &c.XID); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// readSnapshot runs fn in a read-only REPEATABLE READ transaction, after
// reading the snapshot's xmin into watermark: in REPEATABLE READ the first
// statement fixes the snapshot every later one reads.
func (s *Store) readSnapshot(ctx context.Context, watermark *uint64, fn func(tx *gorm.DB) error) error {
	return s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Raw(`SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint`).Row().Scan(watermark); err != nil {
			return err
		}
		return fn(tx)
	}, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
}

// Pipeline is what the database says about the pipeline's health.
type Pipeline struct {
	OutboxBacklog     int64         // outbox rows the relay has not published
	OldestUnpublished time.Duration // age of the oldest of them
	OutboxFailed      int64         // events the relay gave up on (outbox_failed)
	Leader            string        // the relay lease's owner; "" when nobody holds it
	LeaderToken       int64
	// AppliedPerSec is the rate of order and view events recorded in
	// event_handled over the last Window (likes keep no idempotency row).
	AppliedPerSec float64
	// E2ELagAvg and E2ELagMax are the time from the API's commit of an event
	// to the consumer's commit of its effect, over the events of the last
	// Window; nil when none was applied.
	E2ELagAvg, E2ELagMax *time.Duration
}

// PipelineWindow is the span AppliedPerSec and the lags are measured over.
const PipelineWindow = 2 * time.Second

// PipelineStats reads the pipeline's health: the relay's state through
// internal/outbox's reader, the rest in one more statement.
func (s *Store) PipelineStats(ctx context.Context) (Pipeline, error) {
	relay, err := outbox.ReadRelayState(ctx, queryRow(s.db))
	if err != nil {
		return Pipeline{}, mapErr(err)
	}
	p := Pipeline{OutboxBacklog: relay.Backlog, OldestUnpublished: relay.OldestAge}
	if l := relay.Leader; l != nil {
		p.Leader, p.LeaderToken = l.Owner, l.Token
	}
	var (
		applied        int64
		lagAvg, lagMax sql.NullFloat64
	)
	err = s.db.WithContext(ctx).Raw(`
		WITH recent AS (
			SELECT h.created_at, split_part(h.idempotency_key, ':', 2) AS event_id
			FROM event_handled h
			WHERE h.created_at > clock_timestamp() - ?::bigint * interval '1 microsecond'
		), lag AS (
			-- Keys are '{group}:{eventId}'; events from elsewhere may carry
			-- ids that are not UUIDs, and have no outbox row anyway.
			SELECT EXTRACT(EPOCH FROM avg(r.created_at - o.created_at))::float8 AS avg,
			       EXTRACT(EPOCH FROM max(r.created_at - o.created_at))::float8 AS max
			FROM recent r JOIN outbox o ON o.event_id = (CASE
				WHEN r.event_id ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'
				THEN r.event_id::uuid END)
		)
		SELECT (SELECT count(*) FROM outbox_failed), (SELECT count(*) FROM recent), lag.avg, lag.max
		FROM lag`, PipelineWindow.Microseconds()).
		Row().Scan(&p.OutboxFailed, &applied, &lagAvg, &lagMax)
	if err != nil {
		return Pipeline{}, fmt.Errorf("read pipeline stats: %w", mapErr(err))
	}
	p.AppliedPerSec = float64(applied) / PipelineWindow.Seconds()
	if lagAvg.Valid && lagMax.Valid {
		a, m := seconds(lagAvg.Float64), seconds(lagMax.Float64)
		p.E2ELagAvg, p.E2ELagMax = &a, &m
	}
	return p, nil
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// NotifyQueueUsage returns the fraction (0 to 1) of PostgreSQL's NOTIFY
// queue in use. The outbox's wake-up notifies on every insert; when the
// queue is full (a listener stuck in a transaction), those commits fail.
func (s *Store) NotifyQueueUsage(ctx context.Context) (float64, error) {
	var u float64
	if err := s.db.WithContext(ctx).Raw(`SELECT pg_notification_queue_usage()`).Row().Scan(&u); err != nil {
		return 0, fmt.Errorf("read the notify queue usage: %w", mapErr(err))
	}
	return u, nil
}
