package benchkit

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/loopers/commerce-pipeline/internal/procstat"
)

// Querier is a pgx connection or pool.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// BackendCPU is the CPU time used so far by each backend of q's database
// that cond, a condition on pg_stat_activity with args, selects. A server on
// another machine has no /proc entry here: its backends are left out.
func BackendCPU(ctx context.Context, q Querier, cond string, args ...any) (map[int]time.Duration, error) {
	rows, err := q.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND (`+cond+`)`, args...)
	if err != nil {
		return nil, err
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, err
	}
	out := make(map[int]time.Duration, len(pids))
	for _, pid := range pids {
		if c, err := procstat.ProcessCPU(int(pid)); err == nil {
			out[int(pid)] = c
		}
	}
	return out, nil
}
