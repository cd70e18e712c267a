// Package outboxops is the operators' door to the outbox tables: the failed
// events (outbox_failed), their re-drive back into the outbox, and the
// relay's state (cursor, backlog, leader). It is pipelinectl's store layer
// and the only package of it importing pgx.
package outboxops

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/loopers/commerce-pipeline/internal/outbox"
	"github.com/loopers/commerce-pipeline/internal/pg"
)

// ErrNotFound is returned when a requested outbox_failed row does not exist.
var ErrNotFound = errors.New("no such outbox_failed row")

// ErrStillQueued is returned when a failed event's original outbox row is
// still after the relay's cursor, so re-driving it would queue it twice.
var ErrStillQueued = errors.New("the event's original outbox row is still queued")

// Store reads and writes the outbox tables.
type Store struct {
	db   *pg.DB
	wake *pg.Notifier // the relay's wake-up after a re-drive committed
}

// Open connects to databaseURL and checks that it answers. An operator's
// command needs a connection or two.
func Open(ctx context.Context, databaseURL string) (*Store, error) {
	db, err := pg.Open(ctx, databaseURL, pg.Options{MaxConns: 2})
	if err != nil {
		return nil, err
	}
	return &Store{db: db, wake: db.NewNotifier(outbox.Channel)}, nil
}

// Close sends the wake-ups still due and closes the pool.
func (s *Store) Close() {
	s.wake.Close()
	s.db.Close()
}

// Failed is one outbox_failed row.
type Failed struct {
	ID            int64     `json:"id"`
	OutboxID      int64     `json:"outboxId"`
	Sequence      int64     `json:"sequence"`
	EventID       string    `json:"eventId"`
	EventType     string    `json:"eventType"`
	AggregateType string    `json:"aggregateType"`
	AggregateID   string    `json:"aggregateId"`
	Error         string    `json:"error"`
	FailedAt      time.Time `json:"failedAt"`
}

const failedColumns = `id, outbox_id, COALESCE(sequence, outbox_id), event_id::text, event_type, aggregate_type, aggregate_id, error_message, failed_at`

func scanFailed(rows pgx.Rows) ([]Failed, error) {
	defer rows.Close()
	var out []Failed
	for rows.Next() {
		var f Failed
		if err := rows.Scan(&f.ID, &f.OutboxID, &f.Sequence, &f.EventID, &f.EventType, &f.AggregateType, &f.AggregateID, &f.Error, &f.FailedAt); err != nil {
			return nil, fmt.Errorf("read outbox_failed: %w", pg.MapErr(err))
		}
		out = append(out, f)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read outbox_failed: %w", pg.MapErr(err))
	}
	return out, nil
}

// ListFailed returns up to limit outbox_failed rows, oldest first.
func (s *Store) ListFailed(ctx context.Context, limit int) ([]Failed, error) {
	rows, err := s.db.Pool.Query(ctx, `SELECT `+failedColumns+` FROM outbox_failed ORDER BY id LIMIT $1`, limit)
	if err != nil {
		return nil, fmt.Errorf("read outbox_failed: %w", pg.MapErr(err))
	}
	return scanFailed(rows)
}

// Selection names the outbox_failed rows to re-drive: IDs (at most MaxIDs,
// moved in one transaction), or every row (moved in chunks).
type Selection struct {
	IDs []int64
	All bool
	// Chunk is how many rows one transaction of an All re-drive moves
	// (0: RedriveChunk).
	Chunk int
	// Progress, when set, is called after each committed chunk of an All
	// re-drive with the number of rows moved so far.
	Progress func(moved int)
}

// RedriveChunk is the rows one transaction of an All re-drive moves. The
// relay cannot publish past an outbox id a running transaction may still
// commit, so one long transaction re-driving everything would stop all
// publishing until it commits; a chunk holds it back for milliseconds.
const RedriveChunk = 500

// MaxIDs bounds the ids one re-drive may name.
const MaxIDs = 10_000

// Redriven is one failed event moved back into the outbox.
type Redriven struct {
	Failed
	NewOutboxID int64 `json:"newOutboxId"` // 0 in a dry run
}

// Redrive moves the selected outbox_failed rows back into the outbox,
// keeping each event's id and sequence, and records each move in
// outbox_redrive with `by` and the time. Named ids move in one transaction:
// one that does not exist fails the whole call (ErrNotFound) and nothing
// moves. All rows move in chunks of Selection.Chunk, each its own short
// transaction, so the relay keeps publishing meanwhile; a chunk that fails
// stops the re-drive, and what the chunks before it moved stays moved (it is
// returned with the error). With dryRun it only reports what it would move.
//
// outbox.event_id is UNIQUE and the event's original row stays in the outbox
// after it failed, until retention purges it. That row is behind the relay's
// cursor (the relay records a failure in the same statement that moves the
// cursor past it) and will never be read again, so the re-drive deletes it in
// the same transaction before inserting the event again: the constraint keeps
// guarding against a second live copy, and outbox_failed / outbox_redrive keep
// the history. The new row takes a new id from the outbox sequence, since the
// relay reads only above its cursor, and carries the original sequence, which
// the relay publishes as the CloudEvents sequence. It keeps its created_at,
// the CloudEvents time, too: consumers judge their idempotency horizon by it,
// and an event older than the horizon must stay skipped however it returns.
// The relay's max-age clock runs from it as well, so a re-driven event older
// than OUTBOX_RELAY_MAX_AGE that meets a retriable error goes straight back
// to outbox_failed: re-drive once the cause is fixed.
func (s *Store) Redrive(ctx context.Context, sel Selection, by string, dryRun bool) ([]Redriven, error) {
	if by == "" {
		return nil, errors.New("re-drive: who asks for it must be named")
	}
	if !sel.All && len(sel.IDs) == 0 {
		return nil, errors.New("re-drive: no rows selected")
	}
	if len(sel.IDs) > MaxIDs {
		return nil, fmt.Errorf("re-drive: %d ids, at most %d a call", len(sel.IDs), MaxIDs)
	}
	if !sel.All {
		return s.redriveChunk(ctx, sel, 0, 0, by, dryRun)
	}
	size := sel.Chunk
	if size <= 0 {
		size = RedriveChunk
	}
	var out []Redriven
	for after := int64(0); ; {
		chunk, err := s.redriveChunk(ctx, sel, after, size, by, dryRun)
		out = append(out, chunk...)
		if err != nil {
			return out, err
		}
		if len(chunk) < size {
			return out, nil
		}
		after = chunk[len(chunk)-1].ID
		if sel.Progress != nil && !dryRun {
			sel.Progress(len(out))
		}
	}
}

// redriveChunk moves, in one transaction, the selected rows: sel.IDs, or
// (for All) up to size rows with ids above after.
func (s *Store) redriveChunk(ctx context.Context, sel Selection, after int64, size int, by string, dryRun bool) ([]Redriven, error) {
	var out []Redriven
	err := s.db.InTx(ctx, func(tx pgx.Tx) error {
		// FOR UPDATE: two operators re-driving the same row serialise, and
		// the second finds it gone.
		var (
			rows pgx.Rows
			err  error
		)
		if sel.All {
			rows, err = tx.Query(ctx, `SELECT `+failedColumns+` FROM outbox_failed
				WHERE id > $1 ORDER BY id LIMIT $2 FOR UPDATE`, after, size)
		} else {
			rows, err = tx.Query(ctx, `SELECT `+failedColumns+` FROM outbox_failed
				WHERE id = ANY($1) ORDER BY id FOR UPDATE`, sel.IDs)
		}
		if err != nil {
			return fmt.Errorf("read outbox_failed: %w", err)
		}
		failed, err := scanFailed(rows)
		if err != nil {
			return err
		}
		if err := missing(sel, failed); err != nil {
			return err
		}
		out = make([]Redriven, len(failed))
		for i, f := range failed {
			out[i].Failed = f
			if dryRun {
				continue
			}
			if out[i].NewOutboxID, err = redriveOne(ctx, tx, f, by); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !dryRun && len(out) > 0 {
		s.wake.Notify()
	}
	return out, nil
}

func missing(sel Selection, found []Failed) error {
	if sel.All {
		return nil
	}
	have := map[int64]bool{}
	for _, f := range found {
		have[f.ID] = true
	}
	var absent []int64
	for _, id := range sel.IDs {
		if !have[id] {
			absent = append(absent, id)
		}
	}
	if len(absent) > 0 {
		return fmt.Errorf("re-drive %v: %w", absent, ErrNotFound)
	}
	return nil
}

func redriveOne(ctx context.Context, tx pgx.Tx, f Failed, by string) (int64, error) {
	var queued bool
	err := tx.QueryRow(ctx, `
		WITH gone AS (
			DELETE FROM outbox WHERE event_id = $1::uuid
			  AND id <= (SELECT last_processed_id FROM outbox_cursor WHERE id = 1)
		)
		SELECT EXISTS (SELECT 1 FROM outbox WHERE event_id = $1::uuid
			AND id > (SELECT last_processed_id FROM outbox_cursor WHERE id = 1))`, f.EventID).Scan(&queued)
	if err != nil {
		return 0, fmt.Errorf("re-drive outbox_failed %d: remove the original row: %w", f.ID, err)
	}
	if queued {
		return 0, fmt.Errorf("re-drive outbox_failed %d (event %s): %w", f.ID, f.EventID, ErrStillQueued)
	}
	var id int64
	err = tx.QueryRow(ctx, `
		WITH f AS (DELETE FROM outbox_failed WHERE id = $1 RETURNING *),
		n AS (
			INSERT INTO outbox (event_id, event_type, source, aggregate_type, aggregate_id, payload, created_at, sequence, traceparent, tracestate)
			SELECT event_id, event_type, source, aggregate_type, aggregate_id, payload, created_at, COALESCE(sequence, outbox_id), traceparent, tracestate FROM f
			RETURNING id, event_id, sequence
		), a AS (
			INSERT INTO outbox_redrive (failed_id, failed_outbox_id, new_outbox_id, event_id, sequence, event_type, error_message, failed_at, redriven_by)
			SELECT f.id, f.outbox_id, n.id, f.event_id, n.sequence, f.event_type, f.error_message, f.failed_at, $2 FROM f JOIN n USING (event_id)
		)
		SELECT id FROM n`, f.ID, by).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("re-drive outbox_failed %d: %w", f.ID, err)
	}
	return id, nil
}

// Status is the relay's state as the database holds it.
type Status struct {
	Cursor          int64         `json:"cursor"`
	CursorUpdatedAt time.Time     `json:"cursorUpdatedAt"`
	Backlog         int64         `json:"backlog"`
	OldestAge       time.Duration `json:"oldestUnpublishedAgeNs"`
	Failed          int64         `json:"failed"`
	// Leader is the holder of the live lease; nil when no relay holds it
	// now.
	Leader *Lease `json:"leader"`
	// Terms is how many terms the lease has had (its latest fencing token;
	// 0 when no relay ever held it).
	Terms int64 `json:"terms"`
}

// Lease is a live term of the relay's leader lease.
type Lease struct {
	Owner      string    `json:"owner"`
	Token      int64     `json:"token"`
	Until      time.Time `json:"until"`
	AcquiredAt time.Time `json:"acquiredAt"`
}

// Status reads the relay's state (internal/outbox's reader: the cursor, the
// backlog after it and the age of its oldest row, the lease) and the number
// of failed events.
func (s *Store) Status(ctx context.Context) (Status, error) {
	rs, err := outbox.ReadRelayState(ctx, s.db.Pool.QueryRow)
	if err != nil {
		return Status{}, pg.MapErr(err)
	}
	st := Status{Cursor: rs.Cursor, CursorUpdatedAt: rs.CursorUpdatedAt, Backlog: rs.Backlog, OldestAge: rs.OldestAge, Terms: rs.Terms}
	if l := rs.Leader; l != nil {
		st.Leader = &Lease{Owner: l.Owner, Token: l.Token, Until: l.Until, AcquiredAt: l.AcquiredAt}
	}
	if err := s.db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox_failed`).Scan(&st.Failed); err != nil {
		return Status{}, fmt.Errorf("count outbox_failed: %w", pg.MapErr(err))
	}
	return st, nil
}
