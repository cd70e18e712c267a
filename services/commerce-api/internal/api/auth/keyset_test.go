package auth_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"

	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/api/auth"
	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/api/auth/authtest"
)

// newVerifier starts a Verifier on cfg for the test's life.
func newVerifier(t *testing.T, cfg auth.Config) *auth.Verifier {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	v, err := auth.New(ctx, cfg, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// verifyStatus is the status Verify's answer maps to: 200 for a principal.
func verifyStatus(t *testing.T, v *auth.Verifier, token string) (int, string) {
	t.Helper()
	p, err := v.Verify(context.Background(), token)
	if err == nil {
		return http.StatusOK, p.User
	}
	var e *auth.Error
	if !errors.As(err, &e) {
		t.Fatalf("Verify: %v is not an *auth.Error", err)
	}
	return e.Status, e.Detail
}

// TestKeySetKeepsOnlySigningKeys reads a key set file holding every kind of
// key a careless or hostile set may hold: only the asymmetric signing keys
// with a kid verify tokens, and a secret (oct) key never does, whatever
// the token's alg.
func TestKeySetKeepsOnlySigningKeys(t *testing.T) {
	t.Parallel()
	good := authtest.ECKey(t, "good")
	rsaGood := authtest.RSAKey(t, "rsa")
	small, err := rsa.GenerateKey(rand.Reader, 1024) //nolint:gosec // the point: a key too small to accept
	if err != nil {
		t.Fatal(err)
	}
	smallKey := authtest.Key{KID: "small", Method: jwt.SigningMethodRS256, Private: small}
	enc := authtest.ECKey(t, "enc")
	encJWK := enc.JWK(t)
	encJWK.USE = jwkset.UseEnc
	mislabelled := rsaGood.JWK(t)
	mislabelled.KID, mislabelled.ALG = "mislabelled", "ES256"
	noKID := good.JWK(t)
	noKID.KID = ""
	secret := []byte("0123456789abcdef0123456789abcdef")
	set := map[string]any{"keys": []any{
		map[string]string{"kty": "oct", "kid": "secret", "k": "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY"},
		smallKey.JWK(t), encJWK, mislabelled, noKID, good.JWK(t), rsaGood.JWK(t),
		map[string]string{"kty": "EC", "kid": "off-curve", "crv": "P-256", "x": "AQ", "y": "AQ"},
	}}
	raw, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(file, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := authtest.NewProvider(t).Config(time.Hour)
	cfg.JWKSURL, cfg.JWKSFile = "", file
	v := newVerifier(t, cfg)
	if err := v.Ready(context.Background()); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	claims := authtest.Claims("alice")
	for _, tc := range []struct {
		name   string
		token  string
		status int
		detail string
	}{
		{"EC key", authtest.Token(t, good, claims), http.StatusOK, "alice"},
		{"RSA key", authtest.Token(t, rsaGood, claims), http.StatusOK, "alice"},
		{"RSA key of 1024 bits", authtest.Token(t, smallKey, claims), http.StatusUnauthorized, "unknown kid"},
		{"encryption key", authtest.Token(t, enc, claims), http.StatusUnauthorized, "unknown kid"},
		{"RSA key labelled ES256", authtest.Sign(t, jwt.SigningMethodRS256, rsaGood.Private, "mislabelled", claims), http.StatusUnauthorized, "unknown kid"},
		{"HS256 with the secret of an oct key", authtest.Sign(t, jwt.SigningMethodHS256, secret, "secret", claims), http.StatusUnauthorized, "alg is not accepted"},
		{"alg none", unsigned(t, claims), http.StatusUnauthorized, "alg is not accepted"},
		{"an alg no library knows", unknownAlg(t, "secret", claims), http.StatusUnauthorized, "alg is not accepted"},
		{"no kid", authtest.Token(t, authtest.Key{Method: good.Method, Private: good.Private}, claims), http.StatusUnauthorized, "no kid"},
		{"ES256 token naming the RSA key", authtest.Sign(t, jwt.SigningMethodES256, good.Private, "rsa", claims), http.StatusUnauthorized, "does not fit the key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			status, detail := verifyStatus(t, v, tc.token)
			if status != tc.status || !strings.Contains(detail, tc.detail) {
				t.Errorf("got %d %q, want %d with %q", status, detail, tc.status, tc.detail)
			}
		})
	}
}

// unsigned is a token of claims with alg none.
func unsigned(t *testing.T, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodNone, claims).SignedString(jwt.UnsafeAllowNoneSignatureType)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// unknownAlg is a token of claims whose header names kid and an alg no JWT
// library registers; its signature is junk.
func unknownAlg(t *testing.T, kid string, claims jwt.MapClaims) string {
	t.Helper()
	enc := func(v any) string {
		raw, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return base64.RawURLEncoding.EncodeToString(raw)
	}
	return enc(map[string]string{"alg": "XY9", "typ": "JWT", "kid": kid}) + "." + enc(claims) + ".c2ln"
}

// TestUnknownKIDRefreshIsRateLimited: tokens naming keys the set does not
// have make the Verifier read the set again at most once per minimum
// interval, however many come at once.
func TestUnknownKIDRefreshIsRateLimited(t *testing.T) {
	t.Parallel()
	k1 := authtest.RSAKey(t, "k1")
	p := authtest.NewProvider(t, k1)
	v := newVerifier(t, p.Config(time.Hour))
	if got := p.Fetches(); got != 1 {
		t.Fatalf("%d fetches at start, want 1", got)
	}
	stranger := authtest.ECKey(t, "stranger")
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			claims := authtest.Claims("mallory")
			stranger := stranger
			stranger.KID = "made-up-" + string(rune('a'+i))
			if status, detail := verifyStatus(t, v, authtest.Token(t, stranger, claims)); status != http.StatusUnauthorized || !strings.Contains(detail, "unknown kid") {
				t.Errorf("unknown kid: %d %q, want 401 unknown kid", status, detail)
			}
		})
	}
	wg.Wait()
	if got := p.Fetches(); got != 2 {
		t.Errorf("%d fetches after 20 tokens with unknown kids, want 2 (start, and one refresh)", got)
	}
	// A key published now waits for the next allowed or scheduled read.
	k2 := authtest.ECKey(t, "k2")
	p.Publish(t, k1, k2)
	if status, _ := verifyStatus(t, v, authtest.Token(t, k2, authtest.Claims("alice"))); status != http.StatusUnauthorized {
		t.Errorf("a new key within the minimum interval: %d, want 401", status)
	}
	if status, _ := verifyStatus(t, v, authtest.Token(t, k1, authtest.Claims("alice"))); status != http.StatusOK {
		t.Errorf("a known key: %d, want 200", status)
	}
}

// TestPeriodicRefresh: Run reads the set every COMMERCE_API_AUTH_JWKS_REFRESH, so a
// rotated key verifies although token-driven reads are rate limited, and a
// withdrawn key stops verifying.
func TestPeriodicRefresh(t *testing.T) {
	t.Parallel()
	k1, k2 := authtest.RSAKey(t, "k1"), authtest.ECKey(t, "k2")
	p := authtest.NewProvider(t, k1)
	cfg := p.Config(time.Hour)
	cfg.JWKSRefresh = 50 * time.Millisecond
	v := newVerifier(t, cfg)
	// Spend the token-driven read of the hour.
	if status, _ := verifyStatus(t, v, authtest.Token(t, authtest.ECKey(t, "nobody"), authtest.Claims("a"))); status != http.StatusUnauthorized {
		t.Fatalf("unknown kid: %d", status)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { v.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	p.Publish(t, k2)
	seen := p.Fetches()
	deadline := time.Now().Add(10 * time.Second)
	for p.Fetches() < seen+2 { // one read may have started before the rotation
		if time.Now().After(deadline) {
			t.Fatalf("no scheduled read within 10 s (%d fetches)", p.Fetches())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if status, detail := verifyStatus(t, v, authtest.Token(t, k2, authtest.Claims("alice"))); status != http.StatusOK {
		t.Errorf("rotated key after a scheduled read: %d %q", status, detail)
	}
	if status, detail := verifyStatus(t, v, authtest.Token(t, k1, authtest.Claims("alice"))); status != http.StatusUnauthorized || !strings.Contains(detail, "unknown kid") {
		t.Errorf("withdrawn key: %d %q, want 401 unknown kid", status, detail)
	}
}

// TestKeySetUnavailable: while the key set cannot be read no token passes:
// 503 (never a 2xx, and never a 401 that would tell the client its token
// is bad) and Ready fails; keys read before an outage still verify, a key
// the outage hides does not, and the Verifier recovers with the provider.
func TestKeySetUnavailable(t *testing.T) {
	t.Parallel()
	k1, k2 := authtest.RSAKey(t, "k1"), authtest.ECKey(t, "k2")
	t.Run("refused connections at start", func(t *testing.T) {
		t.Parallel()
		p := authtest.NewProvider(t, k1)
		p.Close()
		v := newVerifier(t, p.Config(time.Nanosecond))
		if err := v.Ready(context.Background()); err == nil {
			t.Error("Ready with no key set read")
		}
		for range 3 {
			if status, detail := verifyStatus(t, v, authtest.Token(t, k1, authtest.Claims("alice"))); status != http.StatusServiceUnavailable {
				t.Errorf("valid token, provider gone: %d %q, want 503", status, detail)
			}
		}
	})
	t.Run("down at start, then up", func(t *testing.T) {
		t.Parallel()
		p := authtest.NewProvider(t, k1)
		p.SetDown(true)
		v := newVerifier(t, p.Config(time.Nanosecond))
		if status, _ := verifyStatus(t, v, authtest.Token(t, k1, authtest.Claims("alice"))); status != http.StatusServiceUnavailable {
			t.Errorf("provider down: %d, want 503", status)
		}
		p.SetDown(false)
		if status, _ := verifyStatus(t, v, authtest.Token(t, k1, authtest.Claims("alice"))); status != http.StatusOK {
			t.Errorf("provider back: %d, want 200", status)
		}
		if err := v.Ready(context.Background()); err != nil {
			t.Errorf("Ready after a read: %v", err)
		}
	})
	t.Run("down during", func(t *testing.T) {
		t.Parallel()
		p := authtest.NewProvider(t, k1)
		v := newVerifier(t, p.Config(time.Nanosecond))
		p.SetDown(true)
		p.Publish(t, k1, k2)
		forged := authtest.Token(t, authtest.RSAKey(t, "k1"), authtest.Claims("alice"))
		for _, tc := range []struct {
			name   string
			token  string
			status int
		}{
			{"known key", authtest.Token(t, k1, authtest.Claims("alice")), http.StatusOK},
			{"key published during the outage", authtest.Token(t, k2, authtest.Claims("alice")), http.StatusServiceUnavailable},
			{"forged with a known kid", forged, http.StatusUnauthorized},
		} {
			if status, detail := verifyStatus(t, v, tc.token); status != tc.status {
				t.Errorf("%s: %d %q, want %d", tc.name, status, detail, tc.status)
			}
		}
		if err := v.Ready(context.Background()); err != nil {
			t.Errorf("Ready with a key set read before the outage: %v", err)
		}
		p.SetDown(false)
		if status, detail := verifyStatus(t, v, authtest.Token(t, k2, authtest.Claims("alice"))); status != http.StatusOK {
			t.Errorf("after the outage: %d %q", status, detail)
		}
	})
}

// TestKeySetFileErrors: a key set file that cannot be used stops New.
func TestKeySetFileErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, content := range map[string]string{
		"not json":    `{"keys":`,
		"no keys":     `{"kid":"k"}`,
		"empty":       `{"keys":[]}`,
		"secret only": `{"keys":[{"kty":"oct","kid":"s","k":"c2VjcmV0"}]}`,
		"too large":   `{"keys":[],"pad":"` + strings.Repeat("x", 1<<20) + `"}`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			file := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".json")
			if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg := auth.Config{Mode: auth.ModeJWT, Issuer: authtest.Issuer, Audience: authtest.Audience, JWKSFile: file,
				JWKSRefresh: time.Hour, JWKSMinRefresh: time.Hour, Leeway: time.Second, AdminRole: "a", RoleClaims: []string{"roles"}}
			_, err := auth.New(context.Background(), cfg, nil, slog.New(slog.DiscardHandler))
			if err == nil || !strings.Contains(err.Error(), "COMMERCE_API_AUTH_JWKS_FILE") {
				t.Errorf("New: %v, want an error naming COMMERCE_API_AUTH_JWKS_FILE", err)
			}
		})
	}
}
