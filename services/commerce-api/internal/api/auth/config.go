// Package auth decides who calls commerce-api. In jwt mode it verifies
// OAuth 2.0 bearer tokens (RFC 6750) that are JSON Web Tokens signed by an
// identity provider, against the provider's JSON Web Key Set; in header mode
// it leaves the acting user to the X-User-ID header that a trusted gateway in
// front sets.
//
// Signatures and claims are checked by github.com/golang-jwt/jwt/v5 and keys
// parsed by github.com/MicahParks/jwkset: this package only fetches and
// caches the key set, picks the key a token names, and turns every failure
// into an Error that says what is wrong in words a client can act on.
package auth

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/loopers/commerce-pipeline/internal/config"
)

// Mode is how the API learns who calls.
type Mode string

const (
	// ModeHeader takes the acting user from X-User-ID as sent, for a gateway
	// that authenticates and sets it. Anyone who reaches the listener
	// directly can act as anyone.
	ModeHeader Mode = "header"
	// ModeJWT takes the acting user from a verified bearer token's sub.
	ModeJWT Mode = "jwt"
)

// Defaults of the AUTH_* variables.
const (
	DefaultAdminRole      = "catalog-admin"
	DefaultLeeway         = 30 * time.Second
	DefaultJWKSRefresh    = 15 * time.Minute
	DefaultJWKSMinRefresh = 10 * time.Second
)

// DefaultRoleClaims are where roles are read by default: a top-level
// "roles" array (Auth0 rules, Azure AD app roles, most hand-made issuers)
// and Keycloak's realm roles.
var DefaultRoleClaims = []string{"roles", "realm_access.roles"}

// Config is the AUTH_* part of commerce-api's configuration.
type Config struct {
	Mode Mode // COMMERCE_API_AUTH_MODE: header (default) or jwt
	// Issuer (COMMERCE_API_AUTH_ISSUER) must equal a token's iss; Audience (COMMERCE_API_AUTH_AUDIENCE)
	// must be one of its aud. Both are required in jwt mode.
	Issuer   string
	Audience string
	// JWKSURL (COMMERCE_API_AUTH_JWKS_URL) or JWKSFile (COMMERCE_API_AUTH_JWKS_FILE), exactly one in jwt
	// mode: where the key set is read from. Both are read again every
	// JWKSRefresh, and on a token naming an unknown key at most once per
	// JWKSMinRefresh.
	JWKSURL        string
	JWKSFile       string
	JWKSRefresh    time.Duration // COMMERCE_API_AUTH_JWKS_REFRESH, default 15m
	JWKSMinRefresh time.Duration // COMMERCE_API_AUTH_JWKS_MIN_REFRESH, default 10s
	// Leeway (COMMERCE_API_AUTH_LEEWAY, default 30s) is the clock difference tolerated
	// when exp, nbf and iat are compared with this server's clock.
	Leeway time.Duration
	// AdminRole (COMMERCE_API_AUTH_ADMIN_ROLE, default catalog-admin) is the role a token
	// needs to create products.
	AdminRole string
	// RoleClaims (COMMERCE_API_AUTH_ROLE_CLAIMS, default roles,realm_access.roles) are the
	// claims whose string arrays hold a token's roles; a dotted name is a
	// path into nested objects unless a top-level claim has that exact name.
	RoleClaims []string
}

// Load reads the AUTH_* variables through l. In jwt mode it requires the
// issuer, the audience and exactly one key set source, and reads a key set
// file once so that one that does not parse stops the start. In header mode
// a jwt-only variable that is set is an error too: it would mean an operator
// believes tokens are checked while they are not.
func Load(l *config.Loader) Config {
	c := Config{
		Mode:           Mode(l.String("COMMERCE_API_AUTH_MODE", string(ModeHeader))),
		Issuer:         l.String("COMMERCE_API_AUTH_ISSUER", ""),
		Audience:       l.String("COMMERCE_API_AUTH_AUDIENCE", ""),
		JWKSURL:        l.String("COMMERCE_API_AUTH_JWKS_URL", ""),
		JWKSFile:       l.String("COMMERCE_API_AUTH_JWKS_FILE", ""),
		JWKSRefresh:    l.Duration("COMMERCE_API_AUTH_JWKS_REFRESH", DefaultJWKSRefresh),
		JWKSMinRefresh: l.Duration("COMMERCE_API_AUTH_JWKS_MIN_REFRESH", DefaultJWKSMinRefresh),
		Leeway:         l.Duration("COMMERCE_API_AUTH_LEEWAY", DefaultLeeway),
		AdminRole:      l.String("COMMERCE_API_AUTH_ADMIN_ROLE", DefaultAdminRole),
		RoleClaims:     l.List("COMMERCE_API_AUTH_ROLE_CLAIMS", DefaultRoleClaims),
	}
	switch c.Mode {
	case ModeHeader:
		for _, v := range [][2]string{{"COMMERCE_API_AUTH_ISSUER", c.Issuer}, {"COMMERCE_API_AUTH_AUDIENCE", c.Audience}, {"COMMERCE_API_AUTH_JWKS_URL", c.JWKSURL}, {"COMMERCE_API_AUTH_JWKS_FILE", c.JWKSFile}} {
			if v[1] != "" {
				l.Fail(v[0], "is set but COMMERCE_API_AUTH_MODE is header, which checks no token: set COMMERCE_API_AUTH_MODE=jwt, or unset %s", v[0])
			}
		}
	case ModeJWT:
		if c.Issuer == "" {
			l.Fail("COMMERCE_API_AUTH_ISSUER", "is required when COMMERCE_API_AUTH_MODE=jwt (the iss every token must carry)")
		}
		if c.Audience == "" {
			l.Fail("COMMERCE_API_AUTH_AUDIENCE", "is required when COMMERCE_API_AUTH_MODE=jwt (an aud every token must carry)")
		}
		switch {
		case c.JWKSURL == "" && c.JWKSFile == "":
			l.Fail("COMMERCE_API_AUTH_JWKS_URL", "is required when COMMERCE_API_AUTH_MODE=jwt, unless COMMERCE_API_AUTH_JWKS_FILE is set (where the signing keys are)")
		case c.JWKSURL != "" && c.JWKSFile != "":
			l.Fail("COMMERCE_API_AUTH_JWKS_FILE", "is set together with COMMERCE_API_AUTH_JWKS_URL; set exactly one")
		case c.JWKSURL != "":
			if err := checkJWKSURL(c.JWKSURL); err != nil {
				l.Fail("COMMERCE_API_AUTH_JWKS_URL", "%v", err)
			}
		default:
			if _, err := readKeyFile(c.JWKSFile); err != nil {
				l.Fail("COMMERCE_API_AUTH_JWKS_FILE", "%v", err)
			}
		}
	default:
		l.Fail("COMMERCE_API_AUTH_MODE", "must be header or jwt, got %q", c.Mode)
	}
	if c.AdminRole == "" || strings.ContainsFunc(c.AdminRole, func(r rune) bool { return r <= ' ' || r > '~' }) {
		l.Fail("COMMERCE_API_AUTH_ADMIN_ROLE", "must be printable ASCII without spaces, got %q", c.AdminRole)
	}
	return c
}

// checkJWKSURL accepts an absolute http or https URL.
func checkJWKSURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return fmt.Errorf("must be an http:// or https:// URL, got %q", raw)
	}
	return nil
}

// PlainHTTP reports whether the key set is fetched without TLS from a host
// other than this one's loopback: whoever sits on that path could hand the
// API keys of its own and sign tokens for anyone.
func (c Config) PlainHTTP() bool {
	u, err := url.Parse(c.JWKSURL)
	if err != nil || u.Scheme != "http" {
		return false
	}
	return !IsLoopback(u.Hostname())
}

// IsLoopback reports whether host (a name or an IP, no port) only ever
// means this machine: localhost or a loopback address. An empty host, a
// wildcard address or any other name is not.
func IsLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// maxKeySetBytes bounds a key set read from a file or fetched: real ones
// are a few KiB, and a misbehaving endpoint must not fill the memory.
const maxKeySetBytes = 1 << 20

// readKeyFile reads and parses a key set file.
func readKeyFile(path string) (keyMap, error) {
	f, err := os.Open(path)
	if err != nil {
		return keyMap{}, fmt.Errorf("cannot be read: %w", err)
	}
	defer f.Close()
	raw, err := readBounded(f)
	if err != nil {
		return keyMap{}, fmt.Errorf("cannot be read: %w", err)
	}
	km, err := parseKeySet(raw)
	if err != nil {
		return keyMap{}, fmt.Errorf("%s: %w", path, err)
	}
	return km, nil
}

var errTooLarge = errors.New("the key set is larger than 1 MiB")
