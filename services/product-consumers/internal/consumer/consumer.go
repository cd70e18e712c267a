// Package consumer turns product events into aggregate updates: one pcon
// handler per consumer group, each decoding CloudEvents with pkg/events and
// applying them through the store exactly once.
package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/loopers/commerce-pipeline/internal/logkey"
	"github.com/loopers/commerce-pipeline/internal/stages"
	"github.com/loopers/commerce-pipeline/pkg/events"
	"github.com/loopers/commerce-pipeline/pkg/pcon"
	"github.com/loopers/commerce-pipeline/pkg/pcon/pcontrace"
	"github.com/loopers/commerce-pipeline/services/product-consumers/internal/store"
)

// The consumers this service can run, by the name PRODUCT_CONSUMERS_GROUPS uses.
const (
	Like  = "like"
	Order = "order"
	View  = "view"
	Stock = "stock"
)

// Names lists every consumer, in the order PRODUCT_CONSUMERS_GROUPS documents.
var Names = []string{Like, Order, View, Stock}

// The consumer group of each consumer, defined here only. A group's name is
// part of the idempotency key of every event it handles (see
// idempotencyKey): renaming a group makes redelivered events apply twice.
const (
	LikeGroup  = "product-like-consumer"
	OrderGroup = "product-order-consumer"
	ViewGroup  = "product-view-consumer"
	StockGroup = "product-stock-consumer"
)

// Spec is what a consumer group needs: its group, its topic and its handler.
type Spec struct {
	Name    string
	Group   string
	Topic   string
	Handler pcon.Handler
}

// Cache invalidates cached product details (internal/productcache's
// protocol, shared with commerce-api, which fills them).
type Cache interface {
	Invalidate(ctx context.Context, ids ...int64) error
}

// invalidateTimeout bounds the invalidation after an aggregate commit: the
// commit stands whatever Redis does, and a slow cache must not slow the
// consumers.
const invalidateTimeout = 100 * time.Millisecond

// Handlers builds the consumers' handlers.
type Handlers struct {
	reg     *events.Registry
	store   *store.Store
	cache   Cache
	logger  *slog.Logger
	outcome *prometheus.CounterVec
	// invalidateFailed counts invalidations after a commit that failed:
	// those products' pages may be served stale for up to the cache's TTL.
	invalidateFailed prometheus.Counter
	stages           *stages.Recorder // the broker and apply stages
	horizon          time.Duration
	now              func() time.Time
	issued           atomic.Int64                 // the highest outbox id known to be issued
	source           atomic.Pointer[parsedSource] // the last source read (see readSource)
}

// New returns Handlers applying events to st and deleting entries of cache.
// It registers its counters on metrics.
//
// horizon is how far back event_handled remembers events (its retention
// minus a safety margin). An order or view event older than that is skipped,
// counted as expired and logged: its idempotency record may have been purged
// already, so applying it could count it twice. Likes need no horizon: their
// stored state and sequence make any replay harmless.
func New(reg *events.Registry, st *store.Store, cache Cache, logger *slog.Logger, metrics prometheus.Registerer, horizon time.Duration) (*Handlers, error) {
	outcome := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "product_consumer_events_total",
		Help: "Events handled by each product consumer, by outcome: applied; duplicate (already handled, superseded in its batch, or no newer than the stored state); expired (older than the idempotency horizon, skipped).",
	}, []string{"consumer", "outcome"})
	failed := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "product_consumer_cache_invalidation_failures_total",
		Help: "Product cache invalidations after an aggregate commit that failed; those pages may be stale for up to COMMERCE_API_PRODUCT_CACHE_TTL.",
	})
	for _, c := range []prometheus.Collector{outcome, failed} {
		if err := metrics.Register(c); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	rec, err := stages.NewRecorder(metrics, reg.Types(), stages.Broker, stages.Apply)
	if err != nil {
		return nil, err
	}
	return &Handlers{reg: reg, store: st, cache: cache, logger: logger, outcome: outcome, invalidateFailed: failed, stages: rec, horizon: horizon, now: time.Now}, nil
}

// StageWindows returns the broker and apply stages observed since the
// previous call, for the cluster registry's heartbeat.
func (h *Handlers) StageWindows() []stages.Window { return h.stages.Take() }

// timed records the stages of a record of type typ whose effect committed
// at done: broker from the record's timestamp (the producer's clock, to the
// millisecond) to its fetch, and apply from the fetch to done, both on this
// process's clock. A record whose creation context was sampled is the
// exemplar of both, with its trace id.
func (h *Handlers) timed(r *pcon.Record, typ string, done time.Time) {
	if r.Received.IsZero() {
		return
	}
	sc := pcontrace.RecordContext(r)
	if !r.Timestamp.IsZero() {
		h.stages.ObserveTraced(stages.Broker, typ, r.Received.Sub(r.Timestamp), sc)
	}
	h.stages.ObserveTraced(stages.Apply, typ, done.Sub(r.Received), sc)
}

// invalidate drops the cached pages of products whose aggregates a commit
// just changed, so that the product page shows the change at once instead
// of after the cache's TTL. It never fails the handler: the aggregates are
// committed, and retrying them for the cache's sake would hold the
// partition back while Redis is down.
func (h *Handlers) invalidate(ctx context.Context, ids []int64) {
	if len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, invalidateTimeout)
	defer cancel()
	ctx, end := child(ctx, "cache invalidate", attrProducts.Int(len(ids)))
	err := h.cache.Invalidate(ctx, ids...)
	end(err)
	if err != nil {
		h.invalidateFailed.Inc()
		h.logger.Warn("product cache invalidation failed", "products", len(ids), logkey.Err, err)
	}
}

// expired reports whether msg is older than the idempotency horizon, and
// logs and counts it if so.
func (h *Handlers) expired(consumer string, msg events.Message) bool {
	if msg.Time.IsZero() || h.now().Sub(msg.Time) <= h.horizon {
		return false
	}
	h.logger.Warn("event older than the idempotency horizon skipped",
		"consumer", consumer, "type", msg.Type, "id", msg.ID, "time", msg.Time, "horizon", h.horizon.String())
	h.count(consumer, "expired", 1)
	return true
}

// Spec returns the spec of the named consumer.
func (h *Handlers) Spec(name string) (Spec, error) {
	var (
		group   string
		ev      any // an event the consumer handles: its topic is the consumer's
		handler pcon.Handler
	)
	switch name {
	case Like:
		group, ev, handler = LikeGroup, events.LikeCreatedV1{}, pcon.BatchHandler(h.likes)
	case Order:
		group, ev, handler = OrderGroup, events.OrderPaidV1{}, pcon.RecordHandler(h.order)
	case View:
		group, ev, handler = ViewGroup, events.ProductViewedV1{}, pcon.BatchHandler(h.views)
	case Stock:
		group, ev, handler = StockGroup, events.StockDepletedV1{}, pcon.RecordHandler(h.stock)
	default:
		return Spec{}, fmt.Errorf("unknown consumer %q", name)
	}
	topic, err := h.reg.TopicFor(ev)
	if err != nil {
		return Spec{}, fmt.Errorf("consumer %s: %w", name, err)
	}
	return Spec{name, group, topic, handler}, nil
}

func (h *Handlers) count(consumer, outcome string, n int) {
	if n > 0 {
		h.outcome.WithLabelValues(consumer, outcome).Add(float64(n))
	}
}

// issuedSequence refuses, permanently, a like event whose sequence is beyond
// any outbox id issued so far: it can only be forged, and the like state
// would take it as the newest change of its (user, product) forever, so that
// every real change after it is ignored. The highest id issued is read again
// only when an event goes past the one known.
func (h *Handlers) issuedSequence(ctx context.Context, m events.Message) error {
	if m.Sequence <= h.issued.Load() {
		return nil
	}
	issued, err := h.store.IssuedSequence(ctx)
	if err != nil {
		return err // retried: the database decides, not this guess
	}
	h.learnIssued(issued)
	if m.Sequence > issued {
		return pcon.Permanent(fmt.Errorf("event %s: %w: sequence %d is beyond the highest outbox id issued (%d)", m.ID, events.ErrBadData, m.Sequence, issued))
	}
	return nil
}

// learnIssued raises the highest outbox id known to be issued to id. Each
// like batch learns it with its writes, so that the next batch's sequences,
// mostly issued before that, need no query of their own.
func (h *Handlers) learnIssued(id int64) {
	for {
		cur := h.issued.Load()
		if id <= cur || h.issued.CompareAndSwap(cur, id) {
			return
		}
	}
}

// storeErr makes the database's refusal of the data itself (SQLSTATE
// classes 22 and 23) permanent: the same rows would be refused again. A
// batch's error names no record, so pcon first retries the batch's records
// alone, and only the record at fault then fails, permanently, and reaches
// the dead-letter topic. Anything else (the database unavailable, a
// deadlock) stays retryable.
func storeErr(err error) error {
	if errors.Is(err, store.ErrInvalidInput) || errors.Is(err, store.ErrConstraint) {
		return pcon.Permanent(err)
	}
	return err
}

func unexpected(msg events.Message) error {
	return pcon.Permanent(fmt.Errorf("event %s: type %s does not belong on this topic: %w", msg.ID, msg.Type, events.ErrUnknownType))
}

// idempotencyKey is the event_handled key of msg handled by group.
func idempotencyKey(group string, msg events.Message) string { return group + ":" + msg.ID }

func (h *Handlers) order(ctx context.Context, r *pcon.Record) error {
	msg, err := h.decode(ctx, r)
	if err != nil {
		return err
	}
	paid, ok := msg.Event.(events.OrderPaidV1)
	if !ok {
		return unexpected(msg)
	}
	if h.expired(Order, msg) {
		return nil
	}
	sales := make([]store.Sale, len(paid.Items))
	for i, it := range paid.Items {
		sales[i] = store.Sale{ProductID: it.ProductID, Quantity: it.Quantity, Amount: it.Quantity * it.UnitPrice}
	}
	txCtx, end := child(ctx, "aggregate sales", attrProducts.Int(len(sales)))
	applied, err := h.store.ApplyOrderPaid(txCtx, idempotencyKey(OrderGroup, msg), sales)
	end(err)
	if err != nil {
		return storeErr(err)
	}
	h.timed(r, msg.Type, time.Now())
	if !applied {
		h.logger.Debug("event already handled", "type", msg.Type, "id", msg.ID, "action", "skip")
		h.count(Order, "duplicate", 1)
		markOutcome(ctx, Order, 0, 1)
		return nil
	}
	h.count(Order, "applied", 1)
	markOutcome(ctx, Order, 1, 0)
	ids := make([]int64, len(sales))
	for i, sale := range sales {
		ids[i] = sale.ProductID
	}
	h.invalidate(ctx, ids)
	return nil
}

func (h *Handlers) stock(ctx context.Context, r *pcon.Record) error {
	msg, err := h.decode(ctx, r)
	if err != nil {
		return err
	}
	depleted, ok := msg.Event.(events.StockDepletedV1)
	if !ok {
		return unexpected(msg)
	}
	// Deleting is idempotent, so no idempotency record is needed.
	invCtx, end := child(ctx, "cache invalidate", attrProducts.Int(1))
	err = h.cache.Invalidate(invCtx, depleted.ProductID)
	end(err)
	if err != nil {
		return fmt.Errorf("invalidate product %d: %w", depleted.ProductID, err)
	}
	h.timed(r, msg.Type, time.Now())
	h.count(Stock, "applied", 1)
	return nil
}

// decodeBatch decodes every record of a batch; those that fail are reported
// by index in failed, the others returned with their records. A batch holds
// runs of a product's records in order; once one of a product's records
// failed, pcon runs the product's later records of the batch again after
// it, so they are left out here instead of being applied twice.
func (h *Handlers) decodeBatch(ctx context.Context, rs []*pcon.Record, accept func(events.Message) error) (ok []events.Message, recs []*pcon.Record, failed map[int]error) {
	failed = map[int]error{}
	var broken map[string]bool // record keys with a failed record in this batch
	for i, r := range rs {
		if broken[string(r.Key)] {
			continue
		}
		msg, err := h.decode(ctx, r)
		if err == nil {
			err = accept(msg)
		}
		if err != nil {
			failed[i] = err
			if broken == nil {
				broken = map[string]bool{}
			}
			broken[string(r.Key)] = true
			continue
		}
		ok, recs = append(ok, msg), append(recs, r)
	}
	return ok, recs, failed
}

func batchResult(failed map[int]error) error {
	if len(failed) == 0 {
		return nil
	}
	return &pcon.BatchError{Failed: failed}
}

func (h *Handlers) views(ctx context.Context, rs []*pcon.Record) error {
	msgs, recs, failed := h.decodeBatch(ctx, rs, func(m events.Message) error {
		if _, ok := m.Event.(events.ProductViewedV1); !ok {
			return unexpected(m)
		}
		return nil
	})
	views := make([]store.View, 0, len(msgs))
	viewed := make([]int, 0, len(msgs)) // indexes in msgs
	for i, m := range msgs {
		if h.expired(View, m) {
			continue
		}
		views = append(views, store.View{IdempotencyKey: idempotencyKey(ViewGroup, m), ProductID: m.Event.(events.ProductViewedV1).ProductID})
		viewed = append(viewed, i)
	}
	if len(views) > 0 {
		txCtx, end := child(ctx, "aggregate views", attrEvents.Int(len(views)))
		applied, err := h.store.ApplyViews(txCtx, views)
		end(err)
		if err != nil {
			return storeErr(err) // every record of the batch is retried, alone
		}
		markOutcome(ctx, View, applied, len(views)-applied)
		done := time.Now()
		for _, i := range viewed {
			h.timed(recs[i], msgs[i].Type, done)
		}
		h.count(View, "applied", applied)
		h.count(View, "duplicate", len(views)-applied)
		if applied > 0 {
			h.invalidate(ctx, distinct(len(views), func(i int) int64 { return views[i].ProductID }))
		}
	}
	return batchResult(failed)
}

func (h *Handlers) likes(ctx context.Context, rs []*pcon.Record) error {
	msgs, recs, failed := h.decodeBatch(ctx, rs, func(m events.Message) error {
		switch m.Event.(type) {
		case events.LikeCreatedV1, events.LikeCanceledV1:
			return h.issuedSequence(ctx, m)
		}
		return unexpected(m)
	})
	changes := make([]store.LikeChange, len(msgs))
	for i, m := range msgs {
		switch ev := m.Event.(type) {
		case events.LikeCreatedV1:
			changes[i] = store.LikeChange{UserID: ev.UserID, ProductID: ev.ProductID, Liked: true, Sequence: m.Sequence}
		case events.LikeCanceledV1:
			changes[i] = store.LikeChange{UserID: ev.UserID, ProductID: ev.ProductID, Liked: false, Sequence: m.Sequence}
		}
	}
	if len(changes) > 0 {
		txCtx, end := child(ctx, "aggregate likes", attrEvents.Int(len(changes)))
		res, err := h.store.ApplyLikes(txCtx, changes)
		end(err)
		if err != nil {
			return storeErr(err)
		}
		markOutcome(ctx, Like, res.Transitions, len(changes)-res.Transitions)
		done := time.Now()
		h.learnIssued(res.Issued)
		for i, r := range recs {
			h.timed(r, msgs[i].Type, done)
		}
		h.count(Like, "applied", res.Transitions)
		h.count(Like, "duplicate", len(changes)-res.Transitions)
		if res.Transitions > 0 {
			h.invalidate(ctx, distinct(len(changes), func(i int) int64 { return changes[i].ProductID }))
		}
	}
	return batchResult(failed)
}

// distinct returns the distinct values of id(0..n-1), in first-seen order.
func distinct(n int, id func(int) int64) []int64 {
	seen := make(map[int64]bool, n)
	out := make([]int64, 0, n)
	for i := range n {
		if v := id(i); !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}
