// Package migrations holds the database schema as versioned SQL files,
// embedded in the binary and applied with goose.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"time"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	// Registers the "pgx" database/sql driver that Open uses.
	_ "github.com/jackc/pgx/v5/stdlib"
)

//go:embed *.sql
var files embed.FS

// FS returns the embedded migration files.
func FS() fs.FS { return files }

// Up applies every pending migration to the database at databaseURL.
func Up(ctx context.Context, databaseURL string) error {
	db, err := sql.Open("pgx", databaseURL)
	if err != nil {
		return fmt.Errorf("open database: %w", err)
	}
	defer db.Close()
	// The session lock (a PostgreSQL advisory lock) makes concurrent runs,
	// such as one init container per starting pod, apply each migration once.
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return fmt.Errorf("migration lock: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, files, goose.WithSessionLocker(locker))
	if err != nil {
		return fmt.Errorf("load migrations: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("apply migrations: %w", err)
	}
	return nil
}

// WaitReady retries connecting to databaseURL until a connection answers a
// query or timeout passes, calling onRetry after each failed attempt. The
// wait between attempts grows from 250 ms to 2 s.
func WaitReady(ctx context.Context, databaseURL string, timeout time.Duration, onRetry func(attempt int, err error)) error {
	db, err := sql.Open("pgx", databaseURL)
	if err != nil {
		return fmt.Errorf("open database: %w", err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	wait := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := db.PingContext(ctx)
		if err == nil {
			return nil
		}
		if onRetry != nil {
			onRetry(attempt, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the database did not answer within %s (%d attempts): %w", timeout, attempt, err)
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}
