// Package store is commerce-api's persistence layer and the only package of
// the service that talks to PostgreSQL. Every state change commits together
// with its outbox rows in one transaction, and the aggregate row is locked
// before an outbox row is inserted, so that outbox id order is the logical
// order per aggregate.
package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
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
	// ErrInvalidInput is a value the database refused as data (SQLSTATE
	// class 22: invalid text, out of range, ...). The API validates input
	// first; this is the backstop that keeps such a value a client error.
	ErrInvalidInput = errors.New("invalid input")
	// ErrUnavailable means the database could not be reached or is not
	// serving: connection refused or lost, shutting down or starting up
	// (SQLSTATE 57P01-57P03, class 08), too many connections, a statement
	// timeout or a deadline. Retrying later can succeed.
	ErrUnavailable = errors.New("database unavailable")
)

// Config says how to connect.
type Config struct {
	URL      string
	PoolSize int // the most connections open at once
	// StatementTimeout bounds every statement on the server side
	// (statement_timeout); zero leaves the server's setting.
	StatementTimeout time.Duration
}

// Store holds the connection pool.
type Store struct {
	db  *gorm.DB
	sql *sql.DB
	reg *events.Registry
}

// Open connects as cfg says and checks that the database answers.
func Open(ctx context.Context, cfg Config, reg *events.Registry) (*Store, error) {
	pgCfg, err := pgx.ParseConfig(cfg.URL)
	if err != nil {
		// The parse error quotes the URL, password included.
		return nil, errors.New("open database: the URL does not parse")
	}
	if cfg.StatementTimeout > 0 {
		pgCfg.RuntimeParams["statement_timeout"] = strconv.FormatInt(cfg.StatementTimeout.Milliseconds(), 10)
	}
	sqlDB := stdlib.OpenDB(*pgCfg)
	db, err := gorm.Open(postgres.New(postgres.Config{Conn: sqlDB}), &gorm.Config{
		// Every write here runs in an explicit transaction; gorm's implicit
		// one per statement would only add BEGIN/COMMIT round trips.
		SkipDefaultTransaction: true,
		Logger:                 logger.Discard,
	})
	if err != nil {
		sqlDB.Close()
		return nil, fmt.Errorf("open database: %w", err)
	}
	sqlDB.SetMaxOpenConns(cfg.PoolSize)
	sqlDB.SetMaxIdleConns(cfg.PoolSize)
	sqlDB.SetConnMaxIdleTime(5 * time.Minute)
	s := &Store{db: db, sql: sqlDB, reg: reg}
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
		return fmt.Errorf("ping database: %w", mapErr(err))
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
		switch {
		case pg.Code == "23505": // unique_violation
			return fmt.Errorf("%w: %w", ErrConflict, err)
		case pg.Code == "23503": // foreign_key_violation
			return fmt.Errorf("%w: %w", ErrNotFound, err)
		case strings.HasPrefix(pg.Code, "22"): // data_exception
			return fmt.Errorf("%w: %w", ErrInvalidInput, err)
		case unavailableCode(pg.Code):
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return err
	}
	if unavailable(err) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// unavailableCode reports whether a SQLSTATE says the server is not serving
// now but may be soon.
func unavailableCode(code string) bool {
	switch code {
	case "57P01", // admin_shutdown: "terminating connection due to administrator command"
		"57P02", // crash_shutdown
		"57P03", // cannot_connect_now: starting up or in recovery
		"53300", // too_many_connections
		"57014": // query_canceled: the statement timeout fired
		return true
	}
	return strings.HasPrefix(code, "08") // connection_exception
}

// unavailable reports whether err is a failure to reach the server, or the
// loss of a connection mid-statement, rather than an answer from it.
func unavailable(err error) bool {
	var (
		connect *pgconn.ConnectError
		netErr  net.Error
	)
	return errors.As(err, &connect) || errors.As(err, &netErr) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) || pgconn.SafeToRetry(err)
}
