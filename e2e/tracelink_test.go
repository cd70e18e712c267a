package e2e

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/loopers/commerce-pipeline/internal/telemetry/telemetrytest"
)

// TestLivePageTraceLink runs commerce-api tracing to an OTLP receiver in
// this process, with a trace UI configured (COMMERCE_API_TRACE_UI_URL),
// likes a product through the live page's form in a real browser, and
// follows the link the page's log shows for the like: it opens the trace
// of the like's request, the one whose server span the receiver got.
func TestLivePageTraceLink(t *testing.T) {
	t.Parallel()
	rcv := telemetrytest.NewReceiver(t)
	const ui = "http://traces.example:16686/trace/{traceId}?uiFind=like"
	s := newSystemOn(t, kafkaSetup{ServiceEnv: map[string]map[string]string{"commerce-api": exportingTo(rcv, "COMMERCE_API_TRACE_UI_URL", ui)}})
	var p struct{ ID int64 }
	if st := s.call("POST", "/products", "", map[string]any{"name": "p", "price": 100, "stock": 5}, &p); st != http.StatusCreated {
		t.Fatalf("create product: %d", st)
	}

	ctx := browser(t)
	within(t, ctx, 20*time.Second, "load the page and its configuration",
		chromedp.Navigate(s.api+"/"),
		until(`traceUrl !== ""`),
	)
	within(t, ctx, 10*time.Second, "like through the form",
		chromedp.SetValue(chromedp.CSS(`#user`), "alice"),
		chromedp.SetValue(chromedp.CSS(`#product`), strconv.FormatInt(p.ID, 10)),
		chromedp.Click(chromedp.CSS(`button[data-action="like"]`)),
		until(`document.querySelector("#log li a.trace") !== null`),
	)
	line := eval[string](t, ctx, `document.querySelector("#log li").textContent`)
	href := eval[string](t, ctx, `document.querySelector("#log li a.trace").getAttribute("href")`)
	if !strings.Contains(line, "POST /products/"+strconv.FormatInt(p.ID, 10)+"/likes") {
		t.Fatalf("the log's newest line is %q, not the like", line)
	}

	const route = "POST /api/v1/products/{id}/likes"
	var like telemetrytest.Span
	for deadline := time.Now().Add(30 * time.Second); like.TraceID == ""; time.Sleep(100 * time.Millisecond) {
		for _, sp := range rcv.Spans() {
			if sp.Name == route {
				like = sp
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s span arrived", route)
		}
	}
	if want := strings.ReplaceAll(ui, "{traceId}", like.TraceID); href != want {
		t.Errorf("the like's trace link is %q, want %q (the trace of its server span)", href, want)
	}
}
