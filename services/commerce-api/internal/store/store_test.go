package store

import (
	"context"
	"errors"
	"testing"

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
