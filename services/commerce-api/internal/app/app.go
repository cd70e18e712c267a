// Package app wires commerce-api together and runs it.
package app

import (
	"context"
	"fmt"
	"log/slog"
	"net"

	"github.com/loopers/commerce-pipeline/internal/cluster"
	"github.com/loopers/commerce-pipeline/internal/httpserver"
	"github.com/loopers/commerce-pipeline/internal/process"
	"github.com/loopers/commerce-pipeline/internal/productcache"
	"github.com/loopers/commerce-pipeline/internal/telemetry"
	"github.com/loopers/commerce-pipeline/pkg/events"
	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/api"
	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/api/auth"
	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/store"
	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/stream"
)

// Addrs are the addresses Run's listeners are bound to.
type Addrs struct {
	HTTP  string // the API, the page, the stream
	Admin string // /metrics, the detailed /readyz, the cluster view
}

// Run serves commerce-api until ctx ends, then shuts down gracefully. ready,
// when not nil, receives the bound addresses once both listeners are open.
func Run(ctx context.Context, cfg Config, logger *slog.Logger, ready chan<- Addrs) error {
	st, err := store.Open(ctx, cfg.DatabaseURL, cfg.DB, events.NewRegistry())
	if err != nil {
		return err
	}
	defer st.Close()
	p := process.New(logger)
	defer p.Close()
	reg := p.Registry()
	reg.MustRegister(newNotifyQueue(st.NotifyQueueUsage, logger))
	member, err := p.Join(cfg.DatabaseURL, cfg.Cluster, cluster.Info{Service: "commerce-api", Roles: []string{"api"}})
	if err != nil {
		return err
	}
	// The cluster's own series are exposed once, here, from the database.
	reg.MustRegister(cluster.NewCollector(member, logger))
	deps := api.Deps{
		Store:          st,
		Logger:         logger,
		Metrics:        reg,
		Checks:         map[string]httpserver.Check{httpserver.DatabaseCheck: st.Ping},
		RequestTimeout: cfg.RequestTimeout,
		Cluster:        member,
		TraceUIURL:     traceUI(cfg),
	}
	if cfg.RedisURL != "" {
		c, err := productcache.Open(cfg.RedisURL, cfg.ProductCacheTTL)
		if err != nil {
			return err
		}
		defer c.Close()
		if err := c.Ping(ctx); err != nil {
			return err
		}
		deps.Cache = c
	}
	// What reads under runCtx (the key set, the wait for the listeners'
	// addresses) ends with Run, before it returns.
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	if err := withAuth(runCtx, p, cfg, logger, &deps); err != nil {
		return err
	}
	scfg := stream.DefaultConfig()
	scfg.MaxStreams = cfg.StreamMaxClients
	hub := stream.New(st, stream.FromView(member), scfg, logger)
	if err := hub.Register(reg); err != nil {
		return err
	}
	deps.Stream = hub
	// The hub ends every open stream when the process stops, so the
	// server's graceful shutdown does not wait on them.
	p.Go("stream hub", hub.Run)
	if err := listeners(runCtx, p, cfg, deps, ready); err != nil {
		return err
	}
	logger.Info("commerce-api starting", "addr", cfg.HTTPAddr, "admin", cfg.AdminAddr, "dbMaxConns", cfg.DB.MaxConns, "cache", cfg.RedisURL != "", "streamMaxClients", cfg.StreamMaxClients,
		"authMode", cfg.Auth.Mode)
	logger.Info("live page", "url", pageURL(cfg.HTTPAddr))
	return p.Run(ctx)
}

// withAuth sets up deps' authentication: in jwt mode the verifier, its
// readiness check and its key set's refresher (a component of p, reading
// under ctx); in header mode a warning when the listener is open to others.
func withAuth(ctx context.Context, p *process.Process, cfg Config, logger *slog.Logger, deps *api.Deps) error {
	if cfg.Auth.Mode != auth.ModeJWT {
		warnOpenHeaderMode(logger, cfg.HTTPAddr)
		return nil
	}
	v, err := auth.New(ctx, cfg.Auth, nil, logger)
	if err != nil {
		return err
	}
	if err := v.Register(p.Registry()); err != nil {
		return err
	}
	// Unready while no key set could be read: every token would be
	// refused with 503.
	deps.Checks[JWKSCheck] = v.Ready
	deps.Auth = v
	p.Go("jwks refresh", func(ctx context.Context) error { v.Run(ctx); return nil })
	if cfg.Auth.PlainHTTP() {
		logger.Warn("COMMERCE_API_AUTH_JWKS_URL is plain http to another host: whoever can change the key set in transit can sign tokens for anyone; use https",
			"jwksUrl", cfg.Auth.JWKSURL)
	}
	return nil
}

// listeners adds the two listeners to p: the API (traced when tracing is
// on) and the admin server. ready, when not nil, receives both addresses
// once both listen (unless ctx ends first).
func listeners(ctx context.Context, p *process.Process, cfg Config, deps api.Deps, ready chan<- Addrs) error {
	h, err := api.NewHandler(deps)
	if err != nil {
		return fmt.Errorf("build handler: %w", err)
	}
	if telemetry.Enabled() {
		h = telemetry.HTTPHandler(h)
	}
	admin, err := api.NewAdminHandler(deps)
	if err != nil {
		return fmt.Errorf("build admin handler: %w", err)
	}
	var httpAddr, adminAddr chan string
	if ready != nil {
		httpAddr, adminAddr = make(chan string, 1), make(chan string, 1)
		go func() {
			var a Addrs
			for a.HTTP == "" || a.Admin == "" {
				select {
				case a.HTTP = <-httpAddr:
				case a.Admin = <-adminAddr:
				case <-ctx.Done():
					return
				}
			}
			ready <- a
		}()
	}
	p.Serve("http", cfg.HTTPAddr, h, httpAddr)
	p.Serve("admin", cfg.AdminAddr, admin, adminAddr)
	return nil
}

// JWKSCheck is the readiness check of the identity provider's key set in
// jwt mode.
const JWKSCheck = "jwks"

// warnOpenHeaderMode warns when header mode serves a listener that other
// hosts may reach: whoever reaches it can act as any user and create
// products, unless a gateway in front is the only way in.
func warnOpenHeaderMode(logger *slog.Logger, httpAddr string) {
	host, _, err := net.SplitHostPort(httpAddr)
	if err == nil && auth.IsLoopback(host) {
		return
	}
	logger.Warn("COMMERCE_API_AUTH_MODE=header on a listener other hosts can reach: X-User-ID is trusted as sent, so any client can act as any user and create products; "+
		"put a gateway that sets X-User-ID in front, or set COMMERCE_API_AUTH_MODE=jwt (docs/security-api.md)", "addr", httpAddr)
}

// pageURL is the live page's address for a listen address, for the log a
// newcomer reads: a wildcard host becomes localhost.
func pageURL(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "http://" + listen + "/"
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port) + "/"
}
