package events

// OrderPaidV1 records that an order was paid. Items carry the per-product
// quantities and unit prices so that sales can be aggregated per product.
type OrderPaidV1 struct {
	OrderID   int64
	PaymentID int64
	Amount    int64
	Items     []OrderItem
}

// OrderItem is one line of a paid order.
type OrderItem struct {
	ProductID int64
	Quantity  int64
	UnitPrice int64
}

// LikeCreatedV1 records that a user started liking a product.
type LikeCreatedV1 struct {
	UserID    string
	ProductID int64
}

// LikeCanceledV1 records that a user stopped liking a product.
type LikeCanceledV1 struct {
	UserID    string
	ProductID int64
}

// ProductViewedV1 records that a product's detail was viewed. UserID is empty
// for anonymous views.
type ProductViewedV1 struct {
	ProductID int64
	UserID    string
}

// StockDepletedV1 records that a product's stock reached zero.
type StockDepletedV1 struct {
	ProductID int64
}
