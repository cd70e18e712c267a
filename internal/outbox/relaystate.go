package outbox

import (
	"context"
	"fmt"
	"time"
)

// RelayLease is the relay_lease row the relay's leader holds: the relay
// takes it, and every reader of the relay's leadership reads it.
const RelayLease = "outbox-relay"

// Leader is a live term of the relay lease.
type Leader struct {
	Owner      string    // the relay node holding the lease
	Token      int64     // the term's fencing token
	AcquiredAt time.Time // when the term began
	Until      time.Time // when the lease expires unless renewed
}

// Leadership is the relay lease as the database holds it.
type Leadership struct {
	// Leader is the live term: nil when no relay holds the lease now (it
	// expired, was released, or was never taken). A lease whose time has
	// passed is nobody's, whatever its row still says.
	Leader *Leader
	// Terms is the lease's latest fencing token, which grows by one with
	// every term and is never reset: how many terms there have been (0:
	// none), whether or not one is live.
	Terms int64
}

// RelayState is the relay's progress and leadership, read in one statement.
type RelayState struct {
	Cursor          int64 // the id of the last outbox row the relay has handled
	CursorUpdatedAt time.Time
	Backlog         int64         // outbox rows not published yet: after the cursor, or held behind it
	OldestAge       time.Duration // the age of the oldest of them; 0 when there is none
	Leadership
}

// The lease columns. lease_until is NULL unless the lease is live, judged on
// the database's clock (clock_timestamp, not a transaction's start time, so
// a long transaction cannot see a lease live that has expired); a released
// lease's is -infinity, which has no time.Time. The one-row FROM makes a
// missing lease row a row of NULLs rather than no row.
const (
	leaseColumns = `l.owner, l.token, l.acquired_at, CASE WHEN l.lease_until > clock_timestamp() THEN l.lease_until END`
	leaseJoin    = `LEFT JOIN relay_lease l ON l.name = $1`

	cursorQuery     = `SELECT last_processed_id FROM outbox_cursor WHERE id = 1`
	leadershipQuery = `SELECT ` + leaseColumns + ` FROM (VALUES (1)) one ` + leaseJoin
	relayStateQuery = `
SELECT c.last_processed_id, c.updated_at, b.rows,
       COALESCE(EXTRACT(EPOCH FROM clock_timestamp() - b.oldest), 0)::float8, ` + leaseColumns + `
FROM outbox_cursor c
CROSS JOIN LATERAL (SELECT count(*) AS rows, min(created_at) AS oldest FROM outbox
    WHERE id > c.last_processed_id OR id IN (SELECT outbox_id FROM outbox_held)) b
` + leaseJoin + `
WHERE c.id = 1`
)

// The readers below run their one statement with queryRow, the QueryRow
// method of the caller's pool, connection or transaction (as for Insert),
// and return the driver's errors, for the caller's store to map.

// ReadCursor returns the id of the last outbox row the relay has handled.
func ReadCursor[R Row](ctx context.Context, queryRow func(context.Context, string, ...any) R) (int64, error) {
	var id int64
	if err := queryRow(ctx, cursorQuery).Scan(&id); err != nil {
		return 0, fmt.Errorf("read the relay cursor: %w", err)
	}
	return id, nil
}

// ReadLeadership returns the relay lease's live term, if any, and its number
// of terms.
func ReadLeadership[R Row](ctx context.Context, queryRow func(context.Context, string, ...any) R) (Leadership, error) {
	var l lease
	if err := queryRow(ctx, leadershipQuery, RelayLease).Scan(l.dest()...); err != nil {
		return Leadership{}, fmt.Errorf("read the relay lease: %w", err)
	}
	return l.leadership(), nil
}

// ReadRelayState returns the cursor, the backlog after it and the age of its
// oldest row, and the lease, all from one snapshot.
func ReadRelayState[R Row](ctx context.Context, queryRow func(context.Context, string, ...any) R) (RelayState, error) {
	var (
		s    RelayState
		secs float64
		l    lease
	)
	dest := append([]any{&s.Cursor, &s.CursorUpdatedAt, &s.Backlog, &secs}, l.dest()...)
	if err := queryRow(ctx, relayStateQuery, RelayLease).Scan(dest...); err != nil {
		return RelayState{}, fmt.Errorf("read the relay state: %w", err)
	}
	s.OldestAge = time.Duration(secs * float64(time.Second))
	s.Leadership = l.leadership()
	return s, nil
}

// lease is the scan target of leaseColumns, every one NULL when the lease
// row does not exist.
type lease struct {
	owner           *string
	token           *int64
	acquired, until *time.Time // until: nil unless live
}

func (l *lease) dest() []any { return []any{&l.owner, &l.token, &l.acquired, &l.until} }

func (l *lease) leadership() Leadership {
	if l.token == nil {
		return Leadership{}
	}
	out := Leadership{Terms: *l.token}
	if l.until != nil {
		out.Leader = &Leader{Owner: *l.owner, Token: *l.token, AcquiredAt: *l.acquired, Until: *l.until}
	}
	return out
}
