package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/loopers/commerce-pipeline/internal/pg"
	"github.com/loopers/commerce-pipeline/internal/testenv"
	"github.com/loopers/commerce-pipeline/services/outbox-relay/internal/publisher"
	"github.com/loopers/commerce-pipeline/services/outbox-relay/internal/relaytest"
	"github.com/loopers/commerce-pipeline/services/outbox-relay/internal/store"
)

// logBuffer collects a node's JSON log lines.
type logBuffer struct{ testenv.LogBuffer }

// logged reports whether a record of level has message msg, attribute "id"
// equal to id, and a non-empty attribute attr.
func (b *logBuffer) logged(level, msg string, id int64, attr string) bool {
	for line := range strings.Lines(b.String()) {
		var l map[string]any
		if json.Unmarshal([]byte(line), &l) != nil || l["level"] != level || l["msg"] != msg {
			continue
		}
		if got, ok := l["id"].(float64); ok && int64(got) == id && l[attr] != nil && l[attr] != "" {
			return true
		}
	}
	return false
}

// messages returns the msg of every line logged at level.
func (b *logBuffer) messages(level string) []string {
	var out []string
	for line := range strings.Lines(b.String()) {
		var l struct{ Level, Msg string }
		if json.Unmarshal([]byte(line), &l) == nil && l.Level == level {
			out = append(out, l.Msg)
		}
	}
	return out
}

// testConfig has short intervals so the suite stays fast.
func testConfig(env *relaytest.Env, node string) Config {
	return Config{
		NodeID:        node,
		BatchSize:     100,
		Window:        20_000,
		WindowBytes:   32 << 20,
		SendTimeout:   3 * time.Second,
		RetryInterval: 200 * time.Millisecond,
		MaxAge:        5 * time.Minute,
		Interval:      100 * time.Millisecond,
		LeaseTTL:      time.Second,
		Retention:     7 * 24 * time.Hour,
	}
}

type node struct {
	svc  *Service
	logs *logBuffer
	reg  *prometheus.Registry // the service's metrics
}

func newNode(t *testing.T, env *relaytest.Env, cfg Config) *node {
	t.Helper()
	logs := &logBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs of %s:\n%s", cfg.NodeID, logs.String())
		}
	})
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx := context.Background()
	st, err := store.Open(ctx, env.URL, pg.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	pub, err := publisher.New(env.Kafka, cfg.SendTimeout, env.Reg, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	reg := prometheus.NewRegistry()
	svc, err := NewService(cfg, logger, st, pub, reg)
	if err != nil {
		t.Fatal(err)
	}
	return &node{svc: svc, logs: logs, reg: reg}
}

// leader starts an environment with one node that holds the lease, for tests
// that run passes by hand. Nothing renews a lease taken by hand, so it is
// long: however slowly a loaded machine runs the test's steps, it holds.
func leader(t *testing.T) (*relaytest.Env, *node) {
	t.Helper()
	return leaderOn(t, relaytest.New(t))
}

// leaderOn is leader on env.
func leaderOn(t *testing.T, env *relaytest.Env) (*relaytest.Env, *node) {
	t.Helper()
	cfg := testConfig(env, "node-a")
	cfg.LeaseTTL = time.Minute
	n := newNode(t, env, cfg)
	n.lead(t)
	return env, n
}

// lead makes the node take the lease; the test fails if it cannot.
func (n *node) lead(t *testing.T) {
	t.Helper()
	ok, err := n.svc.elector.TryAcquire(context.Background())
	if err != nil || !ok {
		t.Fatalf("take the lease: ok=%v err=%v", ok, err)
	}
}

// beforeAdvance makes f run before each of the node's cursor updates: it
// stands for a process paused between publishing and confirming.
func (n *node) beforeAdvance(f func()) {
	n.svc.relay.cursor = hookedAdvance{next: n.svc.relay.cursor, before: f}
}

// hookedAdvance runs before ahead of each Advance of next.
type hookedAdvance struct {
	next   advancer
	before func()
}

func (h hookedAdvance) Advance(ctx context.Context, f store.Fence, a store.Advance) error {
	h.before()
	return h.next.Advance(ctx, f, a)
}

// pass runs one pass directly, as the scheduler would.
func (n *node) pass(t *testing.T) PassResult {
	t.Helper()
	res, err := n.svc.relay.Pass(context.Background())
	if err != nil {
		t.Fatalf("pass: %v", err)
	}
	return res
}

// start runs the node in the background until the test ends or stop is
// called. With release false the node stops as if the process had died,
// leaving its lease to expire.
func (n *node) start(t *testing.T, release bool) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	run := n.svc.Run
	if !release {
		run = n.svc.serve // everything Run does but hand the lease over
	}
	go func() { done <- run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("node stopped with %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// eventually polls cond until it holds, failing the test after timeout.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// orderedPerKey checks that, per topic and key, records first appear in
// strictly increasing sequence. A re-publication of a record already seen is
// not an order violation (consumers drop it by event id); callers count
// duplicates separately.
func orderedPerKey(recs []relaytest.Record) error {
	last := map[string]int64{}
	seen := map[string]bool{}
	for _, r := range recs {
		k := r.Topic + "/" + r.Key
		if seen[r.EventID] {
			continue
		}
		seen[r.EventID] = true
		if r.Sequence <= last[k] {
			return fmt.Errorf("topic %s key %s: sequence %d after %d", r.Topic, r.Key, r.Sequence, last[k])
		}
		last[k] = r.Sequence
	}
	return nil
}

// duplicates counts records whose event id appeared before.
func duplicates(recs []relaytest.Record) int {
	seen := map[string]bool{}
	n := 0
	for _, r := range recs {
		if seen[r.EventID] {
			n++
		}
		seen[r.EventID] = true
	}
	return n
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
