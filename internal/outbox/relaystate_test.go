package outbox_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/jackc/pgx/v5"

	"github.com/loopers/commerce-pipeline/internal/outbox"
	"github.com/loopers/commerce-pipeline/internal/pg"
	"github.com/loopers/commerce-pipeline/internal/testenv"
	"github.com/loopers/commerce-pipeline/pkg/events"
)

// TestReadRelayState reads the relay's state after each change of the lease
// and the cursor, through pgx and through database/sql (gorm's driver), and
// checks both readers agree.
func TestReadRelayState(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openDB(t)
	sqlDB := db.SQL()
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	reg := events.NewRegistry()
	var ids []int64
	for i, age := range []time.Duration{3 * time.Hour, 2 * time.Hour, time.Hour} {
		rec, err := reg.Marshal(events.StockDepletedV1{ProductID: int64(i + 1)})
		if err != nil {
			t.Fatal(err)
		}
		e, err := outbox.NewEntry("test", rec)
		if err != nil {
			t.Fatal(err)
		}
		e.CreatedAt = time.Now().Add(-age)
		id, err := outbox.Insert(ctx, db.Pool.QueryRow, e)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	const lease = `INSERT INTO relay_lease (name, owner, token, lease_until, acquired_at) VALUES ($1, $2, $3, %s, now())
		ON CONFLICT (name) DO UPDATE SET owner = EXCLUDED.owner, token = EXCLUDED.token, lease_until = EXCLUDED.lease_until`

	tests := []struct {
		name  string
		setup func()
		want  outbox.RelayState // times not compared; OldestAge within a minute
	}{
		{"never held, nothing published", func() {},
			outbox.RelayState{Backlog: 3, OldestAge: 3 * time.Hour}},
		{"another lease is live", func() { exec(fmt.Sprintf(lease, "now() + interval '1 minute'"), "other", "n-1", 9) },
			outbox.RelayState{Backlog: 3, OldestAge: 3 * time.Hour}},
		{"live", func() { exec(fmt.Sprintf(lease, "now() + interval '1 minute'"), outbox.RelayLease, "relay-a", 3) },
			outbox.RelayState{Backlog: 3, OldestAge: 3 * time.Hour, Leadership: outbox.Leadership{
				Leader: &outbox.Leader{Owner: "relay-a", Token: 3}, Terms: 3}}},
		{"cursor moved", func() { exec(`UPDATE outbox_cursor SET last_processed_id = $1 WHERE id = 1`, ids[0]) },
			outbox.RelayState{Cursor: ids[0], Backlog: 2, OldestAge: 2 * time.Hour, Leadership: outbox.Leadership{
				Leader: &outbox.Leader{Owner: "relay-a", Token: 3}, Terms: 3}}},
		{"expired", func() { exec(fmt.Sprintf(lease, "now() - interval '1 second'"), outbox.RelayLease, "relay-a", 3) },
			outbox.RelayState{Cursor: ids[0], Backlog: 2, OldestAge: 2 * time.Hour, Leadership: outbox.Leadership{Terms: 3}}},
		{"released", func() { exec(fmt.Sprintf(lease, "'-infinity'"), outbox.RelayLease, "relay-b", 4) },
			outbox.RelayState{Cursor: ids[0], Backlog: 2, OldestAge: 2 * time.Hour, Leadership: outbox.Leadership{Terms: 4}}},
		{"all published", func() { exec(`UPDATE outbox_cursor SET last_processed_id = $1 WHERE id = 1`, ids[2]) },
			outbox.RelayState{Cursor: ids[2], Leadership: outbox.Leadership{Terms: 4}}},
	}
	opts := cmp.Options{
		cmpopts.IgnoreFields(outbox.RelayState{}, "CursorUpdatedAt"),
		cmpopts.IgnoreFields(outbox.Leader{}, "AcquiredAt", "Until"),
		cmp.Comparer(func(a, b time.Duration) bool { return (a - b).Abs() < time.Minute }),
	}
	for _, tc := range tests {
		tc.setup()
		viaPgx, err := outbox.ReadRelayState(ctx, db.Pool.QueryRow)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		viaSQL, err := outbox.ReadRelayState(ctx, sqlDB.QueryRowContext)
		if err != nil {
			t.Fatalf("%s: database/sql: %v", tc.name, err)
		}
		if diff := cmp.Diff(tc.want, viaPgx, opts); diff != "" {
			t.Errorf("%s: state (-want +got):\n%s", tc.name, diff)
		}
		if diff := cmp.Diff(viaPgx, viaSQL, cmp.Comparer(func(a, b time.Duration) bool { return (a - b).Abs() < time.Second })); diff != "" {
			t.Errorf("%s: database/sql read differs (-pgx +sql):\n%s", tc.name, diff)
		}
		if l := viaPgx.Leader; l != nil && (l.Until.Before(time.Now()) || l.AcquiredAt.IsZero()) {
			t.Errorf("%s: leader %+v: want a live lease with its start", tc.name, l)
		}
		lead, err := outbox.ReadLeadership(ctx, db.Pool.QueryRow)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(viaPgx.Leadership, lead); diff != "" {
			t.Errorf("%s: ReadLeadership differs from ReadRelayState (-state +leadership):\n%s", tc.name, diff)
		}
		cursor, err := outbox.ReadCursor(ctx, sqlDB.QueryRowContext)
		if err != nil || cursor != tc.want.Cursor {
			t.Errorf("%s: ReadCursor = %d, %v; want %d", tc.name, cursor, err, tc.want.Cursor)
		}
	}
}

// TestLiveOnTheClock reads the leadership inside a transaction that began
// before the lease expired: live is judged on the clock, not on the
// transaction's start time (now()), which a long transaction holds still.
func TestLiveOnTheClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openDB(t)
	if _, err := db.Pool.Exec(ctx, `INSERT INTO relay_lease (name, owner, token, lease_until, acquired_at)
		VALUES ($1, 'relay-a', 1, now() + interval '1 minute', now())`, outbox.RelayLease); err != nil {
		t.Fatal(err)
	}
	err := db.InTx(ctx, func(tx pgx.Tx) error {
		l, err := outbox.ReadLeadership(ctx, tx.QueryRow)
		if err != nil {
			return err
		}
		if l.Leader == nil {
			t.Errorf("leadership %+v: want the live lease", l)
		}
		// Another session ends the term after this transaction began:
		// lease_until is then later than the transaction's now().
		if _, err := db.Pool.Exec(ctx, `UPDATE relay_lease SET lease_until = clock_timestamp() WHERE name = $1`, outbox.RelayLease); err != nil {
			return err
		}
		if l, err = outbox.ReadLeadership(ctx, tx.QueryRow); err != nil {
			return err
		}
		if l.Leader != nil || l.Terms != 1 {
			t.Errorf("leadership after the term ended: %+v, leader %+v; want no leader, 1 term", l, l.Leader)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// openDB opens a fresh database, closed when the test ends.
func openDB(t *testing.T) *pg.DB {
	t.Helper()
	db, err := pg.Open(context.Background(), testenv.DatabaseURL(t), pg.Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return db
}
