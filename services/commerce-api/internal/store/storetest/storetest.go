// Package storetest lets tests look at commerce-api's tables directly, to
// check exactly what a request wrote (or that it wrote nothing).
package storetest

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/loopers/commerce-pipeline/internal/pg"
)

// Tables are the tables commerce-api writes, outbox included.
var Tables = []string{"products", "likes", "orders", "order_items", "payments", "outbox"}

// DB is a direct connection pool to a test database.
type DB struct{ pool *pgxpool.Pool }

// Open connects to databaseURL; the pool closes when the test ends.
func Open(t testing.TB, databaseURL string) *DB {
	t.Helper()
	db, err := pg.Open(context.Background(), databaseURL, pg.Options{})
	if err != nil {
		t.Fatalf("storetest: connect: %v", err)
	}
	t.Cleanup(db.Close)
	return &DB{pool: db.Pool}
}

// Exec runs a statement, failing the test on error.
func (d *DB) Exec(t testing.TB, sql string, args ...any) {
	t.Helper()
	if _, err := d.pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("storetest: %s: %v", sql, err)
	}
}

// Int returns the single integer a query selects.
func (d *DB) Int(t testing.TB, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := d.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("storetest: %s: %v", sql, err)
	}
	return n
}

// Snapshot returns every row of every table in Tables, as JSON text, in a
// stable order, so that two snapshots compare equal exactly when nothing
// was written in between.
func (d *DB) Snapshot(t testing.TB) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, table := range Tables {
		rows, err := d.pool.Query(context.Background(), `SELECT to_jsonb(t)::text FROM `+table+` t ORDER BY 1`)
		if err != nil {
			t.Fatalf("storetest: snapshot %s: %v", table, err)
		}
		out[table] = []string{}
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatalf("storetest: snapshot %s: %v", table, err)
			}
			out[table] = append(out[table], s)
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("storetest: snapshot %s: %v", table, err)
		}
	}
	return out
}

// Event is an outbox row without its generated identity and timestamps.
type Event struct {
	Type          string
	AggregateType string
	AggregateID   string
	Payload       string
}

// OutboxRow is an outbox row as tests inspect it.
type OutboxRow struct {
	ID      int64
	EventID string
	Source  string
	Event
}

// Outbox returns the outbox rows in id order, optionally after a given id.
func (d *DB) Outbox(t testing.TB, afterID int64) []OutboxRow {
	t.Helper()
	rows, err := d.pool.Query(context.Background(), `SELECT id, event_id::text, source, event_type, aggregate_type, aggregate_id, payload
		FROM outbox WHERE id > $1 ORDER BY id`, afterID)
	if err != nil {
		t.Fatalf("storetest: outbox: %v", err)
	}
	defer rows.Close()
	var out []OutboxRow
	for rows.Next() {
		var r OutboxRow
		if err := rows.Scan(&r.ID, &r.EventID, &r.Source, &r.Type, &r.AggregateType, &r.AggregateID, &r.Payload); err != nil {
			t.Fatalf("storetest: outbox: %v", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("storetest: outbox: %v", err)
	}
	return out
}

// Events returns the outbox rows after afterID without their identities,
// failing the test when a row's source or event id is not as every row's
// must be.
func (d *DB) Events(t testing.TB, afterID int64) []Event {
	t.Helper()
	var out []Event
	seen := map[string]bool{}
	for _, r := range d.Outbox(t, afterID) {
		if r.Source != "commerce-api" || len(r.EventID) != 36 || seen[r.EventID] {
			t.Errorf("storetest: outbox row %d: source %q, event id %q (want commerce-api and a fresh UUID)", r.ID, r.Source, r.EventID)
		}
		seen[r.EventID] = true
		out = append(out, r.Event)
	}
	return out
}

// SetAggregates sets, as the consumers would have, the aggregates of the
// products whose rows match where (an SQL condition on product_id) to SQL
// expressions of product_id; an empty expression leaves that aggregate as
// it is. Each aggregate has a table of its own (one writer each).
func (d *DB) SetAggregates(t testing.TB, where, likes, salesCount, salesAmount, views string) {
	t.Helper()
	if likes != "" {
		d.Exec(t, `UPDATE product_likes SET like_count = `+likes+` WHERE `+where)
	}
	if salesCount != "" || salesAmount != "" {
		set := []string{}
		if salesCount != "" {
			set = append(set, "sales_count = "+salesCount)
		}
		if salesAmount != "" {
			set = append(set, "sales_amount = "+salesAmount)
		}
		d.Exec(t, `UPDATE product_sales SET `+strings.Join(set, ", ")+` WHERE `+where)
	}
	if views != "" {
		d.Exec(t, `UPDATE product_views SET view_count = `+views+` WHERE `+where)
	}
}
