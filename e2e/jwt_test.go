package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/golang-jwt/jwt/v5"
	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"
)

// identityProvider stands in for an OpenID Connect provider: one ES256
// signing key, its JSON Web Key Set served over HTTP, tokens signed with it.
type identityProvider struct {
	key      *ecdsa.PrivateKey
	jwksURL  string
	issuer   string
	audience string
}

const idpKeyID = "e2e-1"

func newIdentityProvider(t *testing.T) *identityProvider {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	point, err := key.PublicKey.Bytes() // 0x04 || X || Y
	if err != nil {
		t.Fatal(err)
	}
	b64 := base64.RawURLEncoding.EncodeToString
	set, err := json.Marshal(map[string]any{"keys": []map[string]string{{
		"kty": "EC", "crv": "P-256", "kid": idpKeyID, "alg": "ES256", "use": "sig",
		"x": b64(point[1:33]), "y": b64(point[33:]),
	}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/jwk-set+json")
		_, _ = w.Write(set)
	}))
	t.Cleanup(srv.Close)
	return &identityProvider{key: key, jwksURL: srv.URL + "/certs", issuer: "https://idp.e2e.test/realms/commerce", audience: "commerce-api"}
}

// env is commerce-api's configuration trusting the provider.
func (p *identityProvider) env() map[string]string {
	return map[string]string{"COMMERCE_API_AUTH_MODE": "jwt", "COMMERCE_API_AUTH_ISSUER": p.issuer, "COMMERCE_API_AUTH_AUDIENCE": p.audience, "COMMERCE_API_AUTH_JWKS_URL": p.jwksURL}
}

// token is a valid token for sub with roles, for ten minutes.
func (p *identityProvider) token(t *testing.T, sub string, roles ...string) string {
	t.Helper()
	now := time.Now()
	claims := jwt.MapClaims{"iss": p.issuer, "aud": p.audience, "sub": sub,
		"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(10 * time.Minute).Unix()}
	if len(roles) > 0 {
		claims["roles"] = roles
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, claims)
	tok.Header["kid"] = idpKeyID
	s, err := tok.SignedString(p.key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// callWithToken is call with a bearer token instead of X-User-ID.
func (s *system) callWithToken(method, path, token string, body, out any) int {
	s.t.Helper()
	h := http.Header{}
	h.Set("Authorization", "Bearer "+token)
	return s.send(s.api, method, path, h, body, out)
}

// TestLivePageJWT loads the live page of a commerce-api in jwt mode (its
// keys served by the test as an identity provider would) in a real
// browser: the page follows the stream without a token (a like made
// through the API shows on it), says that writing needs a token and takes
// no X-User-ID, refuses to send a like without one, and likes a product
// through its form once a token is pasted, as the token's subject.
//
//nolint:paralleltest // starts the real service processes and a browser, which on 2 shared cores would break the timing bounds of the other end-to-end tests (the live page's 2 s)
func TestLivePageJWT(t *testing.T) {
	idp := newIdentityProvider(t)
	s := newSystemOn(t, kafkaSetup{ServiceEnv: map[string]map[string]string{"commerce-api": idp.env()}})
	s.startRelay("relay-a")
	s.startConsumers()

	var p struct{ ID int64 }
	if st := s.callWithToken("POST", "/products", idp.token(t, "ops", "catalog-admin"), map[string]any{"name": "Token-gated lamp", "price": 25000, "stock": 10}, &p); st != http.StatusCreated {
		t.Fatalf("create product with an admin token: status %d", st)
	}
	pid := strconv.FormatInt(p.ID, 10)
	// X-User-ID means nothing in jwt mode.
	s.expect(s.call("POST", "/products/"+pid+"/likes", "mallory", nil, nil), http.StatusUnauthorized)
	s.expect(s.callWithToken("POST", "/products/"+pid+"/likes", idp.token(t, "alice"), nil, nil), http.StatusOK)
	// The consumers have their partitions once the first like is counted.
	s.waitLikes(p.ID, 1, 60*time.Second)

	ctx := browser(t)
	count := fmt.Sprintf(`document.querySelector('#top-likes li[data-id="%d"] .count')`, p.ID)
	within(t, ctx, 20*time.Second, "load the page",
		chromedp.Navigate(s.api+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#status.live`)),
		chromedp.WaitVisible(chromedp.CSS(`#auth-note`)),
		until(count+` !== null && `+count+`.textContent === "1"`),
	)

	// The page says writing needs a token, from whom, and asks for one
	// instead of a user name.
	note := eval[string](t, ctx, `document.getElementById("auth-note").textContent`)
	for _, want := range []string{"liking, ordering and paying need a bearer token", "issued by " + idp.issuer + " for " + idp.audience, "catalog-admin"} {
		if !strings.Contains(note, want) {
			t.Errorf("the page's note %q does not say %q", note, want)
		}
	}
	form := eval[map[string]bool](t, ctx, `({userDisabled: document.getElementById("user").disabled,
		tokenShown: !document.getElementById("token-label").hidden && document.getElementById("token").offsetParent !== null})`)
	if diff := cmp.Diff(map[string]bool{"userDisabled": true, "tokenShown": true}, form); diff != "" {
		t.Errorf("the form in jwt mode (-want +got):\n%s", diff)
	}

	// A like made through the API with a valid token reaches the page.
	s.expect(s.callWithToken("POST", "/products/"+pid+"/likes", idp.token(t, "bob"), nil, nil), http.StatusOK)
	within(t, ctx, 15*time.Second, "the API's like shows on the page", until(count+`.textContent === "2"`))

	// The form without a token sends nothing and says why.
	within(t, ctx, 10*time.Second, "like through the form without a token",
		chromedp.SetValue(chromedp.CSS(`#product`), pid),
		chromedp.Click(chromedp.CSS(`button[data-action="like"]`)),
		until(`[...document.querySelectorAll("#log li.err")].some((li) => li.textContent.includes("writing needs a bearer token"))`),
	)

	// With a token pasted, the form likes the product as its subject.
	within(t, ctx, 10*time.Second, "like through the form with a pasted token",
		chromedp.SetValue(chromedp.CSS(`#token`), idp.token(t, "carol")),
		chromedp.Click(chromedp.CSS(`button[data-action="like"]`)),
	)
	within(t, ctx, 15*time.Second, "the form's like shows on the page", until(count+`.textContent === "3"`))

	conn, err := pgx.Connect(t.Context(), s.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(t.Context())
	rows, _ := conn.Query(t.Context(), `SELECT user_id FROM likes WHERE product_id = $1 ORDER BY user_id`, p.ID)
	likers, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"alice", "bob", "carol"}, likers); diff != "" {
		t.Errorf("who liked the product (-want +got):\n%s", diff)
	}
}
