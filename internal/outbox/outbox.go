// Package outbox owns the contract of the outbox table for its writers: the
// columns a writer sets, the INSERT, and the channel writers notify after
// committing. commerce-api, the relay's tests, the end-to-end suite
// and the benchmarks all write through it (Insert, InsertFromSQL, or a COPY
// of Columns with Entry.Values for a bulk write), so a schema change has one
// place to follow.
//
// It is also the one reader of the relay's state (relaystate.go): the
// cursor, the backlog after it, and the leader lease, whose name RelayLease
// is written here only. The relay's metrics, commerce-api's stream summary,
// pipelinectl (internal/outboxops) and the cluster view all read through it,
// so they agree on what "the leader" is: the holder of a live lease.
package outbox

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/loopers/commerce-pipeline/pkg/events"
)

// Channel is the channel the relay LISTENs on: a writer notifies it after
// a transaction that inserted outbox rows committed, outside that
// transaction (pg.Notifier; migration 00013 dropped the trigger that
// notified inside it).
const Channel = "outbox_events"

// Columns are the columns every writer sets, in the order of Entry.Values;
// created_at defaults to the insert's clock_timestamp(), and the rest (id,
// next_retry_at) are the database's and the relay's. traceparent and
// tracestate (migration 00016) are NULL for an entry without a trace
// context.
var Columns = []string{"event_id", "event_type", "source", "aggregate_type", "aggregate_id", "payload", "traceparent", "tracestate"}

// insertSQL uses $n placeholders, which pgx, database/sql over pgx and gorm's
// Raw all pass through. A NULL created_at means clock_timestamp(): the insert
// itself, not the transaction's start (now()), so that the relay's outbox
// stage (package stages) times the row from its insert, not from the lock
// waits and writes before it.
var insertSQL = `INSERT INTO outbox (` + strings.Join(Columns, ", ") + `, created_at)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, COALESCE($9, clock_timestamp())) RETURNING id`

// Entry is one outbox row to write.
type Entry struct {
	EventID string // a UUID; consumers de-duplicate by it
	Source  string // the CloudEvents source
	events.Record
	CreatedAt time.Time // zero: the database's clock at the insert
	// TraceParent and TraceState are the W3C trace context of the span that
	// created the event (StartCreate); empty: none, stored as NULL.
	TraceParent, TraceState string
}

// NewEntry returns an entry for rec from source with a new random event id.
func NewEntry(source string, rec events.Record) (Entry, error) {
	id, err := uuid.NewRandom()
	if err != nil {
		return Entry{}, fmt.Errorf("outbox: event id: %w", err)
	}
	return Entry{EventID: id.String(), Source: source, Record: rec}, nil
}

// Values returns e's values in the order of Columns, for COPY.
func (e Entry) Values() []any {
	return []any{e.EventID, e.Type, e.Source, e.AggregateType, e.AggregateID, string(e.Data), nullable(e.TraceParent), nullable(e.TraceState)}
}

// nullable is s, or NULL when s is empty.
func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// Row is the result of a single-row query: pgx.Row and *sql.Row are both.
type Row interface{ Scan(dest ...any) error }

// Insert writes e with queryRow, the QueryRow method of the caller's
// transaction or connection (pgx.Tx.QueryRow, sql.Tx.QueryRowContext, …), and
// returns the row's id. Errors are the driver's, for the caller's store to
// map.
//
// With tracing on, an entry without a trace context gets one: the insert
// runs under its "create <topic>" span (StartCreate).
func Insert[R Row](ctx context.Context, queryRow func(context.Context, string, ...any) R, e Entry) (id int64, err error) {
	if e.TraceParent == "" {
		var span trace.Span
		ctx, e, span = StartCreate(ctx, e)
		defer func() { EndCreate(span, err) }()
	}
	var at *time.Time
	if !e.CreatedAt.IsZero() {
		at = &e.CreatedAt
	}
	err = queryRow(ctx, insertSQL, append(e.Values(), at)...).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("outbox: insert %s: %w", e.Type, err)
	}
	return id, nil
}

// InsertFromSQL is an INSERT of one outbox row for each row of from (a
// table expression of the caller's statement, such as a data-modifying
// CTE), with an Entry's Values in the placeholders $first to
// $first+len(Columns)-1: the
// outbox write of a change made in one statement, which is one transaction
// and one round trip. created_at is the insert's clock, as Insert's. The
// caller traces the write itself: StartCreate before, EndCreate after.
func InsertFromSQL(from string, first int) string {
	ps := make([]string, len(Columns))
	for i := range ps {
		ps[i] = "$" + strconv.Itoa(first+i)
	}
	return `INSERT INTO outbox (` + strings.Join(Columns, ", ") + `, created_at)
	SELECT ` + strings.Join(ps, ", ") + `, clock_timestamp() FROM ` + from
}
