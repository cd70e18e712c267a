package migrations_test

import (
	"context"
	"database/sql"
	"io/fs"
	"net"
	neturl "net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pressly/goose/v3"

	"github.com/loopers/commerce-pipeline/db/migrations"
	"github.com/loopers/commerce-pipeline/internal/testenv"
)

// Every migration must apply, roll back and apply again cleanly, so that a
// deploy can be reverted.
func TestUpDownUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, db := migratedDown(t)
	var tables int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'goose_db_version'`).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 0 {
		t.Fatalf("%d tables left after migrating down, want 0", tables)
	}
	if err := migrations.Up(ctx, url); err != nil {
		t.Fatalf("up again: %v", err)
	}
}

// Pods starting together each run the migrations (an init container per
// pod): concurrent runs must all succeed and apply each migration once.
func TestConcurrentUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, db := migratedDown(t)
	errs := make(chan error, 3)
	for range 3 {
		go func() { errs <- migrations.Up(ctx, url) }()
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Errorf("concurrent up: %v", err)
		}
	}
	var applied int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM goose_db_version WHERE version_id > 0 AND is_applied`).Scan(&applied); err != nil {
		t.Fatal(err)
	}
	if want := len(mustGlob(t)); applied != want {
		t.Errorf("%d migrations recorded as applied, want %d (each once)", applied, want)
	}
}

// migratedDown returns a fresh database (testenv migrates it up) after
// migrating it down to nothing, and a connection to it.
func migratedDown(t *testing.T) (string, *sql.DB) {
	t.Helper()
	url := testenv.DatabaseURL(t)
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.DownTo(context.Background(), 0); err != nil {
		t.Fatalf("down: %v", err)
	}
	return url, db
}

func mustGlob(t *testing.T) []string {
	t.Helper()
	m, err := fs.Glob(migrations.FS(), "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// WaitReady keeps trying while the port refuses connections, and succeeds
// once the database answers there; it gives up after its timeout.
//
//nolint:paralleltest // the subtests run in turn on one freed port: the first needs it refused, the second starts a server on it
func TestWaitReady(t *testing.T) {
	t.Parallel()
	dbURL := testenv.DatabaseURL(t)
	u, err := neturl.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // refused until the "server" starts below
	target := u.Host
	u.Host = addr

	t.Run("gives up after the timeout", func(t *testing.T) {
		start := time.Now()
		attempts := 0
		err := migrations.WaitReady(context.Background(), u.String(), 600*time.Millisecond, func(int, error) { attempts++ })
		if err == nil || attempts < 2 || time.Since(start) > 5*time.Second {
			t.Fatalf("WaitReady = %v after %d attempts and %s; want an error after several attempts", err, attempts, time.Since(start))
		}
	})

	t.Run("succeeds once the server answers", func(t *testing.T) {
		time.AfterFunc(700*time.Millisecond, func() { testenv.NewProxy(t, addr, target) })
		attempts := 0
		if err := migrations.WaitReady(context.Background(), u.String(), 20*time.Second, func(int, error) { attempts++ }); err != nil {
			t.Fatal(err)
		}
		if attempts == 0 {
			t.Error("the database answered at once; the test did not exercise a retry")
		}
	})
}

// TestNoTriggerNotifies: no trigger of the schema NOTIFYs. A transaction
// that NOTIFYs holds PostgreSQL's database-wide notify lock from pre-commit
// until its commit record is flushed, so the writers of such a table could
// not group-commit: the relay's wake-up is sent after the writer's commit
// (pg.Notifier), and the stream polls an index.
func TestNoTriggerNotifies(t *testing.T) {
	t.Parallel()
	conn, err := pgx.Connect(context.Background(), testenv.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(context.Background(), `
		SELECT t.tgrelid::regclass::text || '.' || t.tgname
		FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid
		WHERE NOT t.tgisinternal AND p.prosrc ILIKE '%notify%'`)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(names) > 0 {
		t.Errorf("triggers that NOTIFY: %v", names)
	}
}
