// Package process is the start-up every service's app.Run shares: the
// metrics registry (with the Go and process collectors), the node in the
// cluster registry, the listeners, and the rule that the first component to
// stop, for whatever reason, stops the rest.
//
// A service builds its parts, adds the long-running ones with Go or Serve,
// and calls Run:
//
//	p := process.New(logger)
//	defer p.Close()
//	member, err := p.Join(databaseURL, cfg.Cluster, cluster.Info{...})
//	...
//	p.Serve("admin", cfg.AdminAddr, admin, adminReady)
//	p.Go("relay", svc.Run)
//	return p.Run(ctx)
package process

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/loopers/commerce-pipeline/internal/cluster"
	"github.com/loopers/commerce-pipeline/internal/httpserver"
)

// DefaultSlowStop is how long after the stop Run waits before it names, in
// a warning, the components still running.
const DefaultSlowStop = 10 * time.Second

// Process is one service process's shared parts. Build it with New and call
// its methods from one goroutine: the set-up, then Run, then Close.
type Process struct {
	// SlowStop is how long after the stop Run waits before it warns about
	// the components that have not returned yet (and again each SlowStop
	// after). Run still waits for them: a component that ignores its
	// context holds the process up, and the warning says which. Zero or
	// less means DefaultSlowStop.
	SlowStop time.Duration

	logger  *slog.Logger
	reg     *prometheus.Registry
	member  *cluster.Member
	started bool
	comps   []component
}

type component struct {
	name string
	run  func(context.Context) error
}

// New returns a Process whose registry already holds the Go and process
// collectors.
func New(logger *slog.Logger) *Process {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return &Process{SlowStop: DefaultSlowStop, logger: logger, reg: reg}
}

// Registry is the process's metrics registry, served at /metrics.
func (p *Process) Registry() *prometheus.Registry { return p.reg }

// Join makes the process a node of the cluster registry on databaseURL,
// its heartbeat metrics on the Registry. Nothing is written until Run,
// which starts the heartbeat; Close leaves. One Join per Process.
func (p *Process) Join(databaseURL string, cfg cluster.Config, info cluster.Info) (*cluster.Member, error) {
	if p.member != nil {
		return nil, errors.New("process: joined the cluster already")
	}
	m, err := cluster.Join(databaseURL, cfg, info, p.logger, p.reg)
	if err != nil {
		return nil, err
	}
	p.member = m
	return m, nil
}

// Go adds a component: run is called by Run with a context that ends when
// Run's does or when another component returns. Its return, with an error
// or nil, stops the others. Its error is wrapped with its name.
func (p *Process) Go(name string, run func(ctx context.Context) error) {
	p.comps = append(p.comps, component{name: name, run: run})
}

// Serve adds a listener on addr serving h as a component named name;
// ready, when not nil, receives the bound address once it listens. It shuts
// down gracefully when the others stop (httpserver.Serve).
func (p *Process) Serve(name, addr string, h http.Handler, ready chan<- string) {
	p.Go(name, func(ctx context.Context) error {
		return httpserver.Serve(ctx, p.logger, httpserver.New(addr, h), ready)
	})
}

// Run starts the cluster heartbeat (when Join was called) and every
// component, each on its own goroutine. The first component to return, for
// whatever reason, stops the rest: their context ends. Run returns once all
// have returned, with their errors joined in the order they came (the
// first first), or nil when none failed. The heartbeat goes on while the
// components stop, so a consumer draining its partitions still reports;
// Close ends it.
func (p *Process) Run(ctx context.Context) error {
	if len(p.comps) == 0 {
		return errors.New("process: nothing to run")
	}
	if p.member != nil {
		// The heartbeat outlives ctx: Close, after the components
		// stopped, ends it and leaves.
		p.member.Start(context.WithoutCancel(ctx))
		p.started = true
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	type result struct {
		i   int
		err error
	}
	results := make(chan result, len(p.comps))
	for i, c := range p.comps {
		go func() { results <- result{i, c.run(ctx)} }()
	}
	running := make(map[int]bool, len(p.comps))
	for i := range p.comps {
		running[i] = true
	}
	// warn ticks once the stop began, until every component returned.
	slowStop := p.SlowStop
	if slowStop <= 0 {
		slowStop = DefaultSlowStop
	}
	warn := time.NewTicker(slowStop)
	warn.Stop()
	defer warn.Stop()
	var (
		errs    []error
		stopped = ctx.Done()
		slow    <-chan time.Time
	)
	for len(running) > 0 {
		select {
		case r := <-results:
			delete(running, r.i)
			if r.err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", p.comps[r.i].name, r.err))
			}
			stop()
		case <-stopped:
			stopped = nil
			warn.Reset(slowStop)
			slow = warn.C
		case <-slow:
			p.logger.Warn("components still running after the stop", "components", p.names(running))
		}
	}
	return errors.Join(errs...)
}

// names lists the components still running, in the order they were added.
func (p *Process) names(running map[int]bool) []string {
	var names []string
	for i, c := range p.comps {
		if running[i] {
			names = append(names, c.name)
		}
	}
	return names
}

// Close leaves the cluster when Run started the heartbeat, or releases the
// member when it never ran (a start-up that failed writes nothing). Call it
// once, deferred right after New, so that it runs after everything that
// reports to the cluster stopped.
func (p *Process) Close() {
	m := p.member
	p.member = nil
	switch {
	case m == nil:
	case p.started:
		m.Leave()
	default:
		m.Abandon()
	}
}
