package api

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/store"
)

// TestProblemForBackstops covers the mappings no valid request reaches now
// that the API validates first: a data error from the database is still a
// 400, never a 500, and an unavailable database is a 503 with Retry-After.
func TestProblemForBackstops(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		err        error
		status     int
		retryAfter int
	}{
		{"data exception", fmt.Errorf("create product: %w: ERROR: invalid byte sequence (SQLSTATE 22021)", store.ErrInvalidInput), 400, 0},
		{"unavailable", fmt.Errorf("like: %w: dial tcp 10.0.0.7:5432: connection refused", store.ErrUnavailable), 503, RetryAfterSeconds},
		{"deadline", fmt.Errorf("list: %w", context.DeadlineExceeded), 503, RetryAfterSeconds},
		{"anything else", fmt.Errorf("boom"), 500, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := problemFor(tc.err)
			if p.Status != tc.status || p.retryAfter != tc.retryAfter || p.Title != http.StatusText(tc.status) {
				t.Errorf("problemFor = %+v; want status %d, Retry-After %d", p, tc.status, tc.retryAfter)
			}
			if tc.status != 500 && (strings.Contains(p.Detail, "10.0.0.7") || strings.Contains(p.Detail, "SQLSTATE")) {
				t.Errorf("detail quotes the driver: %s", p.Detail)
			}
		})
	}
}
