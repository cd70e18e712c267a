package api

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"

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
}

// FieldError is one problem with one part of a request. Pointer is a JSON
// Pointer (RFC 6901) into the body, or names a query parameter or header.
type FieldError struct {
	Pointer string `json:"pointer"`
	Detail  string `json:"detail"`
}

// ValidationError lists every problem found in one request.
type ValidationError struct{ Fields []FieldError }

func (e *ValidationError) Error() string {
	return "the request has " + plural(len(e.Fields), "invalid field")
}

// add records a problem; check reports whether any problem was recorded.
func (e *ValidationError) add(pointer, detail string) {
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
	)
	switch {
	case errors.As(err, &verr):
		return newProblem(http.StatusBadRequest, "validation", verr.Error()+"; see errors", verr.Fields)
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
	default:
		return newProblem(http.StatusInternalServerError, "internal", "the server failed to handle the request; it has been logged", nil)
	}
}

var slugs = map[int]string{
	http.StatusBadRequest:         "bad-request",
	http.StatusUnauthorized:       "unauthorized",
	http.StatusNotFound:           "not-found",
	http.StatusMethodNotAllowed:   "method-not-allowed",
	http.StatusServiceUnavailable: "unavailable",
}

func newProblem(status int, slug, detail string, fields []FieldError) Problem {
	return Problem{Type: ProblemTypeBase + slug, Title: http.StatusText(status), Status: status, Detail: detail, Errors: fields}
}

// writeError answers with the problem for err, logging server errors.
func writeError(w http.ResponseWriter, r *http.Request, logger *slog.Logger, err error) {
	p := problemFor(err)
	switch {
	case r.Context().Err() != nil:
		// The client went away mid-request; nothing failed on our side.
		logger.DebugContext(r.Context(), "request abandoned by the client", "method", r.Method, "path", r.URL.Path, "err", err)
	case p.Status >= http.StatusInternalServerError:
		logger.ErrorContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	w.Header().Set("Content-Type", ProblemContentType)
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
