package store

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/store/storetest"
)

// TestListProductsOrder checks every page of every sort against the plain
// definition of the order: the aggregate (zero when absent) descending, then
// the newest product first. Counts repeat on purpose, and a quarter of the
// products keep the row of zeros they were created with.
func TestListProductsOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, s := openTest(t)
	db := storetest.Open(t, url)
	db.Exec(t, `INSERT INTO products (name, price, stock) SELECT 'p' || i, i, 1 FROM generate_series(1, 60) i`)
	db.SetAggregates(t, `product_id % 4 <> 0`, `(product_id * 7) % 5`, `(product_id * 3) % 4`, "",
		`CASE WHEN product_id % 9 = 0 THEN 0 ELSE product_id % 6 END`)
	// Aggregates of a product that does not exist (yet) are not listed.
	db.Exec(t, `INSERT INTO product_likes (product_id, like_count) VALUES (999999, 99)`)
	db.Exec(t, `INSERT INTO product_sales (product_id, sales_count) VALUES (999999, 99)`)
	db.Exec(t, `INSERT INTO product_views (product_id, view_count) VALUES (999999, 99)`)
	for _, sort := range ProductSorts() {
		col := sortColumn[sort]
		want := "p.id DESC"
		if col != (sortKey{}) {
			want = "COALESCE(" + col.alias + "." + col.column + ", 0) DESC, p.id DESC"
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

// TestProductsHaveMetricsRows: a product has its aggregates' rows from the
// transaction that creates it, with zeros.
func TestProductsHaveMetricsRows(t *testing.T) {
	t.Parallel()
	url, s := openTest(t)
	db := storetest.Open(t, url)
	p, err := s.CreateProduct(context.Background(), NewProduct{Name: "new", Price: 1, Stock: 1})
	if err != nil {
		t.Fatal(err)
	}
	db.Exec(t, `INSERT INTO products (name, price, stock) VALUES ('by another writer', 1, 1)`)
	var missing int64
	if err := s.db.Raw(`SELECT count(*) FROM products p WHERE NOT EXISTS
		(SELECT 1 FROM product_metrics m WHERE m.product_id = p.id AND m.like_count = 0 AND m.view_count = 0 AND m.sales_count = 0)`).
		Row().Scan(&missing); err != nil {
		t.Fatal(err)
	}
	if missing != 0 || p.ID == 0 {
		t.Errorf("%d new products without a row of zeros in product_metrics", missing)
	}
	var unlisted int64
	if err := s.db.Raw(`SELECT count(*) FROM product_metrics WHERE NOT listed`).Row().Scan(&unlisted); err != nil {
		t.Fatal(err)
	}
	if unlisted != 0 {
		t.Errorf("%d metrics rows of existing products are not listed", unlisted)
	}

	// A row a consumer wrote before its product existed is listed, with
	// its counts, once the product is created.
	db.Exec(t, `INSERT INTO product_likes (product_id, like_count) VALUES (424242, 5)`)
	db.Exec(t, `INSERT INTO products (id, name, price, stock) VALUES (424242, 'late', 1, 1)`)
	var listed bool
	var likes int64
	if err := s.db.Raw(`SELECT listed, like_count FROM product_metrics WHERE product_id = 424242`).Row().Scan(&listed, &likes); err != nil {
		t.Fatal(err)
	}
	if !listed || likes != 5 {
		t.Errorf("metrics row of a product created after it: listed %v, likes %d; want true, 5", listed, likes)
	}
}

// TestListProductsUsesIndexes plans and runs page 0 and page 40 (of 100) of
// every sort over 300,000 products in two shapes, almost all with non-zero
// aggregates and almost all zero: each must read the sort's index in order,
// never scan, sort, anti-join a whole table or probe another table per
// skipped entry, and touch at most maxListPages pages, the offset at most
// maxOffsetPages more (EXPLAIN ANALYZE's
// buffers: the work done, which a busy machine does not change; the time it
// takes is bench/api's to measure).
// maxListPages bounds the pages a listing page may touch (about 1,600
// here, most of them the capped count of the total), and maxOffsetPages
// what 40 pages of offset may add to page 0's (about 25 here: the offset
// walks 4,000 index entries in order, never a probe per entry).
const (
	maxListPages   = 2000
	maxOffsetPages = 300
)

func TestListProductsUsesIndexes(t *testing.T) {
	t.Parallel()
	shapes := []struct {
		name, nonZero string // which products get non-zero aggregates
	}{
		{"almost all non-zero", "product_id % 50 <> 0"},
		{"almost all zero", "product_id % 50 = 0"},
	}
	index := map[ProductSort]string{
		SortLatest:    "products_pkey",
		SortLikesDesc: "product_likes_like_count_idx",
		SortSalesDesc: "product_sales_sales_count_idx",
		SortViewsDesc: "product_views_view_count_idx",
	}
	for _, shape := range shapes {
		t.Run(shape.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			url, s := openTest(t)
			db := storetest.Open(t, url)
			db.Exec(t, `INSERT INTO products (name, price, stock) SELECT 'p' || i, i % 1000, 1 FROM generate_series(1, 300000) i`)
			db.SetAggregates(t, shape.nonZero, `1 + product_id % 1000`, `1 + product_id % 97`, "", `1 + product_id % 5000`)
			db.Exec(t, `VACUUM ANALYZE products, product_likes, product_sales, product_views`)
			for _, sort := range ProductSorts() {
				var first int
				for _, page := range []int{0, 40} {
					query, args, err := listQuery(sort, page, 100)
					if err != nil {
						t.Fatal(err)
					}
					var lines []string
					if err := s.db.WithContext(ctx).Raw(`EXPLAIN `+query, args...).Scan(&lines).Error; err != nil {
						t.Fatal(err)
					}
					plan := strings.Join(lines, "\n")
					if !strings.Contains(plan, "Index") || !strings.Contains(plan, index[sort]) {
						t.Errorf("%s page %d: the plan does not read %s:\n%s", sort, page, index[sort], plan)
					}
					// A join under the Limit is a probe per skipped entry: the
					// offset's cost then grows with a second index.
					for _, bad := range []string{"Seq Scan", "Anti Join", "Hash", "Sort Key", "COALESCE", "Semi Join"} {
						if strings.Contains(plan, bad) {
							t.Errorf("%s page %d: the plan has %q (a whole-table step):\n%s", sort, page, bad, plan)
						}
					}
					pages := pagesRead(t, s, query, args)
					t.Logf("%s page %d: %d pages", sort, page, pages)
					if pages > maxListPages {
						t.Errorf("%s page %d touched %d pages, want at most %d", sort, page, pages, maxListPages)
					}
					if page == 0 {
						first = pages
					} else if pages-first > maxOffsetPages {
						t.Errorf("%s page %d touched %d pages more than page 0, want at most %d", sort, page, pages-first, maxOffsetPages)
					}
				}
			}
		})
	}
}

// pagesRead runs query under EXPLAIN (ANALYZE, BUFFERS) and returns the
// pages it touched (shared hit + read + dirtied, every node summed at the
// top): the work the query does, which does not depend on how busy the
// machine is, where its time does.
func pagesRead(t *testing.T, s *Store, query string, args []any) int {
	t.Helper()
	var lines []string
	if err := s.db.Raw(`EXPLAIN (ANALYZE, BUFFERS, TIMING OFF, FORMAT JSON) `+query, args...).Scan(&lines).Error; err != nil {
		t.Fatal(err)
	}
	var out []struct {
		Plan struct {
			Hit  int `json:"Shared Hit Blocks"`
			Read int `json:"Shared Read Blocks"`
		} `json:"Plan"`
	}
	if err := json.Unmarshal([]byte(strings.Join(lines, "")), &out); err != nil || len(out) != 1 {
		t.Fatalf("EXPLAIN output %q: %v", lines, err)
	}
	return out[0].Plan.Hit + out[0].Plan.Read
}

// TestListTotalIsCapped: the total stops counting at the window.
func TestListTotalIsCapped(t *testing.T) {
	t.Parallel()
	url, s := openTest(t)
	db := storetest.Open(t, url)
	db.Exec(t, `INSERT INTO products (name, price, stock) SELECT 'p' || i, 1, 1 FROM generate_series(1, $1::int) i`, ListWindow+5)
	_, total, more, err := s.ListProducts(context.Background(), SortLikesDesc, 0, 20)
	if err != nil || total != ListWindow || !more {
		t.Errorf("ListProducts total %d, more %v, err %v; want %d, true", total, more, err, ListWindow)
	}
}
