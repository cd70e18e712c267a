package api

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/loopers/commerce-pipeline/internal/logkey"
	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/api/auth"
	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/store"
	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/stream"
)

// ProblemContentType is the media type of every error response (RFC 9457).
const ProblemContentType = "application/problem+json"

// ProblemTypeBase prefixes the type URI of every problem this API returns.
const ProblemTypeBase = "https://commerce-api.loopers.dev/problems/"

// Problem is an RFC 9457 problem details object.
type Problem struct {
	Type   string       `json:"type"`
	Title  string       `json:"title"`
	Status int          `json:"status"`
	Detail string       `json:"detail"`
	Errors []FieldError `json:"errors,omitempty"`
	// ErrorsOmitted counts the field problems found beyond MaxFieldErrors.
	ErrorsOmitted int `json:"errorsOmitted,omitempty"`
	// retryAfter, in seconds, is sent as the Retry-After header when > 0.
	retryAfter int
	// challenge is sent as the WWW-Authenticate header when not "".
	challenge string
}

// MaxFieldErrors is the most field problems one response lists; the rest
// are only counted, so a body of a million unknown fields cannot make a
// problem document larger than the body.
const MaxFieldErrors = 20

// maxPointerBytes bounds how much of a client-chosen name a field problem
// repeats.
const maxPointerBytes = 100

// RetryAfterSeconds is the Retry-After of a 503: PostgreSQL restarts and
// failovers observed took about a second.
const RetryAfterSeconds = 1

// FieldError is one problem with one part of a request. Pointer is a JSON
// Pointer (RFC 6901) into the body, or names a query parameter or header.
type FieldError struct {
	Pointer string `json:"pointer"`
	Detail  string `json:"detail"`
}

// ValidationError lists the problems found in one request: the first
// MaxFieldErrors in Fields, and how many more there were in Omitted.
type ValidationError struct {
	Fields  []FieldError
	Omitted int
}

func (e *ValidationError) Error() string {
	return "the request has " + plural(len(e.Fields)+e.Omitted, "invalid field")
}

// add records a problem; check reports whether any problem was recorded.
func (e *ValidationError) add(pointer, detail string) {
	if len(e.Fields) >= MaxFieldErrors {
		e.Omitted++
		return
	}
	if len(pointer) > maxPointerBytes {
		pointer = strings.ToValidUTF8(pointer[:maxPointerBytes], "") + "…"
	}
	e.Fields = append(e.Fields, FieldError{Pointer: pointer, Detail: detail})
}

func (e *ValidationError) check() error {
	if len(e.Fields) == 0 {
		return nil
	}
	return e
}

// requestError is a client error that is not about a field.
type requestError struct {
	status int
	detail string
}

func (e *requestError) Error() string { return e.detail }

func newRequestError(status int, detail string) error {
	return &requestError{status: status, detail: detail}
}

var errNoUser = newRequestError(http.StatusUnauthorized, "the X-User-ID header is required for this operation")

// problemFor is the one mapping from an error to its HTTP status and problem.
func problemFor(err error) Problem {
	var (
		verr   *ValidationError
		rerr   *requestError
		maxErr *http.MaxBytesError
		aerr   *auth.Error
	)
	switch {
	case errors.As(err, &aerr):
		p := newProblem(aerr.Status, authSlug(aerr), aerr.Detail, nil)
		p.challenge, p.retryAfter = aerr.Challenge(), aerr.RetryAfter
		return p
	case errors.As(err, &verr):
		p := newProblem(http.StatusBadRequest, "validation", verr.Error()+"; see errors", verr.Fields)
		if verr.Omitted > 0 {
			p.ErrorsOmitted = verr.Omitted
			p.Detail = verr.Error() + "; errors lists the first " + itoa(MaxFieldErrors)
		}
		return p
	case errors.As(err, &maxErr):
		return newProblem(http.StatusRequestEntityTooLarge, "body-too-large",
			"the request body exceeds "+plural(int(maxErr.Limit), "byte"), nil)
	case errors.As(err, &rerr):
		return newProblem(rerr.status, slugs[rerr.status], rerr.detail, nil)
	case errors.Is(err, stream.ErrTooManyStreams), errors.Is(err, stream.ErrClosed):
		return newProblem(http.StatusServiceUnavailable, "stream-unavailable", err.Error()+"; retry later", nil)
	case errors.Is(err, store.ErrNotFound):
		return newProblem(http.StatusNotFound, "not-found", err.Error(), nil)
	case errors.Is(err, store.ErrInsufficientStock):
		return newProblem(http.StatusConflict, "insufficient-stock", err.Error(), nil)
	case errors.Is(err, store.ErrConflict):
		return newProblem(http.StatusConflict, "conflict", err.Error(), nil)
	case errors.Is(err, store.ErrInvalidInput):
		// The driver's message may quote the value; the client knows it.
		return newProblem(http.StatusBadRequest, "invalid-input", "the database refused a value of the request as invalid", nil)
	case errors.Is(err, store.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		// Never the driver's message: it names hosts and users.
		p := newProblem(http.StatusServiceUnavailable, "unavailable",
			"the database is unavailable, restarting or too slow to answer; retry after "+plural(RetryAfterSeconds, "second"), nil)
		p.retryAfter = RetryAfterSeconds
		return p
	default:
		return newProblem(http.StatusInternalServerError, "internal", "the server failed to handle the request; it has been logged", nil)
	}
}

var slugs = map[int]string{
	http.StatusUnsupportedMediaType: "unsupported-media-type",
	http.StatusBadRequest:           "bad-request",
	http.StatusUnauthorized:         "unauthorized",
	http.StatusNotFound:             "not-found",
	http.StatusMethodNotAllowed:     "method-not-allowed",
	http.StatusServiceUnavailable:   "unavailable",
}

// authSlug names the problem type of a refused credential.
func authSlug(e *auth.Error) string {
	switch {
	case e.Status == http.StatusServiceUnavailable:
		return "auth-unavailable"
	case e.Status == http.StatusForbidden:
		return "forbidden"
	case e.Code == "invalid_token":
		return "invalid-token"
	case e.Code == "invalid_request":
		return "invalid-authorization"
	}
	return "unauthorized"
}

func newProblem(status int, slug, detail string, fields []FieldError) Problem {
	return Problem{Type: ProblemTypeBase + slug, Title: http.StatusText(status), Status: status, Detail: detail, Errors: fields}
}

// writeError answers with the problem for err, logging server errors.
func writeError(w http.ResponseWriter, r *http.Request, logger *slog.Logger, err error) {
	p := problemFor(err)
	switch {
	case errors.Is(r.Context().Err(), context.Canceled):
		// The client went away mid-request; nothing failed on our side.
		logger.DebugContext(r.Context(), "request abandoned by the client", "method", r.Method, "path", r.URL.Path, logkey.Err, err)
	case p.Status >= http.StatusInternalServerError:
		logger.ErrorContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path, logkey.Err, err)
	}
	w.Header().Set("Content-Type", ProblemContentType)
	if p.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(p.retryAfter))
	}
	if p.challenge != "" {
		w.Header().Set("WWW-Authenticate", p.challenge)
	}
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

func writeJSON(w http.ResponseWriter, status int, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	writeBody(w, status, body)
	return nil
}

func writeBody(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func plural(n int, word string) string {
	s := itoa(int64(n)) + " " + word
	if n != 1 {
		s += "s"
	}
	return s
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
