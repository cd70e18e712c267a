package auth_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/api/auth"
)

func TestBearerToken(t *testing.T) {
	t.Parallel()
	const jwtLike = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhIn0.c2ln"
	tests := []struct {
		name        string
		values      []string // Authorization header values; nil for none
		wantToken   string
		wantPresent bool
		wantDetail  string // a part of the error's detail; "" for no error
	}{
		{"no header", nil, "", false, ""},
		{"bearer", []string{"Bearer " + jwtLike}, jwtLike, true, ""},
		{"scheme in any case", []string{"bEaReR " + jwtLike}, jwtLike, true, ""},
		{"several spaces", []string{"Bearer     " + jwtLike}, jwtLike, true, ""},
		{"padded b64token", []string{"Bearer abc+/=="}, "abc+/==", true, ""},
		{"empty", []string{""}, "", true, "empty"},
		{"bearer without token", []string{"Bearer"}, "", true, `no token after "Bearer"`},
		{"bearer and spaces only", []string{"Bearer    "}, "", true, `no token after "Bearer"`},
		{"basic", []string{"Basic YWxpY2U6c2VjcmV0"}, "", true, "uses the Basic scheme"},
		{"token without scheme", []string{jwtLike}, "", true, `not "Bearer <token>"`},
		{"leading space", []string{" Bearer " + jwtLike}, "", true, "starts with a space"},
		{"tab instead of space", []string{"Bearer\t" + jwtLike}, "", true, `not "Bearer <token>"`},
		{"two headers", []string{"Bearer a", "Bearer b"}, "", true, "more than one"},
		{"token with a space inside", []string{"Bearer abc def"}, "", true, "characters a token never has"},
		{"only padding", []string{"Bearer ==="}, "", true, "characters a token never has"},
		{"non-ASCII", []string{"Bearer tökén"}, "", true, "characters a token never has"},
		{"non-ASCII scheme", []string{"Bëarer abc"}, "", true, `not "Bearer <token>"`},
		{"quote in scheme", []string{`Bear"er abc`}, "", true, `not "Bearer <token>"`},
		{"huge", []string{"Bearer " + strings.Repeat("a", 9000)}, "", true, "longer than 8192 bytes"},
		{"control characters", []string{"Bearer a\x00b\x7f"}, "", true, "characters a token never has"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			for _, v := range tc.values {
				h.Add("Authorization", v)
			}
			token, present, err := auth.BearerToken(h)
			if token != tc.wantToken || present != tc.wantPresent {
				t.Errorf("got (%q, %v), want (%q, %v)", token, present, tc.wantToken, tc.wantPresent)
			}
			if tc.wantDetail == "" {
				if err != nil {
					t.Fatalf("error %v", err)
				}
				return
			}
			var e *auth.Error
			if !errors.As(err, &e) {
				t.Fatalf("error %v, want an *auth.Error", err)
			}
			if diff := cmp.Diff([]any{http.StatusUnauthorized, "invalid_request"}, []any{e.Status, e.Code}); diff != "" {
				t.Errorf("status and code (-want +got):\n%s", diff)
			}
			if !strings.Contains(e.Detail, tc.wantDetail) {
				t.Errorf("detail %q lacks %q", e.Detail, tc.wantDetail)
			}
			checkChallenge(t, e.Challenge(), "invalid_request")
		})
	}
}

// checkChallenge asserts that c is an RFC 6750 challenge with the error
// code: the realm, the code, and a description of allowed characters.
func checkChallenge(t *testing.T, c, code string) {
	t.Helper()
	prefix := `Bearer realm="commerce-api", error="` + code + `", error_description="`
	desc, ok := strings.CutPrefix(c, prefix)
	if !ok || !strings.HasSuffix(desc, `"`) {
		t.Fatalf("challenge %q, want %s...\"", c, prefix)
	}
	desc = strings.TrimSuffix(desc, `"`)
	for i := 0; i < len(desc); i++ {
		if b := desc[i]; b < 0x20 || b > 0x7e || b == '"' || b == '\\' {
			t.Fatalf("error_description has byte %#x, outside RFC 6750's set: %q", b, desc)
		}
	}
}

// FuzzBearerToken: whatever the header holds, BearerToken returns a token
// that is a b64token, or no token and a 401 whose challenge is well formed.
func FuzzBearerToken(f *testing.F) {
	for _, s := range []string{"Bearer abc", "Bearer", "Basic x", "", "bearer  a.b.c", "Bearer \xff", "Bearer a=b", strings.Repeat(" ", 100)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		token, present, err := auth.BearerToken(http.Header{"Authorization": {v}})
		if !present {
			t.Fatal("a header that is there is reported absent")
		}
		if err == nil {
			if token == "" || len(token) > 8192 || strings.ContainsFunc(token, func(r rune) bool { return r <= ' ' || r > '~' }) {
				t.Fatalf("accepted token %q", token)
			}
			return
		}
		var e *auth.Error
		if !errors.As(err, &e) || e.Status != http.StatusUnauthorized || token != "" {
			t.Fatalf("(%q, %v) for %q", token, err, v)
		}
		checkChallenge(t, e.Challenge(), "invalid_request")
	})
}
