// Package app wires commerce-api together and runs it.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/loopers/commerce-pipeline/internal/cluster"
	"github.com/loopers/commerce-pipeline/internal/httpserver"
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
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		newNotifyQueue(st.NotifyQueueUsage, logger))
	member, err := cluster.Join(cfg.DatabaseURL, cfg.Cluster, cluster.Info{Service: "commerce-api", Roles: []string{"api"}}, logger, reg)
	if err != nil {
		return err
	}
	member.Start(context.WithoutCancel(ctx))
	defer member.Leave()
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
	switch cfg.Auth.Mode {
	case auth.ModeJWT:
		// The key set's reads end with Run, before it returns.
		authCtx, stopAuth := context.WithCancel(ctx)
		var refresher sync.WaitGroup
		defer refresher.Wait()
		defer stopAuth()
		v, err := auth.New(authCtx, cfg.Auth, nil, logger)
		if err != nil {
			return err
		}
		if err := v.Register(reg); err != nil {
			return err
		}
		// Unready while no key set could be read: every token would be
		// refused with 503.
		deps.Checks[JWKSCheck] = v.Ready
		deps.Auth = v
		refresher.Go(func() { v.Run(authCtx) })
		if cfg.Auth.PlainHTTP() {
			logger.Warn("COMMERCE_API_AUTH_JWKS_URL is plain http to another host: whoever can change the key set in transit can sign tokens for anyone; use https",
				"jwksUrl", cfg.Auth.JWKSURL)
		}
	default:
		warnOpenHeaderMode(logger, cfg.HTTPAddr)
	}
	scfg := stream.DefaultConfig()
	scfg.MaxStreams = cfg.StreamMaxClients
	hub := stream.New(st, stream.FromView(member), scfg, logger)
	if err := hub.Register(reg); err != nil {
		return err
	}
	deps.Stream = hub
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
	// The hub ends every open stream when ctx ends, so the server's
	// graceful shutdown does not wait on them.
	hubCtx, stopHub := context.WithCancel(ctx)
	defer stopHub()
	hubErr := make(chan error, 1)
	go func() { hubErr <- hub.Run(hubCtx) }()
	logger.Info("commerce-api starting", "addr", cfg.HTTPAddr, "admin", cfg.AdminAddr, "dbMaxConns", cfg.DB.MaxConns, "cache", cfg.RedisURL != "", "streamMaxClients", cfg.StreamMaxClients,
		"authMode", cfg.Auth.Mode)
	logger.Info("live page", "url", pageURL(cfg.HTTPAddr))
	// The first listener to fail stops the other.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var (
		wg                  sync.WaitGroup
		serveErr, adminErr  error
		httpAddr, adminAddr = make(chan string, 1), make(chan string, 1)
	)
	wg.Go(func() { serveErr = httpserver.Serve(ctx, logger, httpserver.New(cfg.HTTPAddr, h), httpAddr); stop() })
	wg.Go(func() {
		adminErr = httpserver.Serve(ctx, logger, httpserver.New(cfg.AdminAddr, admin), adminAddr)
		stop()
	})
	if ready != nil {
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
	wg.Wait()
	stopHub()
	return errors.Join(serveErr, adminErr, <-hubErr)
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
