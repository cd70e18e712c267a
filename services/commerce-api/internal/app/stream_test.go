package app

import (
	"bufio"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/loopers/commerce-pipeline/internal/config"
	"github.com/loopers/commerce-pipeline/internal/testenv"
)

// TestStreamOutlivesRequestTimeout runs the service with its shipped
// defaults (only the addresses set) and holds a stream for three times
// COMMERCE_API_REQUEST_TIMEOUT: it must stay open and carry a summary every second,
// while an ordinary request still has its deadline.
func TestStreamOutlivesRequestTimeout(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": testenv.DatabaseURL(t), "REDIS_URL": testenv.RedisURL(t), "HTTP_ADDR": "127.0.0.1:0", "ADMIN_ADDR": "127.0.0.1:0"}
	cfg, err := config.Parse(config.FromMap(env), Load)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RequestTimeout <= 0 {
		t.Fatalf("the shipped COMMERCE_API_REQUEST_TIMEOUT is %v; this test needs one", cfg.RequestTimeout)
	}
	addrs, done, cancel := serve(t, cfg)
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	addr := addrs.HTTP

	resp := testenv.Get(t, "http://"+addr+"/api/v1/stream") //nolint:bodyclose // closed by the defer below; a goroutine reads it
	defer resp.Body.Close()
	hold := 3 * cfg.RequestTimeout
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	start, last := time.Now(), time.Now()
	summaries, inSummary, counted := 0, false, false
	var longest time.Duration
	for time.Since(start) < hold {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("the stream ended after %v (%d summaries); COMMERCE_API_REQUEST_TIMEOUT is %v",
					time.Since(start).Round(time.Millisecond), summaries, cfg.RequestTimeout)
			}
			if line == "event: summary" {
				summaries++
				longest = max(longest, time.Since(last))
				last = time.Now()
			}
			// The public summary names no host, node or address: those are
			// the admin listener's cluster view.
			if data, ok := strings.CutPrefix(line, "data: "); ok && inSummary {
				for _, secret := range []string{host, cfg.Cluster.NodeID, "127.0.0.1"} {
					if strings.Contains(data, secret) {
						t.Errorf("a public summary tells %q: %s", secret, data)
					}
				}
				counted = counted || strings.Contains(data, `"nodes":[{"service":"commerce-api","status":"ALIVE"`)
			}
			inSummary = line == "event: summary" || inSummary && strings.HasPrefix(line, "id: ")
		case <-time.After(5 * time.Second):
			t.Fatalf("nothing on the stream for 5 s after %v", time.Since(start).Round(time.Millisecond))
		}
	}
	if !counted {
		t.Error("no summary showed this node alive")
	}
	t.Logf("stream held %v (COMMERCE_API_REQUEST_TIMEOUT %v): %d summaries, longest gap %v", hold, cfg.RequestTimeout, summaries, longest.Round(time.Millisecond))
	// A summary a second (the shipped SummaryEvery), a little slack for a
	// loaded machine.
	if want := int(hold/time.Second) - 2; summaries < want || longest > 2500*time.Millisecond {
		t.Errorf("%d summaries in %v, longest gap %v; want at least %d, none more than 2.5 s apart", summaries, hold, longest, want)
	}
	// Other routes keep their deadline: the page's own request returns.
	r := testenv.Get(t, "http://"+addr+"/api/v1/products")
	r.Body.Close()
	if r.StatusCode != http.StatusOK || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		t.Errorf("GET /api/v1/products during the stream: %d %q", r.StatusCode, r.Header.Get("Content-Type"))
	}
}
