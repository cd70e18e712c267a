package api_test

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/go-cmp/cmp"

	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/api"
	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/api/auth"
	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/api/auth/authtest"
	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/store/storetest"
)

// newJWTEnv is newEnv in jwt mode, trusting cfg's provider.
func newJWTEnv(t testing.TB, cfg auth.Config) *env {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	v, err := auth.New(ctx, cfg, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return newEnv(t, func(d *api.Deps) {
		d.Auth = v
		d.Checks["jwks"] = v.Ready
	})
}

// bearer returns headers carrying token, plus kv pairs.
func bearer(token string, kv ...string) http.Header {
	h := hdr(kv...)
	h.Set("Authorization", "Bearer "+token)
	return h
}

// jsonBody adds the JSON content type to h.
func jsonBody(h http.Header) http.Header {
	h.Set("Content-Type", "application/json")
	return h
}

// authCase is a request jwt mode must refuse, and how.
type authCase struct {
	name      string
	header    http.Header
	status    int
	code      string // the RFC 6750 error code of the challenge; "" for none
	detail    string // a part of the problem's detail
	challenge bool   // a WWW-Authenticate challenge is due (401, 403)
}

// checkRefused sends tc and asserts the problem, its challenge, and that no
// table changed.
func (e *env) checkRefused(t *testing.T, method, path, body string, tc authCase) {
	t.Helper()
	before := e.db.Snapshot(t)
	r := e.send(t, method, path, tc.header, body)
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
	c := r.Header.Get("WWW-Authenticate")
	switch {
	case !tc.challenge && c != "":
		t.Errorf("WWW-Authenticate %q on a %d", c, tc.status)
	case tc.challenge && tc.code == "" && c != `Bearer realm="commerce-api"`:
		t.Errorf("WWW-Authenticate %q, want a bare Bearer challenge (no credentials were sent)", c)
	case tc.challenge && tc.code != "":
		want := `Bearer realm="commerce-api", error="` + tc.code + `", error_description="`
		if !strings.HasPrefix(c, want) {
			t.Errorf("WWW-Authenticate %q, want %s...", c, want)
		}
	}
	if tc.status == http.StatusServiceUnavailable && r.Header.Get("Retry-After") == "" {
		t.Error("a 503 without Retry-After")
	}
	if diff := cmp.Diff(before, e.db.Snapshot(t)); diff != "" {
		t.Errorf("the refused request changed the database (-before +after):\n%s", diff)
	}
}

// TestJWTTokens sends a like with every kind of token a client, a careless
// provider or an attacker may send. A valid token acts as its sub; every
// other is a 401 problem with an RFC 6750 challenge that writes nothing.
//
//nolint:paralleltest // the cases share one database, and each compares it before and after its request
func TestJWTTokens(t *testing.T) {
	t.Parallel()
	rsaKey, ecKey := authtest.RSAKey(t, "rsa-1"), authtest.ECKey(t, "ec-1")
	p := authtest.NewProvider(t, rsaKey, ecKey)
	e := newJWTEnv(t, p.Config(time.Hour))
	product := e.createProductAs(t, authtest.Token(t, rsaKey, adminClaims("admin")), "lamp", 1000, 10)
	likes := fmt.Sprintf("/api/v1/products/%d/likes", product)

	claims := func(sub string, edit func(jwt.MapClaims)) jwt.MapClaims {
		c := authtest.Claims(sub)
		if edit != nil {
			edit(c)
		}
		return c
	}
	now := time.Now()
	t.Run("valid tokens act as their sub", func(t *testing.T) {
		for _, tc := range []struct {
			name, sub string
			token     string
		}{
			{"RS256", "alice", authtest.Token(t, rsaKey, claims("alice", nil))},
			{"ES256", "bob@example.com", authtest.Token(t, ecKey, claims("bob@example.com", nil))},
			{"expired within the leeway", "carol", authtest.Token(t, rsaKey, claims("carol", func(c jwt.MapClaims) { c["exp"] = now.Add(-10 * time.Second).Unix() }))},
			{"audience in an array", "dave", authtest.Token(t, ecKey, claims("dave", func(c jwt.MapClaims) { c["aud"] = []string{"other", authtest.Audience} }))},
			{"X-User-ID is ignored", "erin", authtest.Token(t, ecKey, claims("erin", nil))},
		} {
			h := bearer(tc.token, api.UserHeader, "mallory")
			got := decode[likeBody](t, e.send(t, "POST", likes, h, ""), http.StatusOK)
			if !got.Liked {
				t.Errorf("%s: %+v", tc.name, got)
			}
			if n := e.db.Int(t, `SELECT count(*) FROM likes WHERE user_id = $1 AND product_id = $2`, tc.sub, product); n != 1 {
				t.Errorf("%s: %d likes by %s, want 1", tc.name, n, tc.sub)
			}
		}
		if n := e.db.Int(t, `SELECT count(*) FROM likes WHERE user_id = 'mallory'`); n != 0 {
			t.Errorf("X-User-ID acted: %d likes by mallory", n)
		}
	})

	otherRSA := authtest.RSAKey(t, "rsa-1") // same kid, another key
	pubDER, err := x509.MarshalPKIXPublicKey(rsaKey.Private.Public())
	if err != nil {
		t.Fatal(err)
	}
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})
	for _, tc := range []authCase{
		{name: "no token", header: hdr(), status: 401, challenge: true, detail: "needs a bearer token"},
		{name: "X-User-ID instead of a token", header: hdr(api.UserHeader, "alice"), status: 401, challenge: true, detail: "X-User-ID is not accepted"},
		{name: "Bearer without token", header: hdr("Authorization", "Bearer"), status: 401, challenge: true, code: "invalid_request", detail: "no token"},
		{name: "Basic credentials", header: hdr("Authorization", "Basic YWxpY2U6c2VjcmV0"), status: 401, challenge: true, code: "invalid_request", detail: "Basic scheme"},
		{name: "not a JWT", header: bearer("abc.def"), status: 401, challenge: true, code: "invalid_token", detail: "not a well-formed JWT"},
		{name: "expired", header: bearer(authtest.Token(t, rsaKey, claims("alice", func(c jwt.MapClaims) {
			c["iat"], c["nbf"], c["exp"] = now.Add(-time.Hour).Unix(), now.Add(-time.Hour).Unix(), now.Add(-2*time.Minute).Unix()
		}))), status: 401, challenge: true, code: "invalid_token", detail: "the token expired at"},
		{name: "not yet valid", header: bearer(authtest.Token(t, rsaKey, claims("alice", func(c jwt.MapClaims) { c["nbf"] = now.Add(2 * time.Minute).Unix() }))),
			status: 401, challenge: true, code: "invalid_token", detail: "not valid before"},
		{name: "issued in the future", header: bearer(authtest.Token(t, rsaKey, claims("alice", func(c jwt.MapClaims) { c["iat"] = now.Add(2 * time.Minute).Unix() }))),
			status: 401, challenge: true, code: "invalid_token", detail: "issued in the future"},
		{name: "no expiry", header: bearer(authtest.Token(t, rsaKey, claims("alice", func(c jwt.MapClaims) { delete(c, "exp") }))),
			status: 401, challenge: true, code: "invalid_token", detail: "no exp claim"},
		{name: "wrong issuer", header: bearer(authtest.Token(t, rsaKey, claims("alice", func(c jwt.MapClaims) { c["iss"] = "https://evil.test" }))),
			status: 401, challenge: true, code: "invalid_token", detail: `iss "https://evil.test" is not the issuer`},
		{name: "wrong audience", header: bearer(authtest.Token(t, rsaKey, claims("alice", func(c jwt.MapClaims) { c["aud"] = "another-api" }))),
			status: 401, challenge: true, code: "invalid_token", detail: "aud does not include commerce-api"},
		{name: "no audience", header: bearer(authtest.Token(t, rsaKey, claims("alice", func(c jwt.MapClaims) { delete(c, "aud") }))),
			status: 401, challenge: true, code: "invalid_token", detail: "no aud claim; it must include commerce-api"},
		{name: "no issuer", header: bearer(authtest.Token(t, rsaKey, claims("alice", func(c jwt.MapClaims) { delete(c, "iss") }))),
			status: 401, challenge: true, code: "invalid_token", detail: "no iss claim; it must be " + authtest.Issuer},
		{name: "signed by another key under a known kid", header: bearer(authtest.Token(t, otherRSA, claims("alice", nil))),
			status: 401, challenge: true, code: "invalid_token", detail: "signature does not verify"},
		{name: "unknown kid", header: bearer(authtest.Token(t, authtest.ECKey(t, "ec-9"), claims("alice", nil))),
			status: 401, challenge: true, code: "invalid_token", detail: "unknown kid"},
		{name: "alg none", header: bearer(authtest.Sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, "rsa-1", claims("alice", nil))),
			status: 401, challenge: true, code: "invalid_token", detail: "alg is not accepted"},
		{name: "HS256 keyed with the public key", header: bearer(authtest.Sign(t, jwt.SigningMethodHS256, pubPEM, "rsa-1", claims("alice", nil))),
			status: 401, challenge: true, code: "invalid_token", detail: "alg is not accepted"},
		{name: "ES256 header on the RSA key", header: bearer(authtest.Sign(t, jwt.SigningMethodES256, ecKey.Private, "rsa-1", claims("alice", nil))),
			status: 401, challenge: true, code: "invalid_token", detail: "does not fit the key"},
		{name: "sub breaking the user id rule", header: bearer(authtest.Token(t, ecKey, claims("al ice", nil))),
			status: 401, challenge: true, code: "invalid_token", detail: "sub is not a valid user id"},
		{name: "sub too long", header: bearer(authtest.Token(t, ecKey, claims(strings.Repeat("a", 65), nil))),
			status: 401, challenge: true, code: "invalid_token", detail: "sub is not a valid user id"},
		{name: "no sub", header: bearer(authtest.Token(t, ecKey, claims("", func(c jwt.MapClaims) { delete(c, "sub") }))),
			status: 401, challenge: true, code: "invalid_token", detail: "no sub claim"},
		{name: "exp of the wrong type", header: bearer(authtest.Token(t, ecKey, claims("alice", func(c jwt.MapClaims) { c["exp"] = "tomorrow" }))),
			status: 401, challenge: true, code: "invalid_token", detail: "wrong type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.checkRefused(t, "POST", likes, "", tc)
		})
	}
}

// adminClaims are valid claims for sub with the admin role.
func adminClaims(sub string) jwt.MapClaims {
	c := authtest.Claims(sub)
	c["roles"] = []string{"reader", auth.DefaultAdminRole}
	return c
}

// createProductAs creates a product with a token, returning its id.
func (e *env) createProductAs(t *testing.T, token, name string, price, stock int64) int64 {
	t.Helper()
	body := fmt.Sprintf(`{"name":%q,"price":%d,"stock":%d}`, name, price, stock)
	return decode[productBody](t, e.send(t, "POST", "/api/v1/products", jsonBody(bearer(token)), body), http.StatusCreated).ID
}

// TestJWTAdminRole: only a token with the admin role, in a top-level roles
// array or Keycloak's realm_access.roles, creates products; a valid token
// without it is a 403 with an insufficient_scope challenge.
//
//nolint:paralleltest // the cases share one database, and each compares it before and after its request
func TestJWTAdminRole(t *testing.T) {
	t.Parallel()
	k := authtest.RSAKey(t, "k")
	e := newJWTEnv(t, authtest.NewProvider(t, k).Config(time.Hour))
	with := func(edit func(jwt.MapClaims)) string {
		c := authtest.Claims("alice")
		edit(c)
		return authtest.Token(t, k, c)
	}
	e.createProductAs(t, with(func(c jwt.MapClaims) { c["roles"] = []string{auth.DefaultAdminRole} }), "roles claim", 1, 1)
	e.createProductAs(t, with(func(c jwt.MapClaims) {
		c["realm_access"] = map[string]any{"roles": []string{"offline_access", auth.DefaultAdminRole}}
	}), "Keycloak realm roles", 1, 1)

	const body = `{"name":"x","price":1,"stock":1}`
	for _, tc := range []authCase{
		{name: "no roles", header: jsonBody(bearer(with(func(jwt.MapClaims) {}))), status: 403, challenge: true, code: "insufficient_scope",
			detail: "creating products needs the role catalog-admin"},
		{name: "other roles", header: jsonBody(bearer(with(func(c jwt.MapClaims) { c["roles"] = []string{"reader"} }))), status: 403, challenge: true,
			code: "insufficient_scope", detail: "this token's roles: reader"},
		{name: "role as a string, not an array", header: jsonBody(bearer(with(func(c jwt.MapClaims) { c["roles"] = auth.DefaultAdminRole }))), status: 403,
			challenge: true, code: "insufficient_scope", detail: "roles: none"},
		{name: "role in a client's roles", header: jsonBody(bearer(with(func(c jwt.MapClaims) {
			c["resource_access"] = map[string]any{"commerce-api": map[string]any{"roles": []string{auth.DefaultAdminRole}}}
		}))), status: 403, challenge: true, code: "insufficient_scope", detail: "needs the role"},
		{name: "no token", header: jsonBody(hdr()), status: 401, challenge: true, detail: "needs a bearer token"},
		{name: "X-User-ID of an admin", header: jsonBody(hdr(api.UserHeader, "admin")), status: 401, challenge: true, detail: "X-User-ID is not accepted"},
		{name: "expired admin token", header: jsonBody(bearer(with(func(c jwt.MapClaims) {
			c["roles"], c["exp"] = []string{auth.DefaultAdminRole}, time.Now().Add(-time.Hour).Unix()
		}))), status: 401, challenge: true, code: "invalid_token", detail: "expired"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.checkRefused(t, "POST", "/api/v1/products", body, tc)
		})
	}
}

// TestJWTPublicReads: reads stay open without a token: the listing, the
// stream, the configuration and a product's detail, whose view is then
// anonymous as it is without X-User-ID in header mode. A token that is sent
// is checked all the same: a valid one names the viewer, an invalid one is
// a 401 and records no view.
func TestJWTPublicReads(t *testing.T) {
	t.Parallel()
	k := authtest.ECKey(t, "k")
	e := newJWTEnv(t, authtest.NewProvider(t, k).Config(time.Hour))
	id := e.createProductAs(t, authtest.Token(t, k, adminClaims("admin")), "lamp", 1000, 10)
	detail := fmt.Sprintf("/api/v1/products/%d", id)
	for _, path := range []string{"/api/v1/products", detail, "/api/v1/config", "/openapi.yaml", "/", "/readyz"} {
		if r := e.send(t, "GET", path, hdr(), ""); r.Status != http.StatusOK {
			t.Errorf("GET %s without a token: %d %s", path, r.Status, r.Body)
		}
	}
	decode[productBody](t, e.send(t, "GET", detail, bearer(authtest.Token(t, k, authtest.Claims("viewer-1"))), ""), http.StatusOK)
	expired := authtest.Claims("viewer-2")
	expired["exp"] = time.Now().Add(-time.Hour).Unix()
	bad := authtest.Token(t, k, expired)
	for _, path := range []string{"/api/v1/products", detail, "/api/v1/stream", "/api/v1/config"} {
		r := e.send(t, "GET", path, bearer(bad), "")
		if pb := decode[problemBody](t, r, http.StatusUnauthorized); !strings.Contains(pb.Detail, "expired") {
			t.Errorf("GET %s with an expired token: %+v", path, pb)
		}
		if c := r.Header.Get("WWW-Authenticate"); !strings.Contains(c, `error="invalid_token"`) {
			t.Errorf("GET %s with an expired token: WWW-Authenticate %q", path, c)
		}
	}
	want := []storetest.Event{
		productEvent("loopers.product.viewed.v1", id, fmt.Sprintf(`{"productId":%d,"userId":""}`, id)),
		productEvent("loopers.product.viewed.v1", id, fmt.Sprintf(`{"productId":%d,"userId":"viewer-1"}`, id)),
	}
	if diff := cmp.Diff(want, e.db.Events(t, 0)); diff != "" {
		t.Errorf("views (-want +got):\n%s", diff)
	}
	var cfg struct{ Auth map[string]string }
	if err := json.Unmarshal(e.send(t, "GET", "/api/v1/config", hdr(), "").Body, &cfg); err != nil {
		t.Fatal(err)
	}
	wantCfg := map[string]string{"mode": "jwt", "issuer": authtest.Issuer, "audience": authtest.Audience, "adminRole": auth.DefaultAdminRole}
	if diff := cmp.Diff(wantCfg, cfg.Auth); diff != "" {
		t.Errorf("GET /api/v1/config (-want +got):\n%s", diff)
	}
}

// TestHeaderModeConfig: header mode says so, and takes no token: an
// Authorization header changes nothing there.
func TestHeaderModeConfig(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var cfg struct{ Auth map[string]string }
	if err := json.Unmarshal(e.send(t, "GET", "/api/v1/config", hdr(), "").Body, &cfg); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"mode": "header", "userHeader": "X-User-ID"}, cfg.Auth); diff != "" {
		t.Errorf("GET /api/v1/config (-want +got):\n%s", diff)
	}
	id := e.createProduct(t, "lamp", 1, 1)
	h := hdr(api.UserHeader, "alice", "Authorization", "Bearer not-even-a-jwt")
	if got := decode[likeBody](t, e.send(t, "POST", fmt.Sprintf("/api/v1/products/%d/likes", id), h, ""), http.StatusOK); !got.Liked {
		t.Errorf("like in header mode with an Authorization header: %+v", got)
	}
}

// TestJWTKeyRotation: the provider replaces its key; a token signed with
// the new key succeeds at once (the unknown kid makes the API read the key
// set again), and the withdrawn key stops verifying.
func TestJWTKeyRotation(t *testing.T) {
	t.Parallel()
	old, next := authtest.RSAKey(t, "2026-01"), authtest.ECKey(t, "2026-02")
	p := authtest.NewProvider(t, old)
	e := newJWTEnv(t, p.Config(time.Nanosecond))
	id := e.createProductAs(t, authtest.Token(t, old, adminClaims("admin")), "lamp", 1, 1)
	likes := fmt.Sprintf("/api/v1/products/%d/likes", id)
	decode[likeBody](t, e.send(t, "POST", likes, bearer(authtest.Token(t, old, authtest.Claims("alice"))), ""), http.StatusOK)

	p.Publish(t, next)
	fetches := p.Fetches()
	decode[likeBody](t, e.send(t, "POST", likes, bearer(authtest.Token(t, next, authtest.Claims("bob"))), ""), http.StatusOK)
	if p.Fetches() != fetches+1 {
		t.Errorf("%d key set reads for the new kid, want 1", p.Fetches()-fetches)
	}
	e.checkRefused(t, "POST", likes, "", authCase{header: bearer(authtest.Token(t, old, authtest.Claims("carol"))),
		status: 401, challenge: true, code: "invalid_token", detail: "unknown kid"})
}

// TestJWKSUnavailable: a key set that cannot be read never lets a request
// through: a token is answered 503 with Retry-After and writes nothing,
// readiness fails, and reads without a token still work. Once the provider
// answers, the same token works.
func TestJWKSUnavailable(t *testing.T) {
	t.Parallel()
	k := authtest.RSAKey(t, "k")
	t.Run("from the start", func(t *testing.T) {
		t.Parallel()
		p := authtest.NewProvider(t, k)
		p.SetDown(true)
		e := newJWTEnv(t, p.Config(time.Nanosecond))
		if r := e.send(t, "GET", "/readyz", hdr(), ""); r.Status != http.StatusServiceUnavailable {
			t.Errorf("/readyz: %d, want 503", r.Status)
		}
		if r := e.adminGet(t, "/readyz"); !strings.Contains(string(r.Body), `"jwks"`) {
			t.Errorf("admin /readyz does not name jwks: %d %s", r.Status, r.Body)
		}
		admin := authtest.Token(t, k, adminClaims("admin"))
		e.checkRefused(t, "POST", "/api/v1/products", `{"name":"x","price":1,"stock":1}`,
			authCase{header: jsonBody(bearer(admin)), status: 503, detail: "signing keys cannot be read"})
		if r := e.send(t, "GET", "/api/v1/products", hdr(), ""); r.Status != http.StatusOK {
			t.Errorf("a read without a token: %d", r.Status)
		}
		p.SetDown(false)
		e.createProductAs(t, admin, "lamp", 1, 1)
		if r := e.send(t, "GET", "/readyz", hdr(), ""); r.Status != http.StatusOK {
			t.Errorf("/readyz once the key set was read: %d %s", r.Status, r.Body)
		}
	})
	t.Run("during", func(t *testing.T) {
		t.Parallel()
		p := authtest.NewProvider(t, k)
		e := newJWTEnv(t, p.Config(time.Nanosecond))
		id := e.createProductAs(t, authtest.Token(t, k, adminClaims("admin")), "lamp", 1, 1)
		p.SetDown(true)
		rotated := authtest.ECKey(t, "k2")
		e.checkRefused(t, "POST", fmt.Sprintf("/api/v1/products/%d/likes", id), "",
			authCase{header: bearer(authtest.Token(t, rotated, authtest.Claims("alice"))), status: 503, detail: "signing keys cannot be read"})
		e.checkRefused(t, "POST", fmt.Sprintf("/api/v1/products/%d/likes", id), "",
			authCase{header: bearer(authtest.Token(t, authtest.RSAKey(t, "k"), authtest.Claims("alice"))), status: 401, challenge: true,
				code: "invalid_token", detail: "signature does not verify"})
		// The keys read before the outage still verify their tokens.
		decode[likeBody](t, e.send(t, "POST", fmt.Sprintf("/api/v1/products/%d/likes", id), bearer(authtest.Token(t, k, authtest.Claims("bob"))), ""), http.StatusOK)
	})
}

// TestAuthorizationHeaderHostile sends Authorization headers no client
// should: each is a 401 problem (never a 5xx) on a write, a read and the
// stream.
//
//nolint:paralleltest // the cases share one database
func TestAuthorizationHeaderHostile(t *testing.T) {
	t.Parallel()
	k := authtest.RSAKey(t, "k")
	e := newJWTEnv(t, authtest.NewProvider(t, k).Config(time.Hour))
	id := e.createProductAs(t, authtest.Token(t, k, adminClaims("admin")), "lamp", 1, 1)
	valid := authtest.Token(t, k, authtest.Claims("alice"))
	for _, tc := range []struct{ name, value string }{
		{"100 KiB", "Bearer " + strings.Repeat("A", 100<<10)},
		{"many spaces", "Bearer" + strings.Repeat(" ", 5000)},
		{"spaces inside", "Bearer " + strings.ReplaceAll(valid, ".", " . ")},
		{"non-ASCII", "Bearer " + valid + "é"},
		{"Latin-1 bytes", "Bearer \xe9\xff\xfe"},
		{"only dots", "Bearer ......."},
		{"four parts", "Bearer " + valid + ".x"},
		{"header of the wrong JSON", "Bearer WzFd.e30.c2ln"},
		{"huge claims part", "Bearer eyJhbGciOiJSUzI1NiIsImtpZCI6ImsifQ." + strings.Repeat("e30", 2500) + ".c2ln"},
		{"tab", "Bearer\t" + valid},
		{"quotes", `Bearer "` + valid + `"`},
		{"scheme only, other case", "BEARER"},
		{"Digest", `Digest username="a", realm="b"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, req := range []struct{ method, path string }{
				{"POST", fmt.Sprintf("/api/v1/products/%d/likes", id)},
				{"GET", fmt.Sprintf("/api/v1/products/%d", id)},
				{"GET", "/api/v1/stream"},
			} {
				r := e.send(t, req.method, req.path, http.Header{"Authorization": {tc.value}}, "")
				if r.Status != http.StatusUnauthorized || r.Header.Get("WWW-Authenticate") == "" {
					t.Errorf("%s %s: %d (WWW-Authenticate %q) %s", req.method, req.path, r.Status, r.Header.Get("WWW-Authenticate"), r.Body)
				}
			}
		})
	}
}

// FuzzAuthorization sends arbitrary Authorization headers to a write in
// jwt mode: never a 5xx, never a write, and never a success (no fuzzed
// header can hold a token signed by the test's key).
func FuzzAuthorization(f *testing.F) {
	k := authtest.RSAKey(f, "k")
	e := newJWTEnv(f, authtest.NewProvider(f, k).Config(time.Hour))
	valid := authtest.Token(f, k, authtest.Claims("alice"))
	for _, s := range []string{"Bearer " + valid[:len(valid)-2], "Bearer", "Basic x", "bearer  a.b.c", "Bearer \xff", "Bearer a=b", "Bearer " + valid + "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if validHeader(v) != nil {
			t.Skip("not a header value an HTTP client can send")
		}
		before := e.db.Snapshot(t)
		r := e.send(t, "POST", "/api/v1/products/1/likes", http.Header{"Authorization": {v}}, "")
		if r.Status != http.StatusUnauthorized {
			t.Fatalf("Authorization %q → %d %s", v, r.Status, r.Body)
		}
		if diff := cmp.Diff(before, e.db.Snapshot(t)); diff != "" {
			t.Errorf("a refused request changed the database (-before +after):\n%s", diff)
		}
	})
}
