package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/loopers/commerce-pipeline/internal/testenv"
	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/api"
	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/stream"
)

// TestStreamHTTP: the stream answers text/event-stream with a ready event
// and summaries matching the document; a bad Last-Event-ID is a 400 and a
// stream past the limit a 503, both problems.
func TestStreamHTTP(t *testing.T) {
	t.Parallel()
	var hub *stream.Hub
	e := newEnv(t, func(d *api.Deps) {
		hub = stream.New(d.Store, nil, stream.Config{MaxStreams: 1, SummaryEvery: 50 * time.Millisecond}, slog.New(slog.DiscardHandler))
		d.Stream = hub
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = hub.Run(ctx) }()

	resp := testenv.Get(t, e.srv.URL+"/api/v1/stream")
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		t.Fatalf("stream: %d %q, want 200 text/event-stream", resp.StatusCode, ct)
	}
	doc, _ := spec(t)
	seen := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	var name string
	for !seen[stream.ReadyEvent] || !seen[stream.SummaryEvent] {
		if !sc.Scan() {
			t.Fatalf("the stream ended: %v", sc.Err())
		}
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "event: "); ok {
			name = v
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		seen[name] = true
		if name == stream.SummaryEvent {
			var v any
			if err := json.Unmarshal([]byte(data), &v); err != nil {
				t.Fatal(err)
			}
			if err := doc.Components.Schemas["StreamSummary"].Value.VisitJSON(v); err != nil {
				t.Errorf("summary %s does not match StreamSummary: %v", data, err)
			}
		}
	}

	// Each id that is sent must be one, even where the header makes the
	// query's moot; the document's EventID allows at most 19 digits.
	for _, tc := range []hostileCase{
		{"not a number", "GET", "/api/v1/stream?lastEventId=abc", nil, "", 400, []string{"lastEventId"}, ""},
		{"a sign", "GET", "/api/v1/stream?lastEventId=%2B1", nil, "", 400, []string{"lastEventId"}, ""},
		{"20 digits", "GET", "/api/v1/stream?lastEventId=00000000000000000001", nil, "", 400, []string{"lastEventId"}, ""},
		{"repeated", "GET", "/api/v1/stream?lastEventId=1&lastEventId=2", nil, "", 400, []string{"lastEventId"}, ""},
		{"a bad query beside a good header", "GET", "/api/v1/stream?lastEventId=x", hdr(api.LastEventIDHeader, "1"), "", 400, []string{"lastEventId"}, ""},
		{"a bad header", "GET", "/api/v1/stream", hdr(api.LastEventIDHeader, "-1"), "", 400, []string{api.LastEventIDHeader}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // refused before the hub is asked: the open stream and its limit do not matter
			e.checkProblem(t, tc)
		})
	}
	r := e.do(t, "GET", "/api/v1/stream", "", "")
	if r.Status != http.StatusServiceUnavailable || r.Header.Get("Content-Type") != api.ProblemContentType || r.Header.Get("Retry-After") == "" {
		t.Errorf("stream past the limit: %d %q Retry-After %q, want 503 problem with Retry-After", r.Status, r.Header.Get("Content-Type"), r.Header.Get("Retry-After"))
	}
}

// TestStreamOutlivesServerTimeouts: a stream keeps flowing past the
// server's read and write timeouts, which bound ordinary requests.
func TestStreamOutlivesServerTimeouts(t *testing.T) {
	t.Parallel()
	var hub *stream.Hub
	e := newEnv(t, func(d *api.Deps) {
		hub = stream.New(d.Store, nil, stream.Config{SummaryEvery: 50 * time.Millisecond}, slog.New(slog.DiscardHandler))
		d.Stream = hub
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = hub.Run(ctx) }()
	srv := httptest.NewUnstartedServer(e.srv.Config.Handler)
	srv.Config.ReadTimeout, srv.Config.WriteTimeout = 300*time.Millisecond, 300*time.Millisecond
	srv.Start()
	defer srv.Close()

	resp := testenv.Get(t, srv.URL+"/api/v1/stream")
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	start := time.Now()
	summaries := 0
	for time.Since(start) < 1500*time.Millisecond {
		if !sc.Scan() {
			t.Fatalf("the stream ended after %v (%d summaries): %v", time.Since(start).Round(time.Millisecond), summaries, sc.Err())
		}
		if sc.Text() == "event: "+stream.SummaryEvent {
			summaries++
		}
	}
}

// TestLivePageServed: the page and its assets come from the binary, with
// nothing fetched from elsewhere.
func TestLivePageServed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	page := e.do(t, "GET", "/", "", "")
	if page.Status != http.StatusOK || !strings.HasPrefix(page.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /: %d %q", page.Status, page.Header.Get("Content-Type"))
	}
	for _, asset := range []string{"/static/app.js", "/static/style.css"} {
		if !strings.Contains(string(page.Body), `"`+asset+`"`) {
			t.Errorf("the page does not load %s", asset)
		}
		resp := testenv.Get(t, e.srv.URL+asset)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %d", asset, resp.StatusCode)
		}
	}
	for _, off := range []string{"http://", "https://", "//cdn"} {
		if strings.Contains(string(page.Body), `src="`+off) || strings.Contains(string(page.Body), `href="`+off) {
			t.Errorf("the page loads something from elsewhere (%s)", off)
		}
	}
}
