package store_test

import (
	"context"
	"testing"

	"github.com/loopers/commerce-pipeline/internal/testenv"
	"github.com/loopers/commerce-pipeline/services/product-consumers/internal/store"
)

// TestExclusivePass: of two replicas (two stores on one database), only one
// runs a pass under a lock name at a time; once it is done the other may, and
// a pass under another name runs meanwhile.
func TestExclusivePass(t *testing.T) {
	ctx := context.Background()
	url := testenv.DatabaseURL(t)
	var replicas [2]*store.Store
	for i := range replicas {
		s, err := store.Open(ctx, url, 4)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		replicas[i] = s
	}
	var innerRan, otherRan bool
	outerRan, err := replicas[0].ExclusivePass(ctx, "reclaim:like-events", func(ctx context.Context) {
		var err error
		innerRan, err = replicas[1].ExclusivePass(ctx, "reclaim:like-events", func(context.Context) {})
		if err != nil {
			t.Error(err)
		}
		otherRan, err = replicas[1].ExclusivePass(ctx, "reclaim:order-events", func(context.Context) {})
		if err != nil {
			t.Error(err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if !outerRan || innerRan || !otherRan {
		t.Fatalf("first replica ran %v, second ran %v on the same topics and %v on others during it; want true, false, true", outerRan, innerRan, otherRan)
	}
	if ran, err := replicas[1].ExclusivePass(ctx, "reclaim:like-events", func(context.Context) {}); err != nil || !ran {
		t.Fatalf("second replica after the first finished: ran %v, %v", ran, err)
	}
}
