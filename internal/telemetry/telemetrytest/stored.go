package telemetrytest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// StoredTraceParent returns the traceparent stored with the one outbox row
// of eventType in the database at dbURL; "" when the row stored none.
func StoredTraceParent(t testing.TB, dbURL, eventType string) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var stored string
	if err := conn.QueryRow(ctx, `SELECT COALESCE(traceparent, '') FROM outbox WHERE event_type = $1`, eventType).Scan(&stored); err != nil {
		t.Fatalf("the %s row's traceparent: %v", eventType, err)
	}
	return stored
}
