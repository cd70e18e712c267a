package offsets

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestTracker(t *testing.T) {
	t.Parallel()
	type state struct {
		Committable int64
		Gap         int
		Incomplete  int
		Blocking    int64
		Completed   []int64
	}
	tests := []struct {
		name     string
		start    int64
		hydrated []int64
		add      []int64
		complete []int64
		want     state
	}{
		{
			name:  "nothing received commits the start",
			start: 5,
			want:  state{Committable: 5, Blocking: -1},
		},
		{
			name:     "in-order completion advances to the end",
			add:      []int64{0, 1, 2},
			complete: []int64{0, 1, 2},
			want:     state{Committable: 3, Blocking: -1},
		},
		{
			name:     "out-of-order completion leaves a gap",
			add:      []int64{0, 1, 2, 3},
			complete: []int64{1, 3},
			want:     state{Committable: 0, Gap: 2, Incomplete: 2, Blocking: 0, Completed: []int64{1, 3}},
		},
		{
			name:     "filling the blocking offset advances past the run",
			add:      []int64{0, 1, 2, 3},
			complete: []int64{1, 2, 0},
			want:     state{Committable: 3, Incomplete: 1, Blocking: 3},
		},
		{
			name:     "a gap below does not mislead finding an offset",
			add:      []int64{0, 2, 3, 4},
			complete: []int64{3, 4},
			want:     state{Committable: 0, Gap: 2, Incomplete: 2, Blocking: 0, Completed: []int64{3, 4}},
		},
		{
			name:     "offsets missing from the log never block",
			start:    10,
			add:      []int64{12, 15, 20},
			complete: []int64{12, 15},
			want:     state{Committable: 20, Incomplete: 1, Blocking: 20},
		},
		{
			name:     "hydrated offsets are complete on arrival and still reported before arrival",
			start:    0,
			hydrated: []int64{1, 3, 7},
			add:      []int64{0, 1, 2, 3},
			complete: []int64{2},
			want:     state{Committable: 0, Gap: 3, Incomplete: 1, Blocking: 0, Completed: []int64{1, 2, 3, 7}},
		},
		{
			name:     "duplicates and unknown completions are ignored",
			add:      []int64{0, 0, 1},
			complete: []int64{5, 1, 1},
			want:     state{Committable: 0, Gap: 1, Incomplete: 1, Blocking: 0, Completed: []int64{1}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tr := NewTracker(tt.start, tt.hydrated)
			for _, o := range tt.add {
				tr.Add(o)
			}
			for _, o := range tt.complete {
				tr.Complete(o)
			}
			got := state{
				Committable: tr.Committable(),
				Gap:         tr.Gap(),
				Incomplete:  tr.Incomplete(),
				Blocking:    -1,
				Completed:   tr.CompletedAbove(nil),
			}
			if b, ok := tr.Blocking(); ok {
				got.Blocking = b
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("state (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTrackerHydratedSkip(t *testing.T) {
	t.Parallel()
	tr := NewTracker(0, []int64{1, 2, 3})
	if _, done := tr.Add(0); done {
		t.Fatal("offset 0 is the committed offset and must be processed")
	}
	tr.Complete(0)
	for o := int64(1); o <= 3; o++ {
		if _, done := tr.Add(o); !done {
			t.Fatalf("offset %d not reported done", o)
		}
	}
	if got := tr.Committable(); got != 4 {
		t.Fatalf("Committable = %d, want 4", got)
	}
}

func TestTrackerLongRunCompacts(t *testing.T) {
	t.Parallel()
	tr := NewTracker(0, nil)
	for o := range int64(10000) {
		tr.Add(o)
	}
	for o := int64(1); o < 10000; o++ {
		tr.Complete(o)
	}
	tr.Complete(0)
	if got := tr.Committable(); got != 10000 {
		t.Fatalf("Committable = %d, want 10000", got)
	}
	if len(tr.outstanding) != 0 {
		t.Fatalf("outstanding not released: %d", len(tr.outstanding))
	}
}
