package store

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/loopers/commerce-pipeline/pkg/events"
)

// Order statuses.
const (
	StatusPending = "PENDING"
	StatusPaid    = "PAID"
)

// Order is an order with its lines.
type Order struct {
	ID          int64
	UserID      string
	Status      string
	TotalAmount int64
	Items       []OrderItem `gorm:"-"`
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// OrderItem is one line of an order; UnitPrice is the product's price when
// the order was placed.
type OrderItem struct {
	ProductID int64
	Quantity  int64
	UnitPrice int64
}

// ItemRequest is one line of a new order.
type ItemRequest struct {
	ProductID int64
	Quantity  int64
}

// Payment is the result of paying an order.
type Payment struct {
	ID      int64
	OrderID int64
	Amount  int64
	// Products lists the products whose stock changed, for cache invalidation.
	Products []int64
}

// CreateOrder places a PENDING order for user, capturing each product's
// current price. items must name each product once and have positive
// quantities (the API validates that). Placing an order reserves no stock
// and emits no event; payment does both.
func (s *Store) CreateOrder(ctx context.Context, user string, items []ItemRequest) (Order, error) {
	o := Order{UserID: user, Status: StatusPending}
	err := s.InTx(ctx, func(tx *Tx) error {
		ids := make([]int64, len(items))
		for i, it := range items {
			ids[i] = it.ProductID
		}
		price, err := tx.productValues(priceColumn, ids, noLock)
		if err != nil {
			return err
		}
		var missing []string
		for _, it := range items {
			p, ok := price[it.ProductID]
			if !ok {
				missing = append(missing, fmt.Sprint(it.ProductID))
				continue
			}
			o.Items = append(o.Items, OrderItem{ProductID: it.ProductID, Quantity: it.Quantity, UnitPrice: p})
			o.TotalAmount += p * it.Quantity
		}
		if len(missing) > 0 {
			return fmt.Errorf("%w: product %s does not exist", ErrNotFound, strings.Join(missing, ", "))
		}
		err = tx.db.Raw(`INSERT INTO orders (user_id, status, total_amount) VALUES (?, ?, ?)
			RETURNING id, created_at, updated_at`, user, o.Status, o.TotalAmount).
			Row().Scan(&o.ID, &o.CreatedAt, &o.UpdatedAt)
		if err != nil {
			return err
		}
		rows := make([]map[string]any, len(o.Items))
		for i, it := range o.Items {
			rows[i] = map[string]any{"order_id": o.ID, "product_id": it.ProductID, "quantity": it.Quantity, "unit_price": it.UnitPrice}
		}
		return tx.db.Table("order_items").Create(rows).Error
	})
	if err != nil {
		return Order{}, err
	}
	return o, nil
}

// GetOrder returns user's order id. Another user's order is not found.
func (s *Store) GetOrder(ctx context.Context, user string, id int64) (Order, error) {
	var o Order
	err := s.InTx(ctx, func(tx *Tx) error {
		var err error
		o, err = tx.order(user, id, noLock)
		return err
	})
	return o, err
}

// order loads user's order id with its items, locking the order row in mode.
func (tx *Tx) order(user string, id int64, mode lockMode) (Order, error) {
	var o Order
	res := tx.db.Raw(`SELECT id, user_id, status, total_amount, created_at, updated_at
		FROM orders WHERE id = ? AND user_id = ? `+string(mode), id, user).Scan(&o)
	if res.Error != nil {
		return Order{}, fmt.Errorf("order %d: %w", id, res.Error)
	}
	if res.RowsAffected == 0 {
		return Order{}, fmt.Errorf("%w: order %d does not exist or belongs to another user", ErrNotFound, id)
	}
	err := tx.db.Raw(`SELECT product_id, quantity, unit_price FROM order_items WHERE order_id = ? ORDER BY id`, id).
		Scan(&o.Items).Error
	if err != nil {
		return Order{}, fmt.Errorf("order %d items: %w", id, err)
	}
	return o, nil
}

// PayOrder pays user's PENDING order: it takes the stock of every item (all
// or nothing; ErrInsufficientStock when any item lacks stock), marks the
// order PAID, and emits OrderPaidV1 and a StockDepletedV1 per product whose
// stock reached zero. Paying an order twice is ErrConflict.
func (s *Store) PayOrder(ctx context.Context, user string, id int64) (Payment, error) {
	var pay Payment
	err := s.InTx(ctx, func(tx *Tx) error {
		o, err := tx.order(user, id, lockWrite)
		if err != nil {
			return err
		}
		if o.Status != StatusPending {
			return fmt.Errorf("%w: order %d is already %s", ErrConflict, id, o.Status)
		}
		items := slices.Clone(o.Items)
		slices.SortFunc(items, func(a, b OrderItem) int { return cmp.Compare(a.ProductID, b.ProductID) })
		pay.Products = make([]int64, len(items))
		for i, it := range items {
			pay.Products[i] = it.ProductID
		}
		left, err := tx.productValues(stockColumn, pay.Products, lockWrite)
		if err != nil {
			return err
		}
		var short []string
		for _, it := range items {
			if left[it.ProductID] < it.Quantity {
				short = append(short, fmt.Sprintf("product %d has %d, the order needs %d", it.ProductID, left[it.ProductID], it.Quantity))
			}
		}
		if len(short) > 0 {
			return fmt.Errorf("%w for order %d: %s", ErrInsufficientStock, id, strings.Join(short, "; "))
		}
		var depleted []int64
		for _, it := range items {
			if err := tx.db.Exec(`UPDATE products SET stock = stock - ?, updated_at = now() WHERE id = ?`,
				it.Quantity, it.ProductID).Error; err != nil {
				return err
			}
			if left[it.ProductID] == it.Quantity {
				depleted = append(depleted, it.ProductID)
			}
		}
		if err := tx.db.Exec(`UPDATE orders SET status = ?, updated_at = now() WHERE id = ?`, StatusPaid, id).Error; err != nil {
			return err
		}
		pay.OrderID, pay.Amount = id, o.TotalAmount
		if err := tx.db.Raw(`INSERT INTO payments (order_id, amount) VALUES (?, ?) RETURNING id`, id, o.TotalAmount).
			Row().Scan(&pay.ID); err != nil {
			return err
		}
		paid := events.OrderPaidV1{OrderID: id, PaymentID: pay.ID, Amount: o.TotalAmount}
		for _, it := range o.Items {
			paid.Items = append(paid.Items, events.OrderItem{ProductID: it.ProductID, Quantity: it.Quantity, UnitPrice: it.UnitPrice})
		}
		if err := tx.AppendEvent(paid); err != nil {
			return err
		}
		for _, p := range depleted {
			if err := tx.AppendEvent(events.StockDepletedV1{ProductID: p}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return Payment{}, err
	}
	return pay, nil
}

// productColumn is an integer column of products that productValues reads.
type productColumn string

const (
	priceColumn productColumn = "price"
	stockColumn productColumn = "stock"
)

// productValues returns one integer column of the given products by id,
// locking their rows in mode through productsQuery.
func (tx *Tx) productValues(column productColumn, ids []int64, mode lockMode) (map[int64]int64, error) {
	var rows []struct{ ID, Value int64 }
	err := tx.db.Raw(productsQuery(column, mode), ids).Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("read products' %s: %w", column, err)
	}
	out := make(map[int64]int64, len(rows))
	for _, r := range rows {
		out[r.ID] = r.Value
	}
	return out, nil
}

// productsQuery reads id and column of the products in its one parameter,
// and is the only statement that locks several products at once. It enforces
// the lock-ordering rule: several product rows are locked in ascending id
// order, always after the order row (PayOrder), so two transactions sharing
// products cannot wait on each other.
func productsQuery(column productColumn, mode lockMode) string {
	q := `SELECT id, ` + string(column) + ` AS value FROM products WHERE id IN ? ORDER BY id`
	if mode != noLock {
		q += " " + string(mode)
	}
	return q
}
