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
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/loopers/commerce-pipeline/pkg/events"
)

// Source is the CloudEvents source of every event this service emits.
const Source = "commerce-api"

// Domain errors. Callers match them with errors.Is; the wrapping error says
// which entity was involved.
var (
	ErrNotFound          = errors.New("not found")
	ErrConflict          = errors.New("conflict")
	ErrInsufficientStock = errors.New("insufficient stock")
)

// Store holds the connection pool.
type Store struct {
	db  *gorm.DB
	sql *sql.DB
	reg *events.Registry
	url string // for connections of their own (LISTEN)
}

// Open connects to databaseURL with at most poolSize connections and checks
// that the database answers.
func Open(ctx context.Context, databaseURL string, poolSize int, reg *events.Registry) (*Store, error) {
	db, err := gorm.Open(postgres.Open(databaseURL), &gorm.Config{
		// Every write here runs in an explicit transaction; gorm's implicit
		// one per statement would only add BEGIN/COMMIT round trips.
		SkipDefaultTransaction: true,
		Logger:                 logger.Discard,
	})
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	sqlDB.SetMaxOpenConns(poolSize)
	sqlDB.SetMaxIdleConns(poolSize)
	sqlDB.SetConnMaxIdleTime(5 * time.Minute)
	s := &Store{db: db, sql: sqlDB, reg: reg, url: databaseURL}
	if err := s.Ping(ctx); err != nil {
		sqlDB.Close()
		return nil, err
	}
	return s, nil
}

// Close closes the pool.
func (s *Store) Close() error { return s.sql.Close() }

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.sql.PingContext(ctx); err != nil {
		return fmt.Errorf("ping database: %w", err)
	}
	return nil
}

// Tx is an open transaction.
type Tx struct {
	db  *gorm.DB
	reg *events.Registry
}

// InTx runs fn in a transaction, committing when it returns nil and rolling
// back otherwise. Database errors are mapped to the domain sentinels.
func (s *Store) InTx(ctx context.Context, fn func(tx *Tx) error) error {
	err := s.db.WithContext(ctx).Transaction(func(db *gorm.DB) error {
		return fn(&Tx{db: db, reg: s.reg})
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
	id, err := uuid.NewRandom()
	if err != nil {
		return fmt.Errorf("outbox: event id: %w", err)
	}
	err = tx.db.Exec(`INSERT INTO outbox (event_id, event_type, source, aggregate_type, aggregate_id, payload)
		VALUES (?, ?, ?, ?, ?, ?)`,
		id.String(), rec.Type, Source, rec.AggregateType, rec.AggregateID, string(rec.Data)).Error
	if err != nil {
		return fmt.Errorf("outbox: insert %s: %w", rec.Type, err)
	}
	return nil
}

// mapErr turns driver errors into domain sentinels, keeping the original in
// the chain for logs.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		switch pg.Code {
		case "23505": // unique_violation
			return fmt.Errorf("%w: %w", ErrConflict, err)
		case "23503": // foreign_key_violation
			return fmt.Errorf("%w: %w", ErrNotFound, err)
		}
	}
	return err
}
