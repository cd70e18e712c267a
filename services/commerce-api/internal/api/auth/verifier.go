package auth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/loopers/commerce-pipeline/pkg/events"
)

// Realm is the realm of every WWW-Authenticate challenge.
const Realm = "commerce-api"

// Principal is who a verified token speaks for.
type Principal struct {
	User  string   // the token's sub
	Roles []string // from the configured role claims
	Admin bool     // Roles holds the admin role
}

// Verifier checks bearer tokens against the identity provider's keys.
type Verifier struct {
	cfg     Config
	keys    *keySet
	parser  *jwt.Parser
	metrics *metrics
}

// New returns a Verifier for a jwt-mode cfg and reads the key set once. A
// key set file that cannot be read or parsed is an error; a URL that cannot
// be fetched is not (the identity provider may start after the API): the
// Verifier refuses tokens with 503 and Ready fails until a read works. The
// key set is read again by Run. client fetches the set (nil: a client of
// its own).
func New(ctx context.Context, cfg Config, client *http.Client, logger *slog.Logger) (*Verifier, error) {
	if cfg.Mode != ModeJWT {
		return nil, fmt.Errorf("auth: New needs COMMERCE_API_AUTH_MODE=jwt, got %q", cfg.Mode)
	}
	if client == nil {
		client = &http.Client{Timeout: fetchTimeout}
	}
	m := newMetrics()
	v := &Verifier{
		cfg:  cfg,
		keys: newKeySet(ctx, cfg, client, logger, m),
		parser: jwt.NewParser(
			jwt.WithValidMethods(Algorithms),
			jwt.WithIssuer(cfg.Issuer),
			jwt.WithAudience(cfg.Audience),
			jwt.WithLeeway(cfg.Leeway),
			jwt.WithExpirationRequired(),
			jwt.WithIssuedAt(),
		),
		metrics: m,
	}
	if err := v.keys.refresh(ctx, true); err != nil {
		if cfg.JWKSFile != "" {
			return nil, fmt.Errorf("COMMERCE_API_AUTH_JWKS_FILE: %w", err)
		}
		// Logged by the read; the service starts unready.
	}
	return v, nil
}

// Run reads the key set again every COMMERCE_API_AUTH_JWKS_REFRESH (sooner while reads
// fail) until ctx ends.
func (v *Verifier) Run(ctx context.Context) { v.keys.run(ctx) }

// Ready is a readiness check: it fails while no key set has been read.
func (v *Verifier) Ready(ctx context.Context) error { return v.keys.ready(ctx) }

// Register adds the Verifier's metrics to reg.
func (v *Verifier) Register(reg prometheus.Registerer) error { return v.metrics.register(reg) }

// Config is the configuration the Verifier checks against.
func (v *Verifier) Config() Config { return v.cfg }

// Verify checks a compact JWS token: an accepted algorithm, a signature by
// the key its kid names, iss, aud, exp, nbf and iat (with the leeway), and a
// sub that is a valid user id. Every failure is an *Error.
func (v *Verifier) Verify(ctx context.Context, token string) (Principal, error) {
	claims := jwt.MapClaims{}
	tok, err := v.parser.ParseWithClaims(token, claims, v.keyfunc(ctx))
	if err != nil {
		return Principal{}, v.fail(v.explain(algRefused(tok, err), claims))
	}
	sub, err := claims.GetSubject()
	if err != nil || sub == "" {
		return Principal{}, v.fail(invalidToken("subject", "the token has no sub claim (the acting user)"))
	}
	if err := events.ValidateUserID(sub); err != nil {
		return Principal{}, v.fail(invalidToken("subject", "the token's sub is not a valid user id: "+err.Error()))
	}
	p := Principal{User: sub, Roles: roles(claims, v.cfg.RoleClaims)}
	for _, r := range p.Roles {
		p.Admin = p.Admin || r == v.cfg.AdminRole
	}
	return p, nil
}

// RequireAdmin refuses a principal without the admin role, for an
// operation described by what ("creating products").
func (v *Verifier) RequireAdmin(p Principal, what string) error {
	if p.Admin {
		return nil
	}
	return v.fail(&Error{Status: http.StatusForbidden, Code: "insufficient_scope", reason: "role",
		Detail: what + " needs the role " + v.cfg.AdminRole + " in the token (claims " + strings.Join(v.cfg.RoleClaims, ", ") + "); this token's roles: " + listOrNone(p.Roles)})
}

// Missing is the error for an operation that needs a user and got no
// token; xUserID says the request sent X-User-ID, which jwt mode ignores.
func (v *Verifier) Missing(xUserID bool) error {
	d := "this operation needs a bearer token: send Authorization: Bearer <JWT> issued by " + v.cfg.Issuer
	if xUserID {
		d += "; X-User-ID is not accepted when the API checks tokens"
	}
	return v.fail(&Error{Status: http.StatusUnauthorized, reason: "missing", Detail: d})
}

// fail counts e and returns it.
func (v *Verifier) fail(e *Error) error {
	v.metrics.failed(e.reason)
	return e
}

// keyfunc picks the key a token names. A token must name one (kid): the
// key set may hold several keys during a rotation, and trying each would
// let a token choose among them.
func (v *Verifier) keyfunc(ctx context.Context) jwt.Keyfunc {
	return func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		if kid == "" {
			return nil, errNoKID
		}
		k, err := v.keys.lookup(ctx, kid)
		if err != nil {
			return nil, err
		}
		if !fitsAlg(t.Method.Alg(), k) {
			return nil, fmt.Errorf("%w: key %q cannot verify %s", errWrongAlg, kid, t.Method.Alg())
		}
		return k.pub, nil
	}
}

var (
	errNoKID    = errors.New("no kid")
	errWrongAlg = errors.New("algorithm does not fit the key")
	// errAlgNotAccepted: the token's header names an alg outside
	// Algorithms, which the parser refuses before any key is looked up.
	errAlgNotAccepted = errors.New("alg not accepted")
)

// algRefused marks err with errAlgNotAccepted when the parser refused the
// token for its alg: the signature was not checked (or the alg is unknown
// to the parser) and tok's header names an alg outside Algorithms. The
// header says so; the parser's error says it only in its text.
func algRefused(tok *jwt.Token, err error) error {
	unchecked := errors.Is(err, jwt.ErrTokenSignatureInvalid) || errors.Is(err, jwt.ErrTokenUnverifiable)
	if tok == nil || !unchecked {
		return err
	}
	if alg, _ := tok.Header["alg"].(string); slices.Contains(Algorithms, alg) {
		return err
	}
	return fmt.Errorf("%w: %w", errAlgNotAccepted, err)
}

// explain turns a parse error into the Error a client sees. The details
// name what failed and the values the client can check, never a key.
func (v *Verifier) explain(err error, claims jwt.MapClaims) *Error {
	switch {
	case errors.Is(err, errKeysUnavailable):
		return &Error{Status: http.StatusServiceUnavailable, reason: "unavailable", RetryAfter: 5,
			Detail: "the identity provider's signing keys cannot be read right now, so the token cannot be checked; retry later"}
	case errors.Is(err, errNoKID):
		return invalidToken("kid", "the token's header has no kid naming its signing key")
	case errors.Is(err, errUnknownKey):
		return invalidToken("kid", "the token is signed with a key the identity provider does not publish (unknown kid)")
	case errors.Is(err, errWrongAlg):
		return invalidToken("alg", "the token's alg does not fit the key its kid names")
	case errors.Is(err, jwt.ErrTokenMalformed):
		return invalidToken("malformed", "the token is not a well-formed JWT (three base64url parts: header, claims, signature)")
	case errors.Is(err, errAlgNotAccepted):
		return invalidToken("alg", "the token's alg is not accepted; accepted: "+strings.Join(Algorithms, ", "))
	case errors.Is(err, jwt.ErrTokenSignatureInvalid), errors.Is(err, jwt.ErrTokenUnverifiable):
		return invalidToken("signature", "the token's signature does not verify with the key its kid names")
	}
	// The signature holds; a claim does not. Say every claim that fails.
	var parts []string
	reason := "claims"
	add := func(r, d string) {
		if len(parts) == 0 {
			reason = r
		}
		parts = append(parts, d)
	}
	if errors.Is(err, jwt.ErrTokenExpired) {
		add("expired", "the token expired"+at(claims.GetExpirationTime))
	}
	if errors.Is(err, jwt.ErrTokenNotValidYet) {
		add("not_yet_valid", "the token is not valid before"+at(claims.GetNotBefore))
	}
	if errors.Is(err, jwt.ErrTokenUsedBeforeIssued) {
		add("not_yet_valid", "the token is issued in the future"+at(claims.GetIssuedAt))
	}
	if errors.Is(err, jwt.ErrTokenInvalidIssuer) {
		iss, _ := claims.GetIssuer()
		add("issuer", fmt.Sprintf("the token's iss %s is not the issuer this API trusts (%s)", quote(iss), v.cfg.Issuer))
	}
	if errors.Is(err, jwt.ErrTokenInvalidAudience) {
		add("audience", "the token's aud does not include "+v.cfg.Audience)
	}
	if errors.Is(err, jwt.ErrTokenRequiredClaimMissing) {
		for _, c := range []struct{ claim, reason, detail string }{
			{"exp", "claims", "the token has no exp claim; tokens without an expiry are refused"},
			{"iss", "issuer", "the token has no iss claim; it must be " + v.cfg.Issuer},
			{"aud", "audience", "the token has no aud claim; it must include " + v.cfg.Audience},
		} {
			if _, ok := claims[c.claim]; !ok {
				add(c.reason, c.detail)
			}
		}
	}
	if errors.Is(err, jwt.ErrInvalidType) {
		add("claims", "a registered claim of the token has the wrong type (exp, nbf and iat are numbers; iss a string; aud a string or an array of strings)")
	}
	if len(parts) == 0 {
		add("claims", "the token's claims are invalid")
	}
	return invalidToken(reason, strings.Join(parts, "; "))
}

// at formats a claim's time for a detail: " at 2026-01-02T03:04:05Z".
func at(get func() (*jwt.NumericDate, error)) string {
	d, err := get()
	if err != nil || d == nil {
		return ""
	}
	return " at " + d.UTC().Format(time.RFC3339)
}

func invalidToken(reason, detail string) *Error {
	return &Error{Status: http.StatusUnauthorized, Code: "invalid_token", reason: reason, Detail: detail}
}

// roles collects the string array members of the role claims. A name is a
// top-level claim when one has that exact name (Auth0's namespaced claims
// are URLs full of dots), otherwise a dotted path into nested objects.
func roles(claims jwt.MapClaims, names []string) []string {
	var out []string
	for _, name := range names {
		v, ok := claims[name]
		if !ok {
			var cur any = map[string]any(claims)
			for part := range strings.SplitSeq(name, ".") {
				obj, isObj := cur.(map[string]any)
				if !isObj {
					cur = nil
					break
				}
				cur = obj[part]
			}
			v = cur
		}
		if list, ok := v.([]any); ok {
			for _, r := range list {
				if s, ok := r.(string); ok {
					out = append(out, s)
				}
			}
		}
	}
	return out
}

func listOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	const most = 10
	if len(s) > most {
		return strings.Join(s[:most], ", ") + fmt.Sprintf(" and %d more", len(s)-most)
	}
	return strings.Join(s, ", ")
}

// quote quotes a value taken from a token for a detail, cut short.
func quote(s string) string {
	const most = 100
	if len(s) > most {
		s = s[:most] + "…"
	}
	return fmt.Sprintf("%q", s)
}

// Token is BearerToken, counting a malformed header as a failure.
func (v *Verifier) Token(h http.Header) (token string, present bool, err error) {
	token, present, err = BearerToken(h)
	var e *Error
	if errors.As(err, &e) {
		v.metrics.failed(e.reason)
	}
	return token, present, err
}
