package auth

import (
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Error is why a request's credentials were refused: 401 (no usable
// token), 403 (a valid token without the role) or 503 (the keys to check
// it cannot be read).
type Error struct {
	Status int
	// Code is the RFC 6750 error code of the challenge: invalid_request,
	// invalid_token or insufficient_scope; "" when the request carried no
	// credentials at all (RFC 6750 section 3.1).
	Code   string
	Detail string
	// RetryAfter, in seconds, is sent as Retry-After when > 0.
	RetryAfter int
	reason     string // the metric label
}

func (e *Error) Error() string { return e.Detail }

// Challenge is the WWW-Authenticate value of a 401 or 403; "" for others.
func (e *Error) Challenge() string {
	if e.Status != http.StatusUnauthorized && e.Status != http.StatusForbidden {
		return ""
	}
	c := `Bearer realm="` + Realm + `"`
	if e.Code != "" {
		c += `, error="` + e.Code + `", error_description="` + description(e.Detail) + `"`
	}
	return c
}

// description fits a detail into an error_description: RFC 6750 allows
// %x20-21 / %x23-5B / %x5D-7E, so no quote, no backslash, ASCII only.
func description(s string) string {
	const most = 300
	var b strings.Builder
	for _, r := range s {
		if b.Len() >= most {
			b.WriteString("...")
			break
		}
		switch {
		case r == '"':
			b.WriteByte('\'')
		case r == '\\':
			b.WriteByte('/')
		case r >= 0x20 && r <= 0x7e:
			b.WriteRune(r)
		default:
			b.WriteByte('?')
		}
	}
	return b.String()
}

// maxAuthorizationBytes bounds the Authorization header this API reads: a
// real JWT is well under 8 KiB; a longer one is refused unparsed.
const maxAuthorizationBytes = 8 << 10

// BearerToken returns the bearer token of a request's Authorization header
// (RFC 6750 section 2.1); present is false when there is no such header. A
// header that is there but is not "Bearer <token>" is an *Error with code
// invalid_request, answered 401 like every other credential problem so
// that a client has one rule: a 401 means get a token and send it.
func BearerToken(h http.Header) (token string, present bool, err error) {
	vals := h.Values("Authorization")
	if len(vals) == 0 {
		return "", false, nil
	}
	bad := func(detail string) (string, bool, error) {
		return "", true, &Error{Status: http.StatusUnauthorized, Code: "invalid_request", reason: "invalid_request", Detail: detail}
	}
	if len(vals) > 1 {
		return bad("the request has more than one Authorization header")
	}
	v := vals[0]
	if len(v) > maxAuthorizationBytes {
		return bad("the Authorization header is longer than 8192 bytes; no token this API accepts is")
	}
	scheme, rest, _ := strings.Cut(v, " ")
	if !strings.EqualFold(scheme, "Bearer") {
		if scheme == "" {
			return bad(`the Authorization header is empty or starts with a space; send "Bearer <token>"`)
		}
		if !printable(scheme) || len(scheme) > 20 {
			return bad(`the Authorization header is not "Bearer <token>"`)
		}
		return bad("the Authorization header uses the " + scheme + ` scheme; this API takes "Bearer <token>"`)
	}
	token = strings.TrimLeft(rest, " ")
	if token == "" {
		return bad(`the Authorization header has no token after "Bearer"`)
	}
	if !b64token(token) {
		return bad("the bearer token has characters a token never has (RFC 6750 b64token: letters, digits, - . _ ~ + / and trailing =)")
	}
	return token, true, nil
}

// b64token reports whether s is an RFC 6750 b64token:
// 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"=".
func b64token(s string) bool {
	body := strings.TrimRight(s, "=")
	if body == "" {
		return false
	}
	for i := 0; i < len(body); i++ {
		c := body[i]
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if !alnum && strings.IndexByte("-._~+/", c) < 0 {
			return false
		}
	}
	return true
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' || s[i] == '"' || s[i] == '\\' {
			return false
		}
	}
	return true
}

// metrics are the Verifier's series.
type metrics struct {
	failures  *prometheus.CounterVec
	refreshes *prometheus.CounterVec
	keys      prometheus.Gauge
	lastOK    prometheus.Gauge
}

// failureReasons are the reason label's values, fixed so that no client
// can add series.
var failureReasons = []string{"missing", "invalid_request", "malformed", "alg", "kid", "signature", "expired", "not_yet_valid",
	"issuer", "audience", "claims", "subject", "role", "unavailable"}

func newMetrics() *metrics {
	m := &metrics{
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "commerce_api_auth_failures_total",
			Help: "Requests refused for their credentials in jwt mode, by reason.",
		}, []string{"reason"}),
		refreshes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "commerce_api_jwks_refreshes_total",
			Help: "Reads of the identity provider's key set, by result (ok, error).",
		}, []string{"result"}),
		keys: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "commerce_api_jwks_keys",
			Help: "Signing keys in the key set read last.",
		}),
		lastOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "commerce_api_jwks_last_success_timestamp_seconds",
			Help: "When the key set was last read successfully (Unix time); 0 before the first.",
		}),
	}
	for _, r := range failureReasons {
		m.failures.WithLabelValues(r)
	}
	m.refreshes.WithLabelValues("ok")
	m.refreshes.WithLabelValues("error")
	return m
}

func (m *metrics) register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.failures, m.refreshes, m.keys, m.lastOK} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

func (m *metrics) failed(reason string) { m.failures.WithLabelValues(reason).Inc() }

func (m *metrics) refreshed(keys int) {
	m.refreshes.WithLabelValues("ok").Inc()
	m.keys.Set(float64(keys))
	m.lastOK.SetToCurrentTime()
}

func (m *metrics) refreshFailed() { m.refreshes.WithLabelValues("error").Inc() }
