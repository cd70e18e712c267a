// Package relay publishes the outbox to Kafka in id order, without loss:
// the pipeline (a window of records in the producer, confirmation in id
// order, the cursor's advance off the hot path, ordered retry per
// aggregate, the gap rule), and the service around it (the leader lease,
// LISTEN wake-ups, retention, metrics).
package relay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/loopers/commerce-pipeline/internal/logkey"
	"github.com/loopers/commerce-pipeline/services/outbox-relay/internal/lease"
	"github.com/loopers/commerce-pipeline/services/outbox-relay/internal/publisher"
	"github.com/loopers/commerce-pipeline/services/outbox-relay/internal/store"
)

// Config is a relay node's settings; internal/app reads them from the
// environment.
type Config struct {
	NodeID    string // CLUSTER_NODE_ID: the lease owner
	BatchSize int    // OUTBOX_RELAY_BATCH_SIZE: rows per read
	// Window and WindowBytes (OUTBOX_RELAY_WINDOW, OUTBOX_RELAY_WINDOW_BYTES)
	// bound the records in the producer: the relay reads more only while
	// both are below their bound. On a replicated cluster every
	// acknowledgement waits for the followers, so throughput is the window
	// over that wait.
	Window      int
	WindowBytes int
	// SendTimeout (OUTBOX_RELAY_SEND_TIMEOUT) is how long the broker waits
	// for its replicas, and how long a record may stay unacknowledged before
	// the cursor passes it as held.
	SendTimeout time.Duration
	// RetryInterval (OUTBOX_RELAY_RETRY_INTERVAL) caps the backoff of a
	// refused record's retries.
	RetryInterval time.Duration
	MaxAge        time.Duration // OUTBOX_RELAY_MAX_AGE: a failing row older than this goes to outbox_failed
	Interval      time.Duration // OUTBOX_RELAY_INTERVAL: polling interval (NOTIFY wakes it sooner)
	LeaseTTL      time.Duration // OUTBOX_RELAY_LEASE_TTL: leader lease; renewed every TTL/3
	Retention     time.Duration // OUTBOX_RELAY_RETENTION: published rows older than this are purged
}

// Relay runs passes over the outbox. Passes must not overlap: the service
// runs them one after the other on one goroutine.
type Relay struct {
	cfg     Config
	store   *store.Store
	pub     *publisher.Publisher
	elector *lease.Elector
	metrics *Metrics
	logger  *slog.Logger
	gaps    gaps
	// wake is the one wake-up: a token left by Notify for a commit, taken
	// by the service's loop (to start a pass) or by a running pass (to read
	// again).
	wake chan struct{}
	// t is the pipeline of the lease term the last pass ran in; a pass of a
	// later term, or after an error, starts a new one from the database.
	t *term

	// wokenBy is what started the next pass (the service's loop sets it):
	// its first read's spans say so.
	wokenBy Wake

	// cursor confirms what a pass handed over: the store.
	cursor advancer
}

// advancer writes a pass's confirmation (store.Store.Advance): the cursor's
// move with the rows failed, held and settled up to it, fenced by the
// lease term.
type advancer interface {
	Advance(ctx context.Context, f store.Fence, a store.Advance) error
}

// NewRelay returns a Relay. Passes run only while elector leads.
func NewRelay(cfg Config, st *store.Store, pub *publisher.Publisher, elector *lease.Elector, metrics *Metrics, logger *slog.Logger) (*Relay, error) {
	if st == nil || pub == nil || elector == nil || metrics == nil || logger == nil {
		return nil, errors.New("relay: store, publisher, elector, metrics and logger are required")
	}
	if cfg.BatchSize <= 0 || cfg.Window <= 0 || cfg.WindowBytes <= 0 || cfg.SendTimeout <= 0 || cfg.RetryInterval <= 0 || cfg.MaxAge <= 0 {
		return nil, fmt.Errorf("relay: batch size, window, window bytes, send timeout, retry interval and max age must be positive, got %d, %d, %d, %s, %s, %s",
			cfg.BatchSize, cfg.Window, cfg.WindowBytes, cfg.SendTimeout, cfg.RetryInterval, cfg.MaxAge)
	}
	return &Relay{cfg: cfg, store: st, pub: pub, elector: elector, metrics: metrics, logger: logger, wake: make(chan struct{}, 1), cursor: st}, nil
}

// Notify tells the relay that rows were committed: a running pass reads
// again at once, and an idle node starts a pass.
func (r *Relay) Notify() {
	select {
	case r.wake <- struct{}{}:
	default: // already told
	}
}

// PassResult sums up one pass.
type PassResult struct {
	Published int   // rows published
	Failed    int   // rows moved to outbox_failed
	Held      int   // rows the cursor passed unpublished (held, in outbox_held)
	Retried   int   // refused records sent again, or waiting to be
	Cursor    int64 // the cursor after the pass
}

// Pass publishes what is ready, until the relay has caught up with the
// outbox and every record it handed to the producer is confirmed or held:
// it reads batches after the last row read while the producer's window has
// room, hands them to the producer in id order, confirms the outcomes in id
// order, and moves the cursor, fenced, off the hot path. A commit notified
// during the pass is read by it. A record the cluster does not acknowledge
// holds back only the later rows of its aggregate; the cursor passes them,
// recorded as held. A pass of a node that is not leader does nothing.
func (r *Relay) Pass(ctx context.Context) (res PassResult, err error) {
	fence, ok := r.elector.Fence()
	if !ok {
		r.t = nil
		return PassResult{}, nil
	}
	start := time.Now()
	defer func() { r.metrics.passDuration.Observe(time.Since(start).Seconds()) }()
	// On shutdown the pass stops reading, but what is in the producer gets
	// up to a send timeout to be confirmed, so a stopping node does not
	// leave published rows for the next leader to publish again.
	stop := ctx
	ctx, release := graceful(stop, r.cfg.SendTimeout)
	defer release()

	if r.t == nil || r.t.fence != fence {
		if r.t, err = r.newTerm(ctx, fence); err != nil {
			r.t = nil
			return res, err
		}
	}
	t := r.t
	t.res = PassResult{Cursor: t.cursor}
	t.passStart, t.woken = start, cmp.Or(r.wokenBy, WokenByPoll)
	r.wokenBy = ""
	defer func() {
		if err != nil {
			r.t = nil // the next pass starts again from the database
		}
		res = t.res
		if t.passSpan != nil {
			endPass(t.passSpan, res, err)
			t.passCtx, t.passSpan = nil, nil
		}
		if res.Published+res.Failed+res.Held > 0 {
			r.logger.Info("relay completed", "success", res.Published, "failed", res.Failed, "held", res.Held, "lastOffset", res.Cursor)
		}
	}()
	return res, t.run(ctx, stop)
}

// NextRetry returns how long until a held aggregate's retry is due; false
// when none waits.
func (r *Relay) NextRetry() (time.Duration, bool) {
	if r.t == nil || len(r.t.blocked) == 0 {
		return 0, false
	}
	next := time.Duration(1<<63 - 1)
	for _, u := range r.t.blocked {
		if !u.sending {
			next = min(next, time.Until(u.due))
		}
	}
	return max(next, 0), true
}

// graceful returns a context that ends grace after ctx ends.
func graceful(ctx context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	out, cancel := context.WithCancel(context.WithoutCancel(ctx))
	unhook := context.AfterFunc(ctx, func() { time.AfterFunc(grace, cancel) })
	return out, func() {
		unhook()
		cancel()
	}
}

// state is where a row is in the pipeline.
type state int

const (
	waiting   state = iota // not in the producer: its aggregate is held back
	producing              // in the producer, no outcome yet
	published              // acknowledged
	failed                 // moved (or moving) to outbox_failed
)

// entry is a row read and routed.
type entry struct {
	row    store.Row
	rec    *kgo.Record // nil when the row cannot be mapped (mapErr)
	mapErr error
	unit   string // the aggregate's topic and key: the unit of order
	size   int
	state  state
	fedAt  time.Time
	// readNow and readSent time the stages: the database clock and this
	// process's clock when the row was read.
	readNow, readSent time.Time
	passed            bool // the cursor passed it (it is held until published or failed)
	alone             bool // refused as too large with batch-mates: sent alone next
	gen               int  // incremented by each produce; an outcome of an earlier one is stale
	// sent is the send spans of the batch that first produced the row, until
	// that produce's outcome (nil when tracing is off).
	sent *sentBatch
	idx  int // the row's index in sent
	// abort fails the record in the producer if it has not been written
	// yet (the producer fails the records behind it in its partition too).
	abort context.CancelFunc
}

func (e *entry) expired(maxAge time.Duration) bool {
	return e.readNow.Sub(e.row.CreatedAt)+time.Since(e.readSent) > maxAge
}

// unit is an aggregate held back: its rows wait, in id order, for the
// retry of the first.
type unit struct {
	rows    []*entry
	due     time.Time
	sending bool // the first is being sent alone
}

// sentBatch is the send spans of the rows one read produced, ended once
// each of those rows' first produce has its outcome.
type sentBatch struct {
	s    *sends
	errs []error
	left int
}

type outcome struct {
	e     *entry
	gen   int
	err   error
	at    time.Time
	alone bool // from ProduceAlone, outside the window
}

// term is the pipeline of one lease term, owned by the pass running it.
type term struct {
	r     *Relay
	fence store.Fence
	res   PassResult

	cursor  int64    // the cursor as last written
	passed  int64    // the last row the cursor passes (written or to write)
	readPos int64    // the last row read and routed
	queue   []*entry // routed and not yet passed, in id order
	held    map[int64]*entry
	blocked map[string]*unit
	// attempts counts the retries of an aggregate since its last success,
	// for the backoff.
	attempts map[string]int

	// The pass's span (started by its first read with rows), what woke the
	// read under way, and when the pass began.
	passCtx   context.Context
	passSpan  trace.Span
	woken     Wake
	passStart time.Time

	inflight, inBytes int // records and bytes in the producer
	waiting           int // rows held back in memory, not in the producer
	outcomes          *inbox

	// The next advance: rows to fail, to hold, and held rows settled.
	failed  []store.Failure
	toHold  map[int64]bool
	settled map[int64]bool
	writing chan error // the advance being written, nil when none
	writeTo int64
	wroteAt time.Time // when the last advance's write began
}

// newTerm starts the pipeline of lease term f: from the cursor, with the
// rows held behind it handed to the producer first, in id order, so they
// go out before any later row of their aggregate.
func (r *Relay) newTerm(ctx context.Context, f store.Fence) (*term, error) {
	cursor, err := r.store.Cursor(ctx)
	if err != nil {
		return nil, err
	}
	heldRows, err := r.store.Held(ctx)
	if err != nil {
		return nil, err
	}
	t := &term{
		r: r, fence: f, cursor: cursor, passed: cursor, readPos: cursor,
		held: map[int64]*entry{}, blocked: map[string]*unit{}, attempts: map[string]int{},
		outcomes: newInbox(),
		toHold:   map[int64]bool{}, settled: map[int64]bool{},
	}
	r.gaps.forget(cursor)
	if len(heldRows) > 0 {
		r.logger.Info("publishing the rows held behind the cursor first", "held", len(heldRows), "cursor", cursor)
		now := time.Now()
		for _, e := range t.prepare(ctx, heldRows, now, now) {
			e.passed = true
			t.held[e.row.ID] = e
			t.route(ctx, e)
		}
	}
	return t, nil
}

// prepare maps rows to entries.
func (t *term) prepare(ctx context.Context, rows []store.Row, readNow, readSent time.Time) []*entry {
	msgs := make([]publisher.Message, len(rows))
	for i, row := range rows {
		msgs[i] = messageOf(row)
	}
	prep := t.r.pub.Prepare(ctx, msgs)
	out := make([]*entry, len(rows))
	for i, row := range rows {
		rec, err := prep.Record(i)
		e := &entry{row: row, rec: rec, mapErr: err, readNow: readNow, readSent: readSent}
		if rec != nil {
			e.unit = rec.Topic + "\x00" + string(rec.Key)
			e.size = len(rec.Value) + len(rec.Key)
			for _, h := range rec.Headers {
				e.size += len(h.Key) + len(h.Value)
			}
		}
		out[i] = e
	}
	return out
}

// route hands e to the producer, or to its aggregate's held rows if the
// aggregate is held back, or fails it if it cannot be mapped.
func (t *term) route(ctx context.Context, e *entry) {
	switch u := t.blocked[e.unit]; {
	case e.mapErr != nil:
		t.fail(e, e.mapErr, "message failed permanently, moving to failed")
	case u != nil:
		e.state = waiting
		t.waiting++
		u.insert(e)
	default:
		t.produce(ctx, e)
	}
}

func (t *term) produce(ctx context.Context, e *entry) {
	e.state, e.fedAt = producing, time.Now()
	e.gen++
	t.inflight++
	t.inBytes += e.size
	gen, out := e.gen, t.outcomes
	// A context of the record's own, not the pass's: a record stays in
	// the producer after its pass ends (held); it is cancelled only to
	// abort a record that expired there.
	rctx, abort := context.WithCancel(context.WithoutCancel(ctx))
	e.abort = abort
	t.r.pub.Produce(rctx, e.rec, func(err error, at time.Time) {
		abort()
		out.put(outcome{e: e, gen: gen, err: err, at: at})
	})
}

// inbox collects outcomes without ever blocking the producer's goroutine:
// a producer whose buffer is full waits in Produce for outcomes to be
// delivered, so a bounded channel could deadlock it with the pass.
type inbox struct {
	mu     sync.Mutex
	items  []outcome
	signal chan struct{} // a token while items is not empty
}

func newInbox() *inbox { return &inbox{signal: make(chan struct{}, 1)} }

func (b *inbox) put(o outcome) {
	b.mu.Lock()
	b.items = append(b.items, o)
	b.mu.Unlock()
	select {
	case b.signal <- struct{}{}:
	default:
	}
}

func (b *inbox) take() []outcome {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.items
	b.items = nil
	return out
}

func (u *unit) insert(e *entry) {
	i, _ := slices.BinarySearchFunc(u.rows, e.row.ID, func(x *entry, id int64) int { return cmpID(x.row.ID, id) })
	u.rows = slices.Insert(u.rows, i, e)
}

func cmpID(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// settle applies a record's outcome.
func (t *term) settle(o outcome) {
	e := o.e
	if !o.alone {
		t.inflight--
		t.inBytes -= e.size
	}
	if sb := e.sent; sb != nil && o.gen == 1 {
		e.sent = nil
		sb.errs[e.idx] = o.err
		if sb.left--; sb.left == 0 {
			endSends(sb.s, sb.errs)
		}
	}
	if o.gen != e.gen || e.state != producing {
		if e.state == failed && o.err == nil {
			// Expired in the producer and aborted too late: the event is
			// in Kafka and in outbox_failed; a re-drive publishes it again
			// (consumers de-duplicate it).
			t.r.logger.Warn("message published after it expired", "id", e.row.ID, "eventId", e.row.EventID)
		}
		return
	}
	if o.alone {
		u := t.blocked[e.unit]
		u.sending = false
		if o.err != nil && !publisher.Unpublishable(o.err) && !e.expired(t.r.cfg.MaxAge) {
			e.state = waiting
			u.due = t.backoff(e.unit)
			t.r.logger.Info("message held for retry", "id", e.row.ID, "nextRetryAt", u.due, logkey.Err, o.err)
			return
		}
		t.waiting--
		u.rows = u.rows[1:]
		u.due = time.Now()
		if len(u.rows) == 0 {
			delete(t.blocked, e.unit)
		}
	}
	switch err := o.err; {
	case err == nil:
		e.state = published
		delete(t.attempts, e.unit)
		t.r.metrics.observe(e.row.EventType, e.readNow.Sub(e.row.CreatedAt), o.at.Sub(e.readSent), rowContext(e.row))
		if e.passed {
			t.unhold(e)
			t.res.Published++
			t.r.metrics.published.Inc()
		}
	case publisher.TooLarge(err) && !e.alone && !o.alone:
		// Refused with the records it travelled with: send it alone, at
		// once, to learn whether it is the one too large.
		e.alone = true
		t.hold(e, err)
		t.blocked[e.unit].due = time.Now()
	case publisher.Unpublishable(err):
		t.fail(e, err, "message failed permanently, moving to failed")
	case e.expired(t.r.cfg.MaxAge):
		t.fail(e, err, "message expired, moving to failed")
	default:
		t.hold(e, err)
	}
}

// hold holds e's aggregate back after the cluster refused e: its later rows
// wait, and e is sent again after a capped, jittered backoff.
func (t *term) hold(e *entry, err error) {
	e.state = waiting
	t.waiting++
	u := t.blocked[e.unit]
	if u == nil {
		u = &unit{due: t.backoff(e.unit)}
		t.blocked[e.unit] = u
		t.r.logger.Info("message held for retry", "id", e.row.ID, "nextRetryAt", u.due, logkey.Err, err)
	}
	u.insert(e)
	if !e.alone {
		t.res.Retried++
		t.r.metrics.retried.Inc()
	}
}

// backoff returns when an aggregate's next retry is due: 100 ms doubled for
// each retry since its last success, capped at the retry interval, ±20 %.
func (t *term) backoff(key string) time.Time {
	n := t.attempts[key]
	t.attempts[key] = n + 1
	d := min(t.r.cfg.RetryInterval, 100*time.Millisecond<<min(n, 20))
	return time.Now().Add(time.Duration(float64(d) * (0.8 + 0.4*rand.Float64())))
}

// fail moves e to outbox_failed, now if the cursor passed it, else when it
// does.
func (t *term) fail(e *entry, err error, msg string) {
	t.r.logger.Warn(msg, "id", e.row.ID, "eventId", e.row.EventID, "type", e.row.EventType, "createdAt", e.row.CreatedAt, logkey.Err, err)
	e.state = failed
	e.mapErr = err
	if e.passed {
		t.failed = append(t.failed, store.Failure{ID: e.row.ID, Error: err.Error()})
		t.unhold(e)
		t.res.Failed++
		t.r.metrics.failed.Inc()
	}
}

// unhold forgets a held row that is published or failed: it leaves
// outbox_held in the next advance, or is never written there.
func (t *term) unhold(e *entry) {
	delete(t.held, e.row.ID)
	if t.toHold[e.row.ID] {
		delete(t.toHold, e.row.ID) // never written as held
	} else {
		t.settled[e.row.ID] = true
	}
}

// confirm passes the cursor over the rows at the head of the queue whose
// outcome is known, or that are held: published, failed, waiting behind a
// refused row of their aggregate, or in the producer for longer than the
// send timeout (the producer keeps them, in their place in the partition's
// order, and the cursor passes them as held). It returns when the head's
// record may still be acknowledged in time.
func (t *term) confirm(stopping bool) (wait time.Duration) {
	for len(t.queue) > 0 {
		e := t.queue[0]
		switch e.state {
		case published:
			t.res.Published++
			t.r.metrics.published.Inc()
		case failed:
			t.failed = append(t.failed, store.Failure{ID: e.row.ID, Error: e.mapErr.Error()})
			t.res.Failed++
			t.r.metrics.failed.Inc()
		case producing:
			if left := t.r.cfg.SendTimeout - time.Since(e.fedAt); left > 0 && !stopping {
				return left
			}
			if e.expired(t.r.cfg.MaxAge) {
				// Aborted in the producer, unless it is being written.
				e.abort()
				e.passed = true
				t.fail(e, errors.New("not acknowledged within the send timeout"), "message expired, moving to failed")
				break
			}
			fallthrough
		case waiting:
			t.held[e.row.ID] = e
			t.toHold[e.row.ID] = true
			t.res.Held++
		}
		e.passed = true
		t.passed = e.row.ID
		t.queue = t.queue[1:]
	}
	return 0
}

// retry sends the held aggregates whose retry is due: their rows, in id
// order, ahead of any later row (which the aggregate held back until now).
// A row refused as too large with others goes alone first.
func (t *term) retry(ctx context.Context) {
	now := time.Now()
	for key, u := range t.blocked {
		if u.sending || u.due.After(now) {
			continue
		}
		if head := u.rows[0]; head.alone {
			u.sending = true
			head.state, head.fedAt = producing, now
			head.gen++
			gen, out, rec := head.gen, t.outcomes, head.rec
			go func() {
				ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*t.r.cfg.SendTimeout)
				defer cancel()
				err := t.r.pub.ProduceAlone(ctx, rec)
				out.put(outcome{e: head, gen: gen, err: err, at: time.Now(), alone: true})
			}()
			continue
		}
		delete(t.blocked, key)
		t.waiting -= len(u.rows)
		for _, e := range u.rows {
			t.produce(ctx, e)
		}
	}
}

// advanceEvery is the shortest time from one advance's write to the next
// while the pass runs on. The cursor's position decides only what a next
// leader publishes again; written after every outcome, it cost a
// transaction per few events (hundreds a second in a drain, one every
// third event at 500 commits/s), and PostgreSQL's share of the relay's CPU
// with it.
const advanceEvery = 10 * time.Millisecond

// flush starts writing the next advance if one is due and none is being
// written. A stopping pass writes at once; otherwise the write waits until
// advanceEvery after the last one, and flush returns how long is left.
func (t *term) flush(ctx context.Context, stopping bool) (wait time.Duration) {
	if t.writing != nil || (t.passed == t.cursor && len(t.failed) == 0 && len(t.toHold) == 0 && len(t.settled) == 0) {
		return 0
	}
	if left := advanceEvery - time.Since(t.wroteAt); left > 0 && !stopping {
		return left
	}
	t.wroteAt = time.Now()
	a := store.Advance{From: t.cursor, To: t.passed, Failed: t.failed}
	for id := range t.toHold {
		a.Held = append(a.Held, id)
	}
	for id := range t.settled {
		a.Settled = append(a.Settled, id)
	}
	t.failed, t.toHold, t.settled = nil, map[int64]bool{}, map[int64]bool{}
	t.writeTo = a.To
	done := make(chan error, 1)
	t.writing = done
	fence := t.fence
	// The write outlives a stopping pass's context: it is fenced, and a
	// stopping leader's last advance spares its successor duplicates.
	go func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.r.cfg.SendTimeout)
		defer cancel()
		done <- t.r.cursor.Advance(ctx, fence, a)
	}()
	return 0
}

// written records the end of an advance's write.
func (t *term) written(err error) error {
	t.writing = nil
	if err != nil {
		return err
	}
	t.cursor = t.writeTo
	t.res.Cursor = t.cursor
	t.r.gaps.forget(t.cursor)
	return nil
}

// run is a pass of term t (see Pass).
func (t *term) run(ctx, stop context.Context) error {
	r := t.r
	var (
		rd        *reader // nil when not reading
		reread    bool    // read again when the reader has stopped
		rereadGap bool    // a new gap was re-read once already
		polled    = time.Now()
	)
	defer func() {
		if rd != nil {
			rd.stop()
		}
	}()
	startReading := func(woken Wake) {
		rd, reread, polled, t.woken = r.startReader(ctx, t.readPos), false, time.Now(), woken
	}
	startReading(t.woken)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		stopping := stop.Err() != nil
		// A stopping node's elector no longer renews, but its lease holds
		// in the database until it is released after this pass: the last
		// advances are written (fenced there).
		if _, leader := r.elector.Fence(); !leader && !stopping {
			// The writes are fenced, and the next term starts afresh; an
			// advance being written says whether it landed.
			if t.writing != nil {
				return t.written(<-t.writing)
			}
			return nil
		}
		if stopping && rd != nil {
			rd.stop()
			rd = nil
		}
		for _, o := range t.outcomes.take() {
			t.settle(o)
		}
		if !stopping {
			t.retry(ctx)
		}
		// A stopping pass waits for its records' outcomes until its grace
		// ends, then passes those still in the producer as held.
		wait := t.confirm(ctx.Err() != nil)
		flushIn := t.flush(ctx, stopping || ctx.Err() != nil)

		// Rows held back in memory are bounded too: an aggregate that stays
		// refused for long stops the reading after a while, rather than
		// the memory growing without end.
		room := t.inflight < r.cfg.Window && t.inBytes < r.cfg.WindowBytes && t.waiting < 8*r.cfg.Window
		if rd == nil && !stopping && (reread || time.Since(polled) >= r.cfg.Interval && len(t.queue) > 0) {
			startReading(WokenByPoll)
		}
		if rd == nil && len(t.queue) == 0 && t.writing == nil && t.passed == t.cursor &&
			len(t.failed)+len(t.toHold)+len(t.settled) == 0 {
			return nil // caught up, and everything handed over is confirmed or held
		}

		var reads chan readResult
		if rd != nil && room {
			reads = rd.results
		}
		var wake, stopped, cancelled <-chan struct{}
		if !stopping {
			wake, stopped = r.wake, stop.Done()
		}
		if ctx.Err() == nil {
			cancelled = ctx.Done()
		}
		d := time.Hour
		if wait > 0 {
			d = wait
		}
		if flushIn > 0 {
			d = min(d, flushIn)
		}
		if next, ok := r.NextRetry(); ok && !stopping {
			d = min(d, next)
		}
		if rd == nil && !stopping && len(t.queue) > 0 {
			d = min(d, max(0, r.cfg.Interval-time.Since(polled)))
		}
		timer.Reset(d)
		select {
		case <-t.outcomes.signal:
		case x := <-reads:
			if x.err != nil {
				return x.err
			}
			more, newGap := t.take(ctx, x.batch)
			if !more {
				rd.stop()
				rd = nil
				if newGap && !rereadGap {
					// A new gap can settle only in a later snapshot.
					reread, rereadGap = true, true
				}
			}
		case err := <-t.writing:
			if err := t.written(err); err != nil {
				return err
			}
		case <-wake:
			if rd == nil {
				startReading(WokenByNotification)
			} else {
				reread = true
			}
		case <-timer.C:
		case <-stopped:
		case <-cancelled:
		}
		if rd != nil && reread && len(rd.results) == 0 && rd.finished() {
			rd.stop()
			startReading(WokenByPoll)
		}
	}
}

// take routes the sendable prefix of b, read after t.readPos. It reports
// whether the reader may go on (the whole batch was full and sendable), and
// whether the prefix ends at a gap first seen in this read.
func (t *term) take(ctx context.Context, b store.Batch) (more, newGap bool) {
	r := t.r
	r.gaps.recorded = false
	rows := r.sendable(ctx, t.readPos, b)
	if len(rows) > 0 {
		recordOutboxWait(b, rows, t.woken)
		if t.passSpan == nil {
			t.passCtx, t.passSpan = startPass(ctx, t.passStart, t.woken)
		}
		entries := t.prepare(ctx, rows, b.Now, b.Sent)
		t.queue = append(t.queue, entries...)
		// The rows this read hands to the producer share a send span per
		// topic; those held back behind their aggregate or unmappable do
		// not.
		var sent []*entry
		for _, e := range entries {
			if e.mapErr == nil && t.blocked[e.unit] == nil {
				sent = append(sent, e)
			}
		}
		if len(sent) > 0 {
			sentRows := make([]store.Row, len(sent))
			for i, e := range sent {
				sentRows[i] = e.row
			}
			if s := startSends(t.passCtx, sentRows); s != nil {
				sb := &sentBatch{s: s, errs: make([]error, len(sent)), left: len(sent)}
				for i, e := range sent {
					e.sent, e.idx = sb, i
				}
			}
		}
		for _, e := range entries {
			t.route(ctx, e)
		}
		t.readPos = rows[len(rows)-1].ID
	}
	return len(rows) == len(b.Rows) && len(rows) == r.cfg.BatchSize, r.gaps.recorded
}

// reader reads batches ahead of the pass, so that the database read of batch
// N+1 overlaps the routing of batch N. It stays at most two batches ahead
// and stops after a batch that is not full.
type reader struct {
	results chan readResult
	cancel  context.CancelFunc
	done    chan struct{}
}

type readResult struct {
	batch store.Batch
	err   error
}

func (r *Relay) startReader(ctx context.Context, after int64) *reader {
	// The read sees every commit notified so far.
	select {
	case <-r.wake:
	default:
	}
	ctx, cancel := context.WithCancel(ctx)
	rd := &reader{results: make(chan readResult, 1), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(rd.done)
		for {
			b, err := r.store.ReadBatch(ctx, after, r.cfg.BatchSize)
			select {
			case rd.results <- readResult{batch: b, err: err}:
			case <-ctx.Done():
				return
			}
			if err != nil || len(b.Rows) < r.cfg.BatchSize {
				return
			}
			after = b.Rows[len(b.Rows)-1].ID
		}
	}()
	return rd
}

// finished reports whether the reader has stopped reading.
func (rd *reader) finished() bool {
	select {
	case <-rd.done:
		return true
	default:
		return false
	}
}

func (rd *reader) stop() {
	rd.cancel()
	<-rd.done
}

// sendable returns the rows of b that may be sent now: the id-ordered prefix
// that stops before an unsettled gap and before a row waiting for its retry
// time (next_retry_at, which relays before per-aggregate holding set).
func (r *Relay) sendable(ctx context.Context, cursor int64, b store.Batch) []store.Row {
	var (
		writers  []uint64
		ok, read bool
	)
	inFlight := func() ([]uint64, bool) {
		if !read {
			read = true
			writers, ok = r.outboxWriters(ctx, b.Snapshot)
		}
		return writers, ok
	}
	next := cursor + 1
	for i, row := range b.Rows {
		if row.ID > next && !r.gaps.resolved(next, row.ID-1, b.Snapshot, inFlight) {
			return b.Rows[:i]
		}
		if !row.Ready {
			return b.Rows[:i]
		}
		next = row.ID + 1
	}
	return b.Rows
}

// outboxWriters returns the transactions that may hold an id missing in
// snap: those holding a write lock on outbox now (read after snap was taken)
// that had not ended when snap was taken (see gaps.go). If the locks cannot
// be read it returns nil and a false ok, and the gap waits for a later pass.
func (r *Relay) outboxWriters(ctx context.Context, snap store.Snapshot) ([]uint64, bool) {
	w, err := r.store.OutboxWriters(ctx)
	if err != nil {
		r.logger.Warn("cannot read the outbox writers; the gap waits", logkey.Err, err)
		return nil, false
	}
	var out []uint64
	for x := range w {
		if x8 := snap.Widen(x); !snap.Ended(x8) {
			out = append(out, x8)
		}
	}
	slices.Sort(out)
	return out, true
}
