package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/loopers/commerce-pipeline/bench/internal/benchkit"
	"github.com/loopers/commerce-pipeline/internal/procstat"
	"github.com/loopers/commerce-pipeline/internal/stages"
)

// probe reads what the pipeline's processes spent and timed: the CPU time
// of each process (and of the PostgreSQL backends serving the benchmark's
// database) and of the broker from /proc, and the stage histograms from the
// services' /metrics. Two readings, before and after a measured window, give
// what the window cost and how its events' time split into stages.
type probe struct {
	procs      []proc   // the pipeline's services
	brokers    []proc   // the cluster's nodes, counted apart from the pipeline
	brokerName string   // the cluster's row in the CPU table
	metrics    []string // /metrics URLs of the processes that time stages
	conn       *pgx.Conn
}

// proc is a process whose CPU is counted, under name.
type proc struct {
	name string
	pid  int
}

// reading is one probe of the pipeline.
type reading struct {
	at       time.Time
	cpu      map[string]float64 // seconds, by process name
	backends map[int]float64    // PostgreSQL backend pid → seconds
	stages   map[string]stages.Window
	// stalled is the machine's CPU pressure (/proc/pressure/cpu, "some"):
	// the seconds during which at least one runnable task waited for a
	// core; NaN where the kernel does not report it.
	stalled float64
}

// cpuStalled reads the total of /proc/pressure/cpu's "some" line, in
// seconds, or NaN when the kernel has no pressure stall information.
func cpuStalled() float64 {
	d, err := procstat.CPUStalled()
	if err != nil {
		return math.NaN()
	}
	return d.Seconds()
}

// cpuSeconds is the CPU time (user + system) pid has used so far.
func cpuSeconds(pid int) (float64, error) {
	d, err := procstat.ProcessCPU(pid)
	return d.Seconds(), err
}

// read takes a reading. It must not run while another goroutine uses conn.
func (p *probe) read(ctx context.Context) (reading, error) {
	r := reading{at: time.Now(), stalled: cpuStalled(), cpu: map[string]float64{}, backends: map[int]float64{}, stages: map[string]stages.Window{}}
	for _, pr := range append(slices.Clone(p.procs), p.brokers...) {
		s, err := cpuSeconds(pr.pid)
		if err != nil {
			return r, fmt.Errorf("cpu of %s: %w", pr.name, err)
		}
		r.cpu[pr.name] = s
	}
	// The backends of the benchmark's own connection (this one) are not the
	// pipeline. A server on another machine has no /proc here: then there
	// are no backends to count, and the table says so.
	backends, err := benchkit.BackendCPU(ctx, p.conn, "pid <> pg_backend_pid()")
	if err != nil {
		return r, err
	}
	for pid, c := range backends {
		r.backends[pid] = c.Seconds()
	}
	for _, u := range p.metrics {
		ws, err := scrapeStages(ctx, u)
		if err != nil {
			return r, err
		}
		for name, w := range ws {
			r.stages[name] = stages.Merge(r.stages[name], w)
		}
	}
	return r, nil
}

func scrapeStages(ctx context.Context, url string) (map[string]stages.Window, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", url, err)
	}
	mf, ok := fams["event_stage_seconds"]
	if !ok {
		return map[string]stages.Window{}, nil
	}
	return stages.FromMetricFamily(mf)
}

// stageQ is one stage's quantiles over a window, in seconds (NaN: no
// observation).
type stageQ struct {
	p50, p99, mean float64
	count          uint64
}

// cost is what a window's events cost: CPU seconds by process (in the order
// of the table), and per 1,000 events the pipeline's and the broker's.
type cost struct {
	rows         []costRow
	brokerName   string
	backends     int // PostgreSQL backends measured; 0: none visible here
	pipeline     float64
	broker       float64
	perKPipeline float64
	perKBroker   float64
	// stalledShare is the share of the window during which some runnable
	// task on the machine waited for a core (NaN: not reported).
	stalledShare float64
}

type costRow struct {
	name string
	secs float64
}

// summarize works out, from two readings, how a window's events split into
// stages and what they cost.
func (p *probe) summarize(before, after reading, events int64) (map[string]stageQ, cost) {
	qs := map[string]stageQ{}
	for _, s := range stages.All {
		w := after.stages[s].Minus(before.stages[s])
		qs[s] = stageQ{p50: w.Quantile(.5), p99: w.Quantile(.99), mean: w.Mean(), count: w.Count}
	}
	var c cost
	for _, pr := range p.procs {
		s := after.cpu[pr.name] - before.cpu[pr.name]
		c.rows = append(c.rows, costRow{pr.name, s})
		c.pipeline += s
	}
	var pg float64
	for pid, s := range before.backends {
		if a, ok := after.backends[pid]; ok {
			pg += a - s
			c.backends++
		}
	}
	if c.backends > 0 {
		c.rows = append(c.rows, costRow{fmt.Sprintf("PostgreSQL backends (%d)", c.backends), pg})
		c.pipeline += pg
	}
	c.stalledShare = (after.stalled - before.stalled) / after.at.Sub(before.at).Seconds()
	c.brokerName = p.brokerName
	for _, b := range p.brokers {
		c.broker += after.cpu[b.name] - before.cpu[b.name]
	}
	if events > 0 {
		c.perKPipeline = c.pipeline / float64(events) * 1000
		c.perKBroker = c.broker / float64(events) * 1000
	}
	return qs, c
}

// report prints how the window's events split into stages, next to the end
// to end, and what the window cost in CPU per 1,000 events: the pipeline's
// processes, then the broker apart.
func printStages(qs map[string]stageQ, c cost, events int64, e2e func(q float64) time.Duration, e2eMean time.Duration) {
	fmt.Println()
	fmt.Println("| stage (timed by) | p50 | p99 | mean | events |")
	fmt.Println("|---|---|---|---|---|")
	what := map[string]string{
		stages.Outbox:  "outbox: insert → relay read (database clock)",
		stages.Publish: "publish: relay read → Kafka ack (relay clock)",
		stages.Broker:  "broker: record timestamp → consumer fetch (relay → consumer clock)",
		stages.Apply:   "apply: fetch → aggregate committed (consumer clock)",
	}
	for _, s := range stages.All {
		q := qs[s]
		fmt.Printf("| %s | %s | %s | %s | %d |\n", what[s], ms(q.p50), ms(q.p99), ms(q.mean), q.count)
	}
	fmt.Printf("| end to end: API 2xx → visible in the aggregates (bench clock) | %s | %s | %s | %d |\n",
		ms(e2e(.5).Seconds()), ms(e2e(.99).Seconds()), ms(e2eMean.Seconds()), events)
	fmt.Println("(stages from the services' histograms over the window, interpolated within buckets;")
	fmt.Println(" publish and broker overlap by the produce round trip; broker reads 0-1 ms long: record timestamps are in whole ms)")

	fmt.Println()
	fmt.Println("| process | CPU seconds | per 1,000 events |")
	fmt.Println("|---|---|---|")
	per := func(s float64) float64 {
		if events == 0 {
			return math.NaN()
		}
		return s / float64(events) * 1000
	}
	for _, r := range c.rows {
		fmt.Printf("| %s | %.2f | %.3f |\n", r.name, r.secs, per(r.secs))
	}
	if c.backends == 0 {
		fmt.Println("| PostgreSQL backends | not measured (no /proc entry for them here) | |")
	}
	fmt.Printf("| **pipeline** (services + PostgreSQL) | %.2f | **%.3f** |\n", c.pipeline, c.perKPipeline)
	fmt.Printf("| %s | %.2f | %.3f |\n", c.brokerName, c.broker, c.perKBroker)
	fmt.Printf("| **all** (pipeline + broker) | %.2f | **%.3f** |\n", c.pipeline+c.broker, c.perKPipeline+c.perKBroker)
	fmt.Println("(utime + stime from /proc; the broker is a process of its own, counted apart from the pipeline;")
	fmt.Println(" Redis and PostgreSQL's background processes are shared and left out)")
	if !math.IsNaN(c.stalledShare) {
		fmt.Printf("CPU pressure: some runnable task on the machine waited for a core %.0f %% of the window (/proc/pressure/cpu)\n", 100*c.stalledShare)
	}
}

// pct prints a share as a percentage, or "–" when it is unknown.
func pct(f float64) string {
	if math.IsNaN(f) {
		return "–"
	}
	return fmt.Sprintf("%.0f %%", 100*f)
}

func ms(s float64) string {
	if math.IsNaN(s) {
		return "–"
	}
	return fmt.Sprintf("%.2f ms", s*1000)
}
