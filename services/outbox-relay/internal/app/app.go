// Package app wires outbox-relay together and runs it: the store, the Kafka
// publisher, the metrics registry, the node in the cluster registry, the
// relay service and its admin server.
package app

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/loopers/commerce-pipeline/internal/cluster"
	"github.com/loopers/commerce-pipeline/internal/httpserver"
	"github.com/loopers/commerce-pipeline/internal/logkey"
	"github.com/loopers/commerce-pipeline/internal/process"
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
	p := process.New(logger)
	defer p.Close()
	member, err := p.Join(cfg.DatabaseURL, cfg.Cluster, cluster.Info{Service: "outbox-relay", Roles: []string{"relay"}})
	if err != nil {
		return err
	}
	svc, err := relay.NewService(cfg.Relay, logger, st, pub, p.Registry())
	if err != nil {
		return err
	}
	// The heartbeat carries the stages this node times to the live page.
	member.WatchStages(svc.StageWindows)
	// Without its admin endpoint the node is not operable: its failure
	// stops the node.
	p.Serve("admin server", cfg.AdminAddr, adminHandler(p.Registry(), st, pub, svc, logger), adminReady)
	p.Go("relay", svc.Run)
	return p.Run(ctx)
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
