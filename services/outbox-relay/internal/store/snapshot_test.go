package store

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseSnapshot(t *testing.T) {
	tests := []struct {
		in      string
		want    Snapshot
		wantErr bool
	}{
		{in: "100:100:", want: Snapshot{Xmin: 100, Xmax: 100}},
		{in: "90:120:110,95", want: Snapshot{Xmin: 90, Xmax: 120, Xip: []uint64{95, 110}}},
		{in: "90:120", wantErr: true},
		{in: "x:120:", wantErr: true},
		{in: "90:120:9a", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseSnapshot(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error %v, want error %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); !tt.wantErr && diff != "" {
				t.Errorf("snapshot (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSnapshotEnded(t *testing.T) {
	s := Snapshot{Xmin: 90, Xmax: 120, Xip: []uint64{95, 110}}
	for xid, want := range map[uint64]bool{80: true, 90: true, 95: false, 100: true, 110: false, 119: true, 120: false, 200: false} {
		if got := s.Ended(xid); got != want {
			t.Errorf("Ended(%d) = %v, want %v", xid, got, want)
		}
	}
	if !s.AllEnded([]uint64{80, 100}) || s.AllEnded([]uint64{80, 95}) {
		t.Error("AllEnded disagrees with Ended")
	}
}
