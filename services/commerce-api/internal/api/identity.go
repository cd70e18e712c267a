package api

import (
	"context"
	"net/http"

	"github.com/loopers/commerce-pipeline/pkg/events"
	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/api/auth"
)

// UserHeader carries the acting user's id in header mode.
const UserHeader = "X-User-ID"

// need is what an operation asks of its caller.
type need int

const (
	anyone need = iota // no user needed; one that is there is recorded (a view's viewer)
	aUser              // a user: likes, orders, payments
	admin              // a user with the admin role: creating products
)

type principalKey struct{}

// guard authenticates a request before h runs, in jwt mode: a request
// that carries a token has it verified whatever the route (a present and
// invalid token is always a 401), one without a token reaches only routes
// that need no user, and one without the admin role no admin route. The
// verified principal travels in the request's context to actor. In header
// mode guard changes nothing: each handler reads X-User-ID where it always
// did, and no route checks a role (the gateway in front decides).
func (s *server) guard(n need, h func(http.ResponseWriter, *http.Request) error) func(http.ResponseWriter, *http.Request) error {
	if s.auth == nil {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) error {
		token, present, err := s.auth.Token(r.Header)
		if err != nil {
			return err
		}
		var p auth.Principal
		switch {
		case present:
			if p, err = s.auth.Verify(r.Context(), token); err != nil {
				return err
			}
		case n != anyone:
			return s.auth.Missing(r.Header.Get(UserHeader) != "")
		}
		if n == admin {
			if err := s.auth.RequireAdmin(p, "creating products"); err != nil {
				return err
			}
		}
		return h(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	}
}

// actor returns the acting user; "" when there is none and none is
// required. In jwt mode it is the verified token's sub (guard has already
// refused a request that needs one and has none). In header mode it is
// X-User-ID, which must follow the user id rule of package events (the
// consumers apply the same rule to the events it ends up in).
func (s *server) actor(r *http.Request, required bool) (string, error) {
	if s.auth != nil {
		p, _ := r.Context().Value(principalKey{}).(auth.Principal)
		if p.User == "" && required {
			// Unreachable behind guard; kept so that a route registered
			// without it fails closed.
			return "", s.auth.Missing(false)
		}
		return p.User, nil
	}
	u := r.Header.Get(UserHeader)
	switch {
	case u == "" && required:
		return "", errNoUser
	case u == "":
		return "", nil
	}
	if err := events.ValidateUserID(u); err != nil {
		return "", &ValidationError{Fields: []FieldError{{Pointer: UserHeader, Detail: "is invalid: " + err.Error()}}}
	}
	return u, nil
}

// publicConfigJSON is what GET /api/v1/config tells anyone: how this API
// learns who calls, so that a client (the live page) knows whether to ask
// for a token. Nothing in it is secret: a token carries the same issuer
// and audience.
type publicConfigJSON struct {
	Auth authConfigJSON `json:"auth"`
	// TraceURL links a trace: {traceId} in it is the trace's id. Absent
	// while tracing is off or no trace UI is configured.
	TraceURL string `json:"traceUrl,omitempty"`
}

type authConfigJSON struct {
	Mode       string `json:"mode"`
	UserHeader string `json:"userHeader,omitempty"`
	Issuer     string `json:"issuer,omitempty"`
	Audience   string `json:"audience,omitempty"`
	AdminRole  string `json:"adminRole,omitempty"`
}

func (s *server) publicConfig(w http.ResponseWriter, _ *http.Request) error {
	a := authConfigJSON{Mode: string(auth.ModeHeader), UserHeader: UserHeader}
	if s.auth != nil {
		c := s.auth.Config()
		a = authConfigJSON{Mode: string(auth.ModeJWT), Issuer: c.Issuer, Audience: c.Audience, AdminRole: c.AdminRole}
	}
	w.Header().Set("Cache-Control", "no-cache")
	return writeJSON(w, http.StatusOK, publicConfigJSON{Auth: a, TraceURL: s.trace})
}
