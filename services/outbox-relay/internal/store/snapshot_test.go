package store

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseSnapshot(t *testing.T) {
	t.Parallel()
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
			t.Parallel()
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
	t.Parallel()
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

func TestSnapshotWiden(t *testing.T) {
	t.Parallel()
	const epoch = 5 << 32
	tests := []struct {
		name string
		xmax uint64
		xid  uint32
		want uint64
	}{
		{"same epoch", epoch + 1000, 990, epoch + 990},
		{"just above xmax", epoch + 1000, 1003, epoch + 1003},
		{"previous epoch", epoch + 10, 0xFFFFFFF0, epoch - 16},
		{"next epoch", epoch + 0xFFFFFFF0, 5, epoch + 1<<32 + 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := (Snapshot{Xmax: tt.xmax}).Widen(tt.xid); got != tt.want {
				t.Errorf("Widen(%d) with xmax %d = %d, want %d", tt.xid, tt.xmax, got, tt.want)
			}
		})
	}
}
