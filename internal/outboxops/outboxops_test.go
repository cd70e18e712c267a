package outboxops_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/loopers/commerce-pipeline/internal/outboxops"
	"github.com/loopers/commerce-pipeline/internal/testenv"
)

type fixture struct {
	t     *testing.T
	conn  *pgx.Conn
	store *outboxops.Store
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	url := testenv.DatabaseURL(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	st, err := outboxops.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return &fixture{t: t, conn: conn, store: st}
}

func (f *fixture) exec(sql string, args ...any) {
	f.t.Helper()
	if _, err := f.conn.Exec(context.Background(), sql, args...); err != nil {
		f.t.Fatalf("%s: %v", sql, err)
	}
}

// publish appends an event to the outbox and returns its id.
func (f *fixture) publish(eventID string) int64 {
	f.t.Helper()
	var id int64
	if err := f.conn.QueryRow(context.Background(), `INSERT INTO outbox (event_id, event_type, source, aggregate_type, aggregate_id, payload)
		VALUES ($1, 'loopers.like.created.v1', 'test', 'Product', '1', '{}') RETURNING id`, eventID).Scan(&id); err != nil {
		f.t.Fatal(err)
	}
	return id
}

// fail does what the relay does when it gives up on row id: the cursor moves
// past it and the row is copied to outbox_failed.
func (f *fixture) fail(id int64) {
	f.t.Helper()
	f.exec(`UPDATE outbox_cursor SET last_processed_id = $1 WHERE id = 1`, id)
	f.exec(`INSERT INTO outbox_failed (outbox_id, event_id, event_type, source, aggregate_type, aggregate_id, payload, created_at, error_message)
		SELECT id, event_id, event_type, source, aggregate_type, aggregate_id, payload, created_at, 'record too large' FROM outbox WHERE id = $1`, id)
}

type outboxRow struct {
	ID, Sequence int64
	EventID      string
}

func (f *fixture) outbox() []outboxRow {
	f.t.Helper()
	rows, err := f.conn.Query(context.Background(), `SELECT id, COALESCE(sequence, id), event_id::text FROM outbox ORDER BY id`)
	if err != nil {
		f.t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[outboxRow])
	if err != nil {
		f.t.Fatal(err)
	}
	return out
}

func (f *fixture) count(table string) int {
	f.t.Helper()
	var n int
	if err := f.conn.QueryRow(context.Background(), `SELECT count(*) FROM `+table).Scan(&n); err != nil {
		f.t.Fatal(err)
	}
	return n
}

func TestRedriveKeepsIdentity(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	ev := uuid.NewString()
	first := f.publish(ev)
	var created time.Time
	if err := f.conn.QueryRow(ctx, `SELECT created_at FROM outbox WHERE id = $1`, first).Scan(&created); err != nil {
		t.Fatal(err)
	}
	later := f.publish(uuid.NewString())
	f.fail(first)
	f.exec(`UPDATE outbox_cursor SET last_processed_id = $1 WHERE id = 1`, later)

	failed, err := f.store.ListFailed(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(failed) != 1 || failed[0].Sequence != first || failed[0].EventID != ev {
		t.Fatalf("failed rows %+v, want one of event %s with sequence %d", failed, ev, first)
	}

	// A dry run reports and changes nothing.
	dry, err := f.store.Redrive(ctx, outboxops.Selection{All: true}, "alice", true)
	if err != nil {
		t.Fatal(err)
	}
	if len(dry) != 1 || dry[0].NewOutboxID != 0 || f.count("outbox_failed") != 1 || f.count("outbox_redrive") != 0 || len(f.outbox()) != 2 {
		t.Fatalf("dry run %+v changed something", dry)
	}

	got, err := f.store.Redrive(ctx, outboxops.Selection{IDs: []int64{failed[0].ID}}, "alice", false)
	if err != nil {
		t.Fatal(err)
	}
	redriven := got[0].NewOutboxID
	if redriven <= later {
		t.Fatalf("re-driven as outbox id %d, want one after the cursor %d", redriven, later)
	}
	// The original row is gone (event_id is unique), the new one keeps
	// event id and sequence.
	want := []outboxRow{{later, later, f.outbox()[0].EventID}, {redriven, first, ev}}
	if diff := cmp.Diff(want, f.outbox()); diff != "" {
		t.Errorf("outbox after the re-drive (-want +got):\n%s", diff)
	}
	var by string
	var seq, failedOutbox int64
	if err := f.conn.QueryRow(ctx, `SELECT redriven_by, sequence, failed_outbox_id FROM outbox_redrive WHERE event_id = $1`, ev).Scan(&by, &seq, &failedOutbox); err != nil {
		t.Fatal(err)
	}
	var sameTime bool
	if err := f.conn.QueryRow(ctx, `SELECT o.created_at = f.created_at FROM outbox o, outbox_redrive r, LATERAL (SELECT $2::timestamptz AS created_at) f
		WHERE o.id = r.new_outbox_id AND r.event_id = $1`, ev, created).Scan(&sameTime); err != nil || !sameTime {
		t.Errorf("the re-driven row's created_at differs from the event's (%v)", err)
	}
	if by != "alice" || seq != first || failedOutbox != first {
		t.Errorf("audit row by %q sequence %d failed outbox id %d, want alice, %d, %d", by, seq, failedOutbox, first, first)
	}

	// It fails again and is re-driven again: the sequence is still the first.
	f.fail(redriven)
	again, err := f.store.Redrive(ctx, outboxops.Selection{All: true}, "bob", false)
	if err != nil {
		t.Fatal(err)
	}
	if len(again) != 1 || again[0].Sequence != first {
		t.Fatalf("second re-drive %+v, want sequence %d", again, first)
	}
	if rows := f.outbox(); rows[len(rows)-1] != (outboxRow{again[0].NewOutboxID, first, ev}) {
		t.Errorf("outbox after the second re-drive: %+v", rows)
	}
	if n := f.count("outbox_redrive"); n != 2 {
		t.Errorf("%d audit rows, want 2", n)
	}
}

func TestRedriveRefuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name  string
		setup func(f *fixture) outboxops.Selection
		want  error
	}{
		{"unknown id", func(f *fixture) outboxops.Selection {
			f.fail(f.publish(uuid.NewString()))
			return outboxops.Selection{IDs: []int64{1, 999}}
		}, outboxops.ErrNotFound},
		{"original still queued", func(f *fixture) outboxops.Selection {
			id := f.publish(uuid.NewString())
			f.fail(id)
			f.exec(`UPDATE outbox_cursor SET last_processed_id = 0 WHERE id = 1`)
			return outboxops.Selection{All: true}
		}, outboxops.ErrStillQueued},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			sel := tc.setup(f)
			before := f.outbox()
			if _, err := f.store.Redrive(ctx, sel, "alice", false); !errors.Is(err, tc.want) {
				t.Fatalf("Redrive error = %v, want %v", err, tc.want)
			}
			if diff := cmp.Diff(before, f.outbox()); diff != "" || f.count("outbox_failed") != 1 || f.count("outbox_redrive") != 0 {
				t.Errorf("a refused re-drive changed something (-before +after):\n%s", diff)
			}
		})
	}
}

// TestStatus reads the status as the relay's lease goes from live to
// expired to released: only a live lease names a leader, and a released one
// (lease_until -infinity) still reads.
func TestStatus(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	st, err := f.store.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Leader != nil || st.Terms != 0 || st.Backlog != 0 || st.Cursor != 0 {
		t.Fatalf("empty status %+v", st)
	}
	a := f.publish(uuid.NewString())
	f.publish(uuid.NewString())
	f.fail(a)
	f.exec(`INSERT INTO relay_lease (name, owner, token, lease_until, acquired_at) VALUES ('outbox-relay', 'node-1', 4, now() + interval '10 s', now())`)
	st, err = f.store.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Cursor != a || st.Backlog != 1 || st.Failed != 1 || st.OldestAge <= 0 || st.Terms != 4 || st.Leader == nil ||
		st.Leader.Owner != "node-1" || st.Leader.Token != 4 || !st.Leader.Until.After(time.Now()) {
		t.Errorf("status %+v leader %+v", st, st.Leader)
	}
	for _, until := range []string{`now() - interval '1 s'`, `'-infinity'`} {
		f.exec(`UPDATE relay_lease SET lease_until = ` + until)
		st, err = f.store.Status(ctx)
		if err != nil {
			t.Fatalf("lease until %s: %v", until, err)
		}
		if st.Leader != nil || st.Terms != 4 {
			t.Errorf("lease until %s: status %+v leader %+v; want no leader, 4 terms", until, st, st.Leader)
		}
	}
}
