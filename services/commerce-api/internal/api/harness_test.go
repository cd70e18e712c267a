package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/loopers/commerce-pipeline/internal/eventcontract"
	"github.com/loopers/commerce-pipeline/internal/httpserver"
	"github.com/loopers/commerce-pipeline/internal/pg"
	"github.com/loopers/commerce-pipeline/internal/testenv"
	"github.com/loopers/commerce-pipeline/pkg/events"
	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/api"
	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/store"
	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/store/storetest"
)

var (
	specOnce   sync.Once
	specDoc    *openapi3.T
	specRouter routers.Router
	specErr    error
)

// spec loads the embedded OpenAPI document that every response of these
// tests is checked against.
func spec(t *testing.T) (*openapi3.T, routers.Router) {
	t.Helper()
	specOnce.Do(func() {
		// The live page is HTML: compare it as an opaque string.
		openapi3filter.RegisterBodyDecoder("text/html", openapi3filter.FileBodyDecoder)
		specDoc, specErr = openapi3.NewLoader().LoadFromData(api.OpenAPI)
		if specErr == nil {
			specErr = specDoc.Validate(context.Background())
		}
		if specErr == nil {
			specRouter, specErr = gorillamux.NewRouter(specDoc)
		}
	})
	if specErr != nil {
		t.Fatalf("openapi.yaml: %v", specErr)
	}
	return specDoc, specRouter
}

type env struct {
	url string // the test database
	db  *storetest.DB
	st  *store.Store
	srv *httptest.Server
	// admin serves NewAdminHandler on the same dependencies.
	admin *httptest.Server
}

// newEnv serves the real handler over a fresh database. with may adjust the
// dependencies (for example to add a cache).
func newEnv(t testing.TB, with ...func(*api.Deps)) *env {
	t.Helper()
	return newEnvStore(t, nil, with...)
}

// storeConfig is how a test's store connects.
type storeConfig struct {
	URL     string
	Options pg.Options
}

// newEnvStore is newEnv whose store configuration cfg may adjust (nil for
// the default).
func newEnvStore(t testing.TB, cfg func(*storeConfig), with ...func(*api.Deps)) *env {
	t.Helper()
	url := testenv.DatabaseURL(t)
	sc := storeConfig{URL: url, Options: pg.Options{MaxConns: 16}}
	if cfg != nil {
		cfg(&sc)
	}
	st, err := store.Open(context.Background(), sc.URL, sc.Options, events.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	deps := api.Deps{
		Store:   st,
		Logger:  slog.New(slog.DiscardHandler),
		Metrics: prometheus.NewRegistry(),
		Checks:  map[string]httpserver.Check{httpserver.DatabaseCheck: st.Ping},
	}
	for _, f := range with {
		f(&deps)
	}
	h, err := api.NewHandler(deps)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	ah, err := api.NewAdminHandler(deps)
	if err != nil {
		t.Fatal(err)
	}
	admin := httptest.NewServer(ah)
	t.Cleanup(admin.Close)
	e := &env{url: url, db: storetest.Open(t, url), st: st, srv: srv, admin: admin}
	t.Cleanup(func() { checkOutbox(t, e.db) })
	return e
}

var (
	contractOnce sync.Once
	contractDoc  *eventcontract.Contract
	contractErr  error
)

// checkOutbox validates every event a test's requests wrote to the outbox
// against the AsyncAPI document, as checkSpec does every response against
// the OpenAPI one: the payloads the relay will publish verbatim.
func checkOutbox(t testing.TB, db *storetest.DB) {
	t.Helper()
	contractOnce.Do(func() { contractDoc, contractErr = eventcontract.Default() })
	if contractErr != nil {
		t.Fatalf("asyncapi.yaml: %v", contractErr)
	}
	for _, r := range db.Outbox(t, 0) {
		m, ok := contractDoc.Message(r.Type)
		if !ok {
			t.Errorf("outbox row %d: type %q is not in asyncapi.yaml", r.ID, r.Type)
			continue
		}
		if err := m.CheckPayload([]byte(r.Payload)); err != nil {
			t.Errorf("outbox row %d does not match asyncapi.yaml: %v", r.ID, err)
		}
	}
}

type response struct {
	Status int
	Header http.Header
	Body   []byte
}

// do sends a request (body "" for none; user "" for no X-User-ID) as a
// JSON client would, with Content-Type application/json on every POST and
// every body, and checks the response against the OpenAPI document. It is
// safe for concurrent use.
func (e *env) do(t *testing.T, method, path, user, body string) response {
	t.Helper()
	return e.send(t, method, path, jsonHeaders(method, user, body), body)
}

// jsonHeaders are the headers do sends.
func jsonHeaders(method, user, body string) http.Header {
	h := http.Header{}
	if body != "" || method == http.MethodPost {
		h.Set("Content-Type", "application/json")
	}
	if user != "" {
		h.Set(api.UserHeader, user)
	}
	return h
}

// adminGet is a GET of path on the admin handler, checked against the
// OpenAPI document as do's are.
func (e *env) adminGet(t *testing.T, path string) response {
	t.Helper()
	return e.sendTo(t, e.admin, http.MethodGet, path, http.Header{}, "")
}

// send is do with exactly the given headers.
func (e *env) send(t *testing.T, method, path string, h http.Header, body string) response {
	t.Helper()
	return e.sendTo(t, e.srv, method, path, h, body)
}

func (e *env) sendTo(t *testing.T, srv *httptest.Server, method, path string, h http.Header, body string) response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	r := response{Status: resp.StatusCode, Header: resp.Header, Body: b}
	checkSpec(t, req, r)
	return r
}

// checkSpec validates a response against the operation the document
// declares for it; a response of a route the document does not know must be
// a problem.
func checkSpec(t *testing.T, req *http.Request, r response) {
	t.Helper()
	doc, router := spec(t)
	route, params, err := router.FindRoute(req)
	if err != nil {
		if r.Status != http.StatusNotFound && r.Status != http.StatusMethodNotAllowed {
			t.Errorf("%s %s: not in openapi.yaml (%v) yet answered %d", req.Method, req.URL.Path, err, r.Status)
		}
		if ct := r.Header.Get("Content-Type"); ct != api.ProblemContentType {
			t.Errorf("%s %s: content type %q, want %s", req.Method, req.URL.Path, ct, api.ProblemContentType)
		}
		var v any
		if err := json.Unmarshal(r.Body, &v); err != nil {
			t.Errorf("%s %s: problem body: %v", req.Method, req.URL.Path, err)
		} else if err := doc.Components.Schemas["Problem"].Value.VisitJSON(v); err != nil {
			t.Errorf("%s %s: problem body does not match the Problem schema: %v", req.Method, req.URL.Path, err)
		}
		return
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 r.Status,
		Header:                 r.Header,
		Body:                   io.NopCloser(bytes.NewReader(r.Body)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true},
	}
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		t.Errorf("%s %s → %d does not match openapi.yaml: %v\nbody: %s", req.Method, req.URL.Path, r.Status, err, r.Body)
	}
}

// decode decodes a response body, failing the test unless the status is want.
func decode[T any](t *testing.T, r response, want int) T {
	t.Helper()
	var v T
	if r.Status != want {
		t.Fatalf("status %d, want %d; body: %s", r.Status, want, r.Body)
	}
	if err := json.Unmarshal(r.Body, &v); err != nil {
		t.Fatalf("decode %s: %v", r.Body, err)
	}
	return v
}

// Response bodies as a client sees them.
type (
	productBody struct {
		ID, Price, Stock                              int64
		Name                                          string
		LikeCount, SalesCount, SalesAmount, ViewCount int64
	}
	pageBody struct {
		Items             []productBody
		Page, Size, Total int64
	}
	likeBody struct {
		ProductID int64
		Liked     bool
	}
	itemBody  struct{ ProductID, Quantity, UnitPrice int64 }
	orderBody struct {
		ID          int64
		UserID      string
		Status      string
		TotalAmount int64
		Items       []itemBody
	}
	paymentBody struct {
		OrderID, PaymentID int64
		Status             string
		Amount             int64
	}
)

func (e *env) createProduct(t *testing.T, name string, price, stock int64) int64 {
	t.Helper()
	p := decode[productBody](t, e.do(t, "POST", "/api/v1/products", "",
		fmt.Sprintf(`{"name":%q,"price":%d,"stock":%d}`, name, price, stock)), http.StatusCreated)
	return p.ID
}

func (e *env) createOrder(t *testing.T, user string, items ...[2]int64) orderBody {
	t.Helper()
	var parts []string
	for _, it := range items {
		parts = append(parts, fmt.Sprintf(`{"productId":%d,"quantity":%d}`, it[0], it[1]))
	}
	return decode[orderBody](t, e.do(t, "POST", "/api/v1/orders", user, `{"items":[`+strings.Join(parts, ",")+`]}`), http.StatusCreated)
}

func (e *env) lastOutboxID(t *testing.T) int64 {
	t.Helper()
	return e.db.Int(t, `SELECT COALESCE(max(id), 0) FROM outbox`)
}

type problemBody struct {
	Type, Title, Detail string
	Status              int
	Errors              []struct{ Pointer, Detail string }
	ErrorsOmitted       int
}
