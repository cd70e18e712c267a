package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/loopers/commerce-pipeline/internal/logkey"
	"github.com/loopers/commerce-pipeline/internal/outbox"
	"github.com/loopers/commerce-pipeline/internal/pg"
	"github.com/loopers/commerce-pipeline/internal/stages"
	"github.com/loopers/commerce-pipeline/services/outbox-relay/internal/lease"
	"github.com/loopers/commerce-pipeline/services/outbox-relay/internal/publisher"
	"github.com/loopers/commerce-pipeline/services/outbox-relay/internal/store"
)

// Service is a relay node: it competes for the lease and, while leading, runs
// passes on every outbox commit, every poll interval and when a held
// aggregate's retry is due, and purges old rows.
type Service struct {
	cfg     Config
	logger  *slog.Logger
	store   *store.Store
	elector *lease.Elector
	relay   *Relay
	metrics *Metrics
}

// NewService returns a relay node publishing through pub, its metrics
// registered on reg.
func NewService(cfg Config, logger *slog.Logger, st *store.Store, pub *publisher.Publisher, reg prometheus.Registerer) (*Service, error) {
	elector, err := lease.New(st, outbox.RelayLease, cfg.NodeID, cfg.LeaseTTL, logger, nil)
	if err != nil {
		return nil, err
	}
	metrics, err := NewMetrics(reg, st, elector)
	if err != nil {
		return nil, err
	}
	r, err := NewRelay(cfg, st, pub, elector, metrics, logger)
	if err != nil {
		return nil, err
	}
	return &Service{cfg: cfg, logger: logger, store: st, elector: elector, relay: r, metrics: metrics}, nil
}

// StageWindows takes the stage timings gathered since the last call, for
// the cluster heartbeat to carry to the live page (cluster.Member.WatchStages).
func (s *Service) StageWindows() []stages.Window { return s.metrics.StageWindows() }

// Leading reports whether the node holds the lease now.
func (s *Service) Leading() bool {
	_, ok := s.elector.Fence()
	return ok
}

// Run runs the node until ctx ends, then stops the jobs, lets a running pass
// finish, and releases the lease so another node takes over at once.
func (s *Service) Run(ctx context.Context) error {
	err := s.serve(ctx)
	rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if rerr := s.elector.Release(rctx); rerr != nil {
		s.logger.Warn("release lease", logkey.Err, rerr)
	}
	if err != nil {
		return err
	}
	s.logger.Info("outbox relay stopped", "node", s.cfg.NodeID)
	return nil
}

// serve is Run up to the release of the lease: the jobs stopped and the
// last pass finished, the lease is left to expire.
func (s *Service) serve(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// The scheduler runs the hourly retention, only on the leader; passes
	// run on the node's own loop (passes), woken by commits.
	sched, err := gocron.NewScheduler(gocron.WithDistributedElector(s.elector))
	if err != nil {
		return fmt.Errorf("create scheduler: %w", err)
	}
	if _, err := sched.NewJob(gocron.DurationJob(min(time.Hour, s.cfg.Retention)),
		gocron.NewTask(s.purge, ctx),
		gocron.WithName("outbox-retention"),
		gocron.WithSingletonMode(gocron.LimitModeReschedule)); err != nil {
		return fmt.Errorf("schedule outbox retention: %w", err)
	}

	var wg sync.WaitGroup
	// The first lease attempt happens before the scheduler starts, so a
	// node that can lead does so from its first tick.
	if _, err := s.elector.TryAcquire(ctx); err != nil {
		s.logger.Warn("first lease attempt failed", logkey.Err, err)
	}
	wg.Go(func() { s.elector.Run(ctx) })
	wg.Go(func() { s.store.Listen(ctx, s.logger, outbox.Channel, s.relay.Notify) })
	wg.Go(func() { s.passes(ctx) })
	sched.Start()
	s.logger.Info("outbox relay started", "node", s.cfg.NodeID, "interval", s.cfg.Interval, "batchSize", s.cfg.BatchSize)

	<-ctx.Done()
	shutdownErr := sched.Shutdown()
	wg.Wait()
	if shutdownErr != nil {
		return fmt.Errorf("stop scheduler: %w", shutdownErr)
	}
	return nil
}

// passes runs a pass at once for each notified commit (a pass running when
// it comes reads it itself), every poll interval, and when a held
// aggregate's retry is due; one at a time, until ctx ends (the last pass
// confirms what it handed over and stops).
func (s *Service) passes(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.relay.wake:
			s.relay.wokenBy = WokenByNotification
		case <-timer.C:
			s.relay.wokenBy = WokenByPoll
		}
		if _, err := s.relay.Pass(ctx); err != nil && ctx.Err() == nil {
			level := slog.LevelError
			if errors.Is(err, store.ErrFenced) {
				level = slog.LevelWarn
			}
			s.logger.Log(ctx, level, "relay pass failed", logkey.Err, err)
		}
		next := s.cfg.Interval
		if d, ok := s.relay.NextRetry(); ok {
			next = min(next, d)
		}
		timer.Reset(next)
	}
}

func (s *Service) purge(ctx context.Context) {
	n, err := s.store.Purge(ctx, s.cfg.Retention, pg.PurgeChunk)
	if err != nil && ctx.Err() == nil {
		s.logger.Error("outbox retention failed", logkey.Err, err, "deleted", n)
		return
	}
	if n > 0 {
		s.logger.Info("outbox retention purged published rows", "deleted", n, "olderThan", s.cfg.Retention)
	}
}
