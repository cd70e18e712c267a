package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/loopers/commerce-pipeline/internal/stack"
)

// sampling is one tracing set-up of the tracing mode: off (no endpoint, the
// services install nothing) or on, exporting to the run's span sink, with
// a share of the roots sampled (parent-based, as the SDK samples by
// default).
type sampling struct {
	label string
	ratio float64 // 0: tracing off
}

// parseSamplings reads -tracing: "off" and ratios in (0, 1].
func parseSamplings(v string) ([]sampling, error) {
	var out []sampling
	for f := range strings.SplitSeq(v, ",") {
		f = strings.TrimSpace(f)
		if f == "off" {
			out = append(out, sampling{label: "off"})
			continue
		}
		r, err := strconv.ParseFloat(f, 64)
		if err != nil || r <= 0 || r > 1 {
			return nil, fmt.Errorf("-tracing: %q is neither off nor a sampling ratio in (0, 1]", f)
		}
		out = append(out, sampling{label: strconv.FormatFloat(r*100, 'f', -1, 64) + " % sampled", ratio: r})
	}
	if len(out) == 0 || out[0].ratio != 0 {
		return nil, errors.New("-tracing: the first set-up must be off, the baseline the others are compared with")
	}
	return out, nil
}

// env is what the services get for s: nothing for off; the sink's endpoint
// and the sampler otherwise.
func (s sampling) env(endpoint string) map[string]string {
	if s.ratio == 0 {
		return nil
	}
	return map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
		"OTEL_TRACES_SAMPLER":         "parentbased_traceidratio",
		"OTEL_TRACES_SAMPLER_ARG":     strconv.FormatFloat(s.ratio, 'f', -1, 64),
	}
}

// spanSink is an OTLP/HTTP trace receiver that counts the spans it gets
// (countSpans) and keeps none: the services' exporters pay their whole cost (encoding,
// batching, the POST), a collector's storage is not measured.
type spanSink struct {
	url   string
	spans atomic.Int64
	srv   *http.Server
}

func startSink() (*spanSink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &spanSink{url: "http://" + ln.Addr().String()}
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

func (s *spanSink) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil || r.URL.Path != "/v1/traces" {
		http.Error(w, "want a POST of spans to /v1/traces", http.StatusBadRequest)
		return
	}
	n, err := countSpans(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.spans.Add(int64(n))
	resp, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(resp)
}

// The OTLP field numbers countSpans walks: ExportTraceServiceRequest's
// resource_spans, ResourceSpans' scope_spans, ScopeSpans' spans.
const (
	fieldResourceSpans = 1
	fieldScopeSpans    = 2
	fieldSpans         = 2
)

// countSpans counts the spans of an OTLP ExportTraceServiceRequest by
// walking its wire format, without decoding a span: the sink runs on the
// machine it measures, and a full decode of every span at 100 % sampling
// would take CPU from the pipeline under test.
func countSpans(b []byte) (int, error) {
	n := 0
	err := eachField(b, fieldResourceSpans, func(rs []byte) error {
		return eachField(rs, fieldScopeSpans, func(ss []byte) error {
			return eachField(ss, fieldSpans, func([]byte) error { n++; return nil })
		})
	})
	return n, err
}

// eachField calls fn with the bytes of every length-delimited field num of
// the message b, skipping the other fields.
func eachField(b []byte, num protowire.Number, fn func([]byte) error) error {
	for len(b) > 0 {
		f, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if f == num && typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return protowire.ParseError(m)
			}
			if err := fn(v); err != nil {
				return err
			}
			b = b[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(f, typ, b)
		if m < 0 {
			return protowire.ParseError(m)
		}
		b = b[m:]
	}
	return nil
}

// tracedWindow is one rate's window under one tracing set-up.
type tracedWindow struct {
	sampling sampling
	w        *window
	spans    int64 // received during the window and its drain
}

// tracing measures what tracing costs: for each set-up of -tracing, a
// fresh stack (the services read the OTEL_* variables at start) on the
// same broker and database, warmed up, then the mixed load at each of
// -tracing-rates; then one table with each set-up's latency and CPU per
// request beside tracing off, measured in the same run. It stops the
// run's shared stack first: two product-consumers in the same groups
// would split the partitions. start starts a stack with extra variables,
// logging into the directory it is given.
func (b *bench) tracing(ctx context.Context, o options, start func(extra map[string]string, logs string) (*stack.Pipeline, error), logs string) error {
	setups, err := parseSamplings(o.tracing)
	if err != nil {
		return err
	}
	sink, err := startSink()
	if err != nil {
		return err
	}
	defer sink.srv.Close()
	b.pipe.Stop(20 * time.Second)
	var got []tracedWindow
	// Rounds, each starting with the next set-up: a set-up measured always
	// first or last would carry the machine's drift (the page cache, the
	// brokers' JIT) as its cost.
	for round := range max(1, o.tracingRounds) {
		for i := range setups {
			s := setups[(round+i)%len(setups)]
			dir := filepath.Join(logs, fmt.Sprintf("tracing-%s-%d", strings.NewReplacer(" ", "", "%", "pct").Replace(s.label), round))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "tracing %s, round %d: starting a stack...\n", s.label, round+1)
			pipe, err := start(s.env(sink.url), dir)
			if err != nil {
				return fmt.Errorf("tracing %s: %w", s.label, err)
			}
			ws, err := b.on(pipe).tracedWindows(ctx, o, s, sink)
			pipe.Stop(20 * time.Second)
			if err != nil {
				return fmt.Errorf("tracing %s: %w", s.label, err)
			}
			got = append(got, ws...)
		}
	}
	printTracing(got, o.duration, max(1, o.tracingRounds))
	return nil
}

// on is b with its load, probe and profiles on pipe instead.
func (b *bench) on(pipe *stack.Pipeline) *bench {
	nb := *b
	nb.api, nb.pipe = pipe.API, pipe
	p := *b.probe
	p.procs = nil
	for _, pr := range pipe.Procs {
		p.procs = append(p.procs, proc{name: pr.Name, pid: pr.Pid()})
	}
	p.metrics = []string{"http://" + pipe.RelayAdmin + "/metrics", "http://" + pipe.ConsumersAdmin + "/metrics"}
	nb.probe = &p
	return &nb
}

// tracedWindows warms the stack up and measures each rate under s.
func (b *bench) tracedWindows(ctx context.Context, o options, s sampling, sink *spanSink) ([]tracedWindow, error) {
	if err := b.warmUp(ctx, b.probe.conn); err != nil {
		return nil, err
	}
	if err := b.warm(ctx, b.probe.conn, o, b.probe.brokers); err != nil {
		return nil, err
	}
	var out []tracedWindow
	for _, rate := range o.tracingRates {
		products, err := b.newProducts(ctx, o.products, fmt.Sprintf("tracing %s %d", s.label, rate))
		if err != nil {
			return nil, err
		}
		before := sink.spans.Load()
		w, err := b.load(ctx, products, rate, o.duration, o.poll)
		if err != nil {
			return nil, err
		}
		if err := b.settle(ctx, w); err != nil {
			return nil, err
		}
		// The batch span processors export every 5 s (OTEL_BSP_SCHEDULE_DELAY's
		// default): wait for the window's last spans before counting them.
		if s.ratio > 0 {
			time.Sleep(6 * time.Second)
		}
		out = append(out, tracedWindow{sampling: s, w: w, spans: sink.spans.Load() - before})
	}
	return out, nil
}

// printTracing prints the tracing mode's table: per rate, each set-up
// beside tracing off.
func printTracing(got []tracedWindow, d time.Duration, n int) {
	fmt.Println()
	fmt.Printf("### tracing overhead: mixed load (views + new likes), %s per window, a fresh stack per set-up and round; the median of %d round(s) by CPU, its range beside\n\n", d, n)
	fmt.Println("| requests/s | tracing | reached | spans / request | API p50 / p99 | end to end p50 / p99 | CPU ms / request: pipeline (rounds' range) | vs off |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	type cell struct {
		rate  int
		label string
	}
	rounds := map[cell][]tracedWindow{}
	var order []cell
	for _, t := range got {
		c := cell{t.w.target, t.sampling.label}
		if rounds[c] == nil {
			order = append(order, c)
		}
		rounds[c] = append(rounds[c], t)
	}
	// The median round by CPU per request stands for the cell; the range
	// of the rounds' CPU is beside it.
	median := func(c cell) (tracedWindow, float64, float64) {
		ts := slices.Clone(rounds[c])
		slices.SortFunc(ts, func(a, b tracedWindow) int { return cmp.Compare(a.w.cost.perKPipeline, b.w.cost.perKPipeline) })
		return ts[len(ts)/2], ts[0].w.cost.perKPipeline, ts[len(ts)-1].w.cost.perKPipeline
	}
	off := map[int]float64{}
	var rates []int
	for _, c := range order {
		if t := rounds[c][0]; t.sampling.ratio == 0 {
			m, _, _ := median(c)
			off[c.rate] = m.w.cost.perKPipeline
			rates = append(rates, c.rate)
		}
	}
	slices.Sort(rates)
	for _, rate := range rates {
		for _, c := range order {
			if c.rate != rate {
				continue
			}
			t, lo, hi := median(c)
			w := t.w
			vs := "baseline"
			if t.sampling.ratio != 0 {
				vs = signedPct(w.cost.perKPipeline/off[rate] - 1)
			}
			perReq := "–"
			if n := len(w.latencies); n > 0 && t.sampling.ratio != 0 {
				perReq = fmt.Sprintf("%.1f", float64(t.spans)/float64(n))
			}
			note := ""
			if s := w.saturated(); s != "" {
				note = " (saturated: " + s + ")"
			}
			fmt.Printf("| %d | %s | %.0f%s | %s | %s / %s | %s / %s | %.3f (%.3f–%.3f) | %s |\n",
				rate, t.sampling.label, w.achieved, note, perReq,
				apiQ(w, .5), apiQ(w, .99), ms1(w.q(.5).Seconds()), ms1(w.q(.99).Seconds()),
				w.cost.perKPipeline, lo, hi, vs)
		}
	}
	fmt.Println()
	fmt.Println("(CPU: utime + stime of the three services and their PostgreSQL backends per visible change,")
	fmt.Println(" the span sink, this process, apart; targets: off ≤ 1 %, 1 % sampled ≤ 3 %, 100 % sampled ≤ 15 %)")
}

// apiQ is the window's API answer quantile f in milliseconds.
func apiQ(w *window, f float64) string {
	if len(w.api) == 0 {
		return "–"
	}
	return ms1(w.api[int(f*float64(len(w.api)-1))].Seconds())
}

// signedPct writes a ratio's change as a signed percentage.
func signedPct(r float64) string {
	return fmt.Sprintf("%+.1f %%", r*100)
}
