package pg

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"
)

// The sentinels driver errors map to. Match them with errors.Is; the driver's
// error stays in the chain for logs.
var (
	// ErrNotFound: the row asked for does not exist.
	ErrNotFound = errors.New("not found")
	// ErrConflict: a unique constraint refused the write (23505).
	ErrConflict = errors.New("conflict")
	// ErrInvalidInput: the database refused a value as data (class 22:
	// invalid UTF-8, a NUL byte, out of range, …). Retrying cannot help.
	ErrInvalidInput = errors.New("invalid input")
	// ErrConstraint: an integrity constraint other than uniqueness refused
	// the write (class 23: foreign key, check, not null).
	ErrConstraint = errors.New("constraint violation")
	// ErrRetryable: the transaction lost a serialization conflict (40001) or
	// a deadlock (40P01); running it again may succeed.
	ErrRetryable = errors.New("retryable transaction failure")
	// ErrUnavailable: the database cannot be reached, is shutting down or
	// starting, has no connection left, or timed a statement out
	// (connection errors, class 08, 57P01-57P03, 53300, 57014). Retrying
	// later can succeed.
	ErrUnavailable = errors.New("database unavailable")
)

// SQLSTATE codes the stores test for themselves.
const (
	CodeUniqueViolation     = "23505"
	CodeForeignKeyViolation = "23503"
)

// Code returns the SQLSTATE of err, or "" when err is not a PostgreSQL error.
func Code(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// MapErr wraps err in the sentinel it belongs to, keeping err in the chain.
// Errors of no sentinel, and nil, come back unchanged.
func MapErr(err error) error {
	if s := sentinel(err); s != nil && !errors.Is(err, s) {
		return fmt.Errorf("%w: %w", s, err)
	}
	return err
}

func sentinel(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	if code := Code(err); code != "" {
		switch {
		case code == CodeUniqueViolation:
			return ErrConflict
		case strings.HasPrefix(code, "23"): // foreign key, check, not null, exclusion
			return ErrConstraint
		case strings.HasPrefix(code, "22"):
			return ErrInvalidInput
		case code == "40001", code == "40P01":
			return ErrRetryable
		case strings.HasPrefix(code, "08"), code == "57P01", code == "57P02", code == "57P03",
			code == "53300", // too many connections
			code == "57014", // statement timeout: a stalled or overloaded server
			// The NOTIFY queue is full (a listener stuck in a transaction):
			// the commit of a transaction that notifies fails until the
			// listener moves on. Nothing about the data is wrong.
			code == "54000":
			return ErrUnavailable
		}
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil // the caller gave up; the database may be fine
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	if errors.As(err, &ce) || errors.As(err, &ne) || pgconn.SafeToRetry(err) || pgconn.Timeout(err) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		// database/sql (under gorm) reports a lost connection with these.
		errors.Is(err, driver.ErrBadConn) || errors.Is(err, sql.ErrConnDone) ||
		// A connection pgx closed already (its lock error unwraps to
		// this), and a pool closed under the caller.
		errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, puddle.ErrClosedPool) {
		return ErrUnavailable
	}
	return nil
}
