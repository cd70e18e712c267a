package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestMapErrCodes covers the SQLSTATEs a running server cannot be made to
// send on demand in a test (a restart, a crash, recovery).
func TestMapErrCodes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		code string
		want error
	}{
		{"22021", ErrInvalidInput}, // invalid byte sequence for encoding "UTF8"
		{"22P05", ErrInvalidInput}, // untranslatable character (NUL)
		{"22003", ErrInvalidInput}, // numeric value out of range
		{"22001", ErrInvalidInput}, // string data right truncation
		{"57P01", ErrUnavailable},  // terminating connection due to administrator command
		{"57P02", ErrUnavailable},  // crash shutdown
		{"57P03", ErrUnavailable},  // the database system is starting up
		{"08006", ErrUnavailable},  // connection failure
		{"08001", ErrUnavailable},  // unable to connect
		{"53300", ErrUnavailable},  // too many connections
		{"57014", ErrUnavailable},  // statement timeout
		{"54000", ErrUnavailable},  // too many notifications in the NOTIFY queue
		{"23505", ErrConflict},
		{"23503", ErrNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.code, func(t *testing.T) {
			t.Parallel()
			err := mapErr(fmt.Errorf("stmt: %w", &pgconn.PgError{Code: tc.code}))
			if !errors.Is(err, tc.want) {
				t.Errorf("mapErr(%s) = %v, want %v", tc.code, err, tc.want)
			}
		})
	}
	if err := mapErr(&pgconn.PgError{Code: "42601"}); errors.Is(err, ErrInvalidInput) || errors.Is(err, ErrUnavailable) {
		t.Errorf("a syntax error mapped to %v; it is a bug, not input", err)
	}
}

// TestMapErrConnectionRefused connects to a port nobody listens on.
func TestMapErrConnectionRefused(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = pgx.Connect(ctx, "postgres://u:secret@"+addr+"/db?sslmode=disable&connect_timeout=2")
	if err == nil {
		t.Fatal("connected to a closed port")
	}
	if got := mapErr(err); !errors.Is(got, ErrUnavailable) {
		t.Errorf("mapErr(%v) is not ErrUnavailable", err)
	}
}
