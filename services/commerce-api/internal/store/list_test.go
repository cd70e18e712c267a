package store

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/store/storetest"
)

// TestListProductsOrder checks every page of every sort against the plain
// definition of the order: the aggregate (zero when absent) descending, then
// the newest product first. Counts repeat on purpose, and some products
// have a metrics row of zeros while others have none.
func TestListProductsOrder(t *testing.T) {
	ctx := context.Background()
	url, s := openTest(t)
	db := storetest.Open(t, url)
	db.Exec(t, `INSERT INTO products (name, price, stock) SELECT 'p' || i, i, 1 FROM generate_series(1, 60) i`)
	db.Exec(t, `INSERT INTO product_metrics (product_id, like_count, sales_count, view_count)
		SELECT id, (id * 7) % 5, (id * 3) % 4, CASE WHEN id % 9 = 0 THEN 0 ELSE id % 6 END
		FROM products WHERE id % 4 <> 0`)
	// A metrics row of a product that does not exist (yet) is not listed.
	db.Exec(t, `INSERT INTO product_metrics (product_id, like_count, sales_count, view_count) VALUES (999999, 99, 99, 99)`)
	for _, sort := range ProductSorts() {
		col := sortColumn[sort]
		want := "p.id DESC"
		if col != "" {
			want = "COALESCE(m." + col + ", 0) DESC, p.id DESC"
		}
		for _, size := range []int{1, 7, 100} {
			for page := 0; page*size <= 70 && page*size <= ListWindow; page++ {
				got, total, more, err := s.ListProducts(ctx, sort, page, size)
				if err != nil {
					t.Fatalf("%s page %d size %d: %v", sort, page, size, err)
				}
				var exp []Product
				if err := s.db.Raw(`SELECT `+productColumns+` ORDER BY `+want+` LIMIT ? OFFSET ?`, size, page*size).Scan(&exp).Error; err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(ids(exp), ids(got)); diff != "" {
					t.Fatalf("%s page %d size %d (-want +got):\n%s", sort, page, size, diff)
				}
				if total != 60 || more {
					t.Fatalf("total %d, more %v; want 60, false", total, more)
				}
			}
		}
	}
}

func ids(ps []Product) []int64 {
	out := []int64{}
	for _, p := range ps {
		out = append(out, p.ID)
	}
	return out
}

// TestListProductsUsesIndexes plans the deepest allowed page of every sort
// over 300,000 products and checks that the plan reads the sort's index and
// never sorts or scans a whole table.
func TestListProductsUsesIndexes(t *testing.T) {
	ctx := context.Background()
	url, s := openTest(t)
	db := storetest.Open(t, url)
	db.Exec(t, `INSERT INTO products (name, price, stock) SELECT 'p' || i, i % 1000, 1 FROM generate_series(1, 300000) i`)
	db.Exec(t, `INSERT INTO product_metrics (product_id, like_count, sales_count, view_count)
		SELECT id, id % 1000, id % 97, id % 5000 FROM products WHERE id % 3 <> 0`)
	db.Exec(t, `ANALYZE products`)
	db.Exec(t, `ANALYZE product_metrics`)
	index := map[ProductSort]string{
		SortLatest:    "products_pkey",
		SortLikesDesc: "product_metrics_like_count_idx",
		SortSalesDesc: "product_metrics_sales_count_idx",
		SortViewsDesc: "product_metrics_view_count_idx",
	}
	for _, sort := range ProductSorts() {
		t.Run(string(sort), func(t *testing.T) {
			query, args, err := listQuery(sort, ListWindow/100, 100)
			if err != nil {
				t.Fatal(err)
			}
			var lines []string
			if err := s.db.WithContext(ctx).Raw(`EXPLAIN `+query, args...).Scan(&lines).Error; err != nil {
				t.Fatal(err)
			}
			plan := strings.Join(lines, "\n")
			if !strings.Contains(plan, "Index Scan") || !strings.Contains(plan, index[sort]) {
				t.Errorf("the plan does not read %s:\n%s", index[sort], plan)
			}
			if strings.Contains(plan, "Seq Scan") {
				t.Errorf("the plan scans a whole table:\n%s", plan)
			}
			if strings.Contains(plan, "COALESCE") {
				t.Errorf("the plan sorts by the COALESCE expression, which no index holds:\n%s", plan)
			}
			if testing.Verbose() {
				var analyzed []string
				_ = s.db.WithContext(ctx).Raw(`EXPLAIN (ANALYZE, TIMING OFF) `+query, args...).Scan(&analyzed).Error
				t.Logf("%s", strings.Join(analyzed, "\n"))
			}
		})
	}
	// The total stops counting at the window.
	_, total, more, err := s.ListProducts(ctx, SortLikesDesc, 0, 20)
	if err != nil || total != ListWindow || !more {
		t.Errorf("ListProducts total %d, more %v, err %v; want %d, true", total, more, err, ListWindow)
	}
}
