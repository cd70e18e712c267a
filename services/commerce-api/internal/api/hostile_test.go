package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/api"
)

// hostileCase is one request an attacker or a careless client sends, with
// the problem it must get. Every case is checked to leave every table as it
// was.
type hostileCase struct {
	name, method, path string
	header             http.Header // sent as is: add Content-Type when the case needs one
	body               string
	status             int
	pointers           []string // the field problems listed, in order
	detail             string   // a part of the detail
}

func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h[kv[i]] = append(h[kv[i]], kv[i+1])
	}
	return h
}

// checkProblem asserts the status, the problem body and that no row of any
// table changed.
func (e *env) checkProblem(t *testing.T, tc hostileCase) problemBody {
	t.Helper()
	before := e.db.Snapshot(t)
	r := e.send(t, tc.method, tc.path, tc.header, tc.body)
	if ct := r.Header.Get("Content-Type"); ct != api.ProblemContentType {
		t.Errorf("content type %q", ct)
	}
	pb := decode[problemBody](t, r, tc.status)
	if pb.Status != tc.status || pb.Title != http.StatusText(tc.status) || !strings.HasPrefix(pb.Type, api.ProblemTypeBase) {
		t.Errorf("problem %+v", pb)
	}
	if !strings.Contains(pb.Detail, tc.detail) {
		t.Errorf("detail %q lacks %q", pb.Detail, tc.detail)
	}
	var pointers []string
	for _, fe := range pb.Errors {
		pointers = append(pointers, fe.Pointer)
		if fe.Detail == "" {
			t.Errorf("field %s has no detail", fe.Pointer)
		}
	}
	if diff := cmp.Diff(tc.pointers, pointers); diff != "" {
		t.Errorf("field problems (-want +got):\n%s\nbody: %s", diff, r.Body)
	}
	if tc.status == http.StatusServiceUnavailable && r.Header.Get("Retry-After") == "" {
		t.Errorf("a 503 without Retry-After")
	}
	if diff := cmp.Diff(before, e.db.Snapshot(t)); diff != "" {
		t.Errorf("the request changed the database (-before +after):\n%s", diff)
	}
	return pb
}

// TestHostileInput sends what was seen to reach a 500, or to succeed when
// it must not: bad user ids, control characters, non-JSON bodies, lines
// repeated to pass the quantity bound, loosely written numbers and deep
// pages. Each is a 4xx problem that writes nothing.
//
//nolint:paralleltest // the cases share one database, and each compares it before and after its request
func TestHostileInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.createProduct(t, "lamp", 30000, 100)
	o := e.createOrder(t, "alice", [2]int64{p, 1})
	likes := fmt.Sprintf("/api/v1/products/%d/likes", p)
	json := "application/json"
	one := fmt.Sprintf(`{"productId":%d,"quantity":1}`, p)

	var cases []hostileCase
	// X-User-ID on every endpoint that reads it.
	for _, bad := range []struct{ name, id string }{
		{"invalid UTF-8", "\xff"},
		{"65 bytes", strings.Repeat("u", 65)},
		{"a space", "a b"},
		{"non-ASCII", "사용자"},
		{"a slash", "a/b"},
	} {
		for _, ep := range []struct{ method, path, body string }{
			{"POST", likes, ""},
			{"DELETE", likes, ""},
			{"GET", fmt.Sprintf("/api/v1/products/%d", p), ""},
			{"POST", "/api/v1/orders", `{"items":[` + one + `]}`},
			{"GET", fmt.Sprintf("/api/v1/orders/%d", o.ID), ""},
			{"POST", fmt.Sprintf("/api/v1/orders/%d/payments", o.ID), ""},
		} {
			cases = append(cases, hostileCase{
				name: "user id with " + bad.name + ", " + ep.method + " " + ep.path, method: ep.method, path: ep.path,
				header: hdr("Content-Type", json, api.UserHeader, bad.id), body: ep.body,
				status: 400, pointers: []string{api.UserHeader}, detail: "invalid field",
			})
		}
	}
	cases = append(cases,
		hostileCase{"name with NUL", "POST", "/api/v1/products", hdr("Content-Type", json),
			`{"name":"a\u0000b","price":1,"stock":1}`, 400, []string{"/name"}, ""},
		hostileCase{"name with a line break", "POST", "/api/v1/products", hdr("Content-Type", json),
			`{"name":"a\nb","price":1,"stock":1}`, 400, []string{"/name"}, ""},
		hostileCase{"name with a C1 control", "POST", "/api/v1/products", hdr("Content-Type", json),
			`{"name":"a\u0085b","price":1,"stock":1}`, 400, []string{"/name"}, ""},
		hostileCase{"product as text/plain", "POST", "/api/v1/products", hdr("Content-Type", "text/plain"),
			`{"name":"a","price":1,"stock":1}`, 415, nil, "application/json"},
		hostileCase{"product as a form", "POST", "/api/v1/products", hdr("Content-Type", "application/x-www-form-urlencoded"),
			`{"name":"a","price":1,"stock":1}`, 415, nil, "application/json"},
		hostileCase{"product without Content-Type", "POST", "/api/v1/products", nil,
			`{"name":"a","price":1,"stock":1}`, 415, nil, "application/json"},
		hostileCase{"product as JSON in Latin-1", "POST", "/api/v1/products", hdr("Content-Type", "application/json; charset=iso-8859-1"),
			`{"name":"a","price":1,"stock":1}`, 415, nil, "application/json"},
		hostileCase{"order as text/plain", "POST", "/api/v1/orders", hdr("Content-Type", "text/plain", api.UserHeader, "alice"),
			`{"items":[` + one + `]}`, 415, nil, "application/json"},
		hostileCase{"one product on 100 lines", "POST", "/api/v1/orders", hdr("Content-Type", json, api.UserHeader, "alice"),
			`{"items":[` + strings.TrimSuffix(strings.Repeat(fmt.Sprintf(`{"productId":%d,"quantity":10000},`, p), 100), ",") + `]}`,
			400, dupPointers(99), "99 invalid fields"},
		hostileCase{"one product on 2 lines", "POST", "/api/v1/orders", hdr("Content-Type", json, api.UserHeader, "alice"),
			`{"items":[` + one + `,` + one + `]}`, 400, []string{"/items/1/productId"}, "1 invalid field"},
		hostileCase{"id with a plus sign", "GET", "/api/v1/products/+1", nil, "", 400, []string{"id"}, ""},
		hostileCase{"id with a leading zero", "POST", "/api/v1/products/01/likes", hdr(api.UserHeader, "alice"), "", 400, []string{"id"}, ""},
		hostileCase{"order id with a leading zero", "GET", fmt.Sprintf("/api/v1/orders/0%d", o.ID), hdr(api.UserHeader, "alice"), "", 400, []string{"id"}, ""},
		hostileCase{"page with a plus sign", "GET", "/api/v1/products?page=+1", nil, "", 400, []string{"page"}, ""},
		hostileCase{"size with a leading zero", "GET", "/api/v1/products?size=020", nil, "", 400, []string{"size"}, ""},
		hostileCase{"page repeated", "GET", "/api/v1/products?page=1&page=2", nil, "", 400, []string{"page"}, ""},
		hostileCase{"page beyond the window", "GET", "/api/v1/products?sort=likes_desc&page=1000000&size=100", nil, "", 400, []string{"page"}, ""},
		hostileCase{"page × size beyond the window", "GET", "/api/v1/products?page=101&size=100", nil, "", 400, []string{"page"}, "invalid field"},
		hostileCase{"sort given empty", "GET", "/api/v1/products?sort=", nil, "", 400, []string{"sort"}, ""},
		hostileCase{"sort repeated", "GET", "/api/v1/products?sort=latest&sort=latest", nil, "", 400, []string{"sort"}, ""},
		hostileCase{"size past the document's maximum", "GET", "/api/v1/products?size=2147483648", nil, "", 400, []string{"size"}, ""},
	)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { e.checkProblem(t, tc) })
	}

	// The last page inside the window is served.
	if r := e.do(t, "GET", "/api/v1/products?sort=likes_desc&page=100&size=100", "", ""); r.Status != http.StatusOK {
		t.Errorf("page 100 of 100: %d %s", r.Status, r.Body)
	}
}

func dupPointers(n int) []string {
	var out []string
	for i := 1; i <= min(n, api.MaxFieldErrors); i++ {
		out = append(out, fmt.Sprintf("/items/%d/productId", i))
	}
	return out
}

// TestErrorListIsCapped sends a body of many unknown fields, one with a
// huge name: the problem lists MaxFieldErrors of them, counts the rest, and
// stays small.
func TestErrorListIsCapped(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var b strings.Builder
	b.WriteString(`{"name":"a","price":1,"stock":1,"` + strings.Repeat("k", 100_000) + `":1`)
	for i := range 50_000 {
		fmt.Fprintf(&b, `,"f%06d":1`, i)
	}
	b.WriteString("}")
	var want []string
	want = append(want, "/f000000")
	for i := 1; i < api.MaxFieldErrors; i++ {
		want = append(want, fmt.Sprintf("/f%06d", i))
	}
	pb := e.checkProblem(t, hostileCase{"many unknown fields", "POST", "/api/v1/products", hdr("Content-Type", "application/json"),
		b.String(), 400, want, "50001 invalid fields"})
	if pb.ErrorsOmitted != 50_001-api.MaxFieldErrors {
		t.Errorf("errorsOmitted %d, want %d", pb.ErrorsOmitted, 50_001-api.MaxFieldErrors)
	}
	r := e.send(t, "POST", "/api/v1/products", hdr("Content-Type", "application/json"), `{"`+strings.Repeat("k", 100_000)+`":1}`)
	if len(r.Body) > 4096 {
		t.Errorf("a problem of %d bytes for one long field name", len(r.Body))
	}
}
