// The examples are programs a user copies; these tests build each one and
// run it for a few seconds against Apache Kafka (the tests' shared broker),
// as `go run . -brokers ...` would, checking that it does what its comment
// says.
package examples_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/loopers/commerce-pipeline/internal/stack"
	"github.com/loopers/commerce-pipeline/internal/testenv"
	"github.com/loopers/commerce-pipeline/pkg/pcon"
)

// waitLong bounds every wait; no assertion depends on timing.
const waitLong = 90 * time.Second

var (
	buildOnce sync.Once
	bins      *stack.Binaries
	buildErr  error
)

// binary builds every example once and returns the path of name's.
func binary(t *testing.T, name string) string {
	t.Helper()
	buildOnce.Do(func() {
		root, err := stack.ModuleRoot()
		if err == nil {
			bins, err = stack.Build(context.Background(), root,
				"./examples/keyorder-dlt", "./examples/hotkey-batch", "./examples/graceful-shutdown", "./examples/metrics")
		}
		buildErr = err
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(bins.Dir, name)
}

func TestMain(m *testing.M) {
	code := m.Run()
	if bins != nil {
		_ = bins.Remove()
	}
	os.Exit(code)
}

// example is a running example program and its log.
type example struct {
	t    *testing.T
	cmd  *exec.Cmd
	mu   sync.Mutex
	log  []string
	more chan struct{} // a line arrived
	done chan error    // Wait's error
}

// run starts example name with args; it is killed when the test ends.
func run(t *testing.T, name string, args ...string) *example {
	t.Helper()
	e := &example{t: t, cmd: exec.Command(binary(t, name), args...), more: make(chan struct{}, 1), done: make(chan error, 1)}
	out, err := e.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := e.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go e.read(out)
	t.Cleanup(func() {
		_ = e.cmd.Process.Kill()
		if t.Failed() {
			e.mu.Lock()
			t.Logf("%s log:\n%s", name, strings.Join(e.log, "\n"))
			e.mu.Unlock()
		}
	})
	return e
}

func (e *example) read(out io.Reader) {
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		e.mu.Lock()
		e.log = append(e.log, sc.Text())
		e.mu.Unlock()
		select {
		case e.more <- struct{}{}:
		default:
		}
	}
	e.done <- e.cmd.Wait()
}

// lines returns the log lines holding every one of parts.
func (e *example) lines(parts ...string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
next:
	for _, l := range e.log {
		for _, p := range parts {
			if !strings.Contains(l, p) {
				continue next
			}
		}
		out = append(out, l)
	}
	return out
}

// waitFor waits until ok holds of the log.
func (e *example) waitFor(what string, ok func() bool) {
	e.t.Helper()
	deadline := time.After(waitLong)
	for !ok() {
		select {
		case <-e.more:
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			e.t.Fatalf("%s: not within %s", what, waitLong)
		}
	}
}

// stop sends SIGTERM and returns the program's exit error.
func (e *example) stop() error {
	e.t.Helper()
	if err := e.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		e.t.Fatal(err)
	}
	select {
	case err := <-e.done:
		return err
	case <-time.After(waitLong):
		e.t.Fatalf("still running %s after SIGTERM", waitLong)
		return nil
	}
}

// produce writes records (key, value) to topic.
func produce(t *testing.T, k *testenv.KafkaEnv, topic string, recs [][2]string) {
	t.Helper()
	cl, err := kgo.NewClient(append(k.ClientOptions("examples-test"), kgo.DefaultProduceTopic(topic))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rs := make([]*kgo.Record, len(recs))
	for i, r := range recs {
		rs[i] = &kgo.Record{Key: []byte(r[0]), Value: []byte(r[1])}
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// records returns n records of value, record i keyed by keyFormat of i
// (of i modulo mod, when mod is not 0).
func records(n int, keyFormat string, mod int, value string) [][2]string {
	out := make([][2]string, n)
	for i := range out {
		k := i
		if mod != 0 {
			k = i % mod
		}
		out[i] = [2]string{fmt.Sprintf(keyFormat, k), value}
	}
	return out
}

// flags are an example's broker, topic and group flags on k.
func flags(k *testenv.KafkaEnv, topic string) []string {
	return []string{"-brokers", strings.Join(k.Brokers, ","), "-topic", k.Topic(topic), "-group", k.Group("example")}
}

// TestKeyOrderDLT: every readable order is handled, in order per customer;
// the unreadable ones land in the dead-letter topic marked permanent; the
// program stops cleanly on SIGTERM.
func TestKeyOrderDLT(t *testing.T) {
	t.Parallel()
	k := testenv.Kafka(t, "orders", "orders.DLT")
	var recs [][2]string
	for i := range 300 {
		recs = append(recs, [2]string{fmt.Sprintf("c%d", i%7), fmt.Sprintf(`{"id":"o%d","amount":%d}`, i, i)})
	}
	recs = append(recs, [2]string{"c1", "not json"}, [2]string{"c2", "{"}, [2]string{"c3", ""})
	produce(t, k, k.Topic("orders"), recs)
	e := run(t, "keyorder-dlt", flags(k, "orders")...)
	e.waitFor("300 orders handled", func() bool { return len(e.lines("order handled")) >= 300 })
	dead := testenv.ReadTopic(t, k.Brokers, k.Topic("orders.DLT"), 3, waitLong)
	for _, m := range dead {
		if h := testenv.Headers(m); h[pcon.HeaderReason] != pcon.ReasonPermanent {
			t.Errorf("dead letter %q: reason %q, want %q", m.Value, h[pcon.HeaderReason], pcon.ReasonPermanent)
		}
	}
	// Per customer, orders in the order produced (one partition per key).
	orderRe := regexp.MustCompile(`customer=(c\d+) order=o(\d+)`)
	last := map[string]int{}
	for _, l := range e.lines("order handled") {
		m := orderRe.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("unexpected log line %q", l)
		}
		n, _ := strconv.Atoi(m[2])
		if prev, ok := last[m[1]]; ok && n <= prev {
			t.Errorf("customer %s: order o%d after o%d", m[1], n, prev)
		}
		last[m[1]] = n
	}
	if err := e.stop(); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
}

// TestHotKeyBatch: a hot key's records are handled many per call, and
// every record is handled.
func TestHotKeyBatch(t *testing.T) {
	t.Parallel()
	k := testenv.Kafka(t, "views", "views.DLT")
	const hot, cold = 3000, 100
	var recs [][2]string
	for i := range hot + cold {
		key := "hot-product"
		if i >= hot {
			key = fmt.Sprintf("p%d", i)
		}
		recs = append(recs, [2]string{key, "view"})
	}
	produce(t, k, k.Topic("views"), recs)
	e := run(t, "hotkey-batch", flags(k, "views")...)
	totalRe := regexp.MustCompile(`records=(\d+) products=\d+ total=(\d+)`)
	var biggest, total int
	e.waitFor("every view handled", func() bool {
		biggest, total = 0, 0
		for _, l := range e.lines("batch handled") {
			if m := totalRe.FindStringSubmatch(l); m != nil {
				n, _ := strconv.Atoi(m[1])
				tot, _ := strconv.Atoi(m[2])
				biggest, total = max(biggest, n), max(total, tot)
			}
		}
		return total >= hot+cold
	})
	if total != hot+cold {
		t.Errorf("handled %d records, produced %d", total, hot+cold)
	}
	// 3000 records of one key were waiting when the consumer started: one
	// call per record would mean batches of 1.
	if biggest < 2 {
		t.Errorf("largest batch held %d records", biggest)
	}
	if err := e.stop(); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
}

// TestGracefulShutdown: on SIGTERM in the middle of the work the program
// exits 0 saying it stopped cleanly, and what it handled is committed: a
// second run of the group handles only the rest.
func TestGracefulShutdown(t *testing.T) {
	t.Parallel()
	k := testenv.Kafka(t, "jobs", "jobs.DLT")
	const n = 400
	produce(t, k, k.Topic("jobs"), records(n, "j%d", 0, "job"))
	first := run(t, "graceful-shutdown", append(flags(k, "jobs"), "-work", "100ms")...)
	first.waitFor("some jobs done", func() bool { return len(first.lines("job done")) >= 40 })
	if err := first.stop(); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
	if len(first.lines("stopped cleanly")) != 1 {
		t.Fatal("no clean stop logged")
	}
	done := len(first.lines("job done"))
	if done >= n {
		t.Fatalf("the first run did all %d jobs before SIGTERM; nothing left to check", done)
	}
	second := run(t, "graceful-shutdown", append(flags(k, "jobs"), "-work", "1ms")...)
	second.waitFor("the rest done", func() bool { return done+len(second.lines("job done")) >= n })
	if err := second.stop(); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
	if again := done + len(second.lines("job done")) - n; again != 0 {
		t.Errorf("%d jobs done again after a clean stop", again)
	}
}

// TestMetrics: /metrics serves pcon's metrics for the group, the processed
// records counted.
func TestMetrics(t *testing.T) {
	t.Parallel()
	k := testenv.Kafka(t, "events", "events.DLT")
	const n = 500
	produce(t, k, k.Topic("events"), records(n, "e%d", 10, "event"))
	addr, err := stack.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	e := run(t, "metrics", append(flags(k, "events"), "-addr", addr)...)
	processedRe := regexp.MustCompile(`(?m)^pcon_processed_total\{group="` + regexp.QuoteMeta(k.Group("example")) + `",partition="\d+",topic="[^"]+"\} (\d+)$`)
	var last string
	e.waitFor("every record counted on /metrics", func() bool {
		body, err := scrape("http://" + addr + "/metrics")
		if err != nil {
			last = err.Error()
			return false
		}
		sum := 0
		for _, m := range processedRe.FindAllStringSubmatch(body, -1) {
			v, _ := strconv.Atoi(m[1])
			sum += v
		}
		last = fmt.Sprintf("pcon_processed_total sums to %d", sum)
		return sum == n && strings.Contains(body, "pcon_true_lag{")
	})
	t.Log(last)
	if err := e.stop(); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
}

func scrape(url string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", errors.New(resp.Status)
	}
	return string(b), nil
}
