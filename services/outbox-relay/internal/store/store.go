// Package store is the relay's only door to PostgreSQL: the outbox rows and
// the snapshot they were read in, the cursor, outbox_failed, the leader lease,
// retention, and LISTEN. It is the only package of the relay importing pgx.
package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/loopers/commerce-pipeline/internal/outbox"
	"github.com/loopers/commerce-pipeline/internal/pg"
)

// ErrFenced is returned by a write that carries a fencing token which is no
// longer current (the lease expired or another node took it), or that
// expected a cursor position another writer has moved. Nothing was written.
var ErrFenced = errors.New("fenced out: the lease is not held with this token")

// Store reads and writes the relay's tables.
type Store struct {
	db   *pg.DB
	pool *pgxpool.Pool
}

// Open connects a pool to databaseURL with o and checks that it answers.
func Open(ctx context.Context, databaseURL string, o pg.Options) (*Store, error) {
	db, err := pg.Open(ctx, databaseURL, o)
	if err != nil {
		return nil, err
	}
	return &Store{db: db, pool: db.Pool}, nil
}

// Close closes the pool.
func (s *Store) Close() { s.db.Close() }

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error { return s.db.Ping(ctx) }

// Fence identifies the lease term a write belongs to. Fenced writes succeed
// only while this term is the current, unexpired one.
type Fence struct {
	Lease string
	Owner string
	Token int64
}

// fenceHeld is the fencing predicate, checked in the same statement as the
// write it guards. FOR SHARE makes a concurrent take-over of the lease (an
// UPDATE of that row) wait until the guarded write has committed, so a write
// can never land after a newer leader has started.
const fenceHeld = `EXISTS (SELECT 1 FROM relay_lease
	WHERE name = @lease AND owner = @owner AND token = @token AND lease_until > clock_timestamp()
	FOR SHARE)`

func (f Fence) args(a pgx.NamedArgs) pgx.NamedArgs {
	a["lease"], a["owner"], a["token"] = f.Lease, f.Owner, f.Token
	return a
}

// Cursor returns the id of the last outbox row the relay has handled.
func (s *Store) Cursor(ctx context.Context) (int64, error) {
	id, err := outbox.ReadCursor(ctx, s.pool.QueryRow)
	return id, pg.MapErr(err)
}

// Row is an outbox row as the relay reads it.
type Row struct {
	ID int64
	// Sequence is the event's CloudEvents sequence: the outbox id it was
	// first written with, which differs from ID only for a re-driven event.
	Sequence      int64
	EventID       string
	EventType     string
	Source        string
	AggregateType string
	AggregateID   string
	Payload       []byte
	CreatedAt     time.Time
	// Ready reports whether the row may be sent now: it has no next_retry_at,
	// or it has passed.
	Ready bool
	// TraceParent and TraceState are the W3C trace context its writer
	// stored (migration 00016), published unchanged; empty when NULL.
	TraceParent, TraceState string
}

// Batch is one read of the outbox and the snapshot it was read in.
type Batch struct {
	Snapshot Snapshot
	Now      time.Time // the database clock when the rows were read
	Sent     time.Time // this process's clock when the read was sent
	Rows     []Row     // in id order
}

// readBatch reads rows after the cursor together with pg_current_snapshot().
// Both come from one statement, hence one snapshot (pg_current_snapshot
// returns the statement's active snapshot under READ COMMITTED): the xip list
// names exactly the transactions whose rows this read cannot see although
// they started before it. The relay's gap rule depends on that pairing; see
// package relay, gaps.go.
const readBatch = `
SELECT s.snap::text, s.now,
       o.id, COALESCE(o.sequence, o.id), o.event_id::text, o.event_type, o.source, o.aggregate_type, o.aggregate_id, o.payload, o.created_at,
       (o.next_retry_at IS NULL OR o.next_retry_at <= s.now), o.traceparent, o.tracestate
FROM (SELECT pg_current_snapshot() AS snap, clock_timestamp() AS now) s
LEFT JOIN LATERAL (
    SELECT * FROM outbox WHERE id > $1 ORDER BY id LIMIT $2
) o ON true
ORDER BY o.id`

// ReadBatch reads up to limit rows with id > after, in id order, and the
// snapshot they were read in.
func (s *Store) ReadBatch(ctx context.Context, after int64, limit int) (Batch, error) {
	b := Batch{Sent: time.Now()}
	rows, err := s.pool.Query(ctx, readBatch, after, limit)
	if err != nil {
		return Batch{}, fmt.Errorf("read outbox: %w", pg.MapErr(err))
	}
	defer rows.Close()
	var (
		snap string
		// Every row repeats the snapshot and the clock: read them once.
		snapDst, nowDst any = &snap, &b.Now
		// Nullable columns (the LEFT JOIN's empty row) scan into pgtype
		// values, which cost no allocation per column.
		id, seq                           pgtype.Int8
		eventID, typ, src, aggType, aggID pgtype.Text
		traceParent, traceState           pgtype.Text
		payload                           []byte
		createdAt                         pgtype.Timestamptz
		ready                             pgtype.Bool
	)
	b.Rows = make([]Row, 0, limit)
	for rows.Next() {
		payload = nil // a fresh array per row: the row keeps it
		if err := rows.Scan(snapDst, nowDst, &id, &seq, &eventID, &typ, &src, &aggType, &aggID, &payload, &createdAt, &ready, &traceParent, &traceState); err != nil {
			return Batch{}, fmt.Errorf("scan outbox row: %w", pg.MapErr(err))
		}
		snapDst, nowDst = nil, nil
		if !id.Valid { // the empty LEFT JOIN: no rows, only the snapshot
			continue
		}
		b.Rows = append(b.Rows, Row{
			ID: id.Int64, Sequence: seq.Int64, EventID: eventID.String, EventType: typ.String, Source: src.String,
			AggregateType: aggType.String, AggregateID: aggID.String, Payload: payload,
			CreatedAt: createdAt.Time, Ready: ready.Bool, TraceParent: traceParent.String, TraceState: traceState.String,
		})
	}
	if err := rows.Err(); err != nil {
		return Batch{}, fmt.Errorf("read outbox: %w", pg.MapErr(err))
	}
	if b.Snapshot, err = ParseSnapshot(snap); err != nil {
		return Batch{}, err
	}
	return b, nil
}

// OutboxWriters returns the (32-bit) transaction ids of the transactions
// holding a RowExclusiveLock on outbox right now: every transaction that has
// inserted into outbox and not ended yet. An INSERT takes that lock before it
// evaluates the id default, and keeps it to the end of the transaction. Each
// transaction holds a lock on its own transaction id, which links the
// relation lock to the xid.
func (s *Store) OutboxWriters(ctx context.Context) (map[uint32]bool, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT DISTINCT x.transactionid::text
		FROM pg_locks r
		JOIN pg_locks x ON x.virtualtransaction = r.virtualtransaction AND x.locktype = 'transactionid'
		WHERE r.locktype = 'relation' AND r.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND r.relation = 'outbox'::regclass AND r.mode = 'RowExclusiveLock' AND r.granted`)
	if err != nil {
		return nil, fmt.Errorf("read outbox writers: %w", pg.MapErr(err))
	}
	defer rows.Close()
	out := map[uint32]bool{}
	for rows.Next() {
		var xid string
		if err := rows.Scan(&xid); err != nil {
			return nil, fmt.Errorf("read outbox writers: %w", pg.MapErr(err))
		}
		v, err := strconv.ParseUint(xid, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("read outbox writers: xid %q: %w", xid, err)
		}
		out[uint32(v)] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read outbox writers: %w", pg.MapErr(err))
	}
	return out, nil
}

// Failure is an outbox row to copy to outbox_failed with its error.
type Failure struct {
	ID    int64
	Error string
}

// advance moves the cursor from its expected position, copies the failed
// rows to outbox_failed, records the held rows (passed by the cursor, not
// yet published) and forgets the settled ones (published or failed), in one
// statement: all of it happens, or none. The data-modifying CTEs see one
// snapshot; the others run only if the fenced, compare-and-set UPDATE
// matched. The cursor may stay where it is (@to = @from): the statement
// still checks the fence.
const advance = `
WITH c AS (
    UPDATE outbox_cursor SET last_processed_id = @to, updated_at = clock_timestamp()
    WHERE id = 1 AND last_processed_id = @from AND ` + fenceHeld + `
    RETURNING 1
), f AS (
    INSERT INTO outbox_failed (outbox_id, event_id, event_type, source, aggregate_type, aggregate_id, payload, created_at, error_message, traceparent, tracestate)
    SELECT o.id, o.event_id, o.event_type, o.source, o.aggregate_type, o.aggregate_id, o.payload, o.created_at, x.err, o.traceparent, o.tracestate
    FROM unnest(@ids::bigint[], @errs::text[]) AS x(id, err)
    JOIN outbox o ON o.id = x.id
    WHERE EXISTS (SELECT 1 FROM c)
    ON CONFLICT (outbox_id) DO NOTHING
), h AS (
    INSERT INTO outbox_held (outbox_id)
    SELECT x.id FROM unnest(@held::bigint[]) AS x(id)
    WHERE EXISTS (SELECT 1 FROM c)
    ON CONFLICT (outbox_id) DO NOTHING
), d AS (
    DELETE FROM outbox_held
    WHERE outbox_id = ANY(@settled::bigint[]) AND EXISTS (SELECT 1 FROM c)
)
SELECT count(*) FROM c`

// Advance is one fenced step of the relay's progress.
type Advance struct {
	From, To int64     // the cursor's expected position and its new one (may be equal)
	Failed   []Failure // rows to copy to outbox_failed (held ones included)
	Held     []int64   // rows the cursor passes that are not published yet
	Settled  []int64   // held rows published or failed since: no longer held
}

// Advance writes a, atomically, if the fence is current and the cursor is
// still at a.From. Otherwise it writes nothing and returns ErrFenced.
//
// The transaction commits asynchronously (synchronous_commit off for it
// alone): the relay's next read waits for this write, and a WAL flush
// shared with every writer of the database cost it milliseconds under load.
// A crash of PostgreSQL can lose only the last such commits that no
// durable transaction followed (the WAL is flushed in order), and a lost
// advance moves the cursor back (with its held rows): the rows behind it
// are published again, which consumers de-duplicate, and a lost
// outbox_failed row fails again. Nothing is skipped.
func (s *Store) Advance(ctx context.Context, f Fence, a Advance) error {
	ids := make([]int64, len(a.Failed))
	errs := make([]string, len(a.Failed))
	for i, x := range a.Failed {
		ids[i], errs[i] = x.ID, x.Error
	}
	settled := append(slices.Clone(a.Settled), ids...)
	// A batch is one implicit transaction: the setting, local to it, holds
	// when it commits.
	b := &pgx.Batch{}
	b.Queue(`SELECT set_config('synchronous_commit', 'off', true)`)
	b.Queue(advance, f.args(pgx.NamedArgs{"from": a.From, "to": a.To, "ids": ids, "errs": errs,
		"held": nonNil(a.Held), "settled": settled}))
	var n int
	br := s.pool.SendBatch(ctx, b)
	_, err := br.Exec()
	if err == nil {
		err = br.QueryRow().Scan(&n)
	}
	if closeErr := br.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return fmt.Errorf("advance cursor to %d: %w", a.To, pg.MapErr(err))
	}
	if n != 1 {
		return fmt.Errorf("advance cursor to %d: %w", a.To, ErrFenced)
	}
	return nil
}

// nonNil makes a nil slice an empty array parameter rather than NULL.
func nonNil(v []int64) []int64 {
	if v == nil {
		return []int64{}
	}
	return v
}

// Held reads the rows the cursor passed without publishing them, in id
// order, as ReadBatch reads rows (every one ready).
func (s *Store) Held(ctx context.Context) ([]Row, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT o.id, COALESCE(o.sequence, o.id), o.event_id::text, o.event_type, o.source, o.aggregate_type, o.aggregate_id, o.payload, o.created_at,
		       COALESCE(o.traceparent, ''), COALESCE(o.tracestate, '')
		FROM outbox_held h JOIN outbox o ON o.id = h.outbox_id
		ORDER BY o.id`)
	if err != nil {
		return nil, fmt.Errorf("read held outbox rows: %w", pg.MapErr(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Row, error) {
		x := Row{Ready: true}
		err := r.Scan(&x.ID, &x.Sequence, &x.EventID, &x.EventType, &x.Source, &x.AggregateType, &x.AggregateID, &x.Payload, &x.CreatedAt,
			&x.TraceParent, &x.TraceState)
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("read held outbox rows: %w", pg.MapErr(err))
	}
	return out, nil
}

// Purge deletes published outbox rows (id ≤ cursor) created more than
// olderThan ago, chunk rows per statement, and returns how many it deleted.
func (s *Store) Purge(ctx context.Context, olderThan time.Duration, chunk int) (int64, error) {
	n, err := s.db.Purge(ctx, `
		DELETE FROM outbox WHERE id IN (
			SELECT id FROM outbox
			WHERE id <= (SELECT last_processed_id FROM outbox_cursor WHERE id = 1)
			  AND id NOT IN (SELECT outbox_id FROM outbox_held)
			  AND created_at < clock_timestamp() - $1::bigint * interval '1 microsecond'
			ORDER BY id LIMIT $2)`, chunk, olderThan.Microseconds())
	if err != nil {
		return n, fmt.Errorf("purge outbox: %w", pg.MapErr(err))
	}
	return n, nil
}

// State reads the relay's state: the cursor, the backlog after it and the
// age of its oldest row, and the lease.
func (s *Store) State(ctx context.Context) (outbox.RelayState, error) {
	st, err := outbox.ReadRelayState(ctx, s.pool.QueryRow)
	return st, pg.MapErr(err)
}

// AcquireLease takes or renews the named lease for owner until now + ttl, in
// one atomic statement: it succeeds when the lease is free, expired, or
// already owner's. The token stays while owner renews a live lease and grows
// by one for every new term. ok is false when another owner holds it.
func (s *Store) AcquireLease(ctx context.Context, name, owner string, ttl time.Duration) (token int64, ok bool, err error) {
	err = s.pool.QueryRow(ctx, `
		INSERT INTO relay_lease AS l (name, owner, token, lease_until, acquired_at)
		VALUES ($1, $2, 1, clock_timestamp() + $3::bigint * interval '1 microsecond', clock_timestamp())
		ON CONFLICT (name) DO UPDATE SET
			token = CASE WHEN l.owner = EXCLUDED.owner AND l.lease_until > clock_timestamp()
			             THEN l.token ELSE l.token + 1 END,
			acquired_at = CASE WHEN l.owner = EXCLUDED.owner AND l.lease_until > clock_timestamp()
			                   THEN l.acquired_at ELSE clock_timestamp() END,
			owner = EXCLUDED.owner,
			lease_until = EXCLUDED.lease_until
		WHERE l.lease_until <= clock_timestamp() OR l.owner = EXCLUDED.owner
		RETURNING token`, name, owner, ttl.Microseconds()).Scan(&token)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("acquire lease %s: %w", name, pg.MapErr(err))
	}
	return token, true, nil
}

// ReleaseLease ends owner's term of the lease at once so another node can
// take it without waiting for the TTL. It does nothing if the term is over.
func (s *Store) ReleaseLease(ctx context.Context, f Fence) error {
	_, err := s.pool.Exec(ctx, `
		UPDATE relay_lease SET lease_until = '-infinity'
		WHERE name = $1 AND owner = $2 AND token = $3`, f.Lease, f.Owner, f.Token)
	if err != nil {
		return fmt.Errorf("release lease %s: %w", f.Lease, pg.MapErr(err))
	}
	return nil
}

// Listen LISTENs on channel and calls notify for every notification, and
// after each (re)connection (pg.DB.Listen).
func (s *Store) Listen(ctx context.Context, logger *slog.Logger, channel string, notify func()) {
	s.db.Listen(ctx, logger, channel, notify)
}
