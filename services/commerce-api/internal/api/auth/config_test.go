package auth_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/loopers/commerce-pipeline/internal/config/configtest"
	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/api/auth"
	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/api/auth/authtest"
)

func TestLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "jwks.json")
	if err := os.WriteFile(good, authtest.KeySet(t, authtest.RSAKey(t, "k1")), 0o600); err != nil {
		t.Fatal(err)
	}
	notJSON := filepath.Join(dir, "broken.json")
	if err := os.WriteFile(notJSON, []byte(`{"keys": [`), 0o600); err != nil {
		t.Fatal(err)
	}
	onlySecret := filepath.Join(dir, "oct.json")
	if err := os.WriteFile(onlySecret, []byte(`{"keys":[{"kty":"oct","kid":"s","k":"c2VjcmV0"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	header := auth.Config{Mode: auth.ModeHeader, JWKSRefresh: 15 * time.Minute, JWKSMinRefresh: 10 * time.Second, Leeway: 30 * time.Second,
		AdminRole: "catalog-admin", RoleClaims: []string{"roles", "realm_access.roles"}}
	jwtEnv := map[string]string{"COMMERCE_API_AUTH_MODE": "jwt", "COMMERCE_API_AUTH_ISSUER": "https://idp/realms/c", "COMMERCE_API_AUTH_AUDIENCE": "commerce-api", "COMMERCE_API_AUTH_JWKS_URL": "https://idp/certs"}
	with := func(m map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range m {
			out[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] == "" {
				delete(out, kv[i])
			} else {
				out[kv[i]] = kv[i+1]
			}
		}
		return out
	}
	jwtWant := header
	jwtWant.Mode, jwtWant.Issuer, jwtWant.Audience, jwtWant.JWKSURL = auth.ModeJWT, "https://idp/realms/c", "commerce-api", "https://idp/certs"
	fileWant := jwtWant
	fileWant.JWKSURL, fileWant.JWKSFile = "", good
	tuned := jwtWant
	tuned.Leeway, tuned.JWKSRefresh, tuned.JWKSMinRefresh, tuned.AdminRole, tuned.RoleClaims = 5*time.Second, time.Hour, time.Minute, "admin", []string{"https://shop.example/roles"}

	tests := []struct {
		name    string
		env     map[string]string
		want    auth.Config
		wantErr []string // variables the error must name
	}{
		{"default is header mode", map[string]string{}, header, nil},
		{"jwt with a URL", jwtEnv, jwtWant, nil},
		{"jwt with a file", with(jwtEnv, "COMMERCE_API_AUTH_JWKS_URL", "", "COMMERCE_API_AUTH_JWKS_FILE", good), fileWant, nil},
		{"jwt tuned", with(jwtEnv, "COMMERCE_API_AUTH_LEEWAY", "5s", "COMMERCE_API_AUTH_JWKS_REFRESH", "1h", "COMMERCE_API_AUTH_JWKS_MIN_REFRESH", "1m", "COMMERCE_API_AUTH_ADMIN_ROLE", "admin",
			"COMMERCE_API_AUTH_ROLE_CLAIMS", "https://shop.example/roles"), tuned, nil},
		{"jwt without issuer, audience or key set", map[string]string{"COMMERCE_API_AUTH_MODE": "jwt"}, auth.Config{},
			[]string{"COMMERCE_API_AUTH_ISSUER", "COMMERCE_API_AUTH_AUDIENCE", "COMMERCE_API_AUTH_JWKS_URL"}},
		{"jwt with both key set sources", with(jwtEnv, "COMMERCE_API_AUTH_JWKS_FILE", good), auth.Config{}, []string{"COMMERCE_API_AUTH_JWKS_FILE: is set together with COMMERCE_API_AUTH_JWKS_URL"}},
		{"jwt with a URL that is not http", with(jwtEnv, "COMMERCE_API_AUTH_JWKS_URL", "file:///etc/jwks.json"), auth.Config{}, []string{"COMMERCE_API_AUTH_JWKS_URL"}},
		{"jwt with a missing file", with(jwtEnv, "COMMERCE_API_AUTH_JWKS_URL", "", "COMMERCE_API_AUTH_JWKS_FILE", filepath.Join(dir, "none.json")), auth.Config{}, []string{"COMMERCE_API_AUTH_JWKS_FILE"}},
		{"jwt with a file that does not parse", with(jwtEnv, "COMMERCE_API_AUTH_JWKS_URL", "", "COMMERCE_API_AUTH_JWKS_FILE", notJSON), auth.Config{}, []string{"COMMERCE_API_AUTH_JWKS_FILE"}},
		{"jwt with a file of secrets only", with(jwtEnv, "COMMERCE_API_AUTH_JWKS_URL", "", "COMMERCE_API_AUTH_JWKS_FILE", onlySecret), auth.Config{}, []string{"COMMERCE_API_AUTH_JWKS_FILE"}},
		{"unknown mode", map[string]string{"COMMERCE_API_AUTH_MODE": "oauth"}, auth.Config{}, []string{"COMMERCE_API_AUTH_MODE"}},
		{"header mode with jwt settings", with(jwtEnv, "COMMERCE_API_AUTH_MODE", "header"), auth.Config{}, []string{"COMMERCE_API_AUTH_ISSUER", "COMMERCE_API_AUTH_AUDIENCE", "COMMERCE_API_AUTH_JWKS_URL"}},
		{"bad durations and role", with(jwtEnv, "COMMERCE_API_AUTH_LEEWAY", "0s", "COMMERCE_API_AUTH_JWKS_REFRESH", "soon", "COMMERCE_API_AUTH_ADMIN_ROLE", "cat admin"), auth.Config{},
			[]string{"COMMERCE_API_AUTH_LEEWAY", "COMMERCE_API_AUTH_JWKS_REFRESH", "COMMERCE_API_AUTH_ADMIN_ROLE"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			configtest.Check(t, tc.env, auth.Load, tc.want, tc.wantErr)
		})
	}
}

func TestPlainHTTP(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		url  string
		want bool
	}{
		{"https://idp.example/certs", false},
		{"http://127.0.0.1:8081/certs", false},
		{"http://localhost/certs", false},
		{"http://[::1]:9/certs", false},
		{"http://keycloak:8080/realms/c/protocol/openid-connect/certs", true},
		{"http://10.1.2.3/certs", true},
	} {
		t.Run(tc.url, func(t *testing.T) {
			t.Parallel()
			if got := (auth.Config{JWKSURL: tc.url}).PlainHTTP(); got != tc.want {
				t.Errorf("PlainHTTP = %v, want %v", got, tc.want)
			}
		})
	}
}
