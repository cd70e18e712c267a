package consumer

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/loopers/commerce-pipeline/internal/pg"
	"github.com/loopers/commerce-pipeline/pkg/events"
	"github.com/loopers/commerce-pipeline/pkg/pcon"
)

// TestStoreErrPermanence: only the database's refusal of the data itself
// dead-letters a record; an unavailable database, a full NOTIFY queue or a
// deadlock is retried.
func TestStoreErrPermanence(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		code      string
		permanent bool
	}{
		{"numeric value out of range", "22003", true},
		{"check violation", "23514", true},
		{"notify queue full", "54000", false},
		{"deadlock", "40P01", false},
		{"connection failure", "08006", false},
		{"statement timeout", "57014", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := fmt.Errorf("apply: %w", pg.MapErr(&pgconn.PgError{Code: tc.code}))
			// storeErr returns what stays retryable as it is, and wraps
			// the rest in pcon.Permanent.
			out := storeErr(in)
			if got := !errors.Is(out, in) || out != in; got != tc.permanent { //nolint:errorlint // identity is the point: a retryable error is returned unwrapped
				t.Errorf("SQLSTATE %s: permanent %v, want %v (%v)", tc.code, got, tc.permanent, out)
			}
			if tc.permanent && out.Error() != pcon.Permanent(in).Error() {
				t.Errorf("SQLSTATE %s: %v, want it marked permanent", tc.code, out)
			}
		})
	}
}

// TestGroupsAreDistinct: two consumers sharing a group would split one
// topic's partitions between them, and share idempotency keys. Each reads
// the topic pkg/events publishes its events to.
func TestGroupsAreDistinct(t *testing.T) {
	t.Parallel()
	h := &Handlers{reg: events.NewRegistry()} // Spec needs only the registry
	topics := map[string]string{Like: "like-events", Order: "order-events", View: "product-events", Stock: "stock-events"}
	owner := map[string]string{}
	for _, name := range Names {
		spec, err := h.Spec(name)
		if err != nil {
			t.Fatal(err)
		}
		if spec.Group == "" {
			t.Errorf("consumer %s has no group", name)
		}
		if spec.Topic != topics[name] {
			t.Errorf("consumer %s reads %q, want %q", name, spec.Topic, topics[name])
		}
		if other, dup := owner[spec.Group]; dup {
			t.Errorf("consumers %s and %s share group %q", other, name, spec.Group)
		}
		owner[spec.Group] = name
	}
}
