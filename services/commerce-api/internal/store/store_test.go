package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/loopers/commerce-pipeline/internal/outbox"
	"github.com/loopers/commerce-pipeline/internal/pg"
	"github.com/loopers/commerce-pipeline/internal/testenv"
	"github.com/loopers/commerce-pipeline/pkg/events"
	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/store/storetest"
)

func TestInTxMapsDriverErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, s := openTest(t)
	p, err := s.CreateProduct(ctx, NewProduct{Name: "p", Price: 1, Stock: 1})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		sql  string
		args []any
		want error
	}{
		{"unique violation is a conflict", `INSERT INTO likes (user_id, product_id) VALUES ('u', ?), ('u', ?)`, []any{p.ID, p.ID}, ErrConflict},
		{"foreign key violation is not found", `INSERT INTO likes (user_id, product_id) VALUES ('u', 424242)`, nil, ErrNotFound},
		{"invalid UTF-8 is invalid input", `INSERT INTO likes (user_id, product_id) VALUES (convert_from('\xff'::bytea, 'UTF8'), ?)`, []any{p.ID}, ErrInvalidInput},
		{"NUL in text is invalid input", `INSERT INTO products (name, price, stock) VALUES (?, 1, 1)`, []any{"a\x00b"}, ErrInvalidInput},
		{"out of range is invalid input", `SELECT 9223372036854775807::bigint + 1`, nil, ErrInvalidInput},
		{"statement timeout is unavailable", `SET LOCAL statement_timeout = 1; SELECT pg_sleep(1)`, nil, ErrUnavailable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := s.InTx(ctx, func(tx *Tx) error { return tx.db.Exec(tc.sql, tc.args...).Error })
			if !errors.Is(err, tc.want) {
				t.Errorf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func TestAppendEventRejectsUnknownTypes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, s := openTest(t)
	err := s.InTx(ctx, func(tx *Tx) error { return tx.AppendEvent(struct{ X int }{1}) })
	if !errors.Is(err, events.ErrUnknownType) {
		t.Errorf("got %v, want ErrUnknownType", err)
	}
	if rows := storetest.Open(t, url).Outbox(t, 0); len(rows) != 0 {
		t.Errorf("outbox rows %+v", rows)
	}
}

func openTest(t *testing.T) (string, *Store) {
	t.Helper()
	url := testenv.DatabaseURL(t)
	s, err := Open(context.Background(), url, pg.Options{MaxConns: 2}, events.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return url, s
}

// TestWritesWakeTheRelayAfterCommit: every write that commits outbox rows
// is followed by a notification on the relay's channel, sent after the
// commit (a listener that reads on the notification sees the row), and a
// write that commits none sends none.
func TestWritesWakeTheRelayAfterCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, s := openTest(t)
	p, err := s.CreateProduct(ctx, NewProduct{Name: "p", Price: 1, Stock: 1})
	if err != nil {
		t.Fatal(err)
	}
	listener, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close(ctx)
	if _, err := listener.Exec(ctx, "LISTEN "+outbox.Channel); err != nil {
		t.Fatal(err)
	}
	db := storetest.Open(t, url)
	wait := func(what string, rows int64) {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if _, err := listener.WaitForNotification(wctx); err != nil {
			t.Fatalf("no wake-up after %s: %v", what, err)
		}
		if n := db.Int(t, `SELECT count(*) FROM outbox`); n < rows {
			t.Fatalf("woken after %s with %d outbox rows visible, want %d", what, n, rows)
		}
	}
	if _, err := s.Like(ctx, "alice", p.ID); err != nil {
		t.Fatal(err)
	}
	wait("a like", 1)
	if changed, err := s.Like(ctx, "alice", p.ID); err != nil || changed {
		t.Fatalf("repeated like: changed %v, %v", changed, err)
	}
	if _, err := s.Unlike(ctx, "alice", p.ID); err != nil {
		t.Fatal(err)
	}
	wait("an unlike", 2)
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if n, err := listener.WaitForNotification(wctx); err == nil {
		t.Errorf("an extra wake-up %+v: the repeated like wrote no outbox row", n)
	}
	if sent, failed := s.WakeUps(); sent != 2 || failed != 0 {
		t.Errorf("wake-ups sent %d, failed %d; want 2 and 0", sent, failed)
	}
}

// TestHotProductWritesDoNotWaitForEachOther: while one user's like of a
// product is in an open transaction, and while a payment holds the
// product's row, another user's like and a view of the product commit at
// once; only the same user's second like waits for the first, the pair
// whose order the like consumer depends on.
func TestHotProductWritesDoNotWaitForEachOther(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, s := openTest(t)
	p, err := s.CreateProduct(ctx, NewProduct{Name: "hot", Price: 1, Stock: 5})
	if err != nil {
		t.Fatal(err)
	}
	holder, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	for _, hold := range []struct {
		name string
		sql  string
	}{
		{"a like in flight", `INSERT INTO likes (user_id, product_id) VALUES ('alice', $1)`},
		{"a payment in flight", `SELECT id FROM products WHERE id = $1 FOR NO KEY UPDATE`},
	} {
		tx, err := holder.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, hold.sql, p.ID); err != nil {
			t.Fatal(err)
		}
		quick, cancel := context.WithTimeout(ctx, 5*time.Second)
		if changed, err := s.Like(quick, "bob", p.ID); err != nil || !changed {
			t.Errorf("%s: another user's like: changed %v, %v", hold.name, changed, err)
		}
		if _, err := s.ViewProduct(quick, p.ID, "carol"); err != nil {
			t.Errorf("%s: a view: %v", hold.name, err)
		}
		if _, err := s.Unlike(quick, "bob", p.ID); err != nil {
			t.Errorf("%s: the other user's cancel: %v", hold.name, err)
		}
		cancel()
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
	}

	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // committed below
	if _, err := tx.Exec(ctx, `INSERT INTO likes (user_id, product_id) VALUES ('alice', $1)`, p.ID); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := s.Like(short, "alice", p.ID); !errors.Is(err, ErrUnavailable) {
		t.Errorf("the same user's like while the first is open: %v, want it to wait (ErrUnavailable at the deadline)", err)
	}
}
