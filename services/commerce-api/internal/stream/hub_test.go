package stream_test

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/loopers/commerce-pipeline/internal/cluster"
	"github.com/loopers/commerce-pipeline/internal/pg"
	"github.com/loopers/commerce-pipeline/internal/stages"
	"github.com/loopers/commerce-pipeline/internal/testenv"
	"github.com/loopers/commerce-pipeline/pkg/events"
	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/store"
	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/stream"
)

// fixture is a hub running over a fresh database, and a connection to write
// the aggregates the way product-consumers does.
type fixture struct {
	hub *stream.Hub
	db  *sql.DB
	reg *prometheus.Registry
}

func newFixture(t *testing.T, cfg stream.Config, cluster stream.Cluster) *fixture {
	t.Helper()
	url := testenv.DatabaseURL(t)
	st, err := store.Open(context.Background(), url, pg.Options{MaxConns: 4}, events.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.ExecContext(t.Context(), `INSERT INTO products (name, price, stock) SELECT 'p' || i, 1000, 10 FROM generate_series(1, 5) i`); err != nil {
		t.Fatal(err)
	}
	hub := stream.New(st, cluster, cfg, slog.New(slog.DiscardHandler))
	reg := prometheus.NewRegistry()
	if err := hub.Register(reg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- hub.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("hub.Run: %v", err)
		}
	})
	return &fixture{hub: hub, db: db, reg: reg}
}

// like adds n likes to product id in one transaction.
func (f *fixture) like(t *testing.T, id, n int64) {
	t.Helper()
	_, err := f.db.ExecContext(t.Context(), `INSERT INTO product_likes AS m (product_id, like_count) VALUES ($1, $2)
		ON CONFLICT (product_id) DO UPDATE SET like_count = m.like_count + EXCLUDED.like_count, updated_at = now()`, id, n)
	if err != nil {
		t.Fatal(err)
	}
}

// likes returns the like count of every liked product as the database has
// it (every product has a row, of zeros until it changes).
func (f *fixture) likes(t *testing.T) map[int64]int64 {
	t.Helper()
	rows, err := f.db.QueryContext(t.Context(), `SELECT product_id, like_count FROM product_metrics WHERE like_count > 0`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[int64]int64{}
	for rows.Next() {
		var id, n int64
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		out[id] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// event is one decoded SSE frame.
type event struct {
	Name     string
	ID       uint64
	Products []store.ProductChange
}

func parse(t *testing.T, frame []byte) event {
	t.Helper()
	var ev event
	sc := bufio.NewScanner(bytes.NewReader(frame))
	sc.Buffer(nil, len(frame)+1) // a frame's data is one line, of any length
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ": ")
		switch k {
		case "event":
			ev.Name = v
		case "id":
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				t.Fatalf("bad id in %q", frame)
			}
			ev.ID = n
		case "data":
			if ev.Name == stream.ChangesEvent || ev.Name == stream.ResetEvent {
				var d struct{ Products []store.ProductChange }
				if err := json.Unmarshal([]byte(v), &d); err != nil {
					t.Fatalf("bad data in %q: %v", frame, err)
				}
				ev.Products = d.Products
			}
		}
	}
	return ev
}

// next returns the subscription's next frame that is not a summary.
func next(t *testing.T, s *stream.Subscription) event {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case f := <-s.Frames():
			if ev := parse(t, f); ev.Name != stream.SummaryEvent {
				return ev
			}
		case <-s.Gone():
			t.Fatal("the subscription ended")
		case <-timeout:
			t.Fatal("no frame within 20 s")
		}
	}
}

// collect applies change frames to state until it equals want, and returns
// the last event id seen.
func collect(t *testing.T, s *stream.Subscription, state, want map[int64]int64) uint64 {
	t.Helper()
	var last uint64
	for !cmp.Equal(state, want) {
		ev := next(t, s)
		if ev.ID < last {
			t.Fatalf("event id went back from %d to %d", last, ev.ID)
		}
		last = ev.ID
		for _, p := range ev.Products {
			// Like want (likes > 0): a product whose row of zeros is sent
			// again, because a transaction elsewhere in the cluster holds
			// the watermark below its creation, has no likes.
			if p.LikeCount == 0 {
				delete(state, p.ID)
				continue
			}
			state[p.ID] = p.LikeCount
		}
	}
	return last
}

var quiet = stream.Config{Coalesce: 20 * time.Millisecond, SummaryEvery: time.Hour}

// TestOrderAndResume: a client sees every change, with event ids that never
// go back; a client that reconnects with its Last-Event-ID gets every product
// changed meanwhile, including a change whose transaction started before the
// disconnection and committed after a later one.
func TestOrderAndResume(t *testing.T) {
	t.Parallel()
	f := newFixture(t, quiet, nil)
	ctx := context.Background()
	s, err := f.hub.Subscribe(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if ev := next(t, s); ev.Name != stream.ReadyEvent || ev.ID == 0 {
		t.Fatalf("first event %+v, want ready with an id", ev)
	}
	state := map[int64]int64{}
	for i := range int64(20) {
		f.like(t, 1+i%3, 1)
	}
	last := collect(t, s, state, f.likes(t))

	// A transaction that takes its id now but commits after a later one.
	slow, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = slow.Rollback() }() // a no-op once committed
	if _, err := slow.ExecContext(t.Context(), `INSERT INTO product_likes AS m (product_id, like_count) VALUES (4, 100)
		ON CONFLICT (product_id) DO UPDATE SET like_count = m.like_count + 100`); err != nil {
		t.Fatal(err)
	}
	f.like(t, 2, 5)
	want := f.likes(t) // without product 4: not committed yet
	last = max(last, collect(t, s, state, want))
	f.hub.Unsubscribe(s) // the client goes away, remembering last

	if err := slow.Commit(); err != nil {
		t.Fatal(err)
	}
	f.like(t, 5, 7)
	f.like(t, 1, 1)
	resumed, err := f.hub.Subscribe(ctx, last)
	if err != nil {
		t.Fatal(err)
	}
	defer f.hub.Unsubscribe(resumed)
	ev := next(t, resumed)
	got := map[int64]int64{}
	for _, p := range ev.Products {
		got[p.ID] = p.LikeCount
	}
	all := f.likes(t)
	wantResumed := map[int64]int64{1: all[1], 4: all[4], 5: all[5]}
	for id := range got { // products seen again are allowed, with their current value
		if _, ok := wantResumed[id]; !ok {
			wantResumed[id] = all[id]
		}
	}
	if diff := cmp.Diff(wantResumed, got); diff != "" {
		t.Errorf("resumed from %d: products (-want +got):\n%s", last, diff)
	}
	if ev.ID < last {
		t.Errorf("resumed event id %d is below the Last-Event-ID %d", ev.ID, last)
	}
}

// TestResumeFromUnknownID: an id this database never handed out (above
// every watermark) gets a reset with the top products (here: all of them),
// and a real watermark to go on from.
func TestResumeFromUnknownID(t *testing.T) {
	t.Parallel()
	f := newFixture(t, quiet, nil)
	f.like(t, 1, 2)
	f.like(t, 3, 1)
	s, err := f.hub.Subscribe(context.Background(), 1<<62)
	if err != nil {
		t.Fatal(err)
	}
	defer f.hub.Unsubscribe(s)
	ev := next(t, s)
	if ev.Name != stream.ResetEvent {
		t.Errorf("first event %q, want %q", ev.Name, stream.ResetEvent)
	}
	got := map[int64]int64{}
	for _, p := range ev.Products {
		if p.LikeCount > 0 {
			got[p.ID] = p.LikeCount
		}
	}
	if diff := cmp.Diff(f.likes(t), got); diff != "" {
		t.Errorf("liked products (-want +got):\n%s", diff)
	}
	if ev.ID == 0 || ev.ID >= 1<<62 {
		t.Errorf("event id %d, want the database's watermark", ev.ID)
	}
}

// TestCoalescing: a thousand changes a second reach the clients as at most
// one frame per Coalesce, and the last frame holds the final values.
//
//nolint:paralleltest // counts frames against the elapsed time
func TestCoalescing(t *testing.T) {
	cfg := quiet
	cfg.Coalesce = 100 * time.Millisecond
	cfg.ClientBuffer = 1000
	f := newFixture(t, cfg, nil)
	s, err := f.hub.Subscribe(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.hub.Unsubscribe(s)
	next(t, s) // ready

	const changes = 1000
	start := time.Now()
	tick := time.NewTicker(time.Millisecond)
	for i := range int64(changes) {
		<-tick.C
		f.like(t, 1+i%5, 1)
	}
	tick.Stop()
	took := time.Since(start)
	state := map[int64]int64{}
	want := f.likes(t)
	frames := 0
	for !cmp.Equal(state, want) {
		ev := next(t, s)
		frames++
		for _, p := range ev.Products {
			state[p.ID] = p.LikeCount
		}
	}
	limit := int(took/cfg.Coalesce) + 3
	t.Logf("%d changes in %v (%.0f/s) arrived as %d frames (at most %d allowed)", changes, took.Round(time.Millisecond), changes/took.Seconds(), frames, limit)
	if frames > limit {
		t.Errorf("%d frames for %d changes in %v; coalescing by %v allows %d", frames, changes, took, cfg.Coalesce, limit)
	}
}

// TestSlowClientDropped: a client that does not read is dropped once its
// buffer is full; another client gets every change and the hub holds only
// it.
func TestSlowClientDropped(t *testing.T) {
	t.Parallel()
	cfg := quiet
	cfg.ClientBuffer = 3
	f := newFixture(t, cfg, nil)
	ctx := context.Background()
	slow, err := f.hub.Subscribe(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	fast, err := f.hub.Subscribe(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.hub.Unsubscribe(fast)
	next(t, fast) // ready
	state := map[int64]int64{}
	for i := range int64(10) {
		f.like(t, 1+i%2, 1)
		collect(t, fast, state, f.likes(t)) // one frame per change, at least
	}
	select {
	case <-slow.Gone():
	case <-time.After(5 * time.Second):
		t.Fatal("the slow client was not dropped")
	}
	if n := len(slow.Frames()); n > cfg.ClientBuffer {
		t.Errorf("the slow client holds %d frames, more than its buffer of %d", n, cfg.ClientBuffer)
	}
	if n := f.hub.Open(); n != 1 {
		t.Errorf("%d streams open, want 1 (the fast client)", n)
	}
	want := `
# HELP commerce_api_stream_clients Open GET /api/v1/stream connections.
# TYPE commerce_api_stream_clients gauge
commerce_api_stream_clients 1
# HELP commerce_api_stream_clients_dropped_total Stream clients disconnected because they fell a whole buffer behind.
# TYPE commerce_api_stream_clients_dropped_total counter
commerce_api_stream_clients_dropped_total 1
`
	if err := testutil.GatherAndCompare(f.reg, strings.NewReader(want), "commerce_api_stream_clients", "commerce_api_stream_clients_dropped_total"); err != nil {
		t.Error(err)
	}
}

// TestStreamLimit: past MaxStreams a subscription is refused, and a freed
// slot can be taken again.
func TestStreamLimit(t *testing.T) {
	t.Parallel()
	cfg := quiet
	cfg.MaxStreams = 2
	f := newFixture(t, cfg, nil)
	ctx := context.Background()
	a, err := f.hub.Subscribe(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := f.hub.Subscribe(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.hub.Unsubscribe(b)
	if _, err := f.hub.Subscribe(ctx, 0); !errors.Is(err, stream.ErrTooManyStreams) {
		t.Fatalf("third subscription: err %v, want ErrTooManyStreams", err)
	}
	f.hub.Unsubscribe(a)
	c, err := f.hub.Subscribe(ctx, 0)
	if err != nil {
		t.Fatalf("subscription after one ended: %v", err)
	}
	f.hub.Unsubscribe(c)
}

// TestShutdownEndsStreams: when Run's context ends, every subscription ends
// and new ones are refused.
func TestShutdownEndsStreams(t *testing.T) {
	t.Parallel()
	url := testenv.DatabaseURL(t)
	st, err := store.Open(context.Background(), url, pg.Options{MaxConns: 4}, events.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	hub := stream.New(st, nil, quiet, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- hub.Run(ctx) }()
	subs := make([]*stream.Subscription, 3)
	for i := range subs {
		if subs[i], err = hub.Subscribe(context.Background(), 0); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return within 5 s of its context ending")
	}
	for i, s := range subs {
		select {
		case <-s.Gone():
		default:
			t.Errorf("subscription %d still open after shutdown", i)
		}
	}
	if _, err := hub.Subscribe(context.Background(), 0); !errors.Is(err, stream.ErrClosed) {
		t.Errorf("subscription after shutdown: err %v, want ErrClosed", err)
	}
}

// TestSummarize: the cluster view is reduced to the nodes that have not
// left, without their ids (a host or pod name), and, per group, the owned
// partitions and their total lag.
func TestSummarize(t *testing.T) {
	t.Parallel()
	lag := func(n int64) *int64 { return &n }
	released := time.Now()
	v := cluster.View{
		Nodes: []cluster.Node{
			{ID: "api-1", Service: "commerce-api", Status: "ALIVE"},
			{ID: "relay-1", Service: "outbox-relay", Status: "SUSPECT"},
			{ID: "relay-0", Service: "outbox-relay", Status: "LEFT"},
		},
		Groups: []cluster.Group{{Group: "product-likes", Partitions: []cluster.Partition{
			{Topic: "like-events", Partition: 0, Owner: "c-1", TrueLag: lag(3), DeadLettered: lag(2)},
			{Topic: "like-events", Partition: 1, Owner: "c-1", TrueLag: lag(4), DeadLettered: lag(1)},
			{Topic: "like-events", Partition: 2, Owner: "c-2"}, // no heartbeat with lag yet
			{Topic: "like-events", Partition: 3, Owner: "c-0", TrueLag: lag(100), ReleasedAt: &released},
		}}},
	}
	want := stream.ClusterSummary{
		Nodes: []stream.Node{
			{Service: "commerce-api", Status: "ALIVE", Alive: true},
			{Service: "outbox-relay", Status: "SUSPECT"},
		},
		Groups: []stream.Group{{Name: "product-likes", Lag: 7, Partitions: 3, DeadLetters: lag(3)}},
		Stages: []stream.Stage{{Name: "outbox"}, {Name: "publish"}, {Name: "broker"}, {Name: "apply"}},
	}
	if diff := cmp.Diff(want, stream.Summarize(v)); diff != "" {
		t.Errorf("Summarize (-want +got):\n%s", diff)
	}
}

// TestSummarizeStages: each stage merges the windows of the alive nodes
// that timed it (two consumers here), leaves out a node that stopped
// heartbeating, and stays in the list, empty, when nobody timed it.
func TestSummarizeStages(t *testing.T) {
	t.Parallel()
	window := func(stage string, ms ...float64) stages.Window {
		rec, err := stages.NewRecorder(prometheus.NewRegistry(), nil, stage)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			rec.Observe(stage, "t", time.Duration(m*float64(time.Millisecond)))
		}
		w := rec.Take()[0]
		w.Seconds = 2
		return w
	}
	v := cluster.View{Nodes: []cluster.Node{
		{ID: "relay-1", Status: "ALIVE", Latency: []stages.Window{window(stages.Outbox, 1, 1, 1, 1), window(stages.Publish, 2, 2)}},
		{ID: "relay-0", Status: "DOWN", Latency: []stages.Window{window(stages.Outbox, 900)}},
		{ID: "c-1", Status: "ALIVE", Latency: []stages.Window{window(stages.Apply, 3, 3, 3)}},
		{ID: "c-2", Status: "ALIVE", Latency: []stages.Window{window(stages.Apply, 7)}},
	}}
	ms := func(f float64) *float64 { return &f }
	// Quantiles interpolate within a bucket, as histogram_quantile does:
	// four 1 ms in (0.75, 1] ms put the median at 0.875 ms.
	want := []stream.Stage{
		{Name: "outbox", Events: 4, WindowSeconds: 2, AvgMs: ms(1), P50Ms: ms(0.88), P99Ms: ms(1)},
		{Name: "publish", Events: 2, WindowSeconds: 2, AvgMs: ms(2), P50Ms: ms(1.75), P99Ms: ms(2)},
		{Name: "broker"},
		// 3, 3, 3 and 7 ms: the median inside (2.5, 3] ms, the top in (6, 7] ms.
		{Name: "apply", Events: 4, WindowSeconds: 2, AvgMs: ms(4), P50Ms: ms(2.83), P99Ms: ms(6.96)},
	}
	if diff := cmp.Diff(want, stream.Summarize(v).Stages); diff != "" {
		t.Errorf("stages (-want +got):\n%s", diff)
	}
}

// views hands out the cluster views of a test, one per call.
type views []cluster.View

func (v *views) View(context.Context) (cluster.View, error) {
	next := (*v)[0]
	*v = (*v)[1:]
	return next, nil
}

// TestGroupRates: a group's events per second come from the owners'
// counters of two successive summaries, and are unknown on the first one
// and across a change of owner (the counters are per process).
//
//nolint:paralleltest // computes a rate from the wall-clock time between two summaries
func TestGroupRates(t *testing.T) {
	n := func(v int64) *int64 { return &v }
	view := func(owner string, processed int64) cluster.View {
		return cluster.View{Groups: []cluster.Group{{Group: "g", Partitions: []cluster.Partition{
			{Topic: "t", Partition: 0, Owner: owner, Processed: n(processed)},
		}}}}
	}
	vs := views{view("c-1", 100), view("c-1", 1100), view("c-2", 5)}
	src := stream.FromView(&vs)
	var got []*float64
	for range 3 {
		s, err := src.Summary(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, s.Groups[0].EventsPerSec)
		time.Sleep(50 * time.Millisecond)
	}
	if got[0] != nil || got[2] != nil {
		t.Errorf("rates %v: want none on the first summary and after the owner changed", got)
	}
	// 1,000 records over about 50 ms.
	if got[1] == nil || *got[1] < 1_000 || *got[1] > 20_000 {
		t.Errorf("rate between the first two summaries = %v, want between 1,000/s and 20,000/s (1,000 records in at least 50 ms)", got[1])
	}
}

// TestNewClientGetsLastSummary: a new client has the last summary queued
// right after its first event, not a SummaryEvery later.
func TestNewClientGetsLastSummary(t *testing.T) {
	t.Parallel()
	cfg := quiet
	cfg.SummaryEvery = 50 * time.Millisecond
	f := newFixture(t, cfg, nil)
	a, err := f.hub.Subscribe(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.hub.Unsubscribe(a)
	for ev := parse(t, <-a.Frames()); ev.Name != stream.SummaryEvent; ev = parse(t, <-a.Frames()) {
	}
	b, err := f.hub.Subscribe(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.hub.Unsubscribe(b)
	if n := len(b.Frames()); n < 2 {
		t.Fatalf("%d events queued when Subscribe returned, want the first and the last summary", n)
	}
	var got []string
	for range 2 {
		got = append(got, parse(t, <-b.Frames()).Name)
	}
	if diff := cmp.Diff([]string{stream.ReadyEvent, stream.SummaryEvent}, got); diff != "" {
		t.Errorf("first events (-want +got):\n%s", diff)
	}
}
