package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/loopers/commerce-pipeline/internal/outbox"
	"github.com/loopers/commerce-pipeline/internal/testenv"
	"github.com/loopers/commerce-pipeline/pkg/events"
)

// TestInsertStoresAndDoesNotNotify writes one entry through a pgx
// transaction and checks the stored row, and that the commit sends no
// notification by itself: a transaction that NOTIFYs holds the database-wide
// notify lock through its commit, so the writers wake the relay after
// their commit instead (pg.Notifier), and no trigger may do it for them.
func TestInsertStoresAndDoesNotNotify(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testenv.DatabaseURL(t)
	listener, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close(ctx)
	if _, err := listener.Exec(ctx, "LISTEN "+outbox.Channel); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)

	e := likeEntry(t)
	e.CreatedAt = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var id int64
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		id, err = outbox.Insert(ctx, tx.QueryRow, e)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	if n, err := listener.WaitForNotification(wctx); err == nil {
		t.Fatalf("the commit notified %s by itself: %+v", outbox.Channel, n)
	}

	var got outbox.Entry
	var payload string
	err = conn.QueryRow(ctx, `SELECT event_id::text, source, event_type, aggregate_type, aggregate_id, payload, created_at
		FROM outbox WHERE id = $1`, id).Scan(&got.EventID, &got.Source, &got.Type, &got.AggregateType, &got.AggregateID, &payload, &got.CreatedAt)
	if err != nil {
		t.Fatal(err)
	}
	got.Data = []byte(payload)
	got.CreatedAt = got.CreatedAt.UTC()
	if diff := cmp.Diff(e, got); diff != "" {
		t.Errorf("stored row (-want +got):\n%s", diff)
	}
}

// TestCreatedAtIsTheInsert: without a CreatedAt the row is stamped when it
// is inserted, not when its transaction began, so the relay's outbox stage
// leaves out what the transaction did before.
func TestCreatedAtIsTheInsert(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testenv.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	e := likeEntry(t)
	const before = 150 * time.Millisecond
	var began, created time.Time
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT now() FROM pg_sleep($1)`, before.Seconds()).Scan(&began); err != nil {
			return err
		}
		id, err := outbox.Insert(ctx, tx.QueryRow, e)
		if err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT created_at FROM outbox WHERE id = $1`, id).Scan(&created)
	})
	if err != nil {
		t.Fatal(err)
	}
	if d := created.Sub(began); d < before {
		t.Errorf("created_at is %s after the transaction began, want at least the %s it spent before the insert", d, before)
	}
}

// likeEntry is an outbox entry of a like, with a new event id.
func likeEntry(t *testing.T) outbox.Entry {
	t.Helper()
	rec, err := events.NewRegistry().Marshal(events.LikeCreatedV1{UserID: "u", ProductID: 7})
	if err != nil {
		t.Fatal(err)
	}
	e, err := outbox.NewEntry("test", rec)
	if err != nil {
		t.Fatal(err)
	}
	return e
}
