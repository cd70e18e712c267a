// Command e2e measures the whole pipeline: the latency from commerce-api's
// 2xx answer to the change being visible in the product aggregates, with the
// real binaries, as a curve over rising request rates. Half the requests
// view a product, half add a new like; the k-th answered view (like) of a
// product is visible once the product's view_count (like_count) reaches k.
//
// The broker is the one the KAFKA variable chooses: Apache Kafka's own broker
// (KAFKA=real, the default; JVM processes on loopback) or kfake
// (KAFKA=embedded), which then runs in a devkafka process. Either way it is a
// process of its own, so that its CPU is counted apart from the pipeline's
// and this load generator's. On Apache Kafka everything runs twice, each
// time on a fresh cluster, database and stack: first on three nodes (every
// topic with three replicas and min.insync.replicas=2, as in production),
// then on one node, whose figures come beside (-nodes chooses). Each part
// of the output starts with the cluster it ran on. The services run with
// their shipped defaults.
//
// The curve sends the mixed load at each of -rates in turn, then at rates
// growing by -growth, until the pipeline saturates: the rate reached falls
// short of the target by more than 10 %, a request fails, p99 passes 1 s, or
// the changes answered are not all visible 30 s after the load stopped (a
// backlog that grew through the window). For every rate it prints, from the
// services' own histograms over the same window, how the time split into the
// stages of an event's path (package internal/stages), and the CPU seconds
// every process spent per 1,000 events (from /proc): the pipeline (the three
// services and the PostgreSQL backends serving the benchmark's database)
// and, apart, the broker; and the machine's CPU pressure over the window
// (/proc/pressure/cpu: the share of the time some runnable task waited for a
// core); then the curve as one table, and as a figure (-png).
//
// Before measuring, the same load goes to a product of its own, unmeasured,
// for -warmup and then until the brokers' JIT compilers have settled (at
// most -warmup-max), so that the windows see warm processes: a fresh
// broker's JVM compiles its hot paths for a minute or two under load, and
// its compiler threads meanwhile take a core of the machine. One stack
// serves every window.
//
// The hot mode sends the same mixed load to one product (a flash sale),
// whose end-to-end p99 has a target of its own (< 45 ms), and writes a burst
// of a hot product's views and likes straight into the outbox to clock the
// relay and the consumers alone, past what the API takes on a small machine.
//
// The tracing mode measures what OpenTelemetry tracing costs: for each
// set-up of -tracing (off, the baseline, then 1 % and 100 % of the roots
// sampled) a fresh stack whose services export their spans over OTLP to a
// sink in this process, the mixed load at each of -tracing-rates (500 and
// 1,000 requests/s), and one table of the API's and the end to end's p50
// and p99 and the pipeline's CPU per request, each set-up beside tracing
// off. It runs last: it stops the stack the other modes share.
//
// The load generator runs on the same machine: past the rate where the
// machine's cores are busy, the rate reached says as much about it as about
// the pipeline. -pprof keeps each service's CPU profile of every window
// (from its admin listener's /debug/pprof), -keep the services' logs.
//
//	eval "$(scripts/testenv.sh kafka)" && go run ./bench/e2e
//	eval "$(scripts/testenv.sh kafka)" && go run ./bench/e2e -rates 250,500 -duration 5s -warmup 5s -hot-duration 3s -burst 5000 -png /tmp/curve.png
//	eval "$(scripts/testenv.sh kafka)" && go run ./bench/e2e -modes tracing -tracing-rates 50 -duration 2s -warmup 0 -nodes 1 -png ""   # the tracing mode, quickly
//	eval "$(scripts/testenv.sh kafka)" && go run ./bench/e2e -rates 50 -growth 1 -duration 2s -warmup 0 -hot-rate 50 -hot-duration 2s -burst 500 -png ""   # a quick check that it runs
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/loopers/commerce-pipeline/bench/internal/benchkit"
	"github.com/loopers/commerce-pipeline/internal/devkafka"
	"github.com/loopers/commerce-pipeline/internal/kafka"
	"github.com/loopers/commerce-pipeline/internal/outbox"
	"github.com/loopers/commerce-pipeline/internal/stack"
	"github.com/loopers/commerce-pipeline/internal/testenv"
	"github.com/loopers/commerce-pipeline/pkg/events"
)

type options struct {
	rates       []int
	growth      float64
	maxRate     int
	duration    time.Duration
	products    int
	poll        time.Duration
	hotRate     int
	hotDuration time.Duration
	burst       int
	modes       string
	warmup      time.Duration
	warmupRate  int
	warmupMax   time.Duration
	png         string
	pprof       string
	keep        bool
	nodes       string
	// tracing mode: the set-ups, tracing off first, and the rates.
	tracing       string
	tracingRates  []int
	tracingRounds int
}

func main() {
	var o options
	var rates, tracingRates string
	flag.StringVar(&rates, "rates", "250,500,1000,2000", "request rates of the curve, in order; after the last, rates grow by -growth until the pipeline saturates")
	flag.Float64Var(&o.growth, "growth", 1.5, "factor between the rates after the last of -rates (1 stops after -rates)")
	flag.IntVar(&o.maxRate, "max-rate", 50_000, "the curve stops after this rate even if it has not saturated")
	flag.DurationVar(&o.duration, "duration", 20*time.Second, "how long each rate of the curve sends requests")
	flag.IntVar(&o.products, "products", 20, "products to spread the curve's requests over (new ones at each rate)")
	flag.DurationVar(&o.poll, "poll", 2*time.Millisecond, "how often the aggregates are read")
	flag.IntVar(&o.hotRate, "hot-rate", 1000, "requests per second on the hot product")
	flag.DurationVar(&o.hotDuration, "hot-duration", 20*time.Second, "how long to send requests to the hot product")
	flag.IntVar(&o.burst, "burst", 50_000, "events of the hot product written straight into the outbox (0 skips)")
	flag.StringVar(&o.modes, "modes", "curve,hot,tracing", "modes to run: curve (-rates 500 -growth 1 for the one rate of before; mixed is its old name), hot, tracing (last: it replaces the shared stack)")
	flag.StringVar(&o.tracing, "tracing", "off,0.01,1", "tracing mode: the set-ups to compare, off (the baseline, first) and sampling ratios, each on a fresh stack exporting to a span sink in this process")
	flag.StringVar(&tracingRates, "tracing-rates", "500,1000", "tracing mode: the request rates each set-up is measured at")
	flag.IntVar(&o.tracingRounds, "tracing-rounds", 3, "tracing mode: rounds of every set-up, each round starting with the next one; the table gives the median round by CPU per request, and the range")
	flag.DurationVar(&o.warmup, "warmup", 20*time.Second, "how long at least to send requests, at -warmup-rate, to a product of its own before measuring, and then until the brokers' JIT compilers settle (0 skips)")
	flag.DurationVar(&o.warmupMax, "warmup-max", 3*time.Minute, "the longest warm-up, settled or not")
	flag.IntVar(&o.warmupRate, "warmup-rate", 500, "requests per second of the warm-up")
	flag.StringVar(&o.png, "png", "docs/img/latency-curve.png", "where to draw the curve, relative to the module root unless absolute (empty: no figure)")
	flag.StringVar(&o.pprof, "pprof", "", "directory to write each service's CPU profile of every window to (empty: none)")
	flag.BoolVar(&o.keep, "keep", false, "keep the services' logs, and say where")
	flag.StringVar(&o.nodes, "nodes", benchkit.DefaultNodes, "cluster sizes to run on, in turn, each a fresh cluster and stack (KAFKA=real): three nodes, one node's figures beside; the first size's curve is -png, the others' beside it (-1node)")
	flag.Parse()
	for _, l := range []struct {
		name, v string
		to      *[]int
	}{{"rates", rates, &o.rates}, {"tracing-rates", tracingRates, &o.tracingRates}} {
		for f := range strings.SplitSeq(l.v, ",") {
			r, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || r <= 0 {
				fmt.Fprintf(os.Stderr, "bench/e2e: -%s: %q is not a positive integer\n", l.name, f)
				os.Exit(2)
			}
			*l.to = append(*l.to, r)
		}
	}
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "bench/e2e:", err)
		os.Exit(1)
	}
}

const (
	view = iota
	like
)

// answered records, per product and kind, when each 2xx arrived, in order.
type answered struct {
	mu sync.Mutex
	at [][2][]time.Time
}

func (a *answered) add(p, kind int, t time.Time) {
	a.mu.Lock()
	a.at[p][kind] = append(a.at[p][kind], t)
	a.mu.Unlock()
}

// bench is the stack every window runs on.
type bench struct {
	client *http.Client
	api    string
	probe  *probe
	pipe   *stack.Pipeline
	pprof  string
	broker string // its name, release and size, for the figure
	png    string // where to draw the curve (empty: no figure)
	target target // the mixed load's at targetRate, for the cluster's size
}

// target is the mixed load's end-to-end target at targetRate.
type target struct{ p50, p99 time.Duration }

// targetFor is the target on a cluster of n nodes: on three, acks=all
// waits for a follower's fetch, and the target allows for it.
func targetFor(n int) target {
	if n >= 3 {
		return target{p50: 10 * time.Millisecond, p99: 50 * time.Millisecond}
	}
	return target{p50: 5 * time.Millisecond, p99: 15 * time.Millisecond}
}

func run(ctx context.Context, o options) error {
	kind, err := devkafka.Kind(devkafka.Real)
	if err != nil {
		return err
	}
	root, err := stack.ModuleRoot()
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "building the services...")
	pkgs := slices.Clone(stack.Services)
	if kind == devkafka.Embedded {
		pkgs = append(pkgs, "./cmd/devkafka")
	}
	bins, err := stack.Build(ctx, root, pkgs...)
	if err != nil {
		return err
	}
	defer func() {
		if err := bins.Remove(); err != nil {
			fmt.Fprintln(os.Stderr, "bench/e2e: remove the built services:", err)
		}
	}()
	redisURL := os.Getenv("TEST_REDIS_URL")
	if redisURL == "" {
		redisURL = "redis://127.0.0.1:6379/0"
	}
	logs, err := os.MkdirTemp("", "bench-e2e-logs-")
	if err != nil {
		return err
	}
	defer func() {
		if o.keep {
			fmt.Fprintln(os.Stderr, "bench/e2e: the services' logs kept in", logs)
			return
		}
		os.RemoveAll(logs)
	}()
	sizes, err := benchkit.ParseNodes(o.nodes, kind)
	if err != nil {
		return err
	}
	var errs []error
	for i, n := range sizes {
		if i > 0 {
			fmt.Println()
		}
		fmt.Printf("## on %s\n\n", benchkit.ClusterLabel(n))
		png := o.png
		if i > 0 && png != "" {
			// The first size's curve is the figure; the others' beside it.
			png = strings.TrimSuffix(png, filepath.Ext(png)) + fmt.Sprintf("-%dnode", n) + filepath.Ext(png)
		}
		err := runOn(ctx, o, kind, n, png, root, bins, redisURL, filepath.Join(logs, strconv.Itoa(n)))
		if err != nil {
			err = fmt.Errorf("on %s: %w", benchkit.ClusterLabel(n), err)
			fmt.Fprintln(os.Stderr, "bench/e2e:", err)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// runOn runs the modes on a fresh cluster of n nodes (KAFKA=real) or the
// embedded broker, with a fresh database, drawing the curve in png.
func runOn(ctx context.Context, o options, kind string, n int, png, root string, bins *stack.Binaries, redisURL, logs string) error {
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return err
	}
	dbURL, drop, err := testenv.NewDatabase(ctx)
	if err != nil {
		return err
	}
	defer drop() //nolint:errcheck // best effort
	kb, err := startBroker(ctx, kind, n, bins, logs)
	if err != nil {
		return err
	}
	defer kb.stop()
	fmt.Printf("broker: %s, %s; KAFKA=%s, %s, up in %s\n", kb.version, benchkit.ClusterLabel(n), kind, kb.brokers, kb.started.Round(100*time.Millisecond))

	start := func(extra map[string]string, logs string) (*stack.Pipeline, error) {
		env := map[string]string{"DATABASE_URL": dbURL, "REDIS_URL": redisURL, "KAFKA_BROKERS": kb.brokers}
		maps.Copy(env, extra)
		return bins.StartPipeline(ctx, stack.PipelineOptions{Env: env, Logs: logs})
	}
	pipe, err := start(nil, logs)
	if err != nil {
		return err
	}
	defer pipe.Stop(20 * time.Second)
	var procs []proc
	for _, p := range pipe.Procs {
		procs = append(procs, proc{name: p.Name, pid: p.Pid()})
	}
	b := &bench{
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 512}},
		api:    pipe.API,
		pipe:   pipe,
		pprof:  o.pprof,
		broker: kb.version + ", " + benchkit.ClusterLabel(n),
		png:    png,
		target: targetFor(n),
	}
	if o.pprof != "" {
		if err := os.MkdirAll(o.pprof, 0o755); err != nil {
			return err
		}
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	// Consumers join their groups asynchronously; let one view go through
	// before timing anything.
	if err := b.warmUp(ctx, conn); err != nil {
		return err
	}
	if err := b.warm(ctx, conn, o, kb.procs); err != nil {
		return err
	}
	b.probe = &probe{
		procs:      procs,
		brokers:    kb.procs,
		brokerName: kb.name,
		metrics:    []string{"http://" + pipe.RelayAdmin + "/metrics", "http://" + pipe.ConsumersAdmin + "/metrics"},
		conn:       conn,
	}

	var errs []error
	seen := map[string]bool{}
	for mode := range strings.SplitSeq(o.modes, ",") {
		if seen[mode] {
			return fmt.Errorf("mode %q twice", mode)
		}
		if seen["tracing"] {
			return fmt.Errorf("mode %q after tracing, which stops the shared stack: put tracing last", mode)
		}
		seen[mode] = true
		switch mode {
		case "tracing":
			errs = append(errs, b.tracing(ctx, o, start, logs))
		case "curve", "mixed":
			errs = append(errs, b.curve(ctx, o, root))
		case "hot":
			errs = append(errs, b.hot(ctx, o))
		default:
			return fmt.Errorf("unknown mode %q", mode)
		}
	}
	return errors.Join(errs...)
}

// The rate of the mixed load's target (targetFor), and the hot product's
// target, end to end.
const (
	targetRate     = 500
	targetHotP99   = 45 * time.Millisecond
	sustainedP99   = 50 * time.Millisecond // the curve's "sustained" bound
	explodedP99    = time.Second
	visibleWithin  = 30 * time.Second // after the load: a backlog past it grew through the window
	settleWithin   = 3 * time.Minute  // for a backlog to clear before the next mode
	shortfallLimit = 0.9              // achieved/target below it: saturated
)

// curve runs the mixed load at rising rates until the pipeline saturates,
// prints each window and the curve, and draws it.
func (b *bench) curve(ctx context.Context, o options, root string) error {
	var points []*window
	rate := 0
	for i := 0; ; i++ {
		switch {
		case i < len(o.rates):
			rate = o.rates[i]
		case o.growth > 1:
			rate = int(math.Round(float64(rate) * o.growth))
		default:
			rate = 0
		}
		if rate == 0 || rate > o.maxRate {
			break
		}
		products, err := b.newProducts(ctx, o.products, fmt.Sprintf("curve %d", rate))
		if err != nil {
			return err
		}
		w, err := b.load(ctx, products, rate, o.duration, o.poll)
		if err != nil {
			return err
		}
		fmt.Println()
		fmt.Printf("### mixed load at %d requests/s over %d products\n", rate, len(products))
		targets := [2]string{}
		if rate == targetRate {
			targets = [2]string{"≤ " + b.target.p50.String(), "≤ " + b.target.p99.String()}
		}
		w.print("mixed load", targets)
		points = append(points, w)
		if w.saturated() != "" {
			fmt.Printf("\nsaturated at %d requests/s: %s\n", rate, w.saturated())
			if err := b.settle(ctx, w); err != nil {
				return err
			}
			break
		}
	}
	if len(points) == 0 {
		return errors.New("the curve has no rate: see -rates and -max-rate")
	}
	printCurve(points, o.duration, b.target)
	if b.png != "" {
		caption := fmt.Sprintf("%s, %s per rate, %s", b.broker, o.duration, time.Now().Format("2006-01-02"))
		path := b.png
		if !filepath.IsAbs(path) {
			path = filepath.Join(root, path)
		}
		if err := drawCurve(path, caption, points, b.target); err != nil {
			return fmt.Errorf("draw the curve: %w", err)
		}
		fmt.Printf("\nthe curve drawn in %s\n", path)
	}
	return nil
}

// printCurve prints the curve as one table, the targets beside the 500
// requests/s row, and the highest rate sustained with p99 ≤ 50 ms.
func printCurve(points []*window, d time.Duration, t target) {
	fmt.Println()
	fmt.Printf("### the curve: mixed load (views + new likes), %s at each rate, one stack\n\n", d)
	fmt.Println("| requests/s | reached | end to end p50 | end to end p99 | outbox p50 / p99 | publish p50 / p99 | broker p50 / p99 | apply p50 / p99 | CPU s / 1,000 events: pipeline | broker | CPU pressure | target (p50 / p99) |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|")
	best := 0
	has500 := false
	for _, w := range points {
		note := ""
		if w.target == targetRate {
			has500 = true
			note = fmt.Sprintf("≤ %s / ≤ %s: %s", t.p50, t.p99, verdict(w.q(.5) <= t.p50 && w.q(.99) <= t.p99))
		}
		if s := w.saturated(); s != "" {
			note = strings.TrimPrefix(note+"; ", "; ") + "saturated: " + s
		} else if w.q(.99) <= sustainedP99 {
			best = w.target
		}
		sq := func(s string) string { q := w.stages[s]; return ms1(q.p50) + " / " + ms1(q.p99) }
		fmt.Printf("| %d | %.0f | %s | %s | %s | %s | %s | %s | %.3f | %.3f | %s | %s |\n",
			w.target, w.achieved, ms1(w.q(.5).Seconds()), ms1(w.q(.99).Seconds()),
			sq("outbox"), sq("publish"), sq("broker"), sq("apply"), w.cost.perKPipeline, w.cost.perKBroker, pct(w.cost.stalledShare), note)
	}
	if !has500 {
		fmt.Printf("(no window at %d requests/s, the rate of the targets p50 ≤ %s and p99 ≤ %s)\n", targetRate, t.p50, t.p99)
	}
	fmt.Println()
	if best > 0 {
		fmt.Printf("highest rate sustained with end-to-end p99 ≤ %s: %d requests/s\n", sustainedP99, best)
	} else {
		fmt.Printf("no rate sustained with end-to-end p99 ≤ %s\n", sustainedP99)
	}
	fmt.Println("(end to end: API 2xx → visible in the aggregates, bench clock; stages from the services' histograms;")
	fmt.Println(" CPU: utime + stime of the services and PostgreSQL backends, the broker's process apart)")
	fmt.Println()
	fmt.Println("For context, not measured here: a WAL-based relay (Debezium-style) reports 55 ms mean and 253 ms p99")
	fmt.Println("from PostgreSQL to Kafka at its load.")
}

// hot sends the mixed load to one product, then the burst.
func (b *bench) hot(ctx context.Context, o options) error {
	products, err := b.newProducts(ctx, 1, "flash sale")
	if err != nil {
		return err
	}
	w, err := b.load(ctx, products, o.hotRate, o.hotDuration, o.poll)
	if err != nil {
		return err
	}
	fmt.Println()
	fmt.Printf("### hot product: every request on one product, %d requests/s\n", o.hotRate)
	w.print("hot product", [2]string{"", "< " + targetHotP99.String()})
	fmt.Printf("\nhot product end-to-end p99 %s, target < %s: %s\n", w.q(.99).Round(100*time.Microsecond), targetHotP99, verdict(w.q(.99) < targetHotP99 && w.saturated() == ""))
	var errs []error
	if s := w.saturated(); s != "" {
		fmt.Printf("hot product saturated at %d requests/s: %s\n", o.hotRate, s)
		errs = append(errs, b.settle(ctx, w))
	}
	if o.burst > 0 {
		errs = append(errs, b.burst(ctx, o.burst))
	}
	return errors.Join(errs...)
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

// newProducts creates n products named after what.
func (b *bench) newProducts(ctx context.Context, n int, what string) ([]int64, error) {
	products := make([]int64, n)
	for i := range products {
		var p struct{ ID int64 }
		if err := benchkit.Call(ctx, b.client, "POST", b.api+"/products", "", fmt.Sprintf(`{"name":"%s %d","price":1000,"stock":1000000}`, what, i), &p); err != nil {
			return nil, err
		}
		products[i] = p.ID
	}
	return products, nil
}

// window is what one rate's load measured.
type window struct {
	target    int
	products  []int64
	sent      int64
	failed    int64
	firstErr  error
	elapsed   time.Duration
	stopped   time.Time       // when the last answer arrived
	achieved  float64         // 2xx answers per second
	latencies []time.Duration // sorted, of the changes that became visible
	api       []time.Duration // sorted, every 2xx's time from request to answer
	pending   int             // answered changes not yet visible when the load stopped
	invisible int             // answered changes still not visible visibleWithin after
	answered  [][2]int        // per product: views and likes answered
	stages    map[string]stageQ
	cost      cost
	poll      time.Duration
	// cacheFailed counts, per service, the product cache (Redis) calls its
	// log says failed during the window: each costs its caller the cache's
	// timeout, and the connection it used.
	cacheFailed []string
}

// q is the end-to-end latency quantile f.
func (w *window) q(f float64) time.Duration {
	if len(w.latencies) == 0 {
		return 0
	}
	return w.latencies[int(f*float64(len(w.latencies)-1))]
}

// saturated says why the window shows a saturated pipeline, or "".
func (w *window) saturated() string {
	var why []string
	if w.failed > 0 {
		why = append(why, fmt.Sprintf("%d requests failed (%v)", w.failed, w.firstErr))
	}
	if w.achieved < shortfallLimit*float64(w.target) {
		why = append(why, fmt.Sprintf("reached %.0f requests/s", w.achieved))
	}
	if w.invisible > 0 {
		why = append(why, fmt.Sprintf("%d changes not visible %s after the load", w.invisible, visibleWithin))
	}
	if w.q(.99) > explodedP99 {
		why = append(why, "p99 over "+explodedP99.String())
	}
	return strings.Join(why, "; ")
}

// load sends rate requests/s for d, spread over products, and measures the
// latency from each 2xx to its change being visible, its split into stages
// and the CPU it cost.
func (b *bench) load(ctx context.Context, products []int64, rate int, d, poll time.Duration) (*window, error) {
	conn := b.probe.conn
	logSizes := b.logSizes()
	before, err := b.probe.read(ctx)
	if err != nil {
		return nil, err
	}
	w := &window{target: rate, products: products, poll: poll}
	ans := &answered{at: make([][2][]time.Time, len(products))}
	var failed atomic.Int64
	var firstErr atomic.Value
	pollDone := make(chan error, 1)
	stopPoll := make(chan struct{})
	vis := &visibility{}
	go func() { pollDone <- pollVisible(ctx, conn, products, ans, poll, stopPoll, vis) }()
	label := fmt.Sprintf("curve-%d", rate)
	if len(products) == 1 {
		label = fmt.Sprintf("hot-%d", rate)
	}
	profiles := b.profile(label, d)

	fmt.Fprintf(os.Stderr, "sending %d requests/s for %s to %d products...\n", rate, d, len(products))
	var likes atomic.Int64
	var apiMu sync.Mutex
	began := time.Now()
	w.sent = int64(pace(rate, d, 512, func(int) {
		t := time.Now()
		pi := rand.IntN(len(products))
		pid := strconv.FormatInt(products[pi], 10)
		var err error
		kind := rand.IntN(2)
		if kind == view {
			err = benchkit.Call(ctx, b.client, "GET", b.api+"/products/"+pid, "", "", nil)
		} else {
			err = benchkit.Call(ctx, b.client, "POST", b.api+"/products/"+pid+"/likes", "bench-"+strconv.Itoa(rate)+"-"+strconv.FormatInt(likes.Add(1), 10), "", nil)
		}
		if err != nil {
			if failed.Add(1) == 1 {
				firstErr.Store(err)
			}
			return
		}
		now := time.Now()
		ans.add(pi, kind, now)
		apiMu.Lock()
		w.api = append(w.api, now.Sub(t))
		apiMu.Unlock()
	}))
	slices.Sort(w.api)
	w.stopped = time.Now()
	w.elapsed = w.stopped.Sub(began)
	close(stopPoll)
	if err := <-pollDone; err != nil {
		return nil, err
	}
	if err := profiles(); err != nil {
		fmt.Fprintln(os.Stderr, "bench/e2e: profile:", err)
	}
	after, err := b.probe.read(ctx)
	if err != nil {
		return nil, err
	}
	w.failed = failed.Load()
	if e, ok := firstErr.Load().(error); ok {
		w.firstErr = e
	}
	answeredN := w.sent - w.failed
	w.achieved = float64(answeredN) / w.elapsed.Seconds()
	w.latencies = vis.latencies
	slices.Sort(w.latencies)
	w.pending = vis.pendingAtStop
	w.invisible = int(answeredN) - len(w.latencies)
	w.answered = make([][2]int, len(products))
	for i := range ans.at {
		w.answered[i] = [2]int{len(ans.at[i][view]), len(ans.at[i][like])}
	}
	w.stages, w.cost = b.probe.summarize(before, after, int64(len(w.latencies)))
	w.cacheFailed = b.cacheFailures(logSizes)
	return w, nil
}

// logSizes are the sizes of the services' logs now.
func (b *bench) logSizes() []int64 {
	sizes := make([]int64, len(b.pipe.Procs))
	for i, p := range b.pipe.Procs {
		if fi, err := os.Stat(p.LogPath); err == nil {
			sizes[i] = fi.Size()
		}
	}
	return sizes
}

// cacheFailures counts the product cache warnings each service logged
// since its log had the size in from.
func (b *bench) cacheFailures(from []int64) []string {
	var out []string
	for i, p := range b.pipe.Procs {
		f, err := os.Open(p.LogPath)
		if err != nil {
			continue
		}
		n := 0
		if _, err := f.Seek(from[i], io.SeekStart); err == nil {
			sc := bufio.NewScanner(f)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			for sc.Scan() {
				if bytes.Contains(sc.Bytes(), []byte(`"msg":"product cache `)) {
					n++
				}
			}
		}
		f.Close()
		if n > 0 {
			out = append(out, fmt.Sprintf("%d in %s", n, p.Name))
		}
	}
	return out
}

// print prints the window: the end to end, its stages and its CPU.
func (w *window) print(title string, targets [2]string) {
	fmt.Println()
	fmt.Printf("| %s, end to end: API 2xx → visible in the aggregates | measured | target |\n", title)
	fmt.Println("|---|---|---|")
	fmt.Printf("| requests (views + new likes) | %d sent, %d failed | 0 failed |\n", w.sent, w.failed)
	fmt.Printf("| throughput reached | %.0f req/s | %d req/s |\n", w.achieved, w.target)
	if len(w.api) > 0 {
		fmt.Printf("| API answer p50 / p99 (request → 2xx, not part of the end to end) | %s / %s | |\n",
			w.api[len(w.api)/2].Round(100*time.Microsecond), w.api[int(.99*float64(len(w.api)-1))].Round(100*time.Microsecond))
	}
	fmt.Printf("| changes not yet visible when the load stopped | %d | |\n", w.pending)
	failed := "none"
	if len(w.cacheFailed) > 0 {
		failed = strings.Join(w.cacheFailed, ", ")
	}
	fmt.Printf("| product cache (Redis) calls that failed, from the logs | %s | none |\n", failed)
	if len(w.latencies) == 0 {
		fmt.Println("| latency | no change became visible | |")
		return
	}
	fmt.Printf("| latency p50 | %s | %s |\n", w.q(.50).Round(100*time.Microsecond), targets[0])
	fmt.Printf("| latency p90 | %s | |\n", w.q(.90).Round(100*time.Microsecond))
	fmt.Printf("| latency p99 | %s | %s |\n", w.q(.99).Round(100*time.Microsecond), targets[1])
	fmt.Printf("| latency max | %s | |\n", w.latencies[len(w.latencies)-1].Round(100*time.Microsecond))
	fmt.Printf("(visibility polled every %s, which bounds the resolution)\n", w.poll)
	var sum time.Duration
	for _, l := range w.latencies {
		sum += l
	}
	printStages(w.stages, w.cost, int64(len(w.latencies)), w.q, sum/time.Duration(len(w.latencies)))
}

// pace calls fn at rate calls per second until d has passed, each call in a
// goroutine of its own, at most limit at once, and returns how many it
// made once every call has returned. The calls keep to a schedule (the
// i-th is due at i/rate), not to a ticker, which drops ticks when the
// sender falls behind: a call delayed by the limit is followed at once by
// those that fell due meanwhile, so a rate the server cannot take shows as
// the time the calls took, not as fewer calls.
func pace(rate int, d time.Duration, limit int, fn func(i int)) int {
	n := int(d.Seconds() * float64(rate))
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	began := time.Now()
	for i := range n {
		if wait := time.Until(began.Add(time.Duration(float64(i) / float64(rate) * float64(time.Second)))); wait > 0 {
			time.Sleep(wait)
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			fn(i)
		})
	}
	wg.Wait()
	return n
}

// visibility is what pollVisible found.
type visibility struct {
	latencies     []time.Duration
	pendingAtStop int
}

// pollVisible reads the aggregates of products every interval and, for each
// answered change that has become visible, records its latency. After stop
// it keeps going until every answered change is visible, for at most
// visibleWithin.
func pollVisible(ctx context.Context, conn *pgx.Conn, products []int64, ans *answered, every time.Duration, stop <-chan struct{}, out *visibility) error {
	index := map[int64]int{}
	for i, id := range products {
		index[id] = i
	}
	seen := make([][2]int, len(products))
	var deadline time.Time
	for {
		now := time.Now()
		got, err := benchkit.ReadCounts(ctx, conn, products)
		if err != nil {
			return err
		}
		pending := 0
		ans.mu.Lock()
		for id, c := range got {
			i, ok := index[id]
			if !ok {
				continue
			}
			for kind, visible := range [2]int64{c.Views, c.Likes} {
				at := ans.at[i][kind]
				for seen[i][kind] < len(at) && int64(seen[i][kind]) < visible {
					out.latencies = append(out.latencies, now.Sub(at[seen[i][kind]]))
					seen[i][kind]++
				}
			}
		}
		for i := range ans.at {
			pending += len(ans.at[i][view]) - seen[i][view] + len(ans.at[i][like]) - seen[i][like]
		}
		ans.mu.Unlock()
		select {
		case <-stop:
			if deadline.IsZero() {
				deadline = time.Now().Add(visibleWithin)
				out.pendingAtStop = pending
			}
			if pending == 0 || time.Now().After(deadline) {
				return nil
			}
		default:
		}
		time.Sleep(every)
	}
}

// settle waits until a saturated window's backlog has cleared (every
// answered change visible), so that what runs next measures an idle
// pipeline, and says how long it took.
func (b *bench) settle(ctx context.Context, w *window) error {
	if w.invisible == 0 {
		return nil
	}
	began := time.Now()
	for {
		got, err := benchkit.ReadCounts(ctx, b.probe.conn, w.products)
		if err != nil {
			return err
		}
		behind := 0
		for i, id := range w.products {
			behind += max(0, w.answered[i][view]-int(got[id].Views)) + max(0, w.answered[i][like]-int(got[id].Likes))
		}
		if behind == 0 {
			fmt.Printf("(its backlog cleared %s after the load stopped)\n", time.Since(w.stopped).Round(100*time.Millisecond))
			return nil
		}
		if time.Since(began) > settleWithin {
			return fmt.Errorf("%d answered changes still not visible %s after the load", behind, time.Since(w.stopped).Round(time.Second))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// profile takes a CPU profile of every service for d, in the background,
// when -pprof names a directory; the function returned waits for them.
func (b *bench) profile(label string, d time.Duration) func() error {
	if b.pprof == "" {
		return func() error { return nil }
	}
	secs := max(1, int(d.Seconds()))
	errc := make(chan error, len(b.pipe.Procs))
	admins := []string{b.pipe.APIAdmin, b.pipe.RelayAdmin, b.pipe.ConsumersAdmin}
	for i, p := range b.pipe.Procs {
		go func() {
			errc <- benchkit.FetchProfile(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", admins[i], secs),
				filepath.Join(b.pprof, label+"-"+p.Name+".pprof"))
		}()
	}
	return func() error {
		var errs []error
		for range b.pipe.Procs {
			errs = append(errs, <-errc)
		}
		return errors.Join(errs...)
	}
}

// warmUp views a product until the view shows in the aggregates, so that
// the consumers own their partitions before measuring.
func (b *bench) warmUp(ctx context.Context, conn *pgx.Conn) error {
	products, err := b.newProducts(ctx, 1, "first view")
	if err != nil {
		return err
	}
	if err := benchkit.Call(ctx, b.client, "GET", b.api+"/products/"+strconv.FormatInt(products[0], 10), "", "", nil); err != nil {
		return err
	}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		var n int64
		err := conn.QueryRow(ctx, `SELECT view_count FROM product_views WHERE product_id = $1`, products[0]).Scan(&n)
		if err == nil && n == 1 {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return errors.New("the warm-up view never became visible")
}

// warmPipeline sends rate requests/s for d (views and new likes, as the
// measured windows do) to a product of its own, and waits until the
// aggregates show every answered one. A JVM compiles its hot paths during
// the first tens of seconds under load: a window measured on a cold broker
// would count the compiler's CPU and its slower answers as the broker's (on
// this machine the broker's CPU per record halved, then halved again, over
// its first three 5-second windows at 500 records/s).
func (b *bench) warmPipeline(ctx context.Context, conn *pgx.Conn, rate int, d time.Duration) error {
	products, err := b.newProducts(ctx, 1, "warm-up")
	if err != nil {
		return err
	}
	pid := strconv.FormatInt(products[0], 10)
	var views, likes atomic.Int64
	pace(rate, d, 512, func(i int) {
		if i%2 == 0 {
			if benchkit.Call(ctx, b.client, "GET", b.api+"/products/"+pid, "", "", nil) == nil {
				views.Add(1)
			}
		} else if benchkit.Call(ctx, b.client, "POST", b.api+"/products/"+pid+"/likes", "warm-"+strconv.Itoa(i), "", nil) == nil {
			likes.Add(1)
		}
	})
	return waitCounts(ctx, conn, products[0], views.Load(), likes.Load(), time.Minute)
}

// warm sends the warm-up load, unmeasured, for -warmup and until the
// brokers' JIT compilers have settled (at most -warmup-max).
func (b *bench) warm(ctx context.Context, conn *pgx.Conn, o options, brokers []proc) error {
	if o.warmup <= 0 {
		return nil
	}
	pids := make([]int, len(brokers))
	for i, p := range brokers {
		pids[i] = p.pid
	}
	took, settled, err := benchkit.WarmUp(ctx, pids, o.warmup, max(o.warmup, o.warmupMax), func(ctx context.Context) error {
		return b.warmPipeline(ctx, conn, o.warmupRate, min(o.warmup, 5*time.Second))
	})
	if err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	state := "the brokers' JIT compilers settled"
	if !settled {
		state = "the brokers' JIT compilers still busy at -warmup-max"
	}
	fmt.Printf("warm-up: %d requests/s on a product of its own for %s, not measured (%s)\n", o.warmupRate, took.Round(time.Second), state)
	return nil
}

// waitCounts waits until product shows views and likes.
func waitCounts(ctx context.Context, conn *pgx.Conn, product, views, likes int64, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		got, err := benchkit.ReadCounts(ctx, conn, []int64{product})
		if err != nil {
			return err
		}
		v, l := got[product].Views, got[product].Likes
		if v == views && l == likes {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("product %d: %d/%d views and %d/%d likes visible after %s", product, v, views, l, likes, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// broker is the run's Kafka broker, a process of its own.
type broker struct {
	version string        // the broker and its release
	name    string        // its row in the CPU table
	brokers string        // KAFKA_BROKERS
	procs   []proc        // the processes whose CPU is the broker's: one per node
	started time.Duration // until it answered, the pipeline's topics created
	stop    func()
}

// startBroker starts the broker kind names, with n nodes, and every topic
// the pipeline uses (3 partitions each, replicated as the cluster allows):
// Apache Kafka, whose JVMs are processes of their own already, or kfake in
// a devkafka process, since in this one its CPU would mix with the load
// generator's.
func startBroker(ctx context.Context, kind string, n int, bins *stack.Binaries, logs string) (*broker, error) {
	if kind == devkafka.Real {
		// The JVM's default compilers: throughput is what is measured.
		b, err := devkafka.Start(ctx, devkafka.Options{Kind: kind, Nodes: n, Topics: kafka.Settings{}.PipelineTopics(3, 1)})
		if err != nil {
			return nil, fmt.Errorf("start the broker (KAFKA=%s): %w", kind, err)
		}
		var procs []proc
		var pids []string
		for _, nd := range b.Cluster.Nodes() {
			procs = append(procs, proc{name: fmt.Sprintf("node %d", nd.ID()), pid: nd.Pid()})
			pids = append(pids, strconv.Itoa(nd.Pid()))
		}
		what := "its JVM, pid "
		if n > 1 {
			what = fmt.Sprintf("its %d JVMs, pids ", n)
		}
		return &broker{
			version: b.Version, name: fmt.Sprintf("broker: %s (%s%s)", b.Version, what, strings.Join(pids, ", ")),
			brokers: strings.Join(b.Brokers, ","), procs: procs, started: b.Started,
			stop: func() {
				if err := b.Close(); err != nil {
					fmt.Fprintln(os.Stderr, "bench/e2e: stop the broker:", err)
				}
			},
		}, nil
	}
	addr, err := stack.FreeAddr()
	if err != nil {
		return nil, err
	}
	_, port, _ := net.SplitHostPort(addr)
	began := time.Now()
	p, err := bins.StartArgs("devkafka", []string{"-kafka", kind, "-port", port}, nil, filepath.Join(logs, "devkafka.log"))
	if err != nil {
		return nil, err
	}
	version, err := waitReady(ctx, p, 30*time.Second)
	if err != nil {
		p.Stop(10 * time.Second)
		return nil, err
	}
	return &broker{
		version: version, name: fmt.Sprintf("broker: %s (the devkafka process, pid %d)", version, p.Pid()),
		brokers: addr, procs: []proc{{name: "devkafka", pid: p.Pid()}}, started: time.Since(began),
		stop: func() { p.Stop(10 * time.Second) },
	}, nil
}

// waitReady waits for devkafka's log line saying its broker is ready (its
// topics created), and returns the broker it names.
func waitReady(ctx context.Context, p *stack.Proc, limit time.Duration) (string, error) {
	deadline := time.Now().Add(limit)
	for {
		b, err := os.ReadFile(p.LogPath)
		if err != nil {
			return "", err
		}
		for line := range strings.Lines(string(b)) {
			var l struct{ Msg, Broker string }
			if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "Kafka broker ready" {
				return l.Broker, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return "", fmt.Errorf("devkafka not ready after %s\n%s", limit, p.Log(2000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// burst writes n events of one new product (half views, half likes by new
// users) straight into the outbox, as commerce-api would in many
// transactions, and clocks them until the aggregates show all of them:
// what the relay and the like and view consumers sustain on a hot product.
func (b *bench) burst(ctx context.Context, n int) error {
	conn := b.probe.conn
	products, err := b.newProducts(ctx, 1, "burst")
	if err != nil {
		return err
	}
	hot := products[0]
	reg := events.NewRegistry()
	const perTx = 1000
	began := time.Now()
	for done := 0; done < n; done += perTx {
		var entries []outbox.Entry
		for i := done; i < min(done+perTx, n); i++ {
			var ev any = events.ProductViewedV1{ProductID: hot, UserID: "burst"}
			if i%2 == 1 {
				ev = events.LikeCreatedV1{UserID: "burst-" + strconv.Itoa(i), ProductID: hot}
			}
			rec, err := reg.Marshal(ev)
			if err != nil {
				return err
			}
			entries = append(entries, outbox.Entry{EventID: uuidString(i), Source: "commerce-api", Record: rec})
		}
		// One COPY of the outbox's columns (its own transaction): the
		// rows many API transactions would write, in one round trip.
		if _, err := conn.CopyFrom(ctx, pgx.Identifier{"outbox"}, outbox.Columns, pgx.CopyFromSlice(len(entries), func(i int) ([]any, error) {
			return entries[i].Values(), nil
		})); err != nil {
			return fmt.Errorf("write the burst: %w", err)
		}
		// The relay's wake-up after the commit, as commerce-api sends it.
		if _, err := conn.Exec(ctx, `SELECT pg_notify($1, '')`, outbox.Channel); err != nil {
			return err
		}
	}
	written := time.Since(began)
	if err := waitCounts(ctx, conn, hot, int64((n+1)/2), int64(n/2), 5*time.Minute); err != nil {
		return fmt.Errorf("burst: %w", err)
	}
	elapsed := time.Since(began)
	rate := float64(n) / elapsed.Seconds()
	fmt.Println()
	fmt.Println("| hot product burst, outbox → aggregates | measured | target |")
	fmt.Println("|---|---|---|")
	fmt.Printf("| events (views + likes of one product) | %d, written in %s | |\n", n, written.Round(time.Millisecond))
	fmt.Printf("| all visible after | %s | |\n", elapsed.Round(time.Millisecond))
	fmt.Printf("| sustained | %.0f events/s | ≥ 5,000 events/s: %s |\n", rate, verdict(rate >= 5000))
	return nil
}

// uuidString makes a distinct, valid event id for the i-th burst event.
func uuidString(i int) string {
	return fmt.Sprintf("00000000-0000-4000-8000-%012x", i)
}

// ms1 writes seconds as milliseconds with one decimal, "–" for none.
func ms1(s float64) string {
	if math.IsNaN(s) {
		return "–"
	}
	return fmt.Sprintf("%.1f ms", s*1000)
}
