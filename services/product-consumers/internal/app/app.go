// Package app wires product-consumers: the store, the cache, one pcon
// consumer per enabled group, the purge job and the admin server.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/go-co-op/gocron/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/loopers/commerce-pipeline/internal/cluster"
	"github.com/loopers/commerce-pipeline/internal/httpserver"
	"github.com/loopers/commerce-pipeline/internal/logkey"
	"github.com/loopers/commerce-pipeline/internal/pg"
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
	if err := cfg.Kafka.CheckAtStart(ctx, logger); err != nil {
		return err
	}
	if cfg.Reclaim.Enabled && cfg.Reclaimer.Role != "" {
		if err := cfg.Reclaimer.CheckAtStart(ctx, logger.With("component", "reclaimer")); err != nil {
			return err
		}
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

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	h, err := consumer.New(events.NewRegistry(), st, pages, logger, reg, cfg.HandledRetention-cfg.HorizonMargin)
	if err != nil {
		return err
	}
	member, err := cluster.Join(cfg.DatabaseURL, cfg.Cluster, cluster.Info{Service: "product-consumers", Roles: cfg.Consumers}, logger, reg)
	if err != nil {
		return err
	}
	member.WatchStages(h.StageWindows)
	// Heartbeats go on while the consumers drain; Leave (deferred, so after
	// they stopped and released their partitions) ends them.
	member.Start(context.WithoutCancel(ctx))
	defer member.Leave()
	var (
		consumers []*pcon.Consumer
		topics    []string
	)
	for _, name := range cfg.Consumers {
		spec, err := h.Spec(name)
		if err != nil {
			return err
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
			return fmt.Errorf("consumer %s: %w", name, err)
		}
		// One collector per consumer; the consumer label keeps their series apart.
		if err := prometheus.WrapRegistererWith(prometheus.Labels{"consumer": name}, reg).Register(pconprom.NewCollector(c)); err != nil {
			return fmt.Errorf("consumer %s metrics: %w", name, err)
		}
		member.WatchStats(group, progressOf(c.Stats))
		consumers = append(consumers, c)
		if !slices.Contains(topics, topic) {
			topics = append(topics, topic)
		}
	}

	sched, err := gocron.NewScheduler()
	if err != nil {
		return fmt.Errorf("scheduler: %w", err)
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
		return fmt.Errorf("purge job: %w", err)
	}
	if cfg.Reclaim.Enabled {
		// Re-drivers (every replica's reclaimer, pipelinectl) take a DLT
		// partition one at a time through an advisory lock each, held on
		// a connection of this small pool of its own.
		locks, err := pg.Open(ctx, cfg.DatabaseURL, pg.Options{MaxConns: len(topics) + 1, Lazy: true})
		if err != nil {
			return fmt.Errorf("reclaim locks: %w", err)
		}
		defer locks.Close()
		r, err := newReclaimer(cfg, topics, logger, reg, reclaim.PGLock(locks))
		if err != nil {
			return err
		}
		defer r.Close()
		if _, err := sched.NewJob(gocron.DurationJob(cfg.Reclaim.Interval), gocron.NewTask(func(ctx context.Context) {
			r.Pass(ctx, reclaim.Options{})
		}), gocron.WithSingletonMode(gocron.LimitModeReschedule), gocron.WithContext(ctx),
			gocron.WithStartAt(gocron.WithStartImmediately())); err != nil {
			return fmt.Errorf("reclaim job: %w", err)
		}
	}
	sched.Start()
	defer sched.Shutdown() //nolint:errcheck // nothing left to do with a failed shutdown

	mux := http.NewServeMux()
	httpserver.Ops(mux, reg, map[string]httpserver.Check{
		httpserver.DatabaseCheck: st.Ping,
		"redis":                  pages.Ping,
	}, httpserver.WithLogger(logger))

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, len(consumers)+1)
	wg.Go(func() { errs <- httpserver.Serve(ctx, logger, httpserver.New(cfg.AdminAddr, mux), adminReady) })
	for i, c := range consumers {
		wg.Go(func() {
			if err := c.Run(ctx); err != nil {
				errs <- fmt.Errorf("consumer %s: %w", cfg.Consumers[i], err)
				return
			}
			errs <- nil
		})
	}
	logger.Info("product-consumers started", "consumers", cfg.Consumers, "admin", cfg.AdminAddr)
	// The first to stop, for whatever reason, stops the rest.
	first := <-errs
	cancel()
	wg.Wait()
	close(errs)
	all := []error{first}
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(slices.DeleteFunc(all, func(e error) bool { return e == nil })...)
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
