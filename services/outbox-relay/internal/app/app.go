// Package app wires outbox-relay together and runs it: the store, the Kafka
// publisher, the metrics registry, the node in the cluster registry, the
// relay service and its admin server.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/loopers/commerce-pipeline/internal/cluster"
	"github.com/loopers/commerce-pipeline/internal/httpserver"
	"github.com/loopers/commerce-pipeline/internal/logkey"
	"github.com/loopers/commerce-pipeline/pkg/events"
	"github.com/loopers/commerce-pipeline/services/outbox-relay/internal/publisher"
	"github.com/loopers/commerce-pipeline/services/outbox-relay/internal/relay"
	"github.com/loopers/commerce-pipeline/services/outbox-relay/internal/store"
)

// Run runs the relay until ctx ends or its admin server fails. adminReady,
// when not nil, receives the admin server's address once it listens. It sets
// the process's GC target to cfg.GC.
func Run(ctx context.Context, cfg Config, logger *slog.Logger, adminReady chan<- string) error {
	cfg.GC.Apply(logger)
	if err := cfg.Kafka.CheckAtStart(ctx, logger); err != nil {
		return err
	}
	st, err := store.Open(ctx, cfg.DatabaseURL, cfg.DB)
	if err != nil {
		return err
	}
	defer st.Close()
	pub, err := publisher.New(cfg.Kafka, cfg.Relay.SendTimeout, events.NewRegistry(), logger)
	if err != nil {
		return err
	}
	defer func() {
		if err := pub.Close(); err != nil {
			logger.Warn("close Kafka producer", logkey.Err, err)
		}
	}()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	member, err := cluster.Join(cfg.DatabaseURL, cfg.Cluster, cluster.Info{Service: "outbox-relay", Roles: []string{"relay"}}, logger, reg)
	if err != nil {
		return err
	}
	svc, err := relay.NewService(cfg.Relay, logger, st, pub, reg, member)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	httpErr := make(chan error, 1)
	go func() {
		err := httpserver.Serve(ctx, logger, httpserver.New(cfg.AdminAddr, adminHandler(reg, st, pub, svc, logger)), adminReady)
		cancel() // without its admin endpoint the node is not operable: stop it
		httpErr <- err
	}()
	runErr := svc.Run(ctx)
	cancel()
	if err := <-httpErr; err != nil {
		runErr = errors.Join(runErr, fmt.Errorf("admin server: %w", err))
	}
	return runErr
}

// adminHandler serves /healthz, /readyz (the database and Kafka answer; the
// body names the node's role) and /metrics.
func adminHandler(reg *prometheus.Registry, st *store.Store, pub *publisher.Publisher, svc *relay.Service, logger *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	httpserver.Ops(mux, reg, map[string]httpserver.Check{
		httpserver.DatabaseCheck: st.Ping,
		"kafka":                  pub.Ping,
	}, httpserver.WithLogger(logger))
	return withRole(mux, svc.Leading)
}
