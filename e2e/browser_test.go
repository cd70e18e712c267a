package e2e

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"

	"github.com/loopers/commerce-pipeline/internal/stack"
	"github.com/loopers/commerce-pipeline/internal/testenv"
)

// ScreenshotPath is where TestLivePage writes the live page's screenshot (docs) when
// UPDATE_SCREENSHOT=1, relative to the module root.
const screenshotPath = "docs/live-page.png"

// browser starts a headless Debian chromium for the test; a missing
// chromium fails the test (scripts/testenv.sh installs it).
func browser(t *testing.T) context.Context {
	t.Helper()
	testenv.Needs(t, "a browser (chromium)")
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("no chromium on PATH (%v): run scripts/testenv.sh as root, or apt-get install chromium", err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Headless,
		chromedp.NoSandbox, // the tests run as root, where chromium's sandbox cannot start
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1280, 1000),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelCtx(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// within runs actions with a deadline, failing the test with what on error.
func within(t *testing.T, ctx context.Context, d time.Duration, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if err := chromedp.Do(c, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// eval returns the value of a JavaScript expression in the page.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(c, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// until waits for a JavaScript predicate to hold in the page.
func until(expr string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(10*time.Millisecond))
}

// TestLivePage loads the page against the running pipeline in a real
// browser, likes a product through the page's form and sees the count on the
// page change within 2 s, and sees the chart split the time by stage; then kills commerce-api, sees the page say it is
// reconnecting, restarts it and sees the page recover and follow changes
// again. It takes the docs' screenshot on the way.
//
//nolint:paralleltest // times the live page (a like shows within 2 s): other tests' service processes on the 2 shared cores would break it
func TestLivePage(t *testing.T) {
	began := time.Now()
	s := newSystem(t)
	s.startRelay("relay-a")

	names := []string{"Mechanical keyboard", "4K monitor", "USB-C dock", "Desk lamp", "Office chair"}
	ids := make([]int64, len(names))
	for i, name := range names {
		var p struct{ ID int64 }
		if st := s.call("POST", "/products", "", map[string]any{"name": name, "price": 30000 + 10000*i, "stock": 1000}, &p); st != http.StatusCreated {
			t.Fatalf("create product: status %d", st)
		}
		ids[i] = p.ID
	}
	// Some history for the lists, and proof that the consumers have their
	// partitions before the timed part.
	for i, id := range ids {
		pid := strconv.FormatInt(id, 10)
		for u := range len(ids) - i {
			s.expect(s.call("POST", "/products/"+pid+"/likes", fmt.Sprintf("user%d", u), nil, nil), http.StatusOK)
			s.call("GET", "/products/"+pid, fmt.Sprintf("user%d", u), nil, nil)
		}
	}
	t.Logf("products seeded after %v", time.Since(began).Round(time.Millisecond))
	// The consumers start 3 s after the seeding, so that its events wait
	// in Kafka as when a group joins late or a broker fails over: a backlog
	// whose seconds in the broker stage are on the chart when the page
	// opens, and must not flatten the other stages' bands.
	time.Sleep(3 * time.Second)
	s.startConsumers()
	s.waitLikes(ids[0], int64(len(ids)), 60*time.Second)

	// Background traffic, so that the chart and the summary have something
	// to show in the screenshot.
	ctxTraffic, stopTraffic := context.WithCancel(context.Background())
	trafficDone := make(chan struct{})
	go func() {
		defer close(trafficDone)
		for i := 0; ctxTraffic.Err() == nil; i++ {
			pid := strconv.FormatInt(ids[i%len(ids)], 10)
			s.call("GET", "/products/"+pid, "viewer", nil, nil)
			if i%3 == 0 {
				var o struct{ ID int64 }
				item := map[string]any{"productId": ids[(i/3)%len(ids)%3], "quantity": 1 + i%4}
				if s.call("POST", "/orders", "buyer", map[string]any{"items": []any{item}}, &o) == http.StatusCreated {
					s.call("POST", "/orders/"+strconv.FormatInt(o.ID, 10)+"/payments", "buyer", nil, nil)
				}
			}
			time.Sleep(40 * time.Millisecond)
		}
	}()
	endTraffic := func() { stopTraffic(); <-trafficDone }
	defer endTraffic()

	t.Logf("pipeline up and consuming after %v", time.Since(began).Round(time.Millisecond))
	ctx := browser(t)
	target := ids[len(ids)-1] // the least liked: alice has not liked it
	count := fmt.Sprintf(`document.querySelector('#top-likes li[data-id="%d"] .count')`, target)
	within(t, ctx, 20*time.Second, "load the page",
		chromedp.Navigate(s.api+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#status.live`)),
		until(count+` !== null`),
	)
	before := eval[string](t, ctx, count+`.textContent`)

	// Like through the page's form and time the count's change on the page.
	liked := time.Now()
	within(t, ctx, 10*time.Second, "like through the form",
		chromedp.SetValue(chromedp.CSS(`#user`), "alice"),
		chromedp.SetValue(chromedp.CSS(`#product`), strconv.FormatInt(target, 10)),
		chromedp.Click(chromedp.CSS(`button[data-action="like"]`)),
	)
	within(t, ctx, 2*time.Second, "the like count on the page changes within 2 s of the click",
		until(fmt.Sprintf(`%s.textContent !== %q`, count, before)))
	t.Logf("like count on the page went from %s to the next value %v after the click", before, time.Since(liked).Round(time.Millisecond))

	// The page stays live: COMMERCE_API_REQUEST_TIMEOUT (5 s, the default here) must not
	// end its stream. Any change of the status away from "live" counts.
	eval[bool](t, ctx, `(() => {
		const el = document.getElementById("status");
		window.notLive = 0;
		new MutationObserver(() => { if (!el.classList.contains("live")) window.notLive++; })
			.observe(el, {attributes: true, childList: true, characterData: true, subtree: true});
		return true;
	})()`)
	time.Sleep(15 * time.Second)
	if n := eval[int](t, ctx, `window.notLive`); n != 0 || eval[string](t, ctx, `document.getElementById("status").className`) != "status live" {
		t.Errorf("the page left \"live\" %d times in 15 s", n)
	}

	// The chart splits the time by stage: each stage's p50 shows in the
	// table, and each stage's band is drawn in its colour.
	within(t, ctx, 20*time.Second, "every stage has a p50 in the table",
		until(`[...document.querySelectorAll("#stages tr")].length === 4 &&
			[...document.querySelectorAll("#stages tr")].every((tr) => / ms$/.test(tr.children[2].textContent))`))
	// history is the page's: the stages' averages of every point drawn.
	bandsCtx, cancelBands := context.WithTimeout(ctx, 10*time.Second)
	defer cancelBands()
	if err := chromedp.Do(bandsCtx, until(`(() => {
			const cv = document.getElementById("chart");
			const px = cv.getContext("2d").getImageData(0, 0, cv.width, cv.height).data;
			const near = (i, rgb) => Math.abs(px[i] - rgb[0]) + Math.abs(px[i + 1] - rgb[1]) + Math.abs(px[i + 2] - rgb[2]) < 12;
			return STAGES.every((st) => {
				const rgb = [1, 3, 5].map((k) => parseInt(st.color.slice(k, k + 2), 16));
				let n = 0;
				for (let i = 0; i < px.length; i += 4) if (near(i, rgb) && ++n >= 20) return true;
				return false;
			});
		})()`)); err != nil {
		t.Fatalf("every stage's band is drawn on the chart: %v; the chart's points: %s", err,
			eval[string](t, ctx, `JSON.stringify(history.map((p) => p.stages))`))
	}
	t.Logf("the chart's highest stack, in ms: %s", eval[string](t, ctx,
		`String(Math.max(...history.map((p) => Object.values(p.stages).reduce((a, v) => a + (v || 0), 0))))`))
	stageText := eval[string](t, ctx, `[...document.querySelectorAll("#stages tr")].map((tr) => tr.dataset.stage + " p50 " + tr.children[2].textContent + " p99 " + tr.children[3].textContent).join(", ")`)
	t.Logf("stages on the page: %s", stageText)

	// The screenshot; the docs' once the chart has a few seconds of
	// history.
	update := os.Getenv("UPDATE_SCREENSHOT") == "1"
	if update {
		time.Sleep(15 * time.Second)
	}
	shotCtx, cancelShot := context.WithTimeout(ctx, 20*time.Second)
	defer cancelShot()
	shot, err := chromedp.Run(shotCtx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if _, err := png.Decode(bytes.NewReader(shot)); err != nil {
		t.Fatalf("the screenshot is not a PNG: %v", err)
	}
	if update {
		root, err := stack.ModuleRoot()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, screenshotPath), shot, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s (%d bytes)", screenshotPath, len(shot))
	}

	// On a phone's width nothing may stick out sideways.
	within(t, ctx, 10*time.Second, "emulate a phone", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(3), chromedp.EmulateMobile))
	within(t, ctx, 5*time.Second, "the page fits a phone's width",
		until(`document.documentElement.scrollWidth <= window.innerWidth`))
	within(t, ctx, 10*time.Second, "back to a laptop", chromedp.EmulateReset())

	// Kill the stream's server: the page must say so, then recover.
	t.Logf("screenshot taken after %v", time.Since(began).Round(time.Millisecond))
	endTraffic()
	s.apiProc.Kill()
	within(t, ctx, 10*time.Second, "the page says it is reconnecting once commerce-api is killed",
		chromedp.WaitVisible(chromedp.CSS(`#status.reconnecting`)))
	if text := eval[string](t, ctx, `document.getElementById("status").textContent`); text != "disconnected — reconnecting…" {
		t.Errorf("status while commerce-api is down: %q", text)
	}
	t.Logf("page said reconnecting after %v", time.Since(began).Round(time.Millisecond))
	s.apiProc = start(t, "commerce-api-2", "commerce-api", s.apiEnv)
	waitHTTP(t, s.api+"/readyz")
	within(t, ctx, 15*time.Second, "the page is live again after commerce-api restarts",
		chromedp.WaitVisible(chromedp.CSS(`#status.live`)))
	before = eval[string](t, ctx, count+`.textContent`)
	within(t, ctx, 10*time.Second, "like again through the form",
		chromedp.SetValue(chromedp.CSS(`#user`), "bob"),
		chromedp.Click(chromedp.CSS(`button[data-action="like"]`)),
	)
	changed, cancelChanged := context.WithTimeout(ctx, 2*time.Second)
	defer cancelChanged()
	if err := chromedp.Do(changed, until(fmt.Sprintf(`%s.textContent !== %q`, count, before))); err != nil {
		t.Fatalf("the like count changes within 2 s after the reconnection: %v\n%s", err, s.likeTrail(t, ctx, target, "bob"))
	}
	t.Logf("browser test took %v", time.Since(began).Round(time.Millisecond))
}

// likeTrail says where user's like of product stands, for a failure: the
// page's log of its requests, the like's row, its outbox row and the
// relay's cursor, and the product's like count.
func (s *system) likeTrail(t *testing.T, ctx context.Context, product int64, user string) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "page log: %s\n", eval[string](t, ctx, `[...document.querySelectorAll("#log li")].map((li) => li.textContent).join(" | ")`))
	conn, err := pgx.Connect(context.Background(), s.dbURL)
	if err != nil {
		return b.String() + err.Error()
	}
	defer conn.Close(context.Background())
	var liked bool
	var outboxID, cursor, count *int64
	err = conn.QueryRow(context.Background(), `SELECT
		EXISTS (SELECT FROM likes WHERE user_id = $2 AND product_id = $1),
		(SELECT max(id) FROM outbox WHERE aggregate_id = $1::text AND payload LIKE '%' || $2 || '%'),
		(SELECT last_processed_id FROM outbox_cursor),
		(SELECT like_count FROM product_likes WHERE product_id = $1)`, product, user).Scan(&liked, &outboxID, &cursor, &count)
	fmt.Fprintf(&b, "liked %t, outbox id %v, relay cursor %v, like_count %v, error %v", liked, deref(outboxID), deref(cursor), deref(count), err)
	return b.String()
}

func deref(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

// waitLikes waits until the API reports product id with at least n likes.
func (s *system) waitLikes(id, n int64, d time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(d)
	for {
		// The listing, not the product's page: that one is cached.
		var page struct {
			Items []struct{ ID, LikeCount int64 }
		}
		s.call("GET", "/products?sort=likes_desc&size=100", "", nil, &page)
		var likes int64
		for _, p := range page.Items {
			if p.ID == id {
				likes = p.LikeCount
			}
		}
		if likes >= n {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("product %d has %d likes after %v, want %d", id, likes, d, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
