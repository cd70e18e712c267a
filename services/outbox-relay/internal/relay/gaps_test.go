package relay

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/loopers/commerce-pipeline/services/outbox-relay/internal/store"
)

func snap(t *testing.T, s string) store.Snapshot {
	t.Helper()
	v, err := store.ParseSnapshot(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestGapsSettleOnlyWhenTheirWritersHaveEnded(t *testing.T) {
	type check struct {
		lo, hi   int64
		snap     string
		inFlight []uint64 // writers seen after the snapshot, when a range is new
		want     bool
	}
	tests := []struct {
		name   string
		checks []check
	}{
		{"nothing in progress settles at once", []check{{3, 4, "100:100:", nil, true}}},
		{"no writer among those in progress still waits one read", []check{
			{3, 3, "90:100:90,95", nil, false},
			{3, 3, "90:101:90,95", nil, true},
		}},
		{"waits while a writer runs, settles once it ended", []check{
			{3, 3, "90:100:90,95", []uint64{95}, false},
			{3, 3, "90:105:90,95,101", nil, false},
			{3, 3, "90:106:90,101", nil, true},
		}},
		{"a writer below the new xmin has ended", []check{
			{5, 7, "90:100:95", []uint64{95}, false},
			{5, 7, "96:110:97", nil, true},
		}},
		{"a later, partly filled range keeps its first writers", []check{
			{5, 7, "90:100:95,96", []uint64{95, 96}, false},
			{5, 5, "90:110:96", nil, false},
			{7, 7, "90:110:", nil, true},
		}},
		{"a range extending a known one records only the new ids", []check{
			{5, 5, "90:100:95", []uint64{95}, false},
			{5, 8, "90:110:101", []uint64{101}, false},
			{5, 8, "90:111:101", nil, false},
			{5, 8, "102:112:", nil, true},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var g gaps
			for i, c := range tt.checks {
				got := g.resolved(c.lo, c.hi, snap(t, c.snap), func() []uint64 { return c.inFlight })
				if got != c.want {
					t.Errorf("check %d (%d..%d in %s): resolved %v, want %v; known %+v", i, c.lo, c.hi, c.snap, got, c.want, g.known)
				}
			}
		})
	}
}

func TestGapsForgetRangesBelowTheCursor(t *testing.T) {
	g := gaps{known: []gap{{lo: 1, hi: 2}, {lo: 4, hi: 6}, {lo: 9, hi: 9}}}
	g.forget(5)
	if diff := cmp.Diff([]gap{{lo: 4, hi: 6}, {lo: 9, hi: 9}}, g.known, cmp.AllowUnexported(gap{})); diff != "" {
		t.Errorf("known gaps (-want +got):\n%s", diff)
	}
}
