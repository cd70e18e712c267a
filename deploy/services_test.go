package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/loopers/commerce-pipeline/internal/testenv"
	"github.com/loopers/commerce-pipeline/pkg/events"
)

// startBinary runs a built binary with env added to the test's environment
// and stops it with SIGTERM when the test ends, printing its log on failure.
func startBinary(t *testing.T, name string, env map[string]string) {
	t.Helper()
	cmd := exec.Command(binary(t, name))
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	logPath := filepath.Join(t.TempDir(), name+".log")
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	done := make(chan struct{})
	// The exit status is the SIGTERM's the cleanup sends; the log tells the rest.
	go func() { _ = cmd.Wait(); log.Close(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 4096 {
				b = b[len(b)-4096:]
			}
			t.Logf("%s log (tail):\n%s", name, b)
		}
	})
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func get(ctx context.Context, url string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

func waitOK(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if code, _, err := get(t.Context(), url); err == nil && code == http.StatusOK {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s never answered 200", url)
}

// call sends one API request and returns the id of the created resource.
func call(t *testing.T, method, url string, body any, want int) int64 {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(t.Context(), method, url, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-User-ID", "deploy-test")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s: status %d, want %d: %s", method, url, resp.StatusCode, want, out)
	}
	var created struct{ ID int64 }
	_ = json.Unmarshal(out, &created)
	return created.ID
}

// family is what a scrape says of one sample name.
type family struct {
	labels map[string]bool
}

// scrape reads a /metrics page and returns its sample names (histograms
// contribute _bucket, _sum and _count) with the label names each carries.
func scrape(ctx context.Context, url string) (map[string]family, error) {
	code, body, err := get(ctx, url)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("%s: status %d", url, code)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", url, err)
	}
	out := map[string]family{}
	for name, mf := range fams {
		labels := map[string]bool{}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = true
			}
		}
		names := []string{name}
		switch mf.GetType() {
		case dto.MetricType_HISTOGRAM:
			names = []string{name + "_bucket", name + "_sum", name + "_count"}
		case dto.MetricType_SUMMARY:
			names = []string{name, name + "_sum", name + "_count"}
		}
		for _, n := range names {
			f := family{labels: map[string]bool{}}
			for l := range labels {
				f.labels[l] = true
			}
			if strings.HasSuffix(n, "_bucket") {
				f.labels["le"] = true
			}
			out[n] = f
		}
	}
	return out, nil
}

// dashboardQueries returns every PromQL expression of the Grafana dashboard:
// panel targets and template variable queries (label_values(metric, label)
// is read as metric{label=""}).
func dashboardQueries(t *testing.T) []string {
	t.Helper()
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Query struct {
					Query string `json:"query"`
				} `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(readFile(t, "deploy/grafana/dashboards/commerce-pipeline.json"), &dash); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	var exprs []string
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		if args, ok := strings.CutPrefix(v.Query.Query, "label_values("); ok {
			metric, label, _ := strings.Cut(strings.TrimSuffix(args, ")"), ",")
			exprs = append(exprs, fmt.Sprintf(`%s{%s=""}`, strings.TrimSpace(metric), strings.TrimSpace(label)))
		}
	}
	if len(exprs) < 20 {
		t.Fatalf("the dashboard has only %d queries", len(exprs))
	}
	return exprs
}

// unknownRefs returns what the queries refer to that the scraped services do
// not expose: metric names, and label names none of an expression's metrics
// carries (job and instance are added by Prometheus).
func unknownRefs(exprs []string, exposed map[string]family) []string {
	var missing []string
	for _, e := range exprs {
		metrics, labels := promqlRefs(e)
		have := map[string]bool{"job": true, "instance": true}
		for _, m := range metrics {
			f, ok := exposed[m]
			if !ok {
				missing = append(missing, fmt.Sprintf("metric %s (in %s)", m, e))
				continue
			}
			for l := range f.labels {
				have[l] = true
			}
		}
		for _, l := range labels {
			if !have[l] {
				missing = append(missing, fmt.Sprintf("label %s (in %s)", l, e))
			}
		}
	}
	sort.Strings(missing)
	return slices.Compact(missing)
}

// TestRunningServices runs the three real binaries against PostgreSQL, Redis
// and Apache Kafka (the pipeline's topics under a prefix of the test's
// own, KAFKA_PREFIX), with their shipped defaults otherwise, drives a little traffic through
// every topic, and checks what the deployment files assume of them: the
// probe paths answer, the healthcheck probe works on the compose URLs, and
// every metric and label the dashboard queries is one they expose.
func TestRunningServices(t *testing.T) {
	t.Parallel()
	kafka := testenv.Kafka(t, events.NewRegistry().AllTopics()...)
	dbURL, redisURL := testenv.DatabaseURL(t), testenv.RedisURL(t)
	// addr is each service's admin address; public is commerce-api's.
	addr := map[string]string{"commerce-api": freeAddr(t), "outbox-relay": freeAddr(t), "product-consumers": freeAddr(t)}
	public := freeAddr(t)
	startBinary(t, "commerce-api", map[string]string{"DATABASE_URL": dbURL, "REDIS_URL": redisURL, "HTTP_ADDR": public, "ADMIN_ADDR": addr["commerce-api"]})
	relay := map[string]string{"DATABASE_URL": dbURL, "ADMIN_ADDR": addr["outbox-relay"], "OUTBOX_RELAY_INTERVAL": "200ms"}
	maps.Copy(relay, kafka.Env())
	startBinary(t, "outbox-relay", relay)
	consumers := map[string]string{"DATABASE_URL": dbURL, "REDIS_URL": redisURL, "ADMIN_ADDR": addr["product-consumers"], "PRODUCT_CONSUMERS_RETRY_BACKOFF": "100ms"}
	maps.Copy(consumers, kafka.Env())
	startBinary(t, "product-consumers", consumers)
	for _, a := range addr {
		waitOK(t, "http://"+a+"/healthz")
	}

	// One event of every type: a view, a like, an order paid that sells the
	// product out (stock depleted).
	api := "http://" + public + "/api/v1"
	product := call(t, "POST", api+"/products", map[string]any{"name": "deploy", "price": 1000, "stock": 1}, http.StatusCreated)
	pid := strconv.FormatInt(product, 10)
	call(t, "GET", api+"/products/"+pid, nil, http.StatusOK)
	call(t, "POST", api+"/products/"+pid+"/likes", nil, http.StatusOK)
	order := call(t, "POST", api+"/orders", map[string]any{"items": []map[string]any{{"productId": product, "quantity": 1}}}, http.StatusCreated)
	call(t, "POST", api+"/orders/"+strconv.FormatInt(order, 10)+"/payments", nil, http.StatusOK)

	t.Run("kubernetes probes", func(t *testing.T) {
		t.Parallel()
		for deployment, paths := range k8sProbes(t) {
			for _, path := range paths {
				waitOK(t, "http://"+addr[deployment]+path)
			}
		}
	})

	t.Run("operators' endpoints only on the admin listener", func(t *testing.T) {
		t.Parallel()
		for _, path := range []string{"/metrics", "/api/v1/cluster"} {
			if code, _, err := get(t.Context(), "http://"+public+path); err != nil || code != http.StatusNotFound {
				t.Errorf("public %s: %d %v, want 404", path, code, err)
			}
			waitOK(t, "http://"+addr["commerce-api"]+path)
		}
	})

	t.Run("compose health checks", func(t *testing.T) {
		t.Parallel()
		probe := binary(t, "healthcheck")
		for svc, u := range composeProbes(t) {
			u.Host = addr[svc]
			if out, err := exec.Command(probe, u.String()).CombinedOutput(); err != nil {
				t.Errorf("%s: healthcheck %s: %v\n%s", svc, u, err, out)
			}
		}
		// The probe must fail on what is not healthy, or it proves nothing.
		for _, bad := range []string{"http://" + public + "/no-such-path", "http://" + freeAddr(t) + "/readyz"} {
			if err := exec.Command(probe, bad).Run(); err == nil {
				t.Errorf("healthcheck %s exited 0", bad)
			}
		}
	})

	t.Run("dashboard and alert metrics", func(t *testing.T) {
		t.Parallel()
		exprs := append(dashboardQueries(t), alertExprs(t)...)
		// Per-partition series appear once the groups have their
		// partitions, handler latency once records were handled.
		deadline := time.Now().Add(60 * time.Second)
		for {
			exposed := map[string]family{}
			var scrapeErr error
			for _, a := range addr {
				fams, err := scrape(t.Context(), "http://"+a+"/metrics")
				if err != nil {
					scrapeErr = err
				}
				for n, f := range fams {
					if old, ok := exposed[n]; ok {
						for l := range old.labels {
							f.labels[l] = true
						}
					}
					exposed[n] = f
				}
			}
			missing := unknownRefs(exprs, exposed)
			if scrapeErr == nil && len(missing) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("scrape error: %v; the dashboard or the alert rules refer to what the services do not expose:\n%s", scrapeErr, strings.Join(missing, "\n"))
			}
			time.Sleep(250 * time.Millisecond)
		}
	})
}

// TestUnknownRefs: the check finds a misspelt metric and a label the metric
// does not carry.
func TestUnknownRefs(t *testing.T) {
	t.Parallel()
	exposed := map[string]family{"pcon_true_lag": {labels: map[string]bool{"group": true}}}
	got := unknownRefs([]string{`sum by (group) (pcon_true_lag)`, `pcon_truelag`, `sum by (route) (pcon_true_lag)`}, exposed)
	want := []string{"label route (in sum by (route) (pcon_true_lag))", "metric pcon_truelag (in pcon_truelag)"}
	if diff := cmpDiff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
