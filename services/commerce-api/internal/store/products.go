package store

import (
	"context"
	"fmt"
	"time"

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

var sortSQL = map[ProductSort]string{
	SortLatest:    "p.id DESC",
	SortLikesDesc: "like_count DESC, p.id DESC",
	SortSalesDesc: "sales_count DESC, p.id DESC",
	SortViewsDesc: "view_count DESC, p.id DESC",
}

// ProductSorts lists the supported listing orders.
func ProductSorts() []ProductSort {
	return []ProductSort{SortLatest, SortLikesDesc, SortSalesDesc, SortViewsDesc}
}

const productColumns = `p.id, p.name, p.price, p.stock, p.created_at, p.updated_at,
	COALESCE(m.like_count, 0) AS like_count, COALESCE(m.sales_count, 0) AS sales_count,
	COALESCE(m.sales_amount, 0) AS sales_amount, COALESCE(m.view_count, 0) AS view_count
	FROM products p LEFT JOIN product_metrics m ON m.product_id = p.id`

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
// ProductViewed event by viewer ("" when anonymous).
func (s *Store) ViewProduct(ctx context.Context, id int64, viewer string) (Product, error) {
	var p Product
	err := s.InTx(ctx, func(tx *Tx) error {
		// FOR SHARE: views commute with each other but not with likes or
		// stock changes of the product, which take FOR NO KEY UPDATE.
		res := tx.db.Raw(`SELECT `+productColumns+` WHERE p.id = ? `+string(lockShare)+` OF p`, id).Scan(&p)
		if err := productFound(id, res.RowsAffected, res.Error); err != nil {
			return err
		}
		return tx.AppendEvent(events.ProductViewedV1{ProductID: id, UserID: viewer})
	})
	return p, err
}

// RecordView records a ProductViewed event without reading the product, for
// a detail served from a cache.
func (s *Store) RecordView(ctx context.Context, id int64, viewer string) error {
	return s.InTx(ctx, func(tx *Tx) error {
		if err := tx.lockProduct(id, lockShare); err != nil {
			return err
		}
		return tx.AppendEvent(events.ProductViewedV1{ProductID: id, UserID: viewer})
	})
}

// ListProducts returns one page of products in the given order and the total
// number of products.
func (s *Store) ListProducts(ctx context.Context, sort ProductSort, page, size int) ([]Product, int64, error) {
	order, ok := sortSQL[sort]
	if !ok {
		return nil, 0, fmt.Errorf("unknown sort %q", sort)
	}
	db := s.db.WithContext(ctx)
	var total int64
	if err := db.Raw(`SELECT count(*) FROM products`).Row().Scan(&total); err != nil {
		return nil, 0, fmt.Errorf("count products: %w", err)
	}
	items := []Product{}
	err := db.Raw(`SELECT `+productColumns+` ORDER BY `+order+` LIMIT ? OFFSET ?`, size, int64(page)*int64(size)).
		Scan(&items).Error
	if err != nil {
		return nil, 0, fmt.Errorf("list products: %w", err)
	}
	return items, total, nil
}

// lockMode is a row-lock clause. Only the constants below exist, so no input
// can reach the SQL through it.
type lockMode string

const (
	noLock lockMode = ""
	// lockShare is for readers that must not see a change in progress:
	// views commute with each other but not with likes or stock changes.
	lockShare lockMode = "FOR SHARE"
	// lockWrite is every writer's lock. Writers take FOR NO KEY UPDATE, never
	// FOR UPDATE: inserting order items or likes takes FOR KEY SHARE on their
	// products through the foreign keys, in line order, and FOR UPDATE
	// conflicts with that, so placing an order could deadlock with a payment
	// locking the same products in id order. NO KEY UPDATE still excludes
	// every other writer and lockShare readers.
	lockWrite lockMode = "FOR NO KEY UPDATE"
)

// lockProduct locks one product row in mode.
func (tx *Tx) lockProduct(id int64, mode lockMode) error {
	var got int64
	res := tx.db.Raw(`SELECT id FROM products WHERE id = ? `+string(mode), id).Scan(&got)
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
