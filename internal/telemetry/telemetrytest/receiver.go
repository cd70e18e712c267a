package telemetrytest

import (
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Span is a span as an OTLP receiver got it.
type Span struct {
	Service         string // the resource's service.name
	Name            string
	TraceID, SpanID string // hex
	ParentID        string // hex; empty for a root
	Kind            tracepb.Span_SpanKind
	Links           []string // the linked spans' ids, hex
	Start, End      time.Time
	Attributes      map[string]string
}

// Receiver is an OTLP/HTTP trace receiver in the test's process: the
// exporters of the programs under test post protobuf export requests to
// URL + "/v1/traces", and Spans returns what arrived.
type Receiver struct {
	URL   string
	mu    sync.Mutex
	spans []Span
}

// NewReceiver starts a receiver that stops when the test ends.
func NewReceiver(t testing.TB) *Receiver {
	t.Helper()
	r := &Receiver{}
	srv := httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

// Spans returns the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "want a protobuf POST to /v1/traces", http.StatusBadRequest)
		return
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var export collectortrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &export); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var got []Span
	for _, rs := range export.GetResourceSpans() {
		service := ""
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				service = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				got = append(got, spanOf(service, s))
			}
		}
	}
	r.mu.Lock()
	r.spans = append(r.spans, got...)
	r.mu.Unlock()
	resp, err := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(resp)
}

func spanOf(service string, s *tracepb.Span) Span {
	out := Span{Service: service, Name: s.GetName(), TraceID: hex.EncodeToString(s.GetTraceId()), SpanID: hex.EncodeToString(s.GetSpanId()),
		ParentID: hex.EncodeToString(s.GetParentSpanId()), Kind: s.GetKind(),
		Start: time.Unix(0, int64(s.GetStartTimeUnixNano())), End: time.Unix(0, int64(s.GetEndTimeUnixNano())), //nolint:gosec // OTLP times are nanoseconds since 1970, far below 2^63
		Attributes: map[string]string{}}
	for _, l := range s.GetLinks() {
		out.Links = append(out.Links, hex.EncodeToString(l.GetSpanId()))
	}
	for _, a := range s.GetAttributes() {
		v := a.GetValue()
		switch {
		case v.GetStringValue() != "":
			out.Attributes[a.GetKey()] = v.GetStringValue()
		default:
			out.Attributes[a.GetKey()] = v.String()
		}
	}
	return out
}
