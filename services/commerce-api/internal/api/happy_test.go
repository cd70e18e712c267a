package api_test

import (
	"bytes"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/loopers/commerce-pipeline/pkg/events"
	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/store/storetest"
)

func productEvent(typ string, product int64, payload string) storetest.Event {
	return storetest.Event{Type: typ, AggregateType: "Product", AggregateID: strconv.FormatInt(product, 10), Payload: payload}
}

func TestProductCreateAndView(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	created := decode[productBody](t, e.do(t, "POST", "/api/v1/products", "", `{"name":"Keyboard","price":45000,"stock":7}`), http.StatusCreated)
	want := productBody{ID: created.ID, Name: "Keyboard", Price: 45000, Stock: 7}
	if diff := cmp.Diff(want, created); diff != "" {
		t.Fatalf("created product (-want +got):\n%s", diff)
	}
	if got := e.db.Events(t, 0); len(got) != 0 {
		t.Fatalf("creating a product wrote outbox rows: %+v", got)
	}

	got := decode[productBody](t, e.do(t, "GET", fmt.Sprintf("/api/v1/products/%d", created.ID), "u1", ""), http.StatusOK)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("product without metrics (-want +got):\n%s", diff)
	}
	// The aggregates come from the tables product-consumers own.
	e.db.SetAggregates(t, fmt.Sprintf("product_id = %d", created.ID), "3", "4", "180000", "9")
	got = decode[productBody](t, e.do(t, "GET", fmt.Sprintf("/api/v1/products/%d", created.ID), "", ""), http.StatusOK)
	want.LikeCount, want.SalesCount, want.SalesAmount, want.ViewCount = 3, 4, 180000, 9
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("product with metrics (-want +got):\n%s", diff)
	}

	id := created.ID
	wantEvents := []storetest.Event{
		productEvent("loopers.product.viewed.v1", id, fmt.Sprintf(`{"productId":%d,"userId":"u1"}`, id)),
		productEvent("loopers.product.viewed.v1", id, fmt.Sprintf(`{"productId":%d,"userId":""}`, id)),
	}
	if diff := cmp.Diff(wantEvents, e.db.Events(t, 0)); diff != "" {
		t.Errorf("outbox (-want +got):\n%s", diff)
	}
}

func TestProductList(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.createProduct(t, "a", 100, 1)
	b := e.createProduct(t, "b", 200, 1)
	c := e.createProduct(t, "c", 300, 1)
	e.db.SetAggregates(t, fmt.Sprintf("product_id = %d", a), "5", "1", "100", "2")
	e.db.SetAggregates(t, fmt.Sprintf("product_id = %d", b), "1", "7", "1400", "3")

	ids := func(p pageBody) []int64 {
		var out []int64
		for _, it := range p.Items {
			out = append(out, it.ID)
		}
		return out
	}
	tests := []struct {
		name, query string
		ids         []int64
		page, size  int64
	}{
		{"default is latest", "", []int64{c, b, a}, 0, 20},
		{"latest", "?sort=latest", []int64{c, b, a}, 0, 20},
		{"likes", "?sort=likes_desc", []int64{a, b, c}, 0, 20},
		{"sales", "?sort=sales_desc", []int64{b, a, c}, 0, 20},
		{"views", "?sort=views_desc", []int64{b, a, c}, 0, 20},
		{"second page", "?sort=likes_desc&page=1&size=2", []int64{c}, 1, 2},
		{"past the end", "?page=5&size=2", nil, 5, 2},
		{"size capped at 100", "?size=500", []int64{c, b, a}, 0, 100},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := decode[pageBody](t, e.do(t, "GET", "/api/v1/products"+tc.query, "", ""), http.StatusOK)
			if diff := cmp.Diff(tc.ids, ids(p)); diff != "" {
				t.Errorf("ids (-want +got):\n%s", diff)
			}
			if p.Page != tc.page || p.Size != tc.size || p.Total != 3 {
				t.Errorf("page %d size %d total %d, want %d %d 3", p.Page, p.Size, p.Total, tc.page, tc.size)
			}
		})
	}
	first := decode[pageBody](t, e.do(t, "GET", "/api/v1/products?sort=likes_desc&size=1", "", ""), http.StatusOK)
	want := productBody{ID: a, Name: "a", Price: 100, Stock: 1, LikeCount: 5, SalesCount: 1, SalesAmount: 100, ViewCount: 2}
	if diff := cmp.Diff([]productBody{want}, first.Items); diff != "" {
		t.Errorf("listed aggregates (-want +got):\n%s", diff)
	}
	if got := e.db.Events(t, 0); len(got) != 0 {
		t.Errorf("listing wrote outbox rows: %+v", got)
	}
}

//nolint:paralleltest // the steps run in turn: each starts from the like the previous one left
func TestLikeAndUnlike(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.createProduct(t, "mug", 9000, 3)
	path := fmt.Sprintf("/api/v1/products/%d/likes", p)
	liked := fmt.Sprintf(`{"userId":"alice","productId":%d}`, p)
	steps := []struct {
		name, method string
		want         likeBody
		event        *storetest.Event
		likes        int64
	}{
		{"like", "POST", likeBody{p, true}, ptr(productEvent("loopers.like.created.v1", p, liked)), 1},
		{"like again", "POST", likeBody{p, true}, nil, 1},
		{"unlike", "DELETE", likeBody{p, false}, ptr(productEvent("loopers.like.canceled.v1", p, liked)), 0},
		{"unlike again", "DELETE", likeBody{p, false}, nil, 0},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			before := e.lastOutboxID(t)
			got := decode[likeBody](t, e.do(t, st.method, path, "alice", ""), http.StatusOK)
			if diff := cmp.Diff(st.want, got); diff != "" {
				t.Errorf("response (-want +got):\n%s", diff)
			}
			var want []storetest.Event
			if st.event != nil {
				want = append(want, *st.event)
			}
			if diff := cmp.Diff(want, e.db.Events(t, before)); diff != "" {
				t.Errorf("outbox (-want +got):\n%s", diff)
			}
			if n := e.db.Int(t, `SELECT count(*) FROM likes WHERE user_id = 'alice' AND product_id = $1`, p); n != st.likes {
				t.Errorf("likes rows %d, want %d", n, st.likes)
			}
		})
	}
}

func TestOrderAndPayment(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p1 := e.createProduct(t, "pen", 1500, 5)
	p2 := e.createProduct(t, "ink", 4000, 2)

	o := e.createOrder(t, "bob", [2]int64{p1, 3}, [2]int64{p2, 2})
	want := orderBody{ID: o.ID, UserID: "bob", Status: "PENDING", TotalAmount: 3*1500 + 2*4000,
		Items: []itemBody{{p1, 3, 1500}, {p2, 2, 4000}}}
	if diff := cmp.Diff(want, o); diff != "" {
		t.Fatalf("created order (-want +got):\n%s", diff)
	}
	if got := e.db.Events(t, 0); len(got) != 0 {
		t.Fatalf("placing an order wrote outbox rows: %+v", got)
	}
	orderPath := fmt.Sprintf("/api/v1/orders/%d", o.ID)
	if diff := cmp.Diff(want, decode[orderBody](t, e.do(t, "GET", orderPath, "bob", ""), http.StatusOK)); diff != "" {
		t.Errorf("fetched order (-want +got):\n%s", diff)
	}

	// The unit price was captured when the order was placed.
	e.db.Exec(t, `UPDATE products SET price = 99999`)
	pay := decode[paymentBody](t, e.do(t, "POST", orderPath+"/payments", "bob", ""), http.StatusOK)
	if pay.PaymentID <= 0 {
		t.Errorf("payment id %d", pay.PaymentID)
	}
	if diff := cmp.Diff(paymentBody{OrderID: o.ID, PaymentID: pay.PaymentID, Status: "PAID", Amount: want.TotalAmount}, pay); diff != "" {
		t.Errorf("payment (-want +got):\n%s", diff)
	}
	wantEvents := []storetest.Event{
		{Type: "loopers.order.paid.v1", AggregateType: "Order", AggregateID: strconv.FormatInt(o.ID, 10),
			Payload: fmt.Sprintf(`{"orderId":%d,"paymentId":%d,"amount":12500,"items":[{"productId":%d,"quantity":3,"unitPrice":1500},{"productId":%d,"quantity":2,"unitPrice":4000}]}`,
				o.ID, pay.PaymentID, p1, p2)},
		productEvent("loopers.stock.depleted.v1", p2, fmt.Sprintf(`{"productId":%d}`, p2)),
	}
	if diff := cmp.Diff(wantEvents, e.db.Events(t, 0)); diff != "" {
		t.Errorf("outbox (-want +got):\n%s", diff)
	}
	if s1, s2 := e.db.Int(t, `SELECT stock FROM products WHERE id = $1`, p1), e.db.Int(t, `SELECT stock FROM products WHERE id = $1`, p2); s1 != 2 || s2 != 0 {
		t.Errorf("stock %d, %d; want 2, 0", s1, s2)
	}
	want.Status = "PAID"
	if diff := cmp.Diff(want, decode[orderBody](t, e.do(t, "GET", orderPath, "bob", ""), http.StatusOK)); diff != "" {
		t.Errorf("paid order (-want +got):\n%s", diff)
	}

	before := e.db.Snapshot(t)
	again := e.do(t, "POST", orderPath+"/payments", "bob", "")
	if p := decode[problemBody](t, again, http.StatusConflict); !strings.Contains(p.Detail, "already PAID") {
		t.Errorf("second payment: %+v", p)
	}
	if diff := cmp.Diff(before, e.db.Snapshot(t)); diff != "" {
		t.Errorf("second payment changed the database (-before +after):\n%s", diff)
	}
}

func TestOps(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.createProduct(t, "x", 1, 1)
	for _, path := range []string{"/healthz", "/readyz", "/openapi.yaml", "/asyncapi.yaml"} {
		if r := e.do(t, "GET", path, "", ""); r.Status != http.StatusOK {
			t.Errorf("%s: %d %s", path, r.Status, r.Body)
		}
	}
	// Served beside the OpenAPI document: the one pkg/events' tests check.
	if r := e.do(t, "GET", "/asyncapi.yaml", "", ""); !bytes.Equal(r.Body, events.AsyncAPI()) || r.Header.Get("Content-Type") != "application/yaml" {
		t.Errorf("/asyncapi.yaml is not events.AsyncAPI() as application/yaml (Content-Type %q)", r.Header.Get("Content-Type"))
	}
	e.do(t, "GET", "/api/v1/products/424242", "", "")
	e.do(t, "GET", "/no/such/route", "", "")
	if r := e.do(t, "GET", "/metrics", "", ""); r.Status != http.StatusNotFound {
		t.Errorf("the public handler serves /metrics: %d", r.Status)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if r := e.adminGet(t, path); r.Status != http.StatusOK {
			t.Errorf("admin %s: %d %s", path, r.Status, r.Body)
		}
	}
	m := e.adminGet(t, "/metrics")
	for _, want := range []string{
		`http_requests_total{method="POST",route="/api/v1/products",status="201"} 1`,
		`http_requests_total{method="GET",route="/api/v1/products/{id}",status="404"} 1`,
		`http_requests_total{method="GET",route="unmatched",status="404"} 2`,
		`http_request_duration_seconds_count{method="POST",route="/api/v1/products",status="201"} 1`,
	} {
		if !strings.Contains(string(m.Body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func ptr[T any](v T) *T { return &v }
