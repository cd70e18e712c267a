// Package store is commerce-api's persistence layer and the only package of
// the service that talks to PostgreSQL. Every state change commits together
// with its outbox rows in one transaction, and the aggregate row is locked
// before an outbox row is inserted, so that outbox id order is the logical
// order per aggregate.
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
	return &Store{db: db, pool: pool, reg: reg}, nil
}

// Close closes the pool.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error { return s.pool.Ping(ctx) }

// Tx is an open transaction.
type Tx struct {
	ctx context.Context
	db  *gorm.DB
	reg *events.Registry
}

// InTx runs fn in a transaction, committing when it returns nil and rolling
// back otherwise. Database errors are mapped to the domain sentinels.
func (s *Store) InTx(ctx context.Context, fn func(tx *Tx) error) error {
	err := s.db.WithContext(ctx).Transaction(func(db *gorm.DB) error {
		return fn(&Tx{ctx: ctx, db: db, reg: s.reg})
	})
	return mapErr(err)
}

// AppendEvent inserts ev, a domain event of package events passed by value,
// into the outbox. The caller must already hold the lock on the event's
// aggregate row.
func (tx *Tx) AppendEvent(ev any) error {
	rec, err := tx.reg.Marshal(ev)
	if err != nil {
		return fmt.Errorf("outbox: %w", err)
	}
	e, err := outbox.NewEntry(Source, rec)
	if err != nil {
		return err
	}
	_, err = outbox.Insert(tx.ctx, queryRow(tx.db), e)
	return err
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
