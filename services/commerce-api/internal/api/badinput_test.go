package api_test

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestBadInput sends invalid requests and checks each gets its 4xx problem
// and leaves every table, the outbox included, exactly as it was.
//
//nolint:paralleltest // the cases share one database, and each compares it before and after its request
func TestBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.createProduct(t, "lamp", 30000, 1)
	o := e.createOrder(t, "alice", [2]int64{p, 1})
	big := e.createOrder(t, "alice", [2]int64{p, 2}) // more than the stock
	e.do(t, "POST", fmt.Sprintf("/api/v1/products/%d/likes", p), "alice", "")
	orderPath := fmt.Sprintf("/api/v1/orders/%d", o.ID)
	likes := fmt.Sprintf("/api/v1/products/%d/likes", p)
	huge := `{"name":"` + strings.Repeat("x", 1<<20) + `","price":1,"stock":1}`
	hugeOrder := `{"items":[` + strings.Repeat(`{"productId":1,"quantity":1},`, 40000) + `{"productId":1,"quantity":1}]}`

	tests := []struct {
		name, method, path, user, body string
		status                         int
		pointers                       []string // the field problems listed, in order
		detail                         string   // a part of the detail
	}{
		{"malformed JSON", "POST", "/api/v1/products", "", `{"name":`, 400, nil, "not valid JSON"},
		{"trailing garbage", "POST", "/api/v1/products", "", `{"name":"a","price":1,"stock":1} x`, 400, nil, "not valid JSON"},
		{"empty body", "POST", "/api/v1/products", "", ``, 400, nil, "not valid JSON"},
		{"not an object", "POST", "/api/v1/products", "", `[1,2]`, 400, []string{"/"}, "invalid field"},
		{"unknown fields", "POST", "/api/v1/products", "", `{"name":"a","price":1,"stock":1,"color":"red","size":2}`, 400, []string{"/color", "/size"}, "2 invalid fields"},
		{"wrong types, all reported", "POST", "/api/v1/products", "", `{"name":5,"price":"x","stock":1.5}`, 400, []string{"/name", "/price", "/stock"}, "3 invalid fields"},
		{"missing and null fields", "POST", "/api/v1/products", "", `{"price":null}`, 400, []string{"/name", "/price", "/stock"}, ""},
		{"negative price and stock", "POST", "/api/v1/products", "", `{"name":"a","price":-1,"stock":-5}`, 400, []string{"/price", "/stock"}, ""},
		{"blank name", "POST", "/api/v1/products", "", `{"name":"  ","price":1,"stock":1}`, 400, []string{"/name"}, ""},
		{"oversized product body", "POST", "/api/v1/products", "", huge, 413, nil, "1048576 bytes"},
		{"oversized order body", "POST", "/api/v1/orders", "alice", hugeOrder, 413, nil, "1048576 bytes"},
		{"zero and negative quantity", "POST", "/api/v1/orders", "alice",
			fmt.Sprintf(`{"items":[{"productId":%d,"quantity":0},{"productId":%d,"quantity":-3}]}`, p, p), 400,
			[]string{"/items/0/quantity", "/items/1/quantity"}, ""},
		{"bad items, every problem", "POST", "/api/v1/orders", "alice",
			`{"items":[{"productId":"1","quantity":1,"note":1},7,{}],"coupon":"x"}`, 400,
			[]string{"/items/0/productId", "/items/0/note", "/items/1", "/items/2/productId", "/items/2/quantity", "/coupon"}, ""},
		{"empty items", "POST", "/api/v1/orders", "alice", `{"items":[]}`, 400, []string{"/items"}, ""},
		{"no items", "POST", "/api/v1/orders", "alice", `{}`, 400, []string{"/items"}, ""},
		{"missing product", "POST", "/api/v1/orders", "alice",
			fmt.Sprintf(`{"items":[{"productId":%d,"quantity":1},{"productId":987654,"quantity":1}]}`, p), 404, nil, "product 987654 does not exist"},
		{"order without user", "POST", "/api/v1/orders", "", fmt.Sprintf(`{"items":[{"productId":%d,"quantity":1}]}`, p), 401, nil, "X-User-ID"},
		{"like without user", "POST", likes, "", "", 401, nil, "X-User-ID"},
		{"unlike without user", "DELETE", likes, "", "", 401, nil, "X-User-ID"},
		{"like missing product", "POST", "/api/v1/products/987654/likes", "alice", "", 404, nil, "product 987654 does not exist"},
		{"view missing product", "GET", "/api/v1/products/987654", "", "", 404, nil, "product 987654 does not exist"},
		{"non-numeric id", "GET", "/api/v1/products/abc", "", "", 400, []string{"id"}, ""},
		{"bad list parameters", "GET", "/api/v1/products?sort=price&page=-1&size=0", "", "", 400, []string{"sort", "page", "size"}, ""},
		{"another user's order", "GET", orderPath, "mallory", "", 404, nil, "does not exist or belongs to another user"},
		{"order without user", "GET", orderPath, "", "", 401, nil, "X-User-ID"},
		{"pay another user's order", "POST", orderPath + "/payments", "mallory", "", 404, nil, "belongs to another user"},
		{"pay without user", "POST", orderPath + "/payments", "", "", 401, nil, "X-User-ID"},
		{"pay missing order", "POST", "/api/v1/orders/987654/payments", "alice", "", 404, nil, "order 987654"},
		{"pay beyond stock", "POST", fmt.Sprintf("/api/v1/orders/%d/payments", big.ID), "alice", "", 409, nil, fmt.Sprintf("product %d has 1, the order needs 2", p)},
		{"unknown route", "GET", "/api/v1/nothing", "", "", 404, nil, "no route"},
		{"method not allowed", "PUT", "/api/v1/products", "", "", 405, nil, "PUT"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e.checkProblem(t, hostileCase{tc.name, tc.method, tc.path, jsonHeaders(tc.method, tc.user, tc.body),
				tc.body, tc.status, tc.pointers, tc.detail})
		})
	}
}

// TestMethodNotAllowed: a method a path does not have is a 405 problem
// whose Allow header lists the methods it has (RFC 9110 §15.5.6), on the
// API's routes, the page and the probes alike.
func TestMethodNotAllowed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tests := []struct{ method, path, allow string }{
		{"PUT", "/api/v1/products", "GET, POST"},
		{"TRACE", "/api/v1/products/1", "GET"},
		{"PATCH", "/api/v1/products/1/likes", "POST, DELETE"},
		{"GET", "/api/v1/orders", "POST"},
		{"DELETE", "/api/v1/orders/1/payments", "POST"},
		{"POST", "/api/v1/stream", "GET"},
		{"POST", "/api/v1/config", "GET"},
		{"DELETE", "/", "GET"},
		{"POST", "/openapi.yaml", "GET"},
		{"POST", "/healthz", "GET, HEAD"},
		{"PUT", "/readyz", "GET, HEAD"},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			t.Parallel()
			r := e.send(t, tc.method, tc.path, http.Header{}, "")
			if diff := cmp.Diff([]string{"405", tc.allow}, []string{strconv.Itoa(r.Status), r.Header.Get("Allow")}); diff != "" {
				t.Errorf("%s %s: status and Allow (-want +got):\n%s", tc.method, tc.path, diff)
			}
		})
	}
}
