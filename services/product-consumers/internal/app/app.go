// Package app wires product-consumers: the store, the cache, one pcon
// consumer per enabled group, the purge job and the admin server.
package app

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/IBM/sarama"
	"github.com/go-co-op/gocron/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/loopers/commerce-pipeline/internal/cluster"
	"github.com/loopers/commerce-pipeline/internal/httpserver"
	"github.com/loopers/commerce-pipeline/internal/logkey"
	"github.com/loopers/commerce-pipeline/internal/pg"
	"github.com/loopers/commerce-pipeline/internal/process"
	"github.com/loopers/commerce-pipeline/internal/productcache"
	"github.com/loopers/commerce-pipeline/internal/reclaim"
	"github.com/loopers/commerce-pipeline/pkg/events"
	"github.com/loopers/commerce-pipeline/pkg/pcon"
	"github.com/loopers/commerce-pipeline/pkg/pcon/pconprom"
	"github.com/loopers/commerce-pipeline/services/product-consumers/internal/consumer"
	"github.com/loopers/commerce-pipeline/services/product-consumers/internal/store"
)

// revokeGrace is how long a revoked partition waits for its records in
// flight; it must end before the group's rebalance does.
const revokeGrace = 5 * time.Second

// Run runs the enabled consumers until ctx ends, then shuts them down: each
// stops taking records, gives those in flight its grace period, commits what
// completed and leaves its group. adminReady, when not nil, receives the
// admin server's address once it listens.
func Run(ctx context.Context, cfg Config, logger *slog.Logger, adminReady chan<- string) error {
	if err := checkAtStart(ctx, cfg, logger); err != nil {
		return err
	}
	st, err := store.Open(ctx, cfg.DatabaseURL, cfg.DB)
	if err != nil {
		return fmt.Errorf("open database: %w", err)
	}
	defer st.Close()
	pages, err := productcache.Open(cfg.RedisURL, 0) // invalidates only
	if err != nil {
		return fmt.Errorf("REDIS_URL: %w", err)
	}
	defer pages.Close()

	p := process.New(logger)
	// Heartbeats go on while the consumers drain; Close (deferred, so after
	// they stopped and released their partitions) ends them.
	defer p.Close()
	h, err := consumer.New(events.NewRegistry(), st, pages, logger, p.Registry(), cfg.HandledRetention-cfg.HorizonMargin)
	if err != nil {
		return err
	}
	member, err := p.Join(cfg.DatabaseURL, cfg.Cluster, cluster.Info{Service: "product-consumers", Roles: cfg.Consumers})
	if err != nil {
		return err
	}
	member.WatchStages(h.StageWindows)
	topics, err := addConsumers(p, cfg, h, member, logger)
	if err != nil {
		return err
	}
	stopJobs, err := startJobs(ctx, cfg, st, topics, logger, p.Registry())
	if err != nil {
		return err
	}
	defer stopJobs()

	mux := http.NewServeMux()
	httpserver.Ops(mux, p.Registry(), map[string]httpserver.Check{
		httpserver.DatabaseCheck: st.Ping,
		"redis":                  pages.Ping,
	}, httpserver.WithLogger(logger))
	p.Serve("admin server", cfg.AdminAddr, mux, adminReady)
	logger.Info("product-consumers started", "consumers", cfg.Consumers, "admin", cfg.AdminAddr)
	return p.Run(ctx)
}

// checkAtStart checks the Kafka settings of the consumers, and those of the
// reclaimer when it runs with a role of its own, against the brokers.
func checkAtStart(ctx context.Context, cfg Config, logger *slog.Logger) error {
	if err := cfg.Kafka.CheckAtStart(ctx, logger); err != nil {
		return err
	}
	if cfg.Reclaim.Enabled && cfg.Reclaimer.Role != "" {
		if err := cfg.Reclaimer.CheckAtStart(ctx, logger.With("component", "reclaimer")); err != nil {
			return err
		}
	}
	return nil
}

// addConsumers adds one pcon consumer per enabled group to p, reporting to
// member and exposing its metrics on p's registry. It returns the topics
// they read, named on the cluster.
func addConsumers(p *process.Process, cfg Config, h *consumer.Handlers, member *cluster.Member, logger *slog.Logger) ([]string, error) {
	var topics []string
	for _, name := range cfg.Consumers {
		spec, err := h.Spec(name)
		if err != nil {
			return nil, err
		}
		// The cluster's names, under KAFKA_PREFIX. The idempotency keys
		// keep the group's own name (consumer.Spec), so a prefix never
		// makes an event apply twice.
		group, topic := cfg.Kafka.Group(spec.Group), cfg.Kafka.Topic(spec.Topic)
		handler, onDeadLetter := consumer.Traced(spec, group)
		c, err := pcon.New(pcon.Config{
			Brokers:     cfg.Kafka.Brokers,
			Group:       group,
			Topics:      []string{topic},
			Sarama:      saramaConfig(cfg),
			RevokeGrace: revokeGrace,
			MaxInFlight: cfg.MaxInFlight,
			InstanceID:  cfg.InstanceID,
			// A handler is one short transaction; one that outlives this is
			// stuck on a lock or a dead connection and is better retried.
			HandlerTimeout: cfg.HandlerTimeout,
			MaxAttempts:    cfg.MaxAttempts,
			Backoff:        cfg.RetryBackoff,
			DLTSuffix:      events.DLTSuffix,
			Logger:         logger.With("consumer", name), // pcon names the group itself
			OnAssigned:     assignedTo(member),
			OnRevoked:      revokedFrom(member),
			OnDeadLetter:   onDeadLetter,
			OnCommit:       consumer.TracedCommit(group),
		}, handler)
		if err != nil {
			return nil, fmt.Errorf("consumer %s: %w", name, err)
		}
		// One collector per consumer; the consumer label keeps their series apart.
		if err := prometheus.WrapRegistererWith(prometheus.Labels{"consumer": name}, p.Registry()).Register(pconprom.NewCollector(c)); err != nil {
			return nil, fmt.Errorf("consumer %s metrics: %w", name, err)
		}
		member.WatchStats(group, progressOf(c.Stats))
		p.Go("consumer "+name, c.Run)
		if !slices.Contains(topics, topic) {
			topics = append(topics, topic)
		}
	}
	return topics, nil
}

// startJobs starts the scheduled jobs: the purge of event_handled and, when
// enabled, the DLT reclaimer over topics. stop shuts them down and releases
// what they hold.
func startJobs(ctx context.Context, cfg Config, st *store.Store, topics []string, logger *slog.Logger, reg prometheus.Registerer) (stop func(), err error) {
	var cleanup []func()
	stop = func() {
		for _, f := range slices.Backward(cleanup) {
			f()
		}
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	sched, err := gocron.NewScheduler()
	if err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	if _, err := sched.NewJob(gocron.DurationJob(cfg.PurgeInterval), gocron.NewTask(func(ctx context.Context) {
		n, err := st.PurgeHandled(ctx, cfg.HandledRetention, pg.PurgeChunk)
		if err != nil {
			logger.Error("purge event_handled failed", logkey.Err, err)
			return
		}
		if n > 0 {
			logger.Info("purged event_handled", "deleted", n, "olderThan", cfg.HandledRetention.String())
		}
	}), gocron.WithSingletonMode(gocron.LimitModeReschedule), gocron.WithContext(ctx)); err != nil {
		return nil, fmt.Errorf("purge job: %w", err)
	}
	if cfg.Reclaim.Enabled {
		// Re-drivers (every replica's reclaimer, pipelinectl) take a DLT
		// partition one at a time through an advisory lock each, held on
		// a connection of this small pool of its own.
		locks, err := pg.Open(ctx, cfg.DatabaseURL, pg.Options{MaxConns: len(topics) + 1, Lazy: true})
		if err != nil {
			return nil, fmt.Errorf("reclaim locks: %w", err)
		}
		cleanup = append(cleanup, locks.Close)
		r, err := newReclaimer(cfg, topics, logger, reg, reclaim.PGLock(locks))
		if err != nil {
			return nil, err
		}
		cleanup = append(cleanup, r.Close)
		if _, err := sched.NewJob(gocron.DurationJob(cfg.Reclaim.Interval), gocron.NewTask(func(ctx context.Context) {
			r.Pass(ctx, reclaim.Options{})
		}), gocron.WithSingletonMode(gocron.LimitModeReschedule), gocron.WithContext(ctx),
			gocron.WithStartAt(gocron.WithStartImmediately())); err != nil {
			return nil, fmt.Errorf("reclaim job: %w", err)
		}
	}
	sched.Start()
	cleanup = append(cleanup, func() { _ = sched.Shutdown() }) // nothing left to do with a failed shutdown
	return stop, nil
}

// newReclaimer builds the DLT reclaimer over the topics (named on the
// cluster) of the consumers this process runs: each instance re-drives only
// records its own handlers will take back.
func newReclaimer(cfg Config, topics []string, logger *slog.Logger, reg prometheus.Registerer, lock reclaim.Locker) (*reclaim.Reclaimer, error) {
	r, err := reclaim.New(reclaim.Config{
		Kafka: cfg.Reclaimer, ClientID: "product-consumers-reclaimer",
		Topics: topics, DLTSuffix: events.DLTSuffix, ParkSuffix: events.ParkedSuffix, Group: cfg.Kafka.Group(reclaim.Group),
		MinIdle: cfg.Reclaim.MinIdle, Count: cfg.Reclaim.Count, MaxRedrives: cfg.Reclaim.MaxRedrives,
		// The consumers' own horizon: what they would skip is parked as
		// expired, not re-driven.
		Horizon: cfg.HandledRetention - cfg.HorizonMargin, HorizonTopics: cfg.Kafka.Topics(reclaim.HorizonTopics),
		Logger: logger.With("component", "reclaimer"), Registerer: reg, Lock: lock,
	})
	if err != nil {
		return nil, fmt.Errorf("reclaimer: %w", err)
	}
	return r, nil
}

func saramaConfig(cfg Config) *sarama.Config {
	c := cfg.Kafka.Config("product-consumers")
	// A new group reads from the beginning so that events published before
	// its first start are aggregated too; afterwards committed offsets rule.
	c.Consumer.Offsets.Initial = sarama.OffsetOldest
	// A member that died without leaving (SIGKILL, a lost node) holds its
	// partitions until its session times out, and a rebalance waits for the
	// members it knows up to the rebalance timeout. The broker holds a
	// JoinGroup answer until then, so the read timeout must be longer, or the
	// joining member gives up and starts over, forever. sarama gives every
	// request that one timeout; a fetch, heartbeat or commit sent to a broker
	// that stopped answering is given up sooner by pcon (and the reclaimer)
	// watching the brokers (pkg/brokerwatch).
	c.Consumer.Group.Session.Timeout = cfg.SessionTimeout
	c.Consumer.Group.Heartbeat.Interval = cfg.SessionTimeout / 10
	c.Consumer.Group.Rebalance.Timeout = cfg.RebalanceTimeout
	c.Net.ReadTimeout = cfg.RebalanceTimeout + 15*time.Second
	return c
}
