package core

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestReadyQueueLowestFirst pushes offsets mostly ascending, as records
// arrive, with older ones in between, as keys free up and retries come
// back, and pops: the lowest offset always comes out first.
func TestReadyQueueLowestFirst(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	var q readyQueue
	var want []int64 // the offsets queued, sorted
	next := int64(0)
	var held []int64 // popped offsets that may come back
	for step := range 20_000 {
		switch r := rng.IntN(10); {
		case r < 5: // a new record arrives
			next += 1 + rng.Int64N(3)
			q.push(&item{off: next})
			want = append(want, next)
		case r < 6 && len(held) > 0: // an older record becomes ready again
			i := rng.IntN(len(held))
			off := held[i]
			held = slices.Delete(held, i, i+1)
			q.push(&item{off: off})
			want = append(want, off)
			slices.Sort(want)
		case q.len() > 0:
			if got := q.min(); got != want[0] {
				t.Fatalf("step %d: min %d, want %d", step, got, want[0])
			}
			if got := q.pop().off; got != want[0] {
				t.Fatalf("step %d: popped %d, want %d", step, got, want[0])
			}
			if rng.IntN(3) == 0 {
				held = append(held, want[0])
			}
			want = want[1:]
		}
		if q.len() != len(want) {
			t.Fatalf("step %d: len %d, want %d", step, q.len(), len(want))
		}
	}
}
