package pg_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/loopers/commerce-pipeline/internal/config"
	"github.com/loopers/commerce-pipeline/internal/pg"
	"github.com/loopers/commerce-pipeline/internal/testenv"
)

func open(t *testing.T, o pg.Options) *pg.DB {
	t.Helper()
	db, err := pg.Open(context.Background(), testenv.DatabaseURL(t), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return db
}

func TestLoadOptions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		env     map[string]string
		want    pg.Options
		wantErr []string
	}{
		{"defaults", nil, pg.Options{MaxConns: 7, StatementTimeout: 30 * time.Second}, nil},
		{"set", map[string]string{"DB_MAX_CONNS": "3", "DB_STATEMENT_TIMEOUT": "2s"}, pg.Options{MaxConns: 3, StatementTimeout: 2 * time.Second}, nil},
		{"invalid", map[string]string{"DB_MAX_CONNS": "0", "DB_STATEMENT_TIMEOUT": "-1s"}, pg.Options{}, []string{"DB_MAX_CONNS", "DB_STATEMENT_TIMEOUT"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := config.New(config.FromMap(tc.env))
			got := pg.LoadOptions(l, pg.Options{MaxConns: 7})
			if tc.wantErr == nil {
				if err := l.Err(); err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("options (-want +got):\n%s", diff)
				}
				return
			}
			for _, name := range tc.wantErr {
				if err := l.Err(); err == nil || !strings.Contains(err.Error(), name) {
					t.Errorf("error %v does not name %s", err, name)
				}
			}
		})
	}
}

func TestOpenAppliesOptions(t *testing.T) {
	t.Parallel()
	db := open(t, pg.Options{MaxConns: 3, StatementTimeout: 1500 * time.Millisecond})
	if got := db.Pool.Config().MaxConns; got != 3 {
		t.Errorf("MaxConns = %d, want 3", got)
	}
	var timeout string
	if err := db.Pool.QueryRow(context.Background(), `SHOW statement_timeout`).Scan(&timeout); err != nil {
		t.Fatal(err)
	}
	if timeout != "1500ms" {
		t.Errorf("statement_timeout = %q, want 1500ms", timeout)
	}
	conn, err := db.Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(context.Background(), `SHOW statement_timeout`).Scan(&timeout); err != nil || timeout != "1500ms" {
		t.Errorf("dedicated connection: statement_timeout = %q (%v), want 1500ms", timeout, err)
	}
	_, err = db.Pool.Exec(context.Background(), `SELECT pg_sleep(5)`)
	if pg.Code(err) != "57014" {
		t.Errorf("a 5 s statement under a 1.5 s timeout: %v, want query_canceled (57014)", err)
	}
}

func TestOpenUnreachable(t *testing.T) {
	t.Parallel()
	_, err := pg.Open(context.Background(), "postgres://nobody@127.0.0.1:1/none?connect_timeout=1", pg.Options{})
	if !errors.Is(err, pg.ErrUnavailable) {
		t.Errorf("Open of a closed port: %v, want ErrUnavailable", err)
	}
}

// TestMapErr provokes each kind of error in a real database and checks the
// sentinel it maps to.
func TestMapErr(t *testing.T) {
	t.Parallel()
	db := open(t, pg.Options{})
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `
		CREATE TABLE parent (id int PRIMARY KEY);
		CREATE TABLE child (id int PRIMARY KEY, parent int REFERENCES parent, n int CHECK (n >= 0), s text);
		INSERT INTO parent VALUES (1); INSERT INTO child VALUES (1, 1, 0, '')`); err != nil {
		t.Fatal(err)
	}
	raise := func(code string) string {
		return `DO $$ BEGIN RAISE EXCEPTION 'test' USING ERRCODE = '` + code + `'; END $$`
	}
	tests := []struct {
		name string
		stmt string
		args []any
		want error
	}{
		{"no rows", `SELECT id FROM parent WHERE id = 99`, nil, pg.ErrNotFound},
		{"unique", `INSERT INTO parent VALUES (1)`, nil, pg.ErrConflict},
		{"foreign key", `INSERT INTO child VALUES (2, 99, 0, '')`, nil, pg.ErrConstraint},
		{"check", `INSERT INTO child VALUES (2, 1, -1, '')`, nil, pg.ErrConstraint},
		{"invalid UTF-8", `SELECT convert_from('\xff'::bytea, 'UTF8')`, nil, pg.ErrInvalidInput},
		{"NUL in text", `INSERT INTO child VALUES (3, 1, 0, $1) RETURNING id`, []any{"a\x00b"}, pg.ErrInvalidInput},
		{"NUL in JSON", `SELECT '"\u0000"'::jsonb ->> 0`, nil, pg.ErrInvalidInput},
		{"out of range", `SELECT 2147483647::int + 1`, nil, pg.ErrInvalidInput},
		{"serialization", raise("40001"), nil, pg.ErrRetryable},
		{"deadlock", raise("40P01"), nil, pg.ErrRetryable},
		{"admin shutdown", raise("57P01"), nil, pg.ErrUnavailable},
		{"cannot connect now", raise("57P03"), nil, pg.ErrUnavailable},
		{"connection failure", raise("08006"), nil, pg.ErrUnavailable},
		{"syntax error", `SELEC 1`, nil, nil},
	}
	sentinels := []error{pg.ErrNotFound, pg.ErrConflict, pg.ErrInvalidInput, pg.ErrConstraint, pg.ErrRetryable, pg.ErrUnavailable}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := db.InTx(ctx, func(tx pgx.Tx) error {
				var v any
				return tx.QueryRow(ctx, tc.stmt, tc.args...).Scan(&v)
			})
			if err == nil {
				t.Fatal("no error")
			}
			for _, s := range sentinels {
				if got, want := errors.Is(err, s), s == tc.want; got != want { //nolint:errorlint // compares two sentinels from the table, not a returned error
					t.Errorf("errors.Is(%v, %v) = %v, want %v", err, s, got, want)
				}
			}
		})
	}
}

func TestMapErrConnectionLost(t *testing.T) {
	t.Parallel()
	db := open(t, pg.Options{})
	ctx := context.Background()
	conn, err := db.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, conn.PgConn().PID()); err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, `SELECT 1`)
	if err := pg.MapErr(err); !errors.Is(err, pg.ErrUnavailable) {
		t.Errorf("query on a terminated connection: %v, want ErrUnavailable", err)
	}
}

// reworded is err under another text: a classification by errors.Is holds,
// one by the text would not.
type reworded struct{ err error }

func (r reworded) Error() string { return "reworded" }
func (r reworded) Unwrap() error { return r.err }

// TestMapErrClosed: work on a connection or pool closed under the caller
// is ErrUnavailable, recognised by the driver's sentinels whatever their
// text.
func TestMapErrClosed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	closedPool := func(t *testing.T) error {
		db := open(t, pg.Options{})
		db.Close()
		_, err := db.Pool.Exec(ctx, `SELECT 1`)
		return err
	}
	closedConn := func(t *testing.T) error {
		conn, err := open(t, pg.Options{}).Connect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := conn.Close(ctx); err != nil {
			t.Fatal(err)
		}
		_, err = conn.Exec(ctx, `SELECT 1`)
		return err
	}
	for _, tc := range []struct {
		name string
		err  func(t *testing.T) error
	}{
		{"closed pool", closedPool},
		{"closed connection", closedConn},
		{"closed pool, reworded", func(t *testing.T) error { return reworded{closedPool(t)} }},
		{"closed connection, reworded", func(t *testing.T) error { return reworded{closedConn(t)} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.err(t)
			if err == nil {
				t.Fatal("no error")
			}
			if got := pg.MapErr(err); !errors.Is(got, pg.ErrUnavailable) {
				t.Errorf("MapErr(%v) = %v, want ErrUnavailable", err, got)
			}
		})
	}
}

func TestInTx(t *testing.T) {
	t.Parallel()
	db := open(t, pg.Options{})
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE t (id int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	insert := func(id int, fail error) error {
		return db.InTx(ctx, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO t VALUES ($1)`, id); err != nil {
				return err
			}
			return fail
		})
	}
	boom := errors.New("boom")
	if err := insert(1, nil); err != nil {
		t.Fatal(err)
	}
	if err := insert(2, boom); !errors.Is(err, boom) {
		t.Errorf("InTx returned %v, want the closure's error", err)
	}
	var ids []int
	rows, _ := db.Pool.Query(ctx, `SELECT id FROM t ORDER BY id`)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int{1}, ids); diff != "" {
		t.Errorf("committed rows (-want +got):\n%s", diff)
	}
}

func TestPurge(t *testing.T) {
	t.Parallel()
	db := open(t, pg.Options{})
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t SELECT generate_series(1, 25)`); err != nil {
		t.Fatal(err)
	}
	n, err := db.Purge(ctx, `DELETE FROM t WHERE id IN (SELECT id FROM t WHERE id <= $1 LIMIT $2)`, 4, 21)
	if err != nil {
		t.Fatal(err)
	}
	var left int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM t`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([2]int64{21, 4}, [2]int64{n, int64(left)}); diff != "" {
		t.Errorf("[deleted, left] (-want +got):\n%s", diff)
	}
}

// TestTryLock: of two processes (two pools on one database), only one holds
// a lock name at a time; another name is free meanwhile; once released, the
// other may take it.
func TestTryLock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testenv.DatabaseURL(t)
	var procs [2]*pg.DB
	for i := range procs {
		db, err := pg.Open(ctx, url, pg.Options{MaxConns: 2})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(db.Close)
		procs[i] = db
	}
	unlock, ok, err := procs[0].TryLock(ctx, pg.ReclaimLock, "like-events.DLT/0")
	if err != nil || !ok {
		t.Fatalf("first lock: %v %v", ok, err)
	}
	if _, ok, err := procs[1].TryLock(ctx, pg.ReclaimLock, "like-events.DLT/0"); err != nil || ok {
		t.Fatalf("the same name from another process while held: ok %v, err %v; want refused", ok, err)
	}
	other, ok, err := procs[1].TryLock(ctx, pg.ReclaimLock, "like-events.DLT/1")
	if err != nil || !ok {
		t.Fatalf("another name: %v %v", ok, err)
	}
	other()
	unlock()
	again, ok, err := procs[1].TryLock(ctx, pg.ReclaimLock, "like-events.DLT/0")
	if err != nil || !ok {
		t.Fatalf("after the release: %v %v", ok, err)
	}
	again()
}

// TestListen: notify runs once when the LISTEN connection is up, for every
// NOTIFY on the channel, and again after the connection is killed and
// re-established (notifications sent meanwhile are lost, so the caller
// must look for itself).
func TestListen(t *testing.T) {
	t.Parallel()
	db := open(t, pg.Options{})
	var logs strings.Builder
	var mu sync.Mutex
	logger := slog.New(slog.NewJSONHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logs.Write(p)
	}), nil))
	_, wait := listen(t, db, logger, "pg test")
	wait("the connection")
	if _, err := db.Pool.Exec(context.Background(), `SELECT pg_notify('pg test', '')`); err != nil {
		t.Fatal(err)
	}
	wait("a NOTIFY")
	var killed int
	if err := db.Pool.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND query ILIKE 'LISTEN%'`).Scan(&killed); err != nil || killed != 1 {
		t.Fatalf("kill the LISTEN connection: %d killed, %v", killed, err)
	}
	wait("the reconnection")
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logs.String(), `"msg":"lost the LISTEN connection; reconnecting","channel":"pg test","error":`) {
		t.Errorf("the lost connection is not logged with its error: %s", logs.String())
	}
}

// listen runs db.Listen on channel until the test ends; it returns the
// channel each notify call arrives on and a wait for the next one.
func listen(t *testing.T, db *pg.DB, logger *slog.Logger, channel string) (<-chan struct{}, func(what string)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	calls := make(chan struct{}, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		db.Listen(ctx, logger, channel, func() { calls <- struct{}{} })
	}()
	t.Cleanup(func() { cancel(); <-done })
	return calls, func(what string) {
		t.Helper()
		select {
		case <-calls:
		case <-time.After(10 * time.Second):
			t.Fatalf("no notify call for %s", what)
		}
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestNotifierFollowsEveryCall: many goroutines call Notify while sends
// are slow; the sends are coalesced (far fewer than the calls), and the last
// send starts after the last call, so that every call, however it raced
// with a send in flight, is followed by a notification sent after it.
func TestNotifierFollowsEveryCall(t *testing.T) {
	t.Parallel()
	n := open(t, pg.Options{}).NewNotifier("unused")
	var (
		clock     atomic.Int64
		lastSend  atomic.Int64
		sends     atomic.Int64
		inFlight  atomic.Int32
		overlaped atomic.Bool
	)
	pg.SetNotifySend(n, func() error {
		if inFlight.Add(1) > 1 {
			overlaped.Store(true)
		}
		defer inFlight.Add(-1)
		lastSend.Store(clock.Add(1))
		sends.Add(1)
		time.Sleep(2 * time.Millisecond)
		return nil
	})
	var lastCall atomic.Int64
	var wg sync.WaitGroup
	const goroutines, calls = 16, 100
	for range goroutines {
		wg.Go(func() {
			for range calls {
				c := clock.Add(1)
				n.Notify()
				for {
					old := lastCall.Load()
					if c <= old || lastCall.CompareAndSwap(old, c) {
						break
					}
				}
				time.Sleep(100 * time.Microsecond)
			}
		})
	}
	wg.Wait()
	n.Close() // waits for the send in flight
	if lastSend.Load() <= lastCall.Load() {
		t.Errorf("last send at %d, before the last call at %d: that call's commit may never be announced", lastSend.Load(), lastCall.Load())
	}
	if overlaped.Load() {
		t.Error("two sends ran at once")
	}
	if s := sends.Load(); s >= goroutines*calls/4 {
		t.Errorf("%d sends for %d calls: not coalesced", s, goroutines*calls)
	}
}

// TestNotifierNotifiesListeners: a Notify reaches a LISTENer on the
// channel through PostgreSQL, and a notification that cannot be sent (the
// notifier's connection killed) is counted, and the next one connects
// afresh.
func TestNotifierNotifiesListeners(t *testing.T) {
	t.Parallel()
	db := open(t, pg.Options{})
	calls, wait := listen(t, db, slog.New(slog.DiscardHandler), "notifier test")
	wait("the connection")
	n := db.NewNotifier("notifier test")
	t.Cleanup(n.Close)
	n.Notify()
	wait("a Notify")
	var killed int
	if err := db.Pool.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE 'SELECT pg_notify%' AND pid <> pg_backend_pid()`).Scan(&killed); err != nil || killed != 1 {
		t.Fatalf("kill the notifier's connection: %d killed, %v", killed, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		n.Notify()
		select {
		case <-calls:
			if sent, failed := n.Stats(); sent >= 2 {
				if failed != 1 {
					t.Errorf("%d failed notifications, want the one on the killed connection", failed)
				}
				return
			}
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			sent, failed := n.Stats()
			t.Fatalf("after the connection was killed: %d sent, %d failed, no notification", sent, failed)
		}
	}
}
