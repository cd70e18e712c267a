package app

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/go-cmp/cmp"

	"github.com/loopers/commerce-pipeline/internal/config"
	"github.com/loopers/commerce-pipeline/internal/testenv"
	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/api/auth/authtest"
)

// serveLogged is serve with the service's log captured.
func serveLogged(t *testing.T, cfg Config) (Addrs, *testenv.LogBuffer, func()) {
	t.Helper()
	logs := &testenv.LogBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan Addrs, 1)
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, slog.New(slog.NewJSONHandler(logs, nil)), ready) }()
	var addrs Addrs
	select {
	case addrs = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("Run returned before serving: %v\n%s", err, logs)
	}
	stop := func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	t.Cleanup(func() {
		select {
		case <-ctx.Done():
		default:
			stop()
		}
	})
	return addrs, logs, stop
}

// shipped is the shipped configuration with the test's database and
// loopback addresses, plus env.
func shipped(t *testing.T, env map[string]string) Config {
	t.Helper()
	all := map[string]string{"DATABASE_URL": testenv.DatabaseURL(t), "HTTP_ADDR": "127.0.0.1:0", "ADMIN_ADDR": "127.0.0.1:0"}
	for k, v := range env {
		all[k] = v
	}
	cfg, err := config.Parse(config.FromMap(all), Load)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// call sends a request with an optional bearer token and JSON body.
func call(t *testing.T, method, url, token, body string) (int, http.Header, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

// TestRunJWTMode runs the service from its shipped configuration plus
// COMMERCE_API_AUTH_MODE=jwt and a provider's issuer, audience and key set URL, and
// writes end to end: an administrator creates a product, a user orders it
// and the order is the token's sub's; without a token the write is a 401.
func TestRunJWTMode(t *testing.T) {
	t.Parallel()
	k := authtest.RSAKey(t, "k1")
	p := authtest.NewProvider(t, k)
	cfg := shipped(t, map[string]string{"COMMERCE_API_AUTH_MODE": "jwt", "COMMERCE_API_AUTH_ISSUER": authtest.Issuer, "COMMERCE_API_AUTH_AUDIENCE": authtest.Audience, "COMMERCE_API_AUTH_JWKS_URL": p.URL()})
	addrs, logs, stop := serveLogged(t, cfg)
	public, admin := "http://"+addrs.HTTP, "http://"+addrs.Admin

	if code, _, body := call(t, "GET", public+"/api/v1/config", "", ""); code != http.StatusOK || !strings.Contains(body, `"mode":"jwt"`) {
		t.Errorf("GET /api/v1/config: %d %s", code, body)
	}
	if code, _, body := call(t, "GET", public+"/readyz", "", ""); code != http.StatusOK {
		t.Errorf("/readyz: %d %s", code, body)
	}
	adminClaims := authtest.Claims("admin-1")
	adminClaims["realm_access"] = map[string]any{"roles": []string{"catalog-admin"}}
	code, _, body := call(t, "POST", public+"/api/v1/products", authtest.Token(t, k, adminClaims), `{"name":"lamp","price":1500,"stock":5}`)
	if code != http.StatusCreated {
		t.Fatalf("create a product as an administrator: %d %s", code, body)
	}
	var product struct{ ID int64 }
	if err := json.Unmarshal([]byte(body), &product); err != nil {
		t.Fatal(err)
	}
	order := `{"items":[{"productId":` + jsonInt(product.ID) + `,"quantity":2}]}`
	code, _, body = call(t, "POST", public+"/api/v1/orders", authtest.Token(t, k, authtest.Claims("user:alice@example.com")), order)
	var got struct {
		UserID      string
		TotalAmount int64
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil || code != http.StatusCreated {
		t.Fatalf("order: %d %s (%v)", code, body, err)
	}
	if diff := cmp.Diff(struct {
		UserID      string
		TotalAmount int64
	}{"user:alice@example.com", 3000}, got); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
	code, h, body := call(t, "POST", public+"/api/v1/orders", "", order)
	if code != http.StatusUnauthorized || h.Get("WWW-Authenticate") != `Bearer realm="commerce-api"` {
		t.Errorf("order without a token: %d %q %s", code, h.Get("WWW-Authenticate"), body)
	}
	code, h, body = call(t, "POST", public+"/api/v1/products", authtest.Token(t, k, authtest.Claims("user-2")), `{"name":"x","price":1,"stock":1}`)
	if code != http.StatusForbidden || !strings.Contains(h.Get("WWW-Authenticate"), `error="insufficient_scope"`) {
		t.Errorf("create a product without the role: %d %q %s", code, h.Get("WWW-Authenticate"), body)
	}
	_, _, metrics := call(t, "GET", admin+"/metrics", "", "")
	for _, series := range []string{`commerce_api_auth_failures_total{reason="missing"} 1`, `commerce_api_auth_failures_total{reason="role"} 1`,
		"commerce_api_jwks_keys 1", `commerce_api_jwks_refreshes_total{result="ok"} 1`} {
		if !strings.Contains(metrics, "\n"+series+"\n") {
			t.Errorf("admin /metrics lacks %s", series)
		}
	}
	stop()
	if strings.Contains(logs.String(), "COMMERCE_API_AUTH_MODE=header") {
		t.Errorf("jwt mode logged the header mode warning:\n%s", logs)
	}
}

func jsonInt(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// TestRunJWTProviderUnreachable: a service whose key set cannot be fetched
// starts, says it is not ready (the admin listener names jwks) and answers
// tokens 503, never letting one through; it reads the key set by itself
// once the provider answers.
func TestRunJWTProviderUnreachable(t *testing.T) {
	t.Parallel()
	k := authtest.RSAKey(t, "k1")
	p := authtest.NewProvider(t, k)
	p.SetDown(true)
	cfg := shipped(t, map[string]string{"COMMERCE_API_AUTH_MODE": "jwt", "COMMERCE_API_AUTH_ISSUER": authtest.Issuer, "COMMERCE_API_AUTH_AUDIENCE": authtest.Audience, "COMMERCE_API_AUTH_JWKS_URL": p.URL(),
		"COMMERCE_API_AUTH_JWKS_MIN_REFRESH": "1h"})
	addrs, logs, _ := serveLogged(t, cfg)
	public, admin := "http://"+addrs.HTTP, "http://"+addrs.Admin
	if code, _, body := call(t, "GET", public+"/readyz", "", ""); code != http.StatusServiceUnavailable || strings.Contains(body, "jwks") {
		t.Errorf("public /readyz: %d %s, want 503 naming nothing", code, body)
	}
	if code, _, body := call(t, "GET", admin+"/readyz", "", ""); code != http.StatusServiceUnavailable || !strings.Contains(body, `"jwks"`) {
		t.Errorf("admin /readyz: %d %s, want 503 naming jwks", code, body)
	}
	claims := authtest.Claims("admin-1")
	claims["roles"] = []string{"catalog-admin"}
	token := authtest.Token(t, k, claims)
	for range 3 {
		if code, h, body := call(t, "POST", public+"/api/v1/products", token, `{"name":"x","price":1,"stock":1}`); code != http.StatusServiceUnavailable || h.Get("Retry-After") == "" {
			t.Errorf("a write with a valid token while the key set is unreachable: %d (Retry-After %q) %s", code, h.Get("Retry-After"), body)
		}
	}
	if code, _, body := call(t, "GET", public+"/api/v1/products", "", ""); code != http.StatusOK {
		t.Errorf("a read without a token: %d %s", code, body)
	}
	if !strings.Contains(logs.String(), "JWKS read failed") {
		t.Errorf("no log of the failed read:\n%s", logs)
	}
	// The refresh loop retries within seconds (token-driven reads are
	// rate limited to one an hour here).
	p.SetDown(false)
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, _, body := call(t, "POST", public+"/api/v1/products", token, `{"name":"x","price":1,"stock":1}`)
		if code == http.StatusCreated {
			break
		}
		if code != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("after the provider came back: %d %s", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code, _, body := call(t, "GET", admin+"/readyz", "", ""); code != http.StatusOK {
		t.Errorf("admin /readyz after the key set was read: %d %s", code, body)
	}
}

// TestHeaderModeWarning: header mode warns at start when the public
// listener is not loopback-only, and only then.
func TestHeaderModeWarning(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		addr string
		warn bool
	}{
		{":8080", true},
		{"0.0.0.0:8080", true},
		{"[::]:8080", true},
		{"192.0.2.10:8080", true},
		{"api.internal:8080", true},
		{"127.0.0.1:8080", false},
		{"127.0.0.2:8080", false},
		{"localhost:8080", false},
		{"[::1]:8080", false},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			t.Parallel()
			var logs bytes.Buffer
			warnOpenHeaderMode(slog.New(slog.NewJSONHandler(&logs, nil)), tc.addr)
			var rec struct{ Level, Msg, Addr string }
			if logs.Len() > 0 {
				if err := json.Unmarshal(logs.Bytes(), &rec); err != nil {
					t.Fatal(err)
				}
			}
			if got := rec.Level == "WARN" && strings.Contains(rec.Msg, "X-User-ID is trusted as sent") && rec.Addr == tc.addr; got != tc.warn {
				t.Errorf("warned = %v, want %v; log: %s", got, tc.warn, logs.String())
			}
		})
	}
	// And Run does it: the shipped configuration on loopback does not warn.
	_, logs, stop := serveLogged(t, shipped(t, nil))
	stop()
	if !strings.Contains(logs.String(), `"authMode":"header"`) || strings.Contains(logs.String(), "X-User-ID is trusted as sent") {
		t.Errorf("header mode on loopback: want the mode logged and no warning:\n%s", logs)
	}
}

// TestHeaderModeIgnoresTokens: the shipped default (header mode) takes
// the user from X-User-ID and reads no Authorization header, so that make
// dev and compose stay one curl per step.
func TestHeaderModeIgnoresTokens(t *testing.T) {
	t.Parallel()
	addrs, _, _ := serveLogged(t, shipped(t, nil))
	public := "http://" + addrs.HTTP
	code, _, body := call(t, "POST", public+"/api/v1/products", "garbage", `{"name":"x","price":1,"stock":1}`)
	if code != http.StatusCreated {
		t.Fatalf("create a product in header mode: %d %s", code, body)
	}
	token := authtest.Sign(t, jwt.SigningMethodHS256, []byte("whatever"), "", authtest.Claims("mallory"))
	code, _, body = call(t, "POST", public+"/api/v1/orders", token, `{"items":[{"productId":1,"quantity":1}]}`)
	if code != http.StatusUnauthorized || !strings.Contains(body, "X-User-ID") {
		t.Errorf("an order with a token and no X-User-ID in header mode: %d %s", code, body)
	}
}
