package store_test

import (
	"context"
	"testing"

	"github.com/loopers/commerce-pipeline/internal/testenv"
	"github.com/loopers/commerce-pipeline/services/product-consumers/internal/store"
)

// TestExclusivePass: of two replicas (two stores on one database), only one
// runs a reclaim pass at a time; once it is done the other may.
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
	var innerRan bool
	outerRan, err := replicas[0].ExclusivePass(ctx, func(ctx context.Context) {
		var err error
		innerRan, err = replicas[1].ExclusivePass(ctx, func(context.Context) {})
		if err != nil {
			t.Error(err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if !outerRan || innerRan {
		t.Fatalf("first replica ran %v, second ran %v during it; want true, false", outerRan, innerRan)
	}
	if ran, err := replicas[1].ExclusivePass(ctx, func(context.Context) {}); err != nil || !ran {
		t.Fatalf("second replica after the first finished: ran %v, %v", ran, err)
	}
}
