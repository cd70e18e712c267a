// Package lease implements gocron's Elector on a lease row in PostgreSQL.
//
// A node is leader while its lease is live: it takes or renews the lease with
// one atomic statement and renews every TTL/3. It trusts its leadership only
// until a local, monotonic deadline of (start of the last successful renewal
// + TTL): the database's lease_until was computed after that start, so the
// local deadline always passes first and a node stops believing it leads
// before anyone else can take over. A failed or late renewal therefore ends
// leadership by itself. Every term carries a fencing token; writes that must
// not come from a deposed leader check it in the database (package store).
package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/loopers/commerce-pipeline/internal/logkey"
	"github.com/loopers/commerce-pipeline/services/outbox-relay/internal/store"
)

// ErrNotLeader is returned by IsLeader when this node does not hold a live
// lease.
var ErrNotLeader = errors.New("not the leader")

// Elector holds or competes for one named lease.
type Elector struct {
	store  *store.Store
	name   string
	owner  string
	ttl    time.Duration
	logger *slog.Logger
	// changed is called, outside the lock, whenever leadership or the token
	// changes; used for metrics.
	changed func(leader bool, token int64)

	mu     sync.Mutex
	token  int64
	until  time.Time // local monotonic deadline of the current term
	leader bool
}

// New returns an Elector for lease name, owned by owner (the node id).
// changed may be nil.
func New(st *store.Store, name, owner string, ttl time.Duration, logger *slog.Logger, changed func(leader bool, token int64)) (*Elector, error) {
	switch {
	case st == nil:
		return nil, errors.New("lease: store is nil")
	case name == "":
		return nil, errors.New("lease: name is empty")
	case owner == "":
		return nil, errors.New("lease: owner is empty")
	case ttl <= 0:
		return nil, fmt.Errorf("lease: ttl must be positive, got %s", ttl)
	case logger == nil:
		return nil, errors.New("lease: logger is nil")
	}
	if changed == nil {
		changed = func(bool, int64) {}
	}
	return &Elector{store: st, name: name, owner: owner, ttl: ttl, logger: logger, changed: changed}, nil
}

// IsLeader implements gocron.Elector: nil while this node holds a live lease.
func (e *Elector) IsLeader(context.Context) error {
	if _, ok := e.Fence(); !ok {
		return ErrNotLeader
	}
	return nil
}

// Fence returns the current term for fenced writes, and whether this node
// still believes it leads.
func (e *Elector) Fence() (store.Fence, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ok := e.leader && time.Now().Before(e.until)
	return store.Fence{Lease: e.name, Owner: e.owner, Token: e.token}, ok
}

// Until returns the local deadline of the current term; zero when not
// leading.
func (e *Elector) Until() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.leader {
		return time.Time{}
	}
	return e.until
}

// TryAcquire takes or renews the lease once and reports whether this node
// now leads.
func (e *Elector) TryAcquire(ctx context.Context) (bool, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, e.ttl/3)
	defer cancel()
	token, ok, err := e.store.AcquireLease(ctx, e.name, e.owner, e.ttl)
	if err != nil || !ok {
		e.lose()
		return false, err
	}
	e.mu.Lock()
	wasLeader, oldToken := e.leader && time.Now().Before(e.until), e.token
	e.token, e.until, e.leader = token, start.Add(e.ttl), true
	e.mu.Unlock()
	if !wasLeader || oldToken != token {
		e.logger.Info("leadership acquired", "lease", e.name, "owner", e.owner, "token", token)
		e.changed(true, token)
	}
	return true, nil
}

func (e *Elector) lose() { e.step(slog.LevelWarn, "leadership lost") }

func (e *Elector) step(level slog.Level, msg string) {
	e.mu.Lock()
	was := e.leader
	e.leader = false
	token := e.token
	e.mu.Unlock()
	if was {
		e.logger.Log(context.Background(), level, msg, "lease", e.name, "owner", e.owner, "token", token)
		e.changed(false, token)
	}
}

// Release gives the lease up at once (graceful shutdown), so another node
// need not wait for the TTL.
func (e *Elector) Release(ctx context.Context) error {
	f, _ := e.Fence()
	e.mu.Lock()
	held := e.token != 0
	e.mu.Unlock()
	e.step(slog.LevelInfo, "leadership released")
	if !held {
		return nil
	}
	return e.store.ReleaseLease(ctx, f)
}

// Run competes for the lease, renewing every TTL/3, until ctx ends. It does
// not release the lease; call Release for that.
func (e *Elector) Run(ctx context.Context) {
	t := time.NewTicker(e.ttl / 3)
	defer t.Stop()
	for {
		if _, err := e.TryAcquire(ctx); err != nil && ctx.Err() == nil {
			e.logger.Warn("lease renewal failed", "lease", e.name, "owner", e.owner, logkey.Err, err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
