package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/api"
)

// FuzzJSONBodies sends arbitrary bodies, user ids and query strings to the
// endpoints that decode them: never a 5xx, every error a problem that the
// OpenAPI document allows (checked by send), and no write unless the request
// succeeded.
func FuzzJSONBodies(f *testing.F) {
	e := newEnv(f)
	for _, seed := range []struct {
		endpoint uint8
		user     string
		body     string
	}{
		{0, "", `{"name":"a","price":1,"stock":1}`},
		{0, "", `{"name":"a\u0000","price":1e3,"stock":-0}`},
		{0, "", `{"name":"` + "\xff\xfe" + `","price":1,"stock":1,"x":{}}`},
		{1, "alice", `{"items":[{"productId":1,"quantity":1},{"productId":1,"quantity":1}]}`},
		{1, "al ice", `{"items":[{"productId":9223372036854775807,"quantity":10000}]}`},
		{1, "\xff", `{"items":null}`},
		{2, "", `page=+1&size=01&sort=likes_desc`},
		{2, "", `page=100&size=100&sort=views_desc`},
		{3, "u\tv", ``},
	} {
		f.Add(seed.endpoint, seed.user, seed.body)
	}
	f.Fuzz(func(t *testing.T, endpoint uint8, user, body string) {
		h := http.Header{"Content-Type": {"application/json"}}
		if user != "" {
			h[api.UserHeader] = []string{user}
		}
		method, path := "POST", "/api/v1/products"
		switch endpoint % 4 {
		case 1:
			path = "/api/v1/orders"
		case 2:
			method, path, body = "GET", "/api/v1/products?"+body, ""
		case 3:
			path = "/api/v1/products/1/likes"
		}
		if _, err := http.NewRequestWithContext(t.Context(), method, e.srv.URL+path, nil); err != nil || validHeader(user) != nil || !validTarget(path) {
			t.Skip("not a request an HTTP client can send")
		}
		before := e.db.Snapshot(t)
		r := e.send(t, method, path, h, body)
		if r.Status >= 500 {
			t.Fatalf("%s %s %q (user %q) → %d %s", method, path, body, user, r.Status, r.Body)
		}
		if r.Status >= 400 {
			if diff := cmp.Diff(before, e.db.Snapshot(t)); diff != "" {
				t.Errorf("a %d changed the database (-before +after):\n%s", r.Status, diff)
			}
		}
	})
}

// validHeader reports whether Go's client sends v as a header value.
func validHeader(v string) error {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return http.ErrNotSupported
		}
	}
	return nil
}

// validTarget reports whether path is a request target as RFC 3986 writes
// one (Go's server refuses others before any handler runs).
func validTarget(path string) bool {
	for i := 0; i < len(path); i++ {
		c := path[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"<>\^`+"`"+`{|}#`, c) >= 0 {
			return false
		}
	}
	return true
}
