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
	t.Parallel()
	type check struct {
		lo, hi   int64
		snap     string
		inFlight []uint64 // writers seen after the snapshot, when a range is new
		unknown  bool     // the writers cannot be read
		want     bool
	}
	tests := []struct {
		name   string
		checks []check
	}{
		{"nothing in flight still waits for a later read", []check{
			{3, 4, "100:100:", nil, false, false},
			{3, 4, "100:101:", nil, false, true},
		}},
		{"waits while a writer runs, settles once it ended", []check{
			{3, 3, "90:100:90,95", []uint64{95}, false, false},
			{3, 3, "90:105:90,95,101", nil, false, false},
			{3, 3, "90:106:90,101", nil, false, true},
		}},
		{"a writer at or above xmax runs although xip omits it", []check{
			{3, 3, "90:100:90", []uint64{100}, false, false},
			{3, 3, "90:100:90", nil, false, false},
			{3, 3, "90:102:90", nil, false, true},
		}},
		{"a writer below the new xmin has ended", []check{
			{5, 7, "90:100:95", []uint64{95}, false, false},
			{5, 7, "96:110:97", nil, false, true},
		}},
		{"a partly filled range keeps its writers", []check{
			{5, 7, "90:100:95,96", []uint64{95, 96}, false, false},
			{5, 5, "90:110:96", nil, false, false},
			{7, 7, "90:110:", nil, false, true},
		}},
		{"a range extending a known one records only the new ids", []check{
			{5, 5, "90:100:95", []uint64{95}, false, false},
			{5, 8, "90:110:101", []uint64{101}, false, false},
			{5, 8, "90:111:101", nil, false, false},
			{5, 8, "102:112:", nil, false, true},
		}},
		{"unknown writers leave the range to a later read", []check{
			{3, 3, "100:100:", nil, true, false},
			{3, 3, "100:101:", nil, false, false},
			{3, 3, "100:102:", nil, false, true},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var g gaps
			for i, c := range tt.checks {
				got := g.resolved(c.lo, c.hi, snap(t, c.snap), func() ([]uint64, bool) { return c.inFlight, !c.unknown })
				if got != c.want {
					t.Errorf("check %d (%d..%d in %s): resolved %v, want %v; known %+v", i, c.lo, c.hi, c.snap, got, c.want, g.known)
				}
			}
		})
	}
}

func TestGapsForgetRangesBelowTheCursor(t *testing.T) {
	t.Parallel()
	g := gaps{known: []gap{{lo: 1, hi: 2}, {lo: 4, hi: 6}, {lo: 9, hi: 9}}}
	g.forget(5)
	if diff := cmp.Diff([]gap{{lo: 4, hi: 6}, {lo: 9, hi: 9}}, g.known, cmp.AllowUnexported(gap{})); diff != "" {
		t.Errorf("known gaps (-want +got):\n%s", diff)
	}
}
