package auth

import (
	"fmt"
	"testing"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/go-cmp/cmp"
)

// TestAlgRefusalIsReadFromTheHeader: a token is refused for its alg when
// the parser refused it unchecked and its header names an alg outside
// Algorithms, whatever the parser's error says; an accepted alg whose
// signature fails is a signature problem, even if the error's text speaks
// of the signing method.
func TestAlgRefusalIsReadFromTheHeader(t *testing.T) {
	t.Parallel()
	withAlg := func(alg string) *jwt.Token { return &jwt.Token{Header: map[string]any{"alg": alg}} }
	for _, tc := range []struct {
		name string
		tok  *jwt.Token
		err  error
		want string // the reason
	}{
		{"HS256, refused in any words", withAlg("HS256"), fmt.Errorf("%w: not on the list", jwt.ErrTokenSignatureInvalid), "alg"},
		{"an alg the parser does not know", withAlg("XY9"), fmt.Errorf("%w: no such method", jwt.ErrTokenUnverifiable), "alg"},
		{"no alg at all", &jwt.Token{Header: map[string]any{}}, fmt.Errorf("%w: unspecified", jwt.ErrTokenUnverifiable), "alg"},
		{"ES256 with a bad signature", withAlg("ES256"), fmt.Errorf("%w: signing method check failed", jwt.ErrTokenSignatureInvalid), "signature"},
		{"malformed, no header read", nil, fmt.Errorf("%w: bad base64", jwt.ErrTokenMalformed), "malformed"},
		{"expired, accepted alg", withAlg("RS256"), fmt.Errorf("%w: signing method fine", jwt.ErrTokenExpired), "expired"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v := &Verifier{}
			got := v.explain(algRefused(tc.tok, tc.err), jwt.MapClaims{}).reason
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("reason (-want +got):\n%s", diff)
			}
		})
	}
}
