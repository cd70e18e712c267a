package store

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestProductsQueryLocksInIDOrder pins the lock-ordering rule: whenever
// productsQuery locks, it orders by id first, so that rows are locked in
// ascending id order.
func TestProductsQueryLocksInIDOrder(t *testing.T) {
	t.Parallel()
	for _, mode := range []lockMode{lockWrite} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			q := productsQuery(stockColumn, mode)
			if !strings.HasSuffix(q, " ORDER BY id "+string(mode)) {
				t.Errorf("%q does not end in ORDER BY id %s", q, mode)
			}
		})
	}
	if q := productsQuery(priceColumn, noLock); strings.Contains(q, "FOR ") {
		t.Errorf("unlocked read %q locks", q)
	}
}

// TestProductValuesLocksAnyInputOrder locks products named in descending
// order and checks the rows come back and are held.
func TestProductValuesLocksAnyInputOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, s := openTest(t)
	var ids []int64
	for i := range 3 {
		p, err := s.CreateProduct(ctx, NewProduct{Name: "p", Price: 1, Stock: int64(10 + i)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append([]int64{p.ID}, ids...)
	}
	err := s.InTx(ctx, func(tx *Tx) error {
		got, err := tx.productValues(stockColumn, ids, lockWrite)
		if err != nil {
			return err
		}
		want := map[int64]int64{ids[2]: 10, ids[1]: 11, ids[0]: 12}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("stock (-want +got):\n%s", diff)
		}
		var locked int64
		if err := tx.db.Raw(`SELECT count(*) FROM pg_locks WHERE locktype = 'transactionid' AND pid = pg_backend_pid()`).Row().Scan(&locked); err != nil {
			return err
		}
		if locked == 0 {
			t.Error("productValues with lockWrite took no row lock")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
