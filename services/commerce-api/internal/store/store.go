// Package store is commerce-api's persistence layer and the only package of
// the service that talks to PostgreSQL. Every state change commits together
// with its outbox rows in one transaction, and every pair of events whose
// order a consumer depends on enters the outbox in the order their changes
// commit. What orders them is the row each change writes, locked no wider
// than that:
//
//   - a like or a cancel writes the (user, product) row of likes: two changes
//     of one user's like of one product wait for each other there (the
//     second's outbox id is drawn after the first committed), and the like
//     consumer orders state per (user, product) by sequence, so the likes of
//     different users need no common lock and commit side by side, however
//     hot the product;
//   - a view locks nothing: product-events holds views only, each counted
//     once whatever the order;
//   - a payment locks its products' rows (FOR NO KEY UPDATE, in id order) to
//     decrement stock, which orders its StockDepleted events, and its order
//     row, which orders the order's events.
//
// The requests of a flash sale (a like, a cancel, a view) are each one
// statement, the change and its outbox row together (changeWithEvent): one
// transaction in one round trip, on the pgx pool directly. Everything else
// runs in gorm transactions (InTx) on the same pool.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/loopers/commerce-pipeline/internal/outbox"
	"github.com/loopers/commerce-pipeline/internal/pg"
	"github.com/loopers/commerce-pipeline/pkg/events"
)

// Source is the CloudEvents source of every event this service emits.
const Source = "commerce-api"

// Domain errors. Callers match them with errors.Is; the wrapping error says
// which entity was involved. The database sentinels are internal/pg's.
var (
	ErrNotFound          = pg.ErrNotFound
	ErrConflict          = pg.ErrConflict
	ErrInvalidInput      = pg.ErrInvalidInput
	ErrUnavailable       = pg.ErrUnavailable
	ErrInsufficientStock = errors.New("insufficient stock")
)

// Store holds the connection pool. gorm runs on internal/pg's pgx pool
// through database/sql, so the pool settings are every service's.
type Store struct {
	db   *gorm.DB
	pool *pg.DB
	reg  *events.Registry
	// wake tells the relay that outbox rows committed: after the commit,
	// outside the writer's transaction (see pg.Notifier).
	wake *pg.Notifier
}

// Open connects to databaseURL with o and checks that the database answers.
func Open(ctx context.Context, databaseURL string, o pg.Options, reg *events.Registry) (*Store, error) {
	pool, err := pg.Open(ctx, databaseURL, o)
	if err != nil {
		return nil, err
	}
	db, err := gorm.Open(postgres.New(postgres.Config{Conn: pool.SQL()}), &gorm.Config{
		// Every write here runs in an explicit transaction; gorm's implicit
		// one per statement would only add BEGIN/COMMIT round trips.
		SkipDefaultTransaction: true,
		Logger:                 logger.Discard,
	})
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("open database: %w", err)
	}
	return &Store{db: db, pool: pool, reg: reg, wake: pool.NewNotifier(outbox.Channel)}, nil
}

// Close closes the pool.
func (s *Store) Close() error {
	s.wake.Close()
	s.pool.Close()
	return nil
}

// WakeUps reports how many relay wake-ups were sent and how many could not
// be (the relay's poll picks those commits up).
func (s *Store) WakeUps() (sent, failed int64) { return s.wake.Stats() }

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error { return s.pool.Ping(ctx) }

// Tx is an open transaction.
type Tx struct {
	ctx      context.Context
	db       *gorm.DB
	reg      *events.Registry
	appended bool // an outbox row was written
}

// InTx runs fn in a transaction, committing when it returns nil and rolling
// back otherwise. Database errors are mapped to the domain sentinels. A
// transaction that wrote outbox rows wakes the relay once it committed.
func (s *Store) InTx(ctx context.Context, fn func(tx *Tx) error) error {
	var t *Tx
	err := s.db.WithContext(ctx).Transaction(func(db *gorm.DB) error {
		t = &Tx{ctx: ctx, db: db, reg: s.reg}
		return fn(t)
	})
	if err == nil && t != nil && t.appended {
		s.wake.Notify()
	}
	return mapErr(err)
}

// AppendEvent inserts ev, a domain event of package events passed by value,
// into the outbox. The caller must already have written the row that orders
// the event against those it must follow (see the package documentation).
func (tx *Tx) AppendEvent(ev any) error {
	rec, err := tx.reg.Marshal(ev)
	if err != nil {
		return fmt.Errorf("outbox: %w", err)
	}
	e, err := outbox.NewEntry(Source, rec)
	if err != nil {
		return err
	}
	if _, err = outbox.Insert(tx.ctx, queryRow(tx.db), e); err != nil {
		return err
	}
	tx.appended = true
	return nil
}

// changeWithEvent runs change, a data-modifying statement with $1…$n
// parameters args that returns a row when it changed something, and in the
// same statement writes ev to the outbox once per returned row: one
// statement is one transaction and one round trip (a BEGIN, two statements
// and a COMMIT were four). It reports whether change returned a row, and
// wakes the relay when it did.
func (s *Store) changeWithEvent(ctx context.Context, change string, args []any, ev any) (bool, error) {
	e, err := s.entry(ev)
	if err != nil {
		return false, err
	}
	ctx, e, span := outbox.StartCreate(ctx, e)
	tag, err := s.pool.Pool.Exec(ctx, `WITH changed AS (`+change+`) `+outbox.InsertFromSQL("changed", len(args)+1),
		append(args, e.Values()...)...)
	outbox.EndCreate(span, err)
	if err != nil {
		return false, err
	}
	if tag.RowsAffected() == 0 {
		return false, nil
	}
	s.wake.Notify()
	return true, nil
}

// entry maps ev, a domain event of package events passed by value, to its
// outbox entry.
func (s *Store) entry(ev any) (outbox.Entry, error) {
	rec, err := s.reg.Marshal(ev)
	if err != nil {
		return outbox.Entry{}, fmt.Errorf("outbox: %w", err)
	}
	return outbox.NewEntry(Source, rec)
}

// queryRow is db's QueryRow for internal/outbox's statements, which use $n
// placeholders; gorm's Raw passes them through.
func queryRow(db *gorm.DB) func(context.Context, string, ...any) *sql.Row {
	return func(ctx context.Context, query string, args ...any) *sql.Row {
		return db.WithContext(ctx).Raw(query, args...).Row()
	}
}

// mapErr turns driver errors into domain sentinels, keeping the original in
// the chain for logs. A foreign key violation here always means the
// referenced product or order does not exist.
func mapErr(err error) error {
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	if pg.Code(err) == pg.CodeForeignKeyViolation {
		return fmt.Errorf("%w: %w", ErrNotFound, pg.MapErr(err))
	}
	if errors.Is(err, context.DeadlineExceeded) {
		// The request's deadline passed while waiting on the database:
		// a busy or stalled database, for the client a "try again".
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return pg.MapErr(err)
}
