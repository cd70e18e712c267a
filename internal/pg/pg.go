// Package pg is the one door every service and test uses to PostgreSQL: it
// opens the pool with the shared settings (DB_MAX_CONNS,
// DB_STATEMENT_TIMEOUT), runs transactions as closures, maps driver errors to
// the sentinels below, deletes old rows in bounded chunks, LISTENs with
// reconnection, and takes advisory locks.
//
// The packages that speak SQL (each service's store, internal/cluster,
// internal/outboxops, the test environments) run their statements on its
// pool and keep the SQL; pg keeps the plumbing. Configuration code imports
// it for Options, and the reclaimer and its callers for the lock
// namespaces.
package pg

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/loopers/commerce-pipeline/internal/config"
	"github.com/loopers/commerce-pipeline/internal/telemetry"
)

// Options are the pool settings every service shares.
type Options struct {
	// MaxConns (DB_MAX_CONNS) is the most connections open at once.
	MaxConns int
	// StatementTimeout (DB_STATEMENT_TIMEOUT) cancels any statement running
	// longer, so that a stuck query frees its connection and locks.
	StatementTimeout time.Duration
	// Lazy skips the check that the database answers: the pool connects on
	// first use. For a side job that must not stop its service from
	// starting while the database is down (the cluster heartbeat).
	Lazy bool
}

// DefaultStatementTimeout is far above any statement of the background
// services (the longest are one purge chunk and one relay batch), and low
// enough that a stuck statement does not hold its locks for long.
const DefaultStatementTimeout = 30 * time.Second

// LoadOptions reads DB_MAX_CONNS and DB_STATEMENT_TIMEOUT, defaulting to
// def's fields (a zero StatementTimeout defaults to DefaultStatementTimeout).
func LoadOptions(l *config.Loader, def Options) Options {
	if def.StatementTimeout == 0 {
		def.StatementTimeout = DefaultStatementTimeout
	}
	return Options{
		MaxConns:         l.PositiveInt("DB_MAX_CONNS", def.MaxConns),
		StatementTimeout: l.Duration("DB_STATEMENT_TIMEOUT", def.StatementTimeout),
	}
}

// DB is a connection pool.
type DB struct {
	// Pool is the pgx pool, for the stores' queries.
	Pool *pgxpool.Pool
}

// Open connects a pool to databaseURL with o and checks that the database
// answers. With tracing on (internal/telemetry) its statements are spans. A zero field of o keeps pgx's default.
func Open(ctx context.Context, databaseURL string, o Options) (*DB, error) {
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("parse database URL: %w", err)
	}
	if o.MaxConns > 0 {
		cfg.MaxConns = int32(min(o.MaxConns, 1<<30))
	}
	if o.StatementTimeout > 0 {
		cfg.ConnConfig.RuntimeParams["statement_timeout"] = strconv.FormatInt(o.StatementTimeout.Milliseconds(), 10)
	}
	if telemetry.Enabled() {
		// Statements under a traced request or handler become its child
		// spans; without tracing the pool carries no tracer at all.
		cfg.ConnConfig.Tracer = telemetry.PgxTracer{}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", MapErr(err))
	}
	db := &DB{Pool: pool}
	if o.Lazy {
		return db, nil
	}
	if err := db.Ping(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return db, nil
}

// Close closes the pool.
func (db *DB) Close() { db.Pool.Close() }

// Ping checks that the database answers.
func (db *DB) Ping(ctx context.Context) error {
	if err := db.Pool.Ping(ctx); err != nil {
		return fmt.Errorf("ping database: %w", MapErr(err))
	}
	return nil
}

// SQL returns a database/sql handle over the same pool, for libraries built
// on database/sql (gorm). Closing it does not close the pool.
func (db *DB) SQL() *sql.DB { return stdlib.OpenDBFromPool(db.Pool) }

// Connect opens a dedicated connection with the pool's settings, outside the
// pool, for a session that must outlive any transaction (LISTEN).
func (db *DB) Connect(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, db.Pool.Config().ConnConfig.Copy())
	if err != nil {
		return nil, fmt.Errorf("connect: %w", MapErr(err))
	}
	return conn, nil
}

// InTx runs fn in a transaction, committing when it returns nil and rolling
// back otherwise. The error is mapped with MapErr.
func (db *DB) InTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return MapErr(pgx.BeginFunc(ctx, db.Pool, fn))
}

// PurgeChunk bounds the rows one purge statement deletes, so that no
// statement holds many locks or runs long.
const PurgeChunk = 1000

// Purge runs the DELETE stmt until it deletes fewer than chunk rows and
// returns how many rows it deleted in all. stmt must delete at most its last
// parameter's number of rows; args are the parameters before it.
func (db *DB) Purge(ctx context.Context, stmt string, chunk int, args ...any) (int64, error) {
	args = append(args[:len(args):len(args)], chunk)
	var total int64
	for {
		tag, err := db.Pool.Exec(ctx, stmt, args...)
		if err != nil {
			return total, MapErr(err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(chunk) {
			return total, nil
		}
	}
}

// LockNamespace is the first key of a two-key advisory lock, or the key of a
// one-key lock. Each purpose has its own, so that advisory locks taken for
// different reasons never wait on each other.
type LockNamespace int32

// The advisory lock namespaces in use.
const (
	// TemplateLock (one key) serialises test processes migrating the
	// template database they clone.
	TemplateLock LockNamespace = 727274
	// LikeStateLock (two keys; the second is the product id folded to
	// int4) serialises product-consumers' like-state updates per product.
	LikeStateLock LockNamespace = 727275
	// ReclaimLock (two keys; the second is hashtext of "DLT topic/partition")
	// lets one re-driver at a time (a product-consumers replica's reclaimer
	// or pipelinectl) take a dead-letter partition.
	ReclaimLock LockNamespace = 727276
)

// TryLock takes the session-level advisory lock (ns, hashtext(name)) on a
// connection of its own, unless another session holds it. When ok, the
// lock is held until unlock is called; a connection that cannot unlock is
// closed, which releases the lock.
func (db *DB) TryLock(ctx context.Context, ns LockNamespace, name string) (unlock func(), ok bool, err error) {
	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("take the lock %s: %w", name, MapErr(err))
	}
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1, hashtext($2))`, int32(ns), name).Scan(&ok); err != nil || !ok {
		conn.Release()
		if err != nil {
			return nil, false, fmt.Errorf("take the lock %s: %w", name, MapErr(err))
		}
		return nil, false, nil
	}
	return func() {
		ctx := context.WithoutCancel(ctx)
		if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock($1, hashtext($2))`, int32(ns), name); err != nil {
			_ = conn.Conn().Close(ctx)
		}
		conn.Release()
	}, true, nil
}
