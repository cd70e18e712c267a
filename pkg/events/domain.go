package events

// The json tags are the wire contract (asyncapi.yaml): camelCase, like the
// REST API. Records written before the tags existed carry Go's field names
// (UserID, ProductID, ...); they still decode because encoding/json matches
// member names to tags case-insensitively, and each pair below differs in
// case only. Renaming a tag to anything else would drop those records'
// values: TestLegacyPayloads fails if that happens.

// OrderPaidV1 records that an order was paid. Items carry the per-product
// quantities and unit prices so that sales can be aggregated per product.
type OrderPaidV1 struct {
	OrderID   int64       `json:"orderId"`
	PaymentID int64       `json:"paymentId"`
	Amount    int64       `json:"amount"`
	Items     []OrderItem `json:"items"`
}

// OrderItem is one line of a paid order.
type OrderItem struct {
	ProductID int64 `json:"productId"`
	Quantity  int64 `json:"quantity"`
	UnitPrice int64 `json:"unitPrice"`
}

// LikeCreatedV1 records that a user started liking a product.
type LikeCreatedV1 struct {
	UserID    string `json:"userId"`
	ProductID int64  `json:"productId"`
}

// LikeCanceledV1 records that a user stopped liking a product.
type LikeCanceledV1 struct {
	UserID    string `json:"userId"`
	ProductID int64  `json:"productId"`
}

// ProductViewedV1 records that a product's detail was viewed. UserID is empty
// for anonymous views.
type ProductViewedV1 struct {
	ProductID int64  `json:"productId"`
	UserID    string `json:"userId"`
}

// StockDepletedV1 records that a product's stock reached zero.
type StockDepletedV1 struct {
	ProductID int64 `json:"productId"`
}
