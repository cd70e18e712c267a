// Package app wires commerce-api together and runs it.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/loopers/commerce-pipeline/internal/cluster"
	"github.com/loopers/commerce-pipeline/internal/httpserver"
	"github.com/loopers/commerce-pipeline/internal/productcache"
	"github.com/loopers/commerce-pipeline/pkg/events"
	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/api"
	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/store"
	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/stream"
)

// Run serves commerce-api until ctx ends, then shuts down gracefully. ready,
// when not nil, receives the bound HTTP address.
func Run(ctx context.Context, cfg Config, logger *slog.Logger, ready chan<- string) error {
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
	reg.MustRegister(cluster.NewCollector(member.Store(), logger))
	deps := api.Deps{
		Store:          st,
		Logger:         logger,
		Metrics:        reg,
		Checks:         map[string]httpserver.Check{httpserver.DatabaseCheck: st.Ping},
		RequestTimeout: cfg.RequestTimeout,
		Cluster:        member,
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
	// The hub ends every open stream when ctx ends, so the server's
	// graceful shutdown does not wait on them.
	hubCtx, stopHub := context.WithCancel(ctx)
	defer stopHub()
	hubErr := make(chan error, 1)
	go func() { hubErr <- hub.Run(hubCtx) }()
	logger.Info("commerce-api starting", "addr", cfg.HTTPAddr, "dbMaxConns", cfg.DB.MaxConns, "cache", cfg.RedisURL != "", "streamMaxClients", cfg.StreamMaxClients)
	logger.Info("live page", "url", pageURL(cfg.HTTPAddr))
	serveErr := httpserver.Serve(ctx, logger, httpserver.New(cfg.HTTPAddr, h), ready)
	stopHub()
	return errors.Join(serveErr, <-hubErr)
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
