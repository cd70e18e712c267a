package api

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/loopers/commerce-pipeline/pkg/events"
	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/store"
)

// An order's bounds are the ones the consumers check OrderPaid events
// against.
const (
	maxOrderItems = events.MaxOrderItems
	maxQuantity   = events.MaxQuantity
)

type orderItemJSON struct {
	ProductID int64 `json:"productId"`
	Quantity  int64 `json:"quantity"`
	UnitPrice int64 `json:"unitPrice"`
}

type orderJSON struct {
	ID          int64           `json:"id"`
	UserID      string          `json:"userId"`
	Status      string          `json:"status"`
	TotalAmount int64           `json:"totalAmount"`
	Items       []orderItemJSON `json:"items"`
	CreatedAt   time.Time       `json:"createdAt"`
}

type paymentJSON struct {
	OrderID   int64  `json:"orderId"`
	PaymentID int64  `json:"paymentId"`
	Status    string `json:"status"`
	Amount    int64  `json:"amount"`
}

func toOrderJSON(o store.Order) orderJSON {
	out := orderJSON{ID: o.ID, UserID: o.UserID, Status: o.Status, TotalAmount: o.TotalAmount,
		Items: make([]orderItemJSON, len(o.Items)), CreatedAt: o.CreatedAt}
	for i, it := range o.Items {
		out.Items[i] = orderItemJSON(it)
	}
	return out
}

func (s *server) createOrder(w http.ResponseWriter, r *http.Request) error {
	u, err := s.actor(r, true)
	if err != nil {
		return err
	}
	var errs ValidationError
	o, err := readObject(w, r, &errs)
	if err != nil {
		return err
	}
	var items []store.ItemRequest
	if o != nil {
		items = orderItems(o)
		o.finish()
	}
	if err := errs.check(); err != nil {
		return err
	}
	order, err := s.st.CreateOrder(r.Context(), u, items)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, toOrderJSON(order))
}

// orderItems decodes the items of a new order. An order has one line per
// product: a product named on two lines is a 400, not merged, so that the
// quantity bound of a line is the bound per product and cannot be passed by
// repeating the line.
func orderItems(o *object) []store.ItemRequest {
	raw, ok := field[[]json.RawMessage](o, "items", "an array")
	if !ok {
		return nil
	}
	if len(raw) == 0 || len(raw) > maxOrderItems {
		o.errs.add(o.at("items"), "must hold 1 to "+itoa(maxOrderItems)+" items")
		return nil
	}
	var items []store.ItemRequest
	first := map[int64]int{} // product → the line that named it first
	for i, r := range raw {
		it := asObject(r, o.at("items")+"/"+itoa(int64(i)), o.errs)
		if it == nil {
			continue
		}
		product, okP := intField(it, "productId", 1, 1<<63-1)
		qty, okQ := intField(it, "quantity", 1, maxQuantity)
		it.finish()
		if !okP || !okQ {
			continue
		}
		if j, dup := first[product]; dup {
			o.errs.add(it.at("productId"), "repeats the product of /items/"+itoa(int64(j))+"; name each product once with its total quantity")
			continue
		}
		first[product] = i
		items = append(items, store.ItemRequest{ProductID: product, Quantity: qty})
	}
	return items
}

func (s *server) getOrder(w http.ResponseWriter, r *http.Request) error {
	id, u, err := s.orderRequest(r)
	if err != nil {
		return err
	}
	o, err := s.st.GetOrder(r.Context(), u, id)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, toOrderJSON(o))
}

func (s *server) pay(w http.ResponseWriter, r *http.Request) error {
	id, u, err := s.orderRequest(r)
	if err != nil {
		return err
	}
	p, err := s.st.PayOrder(r.Context(), u, id)
	if err != nil {
		return err
	}
	s.invalidate(r.Context(), p.Products...)
	return writeJSON(w, http.StatusOK, paymentJSON{OrderID: p.OrderID, PaymentID: p.ID, Status: store.StatusPaid, Amount: p.Amount})
}

func (s *server) orderRequest(r *http.Request) (int64, string, error) {
	id, err := pathID(r)
	if err != nil {
		return 0, "", err
	}
	u, err := s.actor(r, true)
	return id, u, err
}
