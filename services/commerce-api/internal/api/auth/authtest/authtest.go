// Package authtest is an identity provider for tests: real RSA, EC and
// Ed25519 keys generated per test, a JSON Web Key Set served over HTTP by an
// httptest server whose keys can rotate and which can go down, and tokens
// signed with those keys.
package authtest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"

	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/api/auth"
)

// Issuer and Audience are what Provider's tokens carry and Config expects.
const (
	Issuer   = "https://idp.test/realms/commerce"
	Audience = "commerce-api"
)

// Key is a signing key with the id and algorithm its JWK declares.
type Key struct {
	KID     string
	Method  jwt.SigningMethod
	Private crypto.Signer
}

// RSAKey generates a 2048-bit RSA key for RS256.
func RSAKey(t testing.TB, kid string) Key {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return Key{KID: kid, Method: jwt.SigningMethodRS256, Private: k}
}

// ECKey generates a P-256 key for ES256.
func ECKey(t testing.TB, kid string) Key {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return Key{KID: kid, Method: jwt.SigningMethodES256, Private: k}
}

// EdKey generates an Ed25519 key for EdDSA.
func EdKey(t testing.TB, kid string) Key {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return Key{KID: kid, Method: jwt.SigningMethodEdDSA, Private: k}
}

// JWK is the public JWK of k, with kid, alg and use "sig".
func (k Key) JWK(t testing.TB) jwkset.JWKMarshal {
	t.Helper()
	j, err := jwkset.NewJWKFromKey(k.Private.Public(), jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{
		KID: k.KID, ALG: jwkset.ALG(k.Method.Alg()), USE: jwkset.UseSig,
	}})
	if err != nil {
		t.Fatal(err)
	}
	return j.Marshal()
}

// KeySet is the JSON Web Key Set of the public halves of keys.
func KeySet(t testing.TB, keys ...Key) []byte {
	t.Helper()
	set := jwkset.JWKSMarshal{Keys: []jwkset.JWKMarshal{}}
	for _, k := range keys {
		set.Keys = append(set.Keys, k.JWK(t))
	}
	raw, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// Provider serves a key set at its URL.
type Provider struct {
	srv     *httptest.Server
	mu      sync.Mutex
	set     []byte
	down    bool
	fetches atomic.Int64
}

// NewProvider serves the public halves of keys until the test ends.
func NewProvider(t testing.TB, keys ...Key) *Provider {
	t.Helper()
	p := &Provider{set: KeySet(t, keys...)}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.fetches.Add(1)
		p.mu.Lock()
		set, down := p.set, p.down
		p.mu.Unlock()
		if down {
			http.Error(w, "identity provider down", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/jwk-set+json")
		_, _ = w.Write(set)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

// URL is where the key set is served.
func (p *Provider) URL() string { return p.srv.URL + "/protocol/openid-connect/certs" }

// Publish replaces the served key set by the public halves of keys (a
// rotation).
func (p *Provider) Publish(t testing.TB, keys ...Key) {
	t.Helper()
	set := KeySet(t, keys...)
	p.mu.Lock()
	p.set = set
	p.mu.Unlock()
}

// SetDown makes every fetch fail with 503 (down) or serve the set again.
func (p *Provider) SetDown(down bool) {
	p.mu.Lock()
	p.down = down
	p.mu.Unlock()
}

// Close stops the server: fetches are refused at the TCP level.
func (p *Provider) Close() { p.srv.Close() }

// Fetches counts the requests the server got.
func (p *Provider) Fetches() int64 { return p.fetches.Load() }

// Config is a jwt-mode configuration trusting p, with the shipped defaults
// but a minimum refresh interval of minRefresh.
func (p *Provider) Config(minRefresh time.Duration) auth.Config {
	return auth.Config{
		Mode: auth.ModeJWT, Issuer: Issuer, Audience: Audience, JWKSURL: p.URL(),
		JWKSRefresh: auth.DefaultJWKSRefresh, JWKSMinRefresh: minRefresh, Leeway: auth.DefaultLeeway,
		AdminRole: auth.DefaultAdminRole, RoleClaims: auth.DefaultRoleClaims,
	}
}

// Claims are valid claims for sub: Issuer, Audience, issued now, valid
// for five minutes.
func Claims(sub string) jwt.MapClaims {
	now := time.Now()
	return jwt.MapClaims{
		"iss": Issuer, "aud": Audience, "sub": sub,
		"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(5 * time.Minute).Unix(),
	}
}

// Token signs claims with k, naming it by kid.
func Token(t testing.TB, k Key, claims jwt.MapClaims) string {
	t.Helper()
	return Sign(t, k.Method, k.Private, k.KID, claims)
}

// Sign signs claims with any method and key, for tokens a real provider
// would never issue (alg none, HS256 keyed with a public key).
func Sign(t testing.TB, m jwt.SigningMethod, key any, kid string, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
