package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/loopers/commerce-pipeline/internal/outbox"
	"github.com/loopers/commerce-pipeline/pkg/events"
)

// Product is a catalog entry with the aggregates product-consumers maintain
// (zero until the first event of a kind is aggregated).
type Product struct {
	ID          int64
	Name        string
	Price       int64
	Stock       int64
	LikeCount   int64
	SalesCount  int64
	SalesAmount int64
	ViewCount   int64
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// NewProduct is the input of CreateProduct.
type NewProduct struct {
	Name  string
	Price int64
	Stock int64
}

// ProductSort orders a product listing.
type ProductSort string

// The orders a listing supports; ties fall back to the newest product first.
const (
	SortLatest    ProductSort = "latest"
	SortLikesDesc ProductSort = "likes_desc"
	SortSalesDesc ProductSort = "sales_desc"
	SortViewsDesc ProductSort = "views_desc"
)

// sortKey is the table and column of the aggregate a sort orders by (none
// for the newest first). Each has an index (column DESC, product_id DESC)
// WHERE listed.
type sortKey struct{ table, alias, column string }

var sortColumn = map[ProductSort]sortKey{
	SortLatest:    {},
	SortLikesDesc: {"product_likes", "l", "like_count"},
	SortSalesDesc: {"product_sales", "s", "sales_count"},
	SortViewsDesc: {"product_views", "v", "view_count"},
}

// ListWindow bounds listings: a page may start at most this many products
// into the order (page × size ≤ ListWindow), and the total is counted up to
// it. Deeper offsets would make every page read and discard that many rows.
const ListWindow = 10_000

// ProductSorts lists the supported listing orders.
func ProductSorts() []ProductSort {
	return []ProductSort{SortLatest, SortLikesDesc, SortSalesDesc, SortViewsDesc}
}

const productSelect = `p.id, p.name, p.price, p.stock, p.created_at, p.updated_at,
	COALESCE(l.like_count, 0) AS like_count, COALESCE(s.sales_count, 0) AS sales_count,
	COALESCE(s.sales_amount, 0) AS sales_amount, COALESCE(v.view_count, 0) AS view_count`

// withAggregates joins each aggregate's row (one table per aggregate, one
// writer each: migration 00014) to products p, by primary key.
const withAggregates = `
	LEFT JOIN product_likes l ON l.product_id = p.id
	LEFT JOIN product_sales s ON s.product_id = p.id
	LEFT JOIN product_views v ON v.product_id = p.id`

const productColumns = productSelect + `
	FROM products p` + withAggregates

// CreateProduct inserts a product. Creating a product emits no event.
func (s *Store) CreateProduct(ctx context.Context, in NewProduct) (Product, error) {
	p := Product{Name: in.Name, Price: in.Price, Stock: in.Stock}
	err := s.db.WithContext(ctx).Raw(`INSERT INTO products (name, price, stock) VALUES (?, ?, ?)
		RETURNING id, created_at, updated_at`, in.Name, in.Price, in.Stock).
		Row().Scan(&p.ID, &p.CreatedAt, &p.UpdatedAt)
	if err != nil {
		return Product{}, fmt.Errorf("create product: %w", mapErr(err))
	}
	return p, nil
}

// ViewProduct returns a product with its aggregates and records a
// ProductViewed event by viewer ("" when anonymous), in one statement: one
// transaction, one round trip. It locks nothing: a view commutes with every
// other event (its topic holds views only, and each one counts once,
// whatever the order).
func (s *Store) ViewProduct(ctx context.Context, id int64, viewer string) (Product, error) {
	e, err := s.entry(events.ProductViewedV1{ProductID: id, UserID: viewer})
	if err != nil {
		return Product{}, err
	}
	ctx, e, span := outbox.StartCreate(ctx, e)
	var p Product
	err = s.pool.Pool.QueryRow(ctx, `WITH p AS (SELECT `+productColumns+` WHERE p.id = $1),
		viewed AS (`+outbox.InsertFromSQL("p", 2)+`)
		SELECT id, name, price, stock, like_count, sales_count, sales_amount, view_count, created_at, updated_at FROM p`,
		append([]any{id}, e.Values()...)...).
		Scan(&p.ID, &p.Name, &p.Price, &p.Stock, &p.LikeCount, &p.SalesCount, &p.SalesAmount, &p.ViewCount, &p.CreatedAt, &p.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		// No product, no view row: the span's context is stored nowhere.
		outbox.EndCreate(span, nil)
		return Product{}, productFound(id, 0, nil)
	}
	outbox.EndCreate(span, err)
	if err != nil {
		return Product{}, fmt.Errorf("product %d: %w", id, mapErr(err))
	}
	s.wake.Notify()
	return p, nil
}

// RecordView records a ProductViewed event without reading the product, for
// a detail served from a cache.
func (s *Store) RecordView(ctx context.Context, id int64, viewer string) error {
	viewed, err := s.changeWithEvent(ctx, `SELECT id FROM products WHERE id = $1`, []any{id},
		events.ProductViewedV1{ProductID: id, UserID: viewer})
	if err != nil {
		return fmt.Errorf("product %d: %w", id, mapErr(err))
	}
	if !viewed {
		return productFound(id, 0, nil)
	}
	return nil
}

// ListProducts returns one page of products in the given order, the number
// of products counted up to [ListWindow], and whether there are more than
// that. page × size must not exceed ListWindow.
func (s *Store) ListProducts(ctx context.Context, sort ProductSort, page, size int) (items []Product, total int64, more bool, err error) {
	query, args, err := listQuery(sort, page, size)
	if err != nil {
		return nil, 0, false, err
	}
	db := s.db.WithContext(ctx)
	// Counting stops after ListWindow+1 rows: an exact count of a large
	// catalog costs a scan of it on every page, and no page past the window
	// can be asked for anyway.
	if err := db.Raw(`SELECT count(*) FROM (SELECT 1 FROM products LIMIT ?) t`, ListWindow+1).Row().Scan(&total); err != nil {
		return nil, 0, false, fmt.Errorf("count products: %w", mapErr(err))
	}
	if total > ListWindow {
		total, more = ListWindow, true
	}
	items = []Product{}
	if err := db.Raw(query, args...).Scan(&items).Error; err != nil {
		return nil, 0, false, fmt.Errorf("list products: %w", mapErr(err))
	}
	return items, total, more, nil
}

// listQuery builds the statement of one listing page.
//
// Every product has a row, marked listed, in each aggregate's table
// (migrations 00009, 00010 and 00014), so a sort by an aggregate is one
// range scan of its table's partial (column DESC, product_id DESC) WHERE
// listed index: the page's offset is skipped on the index alone, with no
// probe per skipped entry, and only the page's rows are joined to products
// and to the other aggregates. The newest-first order skips its offset on
// the primary key alone, the same way.
func listQuery(sort ProductSort, page, size int) (string, []any, error) {
	col, ok := sortColumn[sort]
	if !ok {
		return "", nil, fmt.Errorf("unknown sort %q", sort)
	}
	offset := int64(page) * int64(size)
	if page < 0 || size <= 0 || offset > ListWindow {
		return "", nil, fmt.Errorf("page %d of size %d: %w: the offset must be at most %d", page, size, ErrInvalidInput, ListWindow)
	}
	if col == (sortKey{}) {
		return `WITH page AS (SELECT id FROM products ORDER BY id DESC LIMIT ? OFFSET ?)
		SELECT ` + productColumns + ` JOIN page ON page.id = p.id ORDER BY p.id DESC`, []any{size, offset}, nil
	}
	// col is one of sortColumn's constants, never input.
	return `WITH page AS (
		SELECT a.product_id AS id, a.` + col.column + ` AS k FROM ` + col.table + ` a
		WHERE a.listed
		ORDER BY a.` + col.column + ` DESC, a.product_id DESC LIMIT ? OFFSET ?)
	SELECT ` + productSelect + `
	FROM page JOIN products p ON p.id = page.id` + withAggregates + `
	ORDER BY page.k DESC, page.id DESC`, []any{size, offset}, nil
}

// lockMode is a row-lock clause. Only the constants below exist, so no input
// can reach the SQL through it.
type lockMode string

const (
	noLock lockMode = ""
	// lockWrite is the lock of a payment, the one writer of a product's
	// row (its stock). It is FOR NO KEY UPDATE, never FOR UPDATE: inserting
	// order items or likes takes FOR KEY SHARE on their products through
	// the foreign keys, in line order, and FOR UPDATE conflicts with that,
	// so placing an order could deadlock with a payment locking the same
	// products in id order; NO KEY UPDATE excludes every other payment and
	// lets likes and orders of the product go on.
	lockWrite lockMode = "FOR NO KEY UPDATE"
)

// productExists checks that product id exists, locking nothing: products
// are never deleted, so the answer cannot change before the commit.
func (tx *Tx) productExists(id int64) error {
	var got int64
	res := tx.db.Raw(`SELECT id FROM products WHERE id = ?`, id).Scan(&got)
	return productFound(id, res.RowsAffected, res.Error)
}

func productFound(id, rows int64, err error) error {
	if err != nil {
		return fmt.Errorf("product %d: %w", id, err)
	}
	if rows == 0 {
		return fmt.Errorf("%w: product %d does not exist", ErrNotFound, id)
	}
	return nil
}
