// Package relay publishes the outbox to Kafka in id order, without loss:
// the pass logic (ordered confirmation, HOL retry, the gap rule), and the
// service around it (gocron scheduling under a leader lease, LISTEN wake-ups,
// retention, metrics).
package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/loopers/commerce-pipeline/internal/service"
	"github.com/loopers/commerce-pipeline/services/outbox-relay/internal/lease"
	"github.com/loopers/commerce-pipeline/services/outbox-relay/internal/publisher"
	"github.com/loopers/commerce-pipeline/services/outbox-relay/internal/store"
)

// Config is a relay node's settings; internal/app reads them from the
// environment.
type Config struct {
	NodeID        string        // OUTBOX_RELAY_NODE_ID: the lease owner
	BatchSize     int           // OUTBOX_RELAY_BATCH_SIZE: rows read per batch
	SendTimeout   time.Duration // OUTBOX_RELAY_SEND_TIMEOUT: how long a batch waits for Kafka
	RetryInterval time.Duration // OUTBOX_RELAY_RETRY_INTERVAL: next_retry_at after a retriable failure
	MaxAge        time.Duration // OUTBOX_RELAY_MAX_AGE: a failing row older than this goes to outbox_failed
	Interval      time.Duration // OUTBOX_RELAY_INTERVAL: polling interval (NOTIFY wakes it sooner)
	LeaseTTL      time.Duration // OUTBOX_RELAY_LEASE_TTL: leader lease; renewed every TTL/3
	Retention     time.Duration // OUTBOX_RETENTION: published rows older than this are purged
}

// Relay runs passes over the outbox. Passes must not overlap (the scheduler
// runs them as a singleton job).
type Relay struct {
	cfg     Config
	store   *store.Store
	pub     *publisher.Publisher
	elector *lease.Elector
	metrics *Metrics
	logger  *slog.Logger
	gaps    gaps
	// wake holds a commit notified since the last read was sent (Notify).
	wake chan struct{}
	// last is where the previous pass left the cursor, and under which
	// lease term: the next pass of the same term starts there without
	// reading it. Only this node's passes of that term move the cursor
	// (the advance is fenced), one at a time; a cursor moved under it
	// anyway (a PostgreSQL crash losing an asynchronous advance) makes the
	// next advance fail, which forgets it.
	last struct {
		cursor, token int64
		ok            bool
	}
	// alone holds the rows whose record the broker refused as too large
	// while it travelled with others: the producer fails a refused batch
	// as a whole, so any of its records may be the one too large. Each is
	// sent alone next, and blamed only if it fails alone. Only the pass
	// (one at a time) reads and writes it.
	alone map[int64]bool

	// beforeAdvance, when set by a test, runs before each cursor update: it
	// stands for a process paused between publishing and confirming.
	beforeAdvance func()
}

// NewRelay returns a Relay. Passes run only while elector leads.
func NewRelay(cfg Config, st *store.Store, pub *publisher.Publisher, elector *lease.Elector, metrics *Metrics, logger *slog.Logger) (*Relay, error) {
	if st == nil || pub == nil || elector == nil || metrics == nil || logger == nil {
		return nil, errors.New("relay: store, publisher, elector, metrics and logger are required")
	}
	if cfg.BatchSize <= 0 || cfg.RetryInterval <= 0 || cfg.MaxAge <= 0 {
		return nil, fmt.Errorf("relay: batch size, retry interval and max age must be positive, got %d, %s, %s",
			cfg.BatchSize, cfg.RetryInterval, cfg.MaxAge)
	}
	return &Relay{cfg: cfg, store: st, pub: pub, elector: elector, metrics: metrics, logger: logger, wake: make(chan struct{}, 1),
		alone: map[int64]bool{}}, nil
}

// Notify tells a running pass that rows were committed since it last read:
// a pass that has caught up with the outbox reads again at once, while what
// it sent is still being confirmed, instead of after that and a new pass.
func (r *Relay) Notify() {
	select {
	case r.wake <- struct{}{}:
	default: // already told
	}
}

// PassResult sums up one pass.
type PassResult struct {
	Published int   // rows published and passed by the cursor
	Failed    int   // rows moved to outbox_failed
	Retried   int   // rows marked for retry (at most one: the pass stops there)
	Cursor    int64 // the cursor after the pass
}

// Pass publishes what is ready after the cursor, batch after batch while
// reads return rows (drain), each read overlapping the previous batch's
// confirmation. It stops before a gap that may still fill, at a row waiting
// for its retry time, and at a retriable failure (HOL). A pass of a node that
// is not leader does nothing.
func (r *Relay) Pass(ctx context.Context) (res PassResult, err error) {
	fence, ok := r.elector.Fence()
	if !ok {
		return PassResult{}, nil
	}
	start := time.Now()
	defer func() { r.metrics.passDuration.Observe(time.Since(start).Seconds()) }()
	// On shutdown the pass stops between batches, but the batch in flight
	// gets up to a send timeout to be confirmed, so a stopping node does not
	// leave published rows for the next leader to publish again.
	stop := ctx
	ctx, release := graceful(stop, r.cfg.SendTimeout)
	defer release()

	cursor, err := r.cursor(ctx, fence)
	if err != nil {
		return res, err
	}
	r.last.ok = false // until this pass ends without an error
	res.Cursor = cursor
	r.gaps.forget(cursor)
	defer func() {
		if res.Published+res.Failed > 0 {
			r.logger.Info("relay completed", "success", res.Published, "failed", res.Failed, "lastOffset", res.Cursor)
		}
	}()
	defer func() {
		if err == nil {
			r.last.cursor, r.last.token, r.last.ok = res.Cursor, fence.Token, true
		}
	}()
	rd := r.startReader(ctx, cursor)
	defer func() { rd.stop() }()
	b, err := rd.next(ctx)
	if err != nil {
		return res, err
	}
	cur := r.prepare(ctx, cursor, b, nil)
	began := time.Now()
	// ahead are the batches handed (or being handed) to the producer after
	// cur, in id order. A pass returns only once everything it prepared is
	// in the producer, so the next pass's records cannot overtake them.
	var ahead []*inflight
	tail := cur
	defer func() { <-tail.fed }()
	rereadGap := false
	finishing := false // stopping: confirm what the producer has, start nothing new
	var readErr error  // reading ahead failed: confirm what is in flight, then return it
	for {
		// Pipelining: the reader is already reading ahead; while the batch
		// in flight is confirmed, up to aheadBatches more are mapped and
		// handed to the producer, so that it has work while a cursor
		// update is written. Only a full batch sent entirely can be
		// followed; anything else ends the drain.
		for !finishing && readErr == nil && len(ahead) < aheadBatches &&
			len(tail.rows) == len(tail.batch.Rows) && len(tail.rows) == r.cfg.BatchSize {
			// Wait for a read only when nothing else is ahead.
			nb, ok, err := rd.poll(ctx, len(ahead) == 0)
			if err != nil {
				readErr = err
				break
			}
			if !ok {
				break
			}
			next := r.prepare(ctx, tail.rows[len(tail.rows)-1].ID, nb, tail)
			ahead = append(ahead, next)
			tail = next
		}
		if !finishing && readErr == nil && len(ahead) == 0 && len(cur.rows) > 0 &&
			len(cur.rows) == len(cur.batch.Rows) && len(cur.rows) < r.cfg.BatchSize &&
			time.Since(began) < r.cfg.Interval {
			// Caught up: a short batch ended the reader's run. A commit
			// notified while it is being confirmed is read at once, so
			// that it does not wait for the acknowledgements, the cursor's
			// advance and another pass. (A pass that never runs dry ends
			// after the poll interval; a wake-up starts the next at once.)
			select {
			case <-r.wake:
				after := cur.rows[len(cur.rows)-1].ID
				rd.stop()
				rd = r.startReader(ctx, after)
				if nb, err := rd.next(ctx); err != nil {
					readErr = err
				} else {
					next := r.prepare(ctx, after, nb, cur)
					ahead = append(ahead, next)
					tail = next
				}
			case <-cur.acked: // and then its advance, after which a
				// commit notified meanwhile is read (below)
			}
		}
		more, err := r.confirm(ctx, fence, &res, cur)
		if err != nil {
			return res, err
		}
		advanced := res.Cursor != cursor
		cursor = res.Cursor
		r.gaps.forget(cursor)
		if advanced {
			rereadGap = false
		}
		switch {
		case !more:
			// A retriable failure stopped the pass; what the batches ahead
			// already sent is published again, in order, after the retry.
			return res, nil
		case len(ahead) > 0:
			cur, ahead = ahead[0], ahead[1:]
		case readErr != nil:
			return res, readErr
		case cur.newGap && !rereadGap && !finishing, !finishing && time.Since(began) < r.cfg.Interval && r.woken():
			// A new gap can settle only in a later snapshot, and a commit
			// notified while the batch was confirmed is not in this read:
			// read again at once instead of waiting for the next pass.
			rereadGap = rereadGap || cur.newGap
			rd.stop()
			rd = r.startReader(ctx, cursor)
			if b, err = rd.next(ctx); err != nil {
				return res, err
			}
			cur = r.prepare(ctx, cursor, b, cur)
			tail = cur
		default:
			return res, nil
		}
		if _, ok := r.elector.Fence(); !ok {
			return res, nil
		}
		finishing = stop.Err() != nil
	}
}

// aheadBatches is how many batches a draining pass hands to the producer
// beyond the one it confirms. One is not enough: the producer finishes it
// while the cursor update of the batch before is written, and then waits.
const aheadBatches = 3

// woken reports, once, whether a commit was notified since the last read
// was sent.
func (r *Relay) woken() bool {
	select {
	case <-r.wake:
		return true
	default:
		return false
	}
}

// cursor returns where a pass of lease term f starts: where the previous
// pass of the same term left the cursor, or else the cursor as stored.
func (r *Relay) cursor(ctx context.Context, f store.Fence) (int64, error) {
	if r.last.ok && r.last.token == f.Token {
		return r.last.cursor, nil
	}
	return r.store.Cursor(ctx)
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

// inflight is a batch read and handed to the producer, not yet confirmed.
type inflight struct {
	batch   store.Batch
	rows    []store.Row        // the sendable prefix of batch.Rows
	fed     chan struct{}      // closed once the batch is handed to the producer
	acked   chan struct{}      // closed once its outcomes are in (errs, pending)
	pending *publisher.Pending // the batch in the producer
	errs    []error            // the outcome of each row
	newGap  bool               // the prefix ends at a gap first seen in this read
	// alone: the batch is one record, the first of its pass, so nothing
	// else shares its produce request and its refusal is its own.
	alone bool
}

// prepare takes the sendable prefix of b, read after id `after`, and hands it
// to the producer after prev (nil for the first batch of a pass).
func (r *Relay) prepare(ctx context.Context, after int64, b store.Batch, prev *inflight) *inflight {
	r.gaps.recorded = false
	rows := r.sendable(ctx, after, b)
	if prev == nil && len(rows) > 0 && r.alone[rows[0].ID] {
		rows = rows[:1]
	}
	msgs := make([]publisher.Message, len(rows))
	for i, row := range rows {
		msgs[i] = messageOf(row)
	}
	in := &inflight{batch: b, rows: rows, fed: make(chan struct{}), acked: make(chan struct{}), newGap: r.gaps.recorded,
		alone: prev == nil && len(rows) == 1}
	// Mapping to CloudEvents records is the costly step; it runs while the
	// previous batch is being confirmed. Feeding the producer waits for the
	// previous batch to be fed, so records enter it in id order.
	go func() {
		defer close(in.acked)
		prep := r.pub.Prepare(ctx, msgs)
		if prev != nil {
			<-prev.fed
		}
		in.pending = r.pub.Feed(ctx, prep)
		close(in.fed)
		if len(rows) > 0 {
			in.errs = in.pending.Wait(ctx)
		}
	}()
	return in
}

// reader reads batches ahead of the pass, so that the database read of batch
// N+1 overlaps the mapping and confirmation of batch N. It stays at most two
// batches ahead and stops after a batch that is not full.
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

// next returns the next batch. Call it only after a full batch (or first).
func (rd *reader) next(ctx context.Context) (store.Batch, error) {
	b, _, err := rd.poll(ctx, true)
	return b, err
}

// poll returns the next batch if it has been read, or waits for it if
// wait is set; ok reports whether it returned one. Call it only after a
// full batch.
func (rd *reader) poll(ctx context.Context, wait bool) (b store.Batch, ok bool, err error) {
	if !wait {
		select {
		case x := <-rd.results:
			return x.batch, true, x.err
		default:
			return store.Batch{}, false, nil
		}
	}
	select {
	case x := <-rd.results:
		return x.batch, true, x.err
	case <-ctx.Done():
		return store.Batch{}, false, ctx.Err()
	}
}

func (rd *reader) stop() {
	rd.cancel()
	<-rd.done
}

// sendable returns the rows of b that may be sent now: the id-ordered prefix
// that stops before an unsettled gap and before a row waiting for its retry
// time.
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
		r.logger.Warn("cannot read the outbox writers; the gap waits", service.ErrKey, err)
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

// confirm waits for the outcomes of a batch and confirms them in id order:
// successes and permanent or expired failures advance; the first retriable
// failure is marked for retry and ends the pass. The cursor moves once per
// batch, fenced. It reports false when a retriable failure stopped the pass.
func (r *Relay) confirm(ctx context.Context, fence store.Fence, res *PassResult, in *inflight) (bool, error) {
	b, rows := in.batch, in.rows
	<-in.acked
	if len(rows) == 0 {
		return true, nil
	}
	errs := in.errs

	from, to := res.Cursor, res.Cursor
	var (
		failed    []store.Failure
		published []int // indexes in rows
		hol       *store.Row
		holErr    error
	)
	for i, row := range rows {
		err := errs[i]
		if in.alone || err == nil || !publisher.Unpublishable(err) {
			delete(r.alone, row.ID)
		}
		switch {
		case err == nil:
			published = append(published, i)
		case publisher.TooLarge(err) && !in.alone:
			// Refused with the records it travelled with: send it alone
			// to learn whether it is the one too large (the others behind
			// it are not confirmed either, and go again after it).
			r.alone[row.ID] = true
			hol, holErr = &rows[i], err
		case publisher.Unpublishable(err):
			r.logger.Warn("message failed permanently, moving to failed", "id", row.ID, "eventId", row.EventID, "type", row.EventType, service.ErrKey, err)
			failed = append(failed, store.Failure{ID: row.ID, Error: err.Error()})
		case b.Now.Sub(row.CreatedAt) > r.cfg.MaxAge:
			r.logger.Warn("message expired, moving to failed", "id", row.ID, "createdAt", row.CreatedAt, service.ErrKey, err)
			failed = append(failed, store.Failure{ID: row.ID, Error: err.Error()})
		default:
			hol, holErr = &rows[i], err
		}
		if hol != nil {
			break
		}
		to = row.ID
	}
	if to != from {
		if r.beforeAdvance != nil {
			r.beforeAdvance()
		}
		if err := r.store.Advance(ctx, fence, from, to, failed); err != nil {
			return false, err
		}
		res.Cursor = to
		res.Published += len(published)
		res.Failed += len(failed)
		r.metrics.published.Add(float64(len(published)))
		r.metrics.failed.Add(float64(len(failed)))
		r.metrics.observe(b, rows, published, in.pending)
	}
	if hol == nil {
		return true, nil
	}
	at, err := r.store.MarkRetry(ctx, fence, hol.ID, r.cfg.RetryInterval)
	if err != nil {
		return false, err
	}
	res.Retried++
	r.metrics.retried.Inc()
	r.logger.Info("message marked for retry", "id", hol.ID, "nextRetryAt", at, service.ErrKey, holErr)
	return false, nil
}
