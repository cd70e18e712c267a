// Package stream fans committed product aggregate changes and a pipeline
// summary out to Server-Sent Events clients. One hub per process reads what
// changed in the aggregates (indexed reads of their change_xid) once per
// Coalesce while a stream is open, and hands every client the same
// pre-encoded frames; clients never query the database themselves. With no
// stream open the hub reads nothing.
//
// What a stream costs is bounded whatever the catalogue's size: a resume
// that would have to send more than Config.ResumeLimit products, or that
// names a watermark this database never handed out, gets a reset event
// instead: the top Config.ResetTop products by each aggregate, from which
// the client continues. Concurrent resets between two reads of changes
// share one snapshot.
package stream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/loopers/commerce-pipeline/internal/logkey"
	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/store"
)

// The SSE event names. ReadyEvent is the first event of a stream that does
// not resume; ResetEvent replaces the client's whole state.
const (
	ChangesEvent = "products"
	SummaryEvent = "summary"
	ReadyEvent   = "ready"
	ResetEvent   = "reset"
)

// ErrTooManyStreams refuses a stream past Config.MaxStreams.
var ErrTooManyStreams = errors.New("too many open streams")

// ErrClosed refuses a stream once the hub has stopped.
var ErrClosed = errors.New("the stream hub has stopped")

// Source is what the hub reads from the database.
type Source interface {
	ChangesSince(ctx context.Context, since uint64, limit int) (store.Changes, error)
	TopProducts(ctx context.Context, n int) (store.Snapshot, error)
	PipelineStats(ctx context.Context) (store.Pipeline, error)
}

// Config tunes a hub. Zero fields take the defaults of DefaultConfig.
type Config struct {
	MaxStreams   int           // open streams at most; more are refused
	ClientBuffer int           // frames queued per client; a client that falls further behind is dropped
	Coalesce     time.Duration // how often changes are read while a stream is open
	SummaryEvery time.Duration // how often the pipeline summary is sent
	// ResumeLimit is the most products a resume (or one read of changes)
	// sends as changes; past it the client gets a reset.
	ResumeLimit int
	// ResetTop is how many products per aggregate (likes, sales, views) a
	// reset carries.
	ResetTop int
}

// DefaultConfig is the configuration commerce-api runs with.
func DefaultConfig() Config {
	return Config{
		MaxStreams: 100, ClientBuffer: 64, Coalesce: 100 * time.Millisecond, SummaryEvery: time.Second,
		ResumeLimit: 1000, ResetTop: 50,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	def := func(v *int, dv int) {
		if *v <= 0 {
			*v = dv
		}
	}
	def(&c.MaxStreams, d.MaxStreams)
	def(&c.ClientBuffer, d.ClientBuffer)
	def(&c.ResumeLimit, d.ResumeLimit)
	def(&c.ResetTop, d.ResetTop)
	if c.Coalesce <= 0 {
		c.Coalesce = d.Coalesce
	}
	if c.SummaryEvery <= 0 {
		c.SummaryEvery = d.SummaryEvery
	}
	return c
}

// Hub is the process's one reader of changes and its subscribers.
//
// Lifecycle: Run reads nothing until the first stream opens; while any is
// open it reads changes every Coalesce and the summary every SummaryEvery;
// when the last closes it forgets its cursor and goes idle again. Subscribe
// and Unsubscribe are safe for concurrent use with each other and with Run.
type Hub struct {
	src      Source
	cluster  Cluster
	cfg      Config
	log      *slog.Logger
	activate chan struct{} // a stream opened (capacity 1: they coalesce)

	// readMu orders reads: a client's first read and the hub's reads
	// happen one at a time, so every frame a client gets comes from a
	// later snapshot than the one before it. It guards the fields below.
	readMu sync.Mutex
	// following says cursor is valid: a stream has been open since it
	// was read, so every change at or above it is still to be broadcast.
	following bool
	cursor    uint64 // the watermark the next read starts from
	// sent is the last state broadcast of the products whose rows a read
	// from cursor still returns (a long transaction holds the watermark
	// back); entries below the cursor are dropped, so it holds at most one
	// read's worth of products.
	sent map[int64]store.ProductChange
	// reset is the last reset frame, reusable while the cursor has not
	// moved since it was read; tooOld is a since known to reach more than
	// ResumeLimit changes, so any since at or below it does too.
	reset       []byte
	resetCursor uint64
	tooOld      uint64

	mu          sync.Mutex
	clients     map[*Subscription]bool // true once the first frame is queued
	closed      bool
	lastSummary []byte // the last summary frame, for new clients

	dropped prometheus.Counter
	frames  *prometheus.CounterVec
	reads   *prometheus.CounterVec
}

// New returns a hub; cluster may be nil (the summary then has no nodes,
// groups or dead letters).
func New(src Source, cluster Cluster, cfg Config, logger *slog.Logger) *Hub {
	return &Hub{
		src: src, cluster: cluster, cfg: cfg.withDefaults(), log: logger,
		activate: make(chan struct{}, 1),
		sent:     map[int64]store.ProductChange{}, clients: map[*Subscription]bool{},
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "commerce_api_stream_clients_dropped_total",
			Help: "Stream clients disconnected because they fell a whole buffer behind.",
		}),
		frames: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "commerce_api_stream_events_total",
			Help: "Events broadcast to the stream's clients, by event name (one per broadcast, not per client).",
		}, []string{"event"}),
		reads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "commerce_api_stream_reads_total",
			Help: "Database reads made by the stream hub, by what they read: changes, top (a reset's snapshot) or summary.",
		}, []string{"read"}),
	}
}

// Register adds the hub's metrics to reg.
func (h *Hub) Register(reg prometheus.Registerer) error {
	open := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "commerce_api_stream_clients",
		Help: "Open GET /api/v1/stream connections.",
	}, func() float64 { return float64(h.Open()) })
	limit := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "commerce_api_stream_clients_max",
		Help: "The most GET /api/v1/stream connections this server accepts (COMMERCE_API_STREAM_MAX_CLIENTS).",
	})
	limit.Set(float64(h.cfg.MaxStreams))
	for _, c := range []prometheus.Collector{open, limit, h.dropped, h.frames, h.reads} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("stream metrics: %w", err)
		}
	}
	return nil
}

// Subscription is one client's stream: Frames carries encoded SSE frames;
// Gone is closed when the hub drops the client (too slow) or stops.
type Subscription struct {
	frames chan []byte
	gone   chan struct{}
	once   sync.Once
}

// Frames returns the channel of encoded SSE frames, in order.
func (s *Subscription) Frames() <-chan []byte { return s.frames }

// Gone is closed when the hub stops serving this subscription.
func (s *Subscription) Gone() <-chan struct{} { return s.gone }

func (s *Subscription) end() { s.once.Do(func() { close(s.gone) }) }

// Subscribe opens a stream. With lastEventID 0 it starts with a ready event
// carrying the current watermark; otherwise with the products changed since
// lastEventID (a watermark this hub or another replica handed out), or a
// reset when that is more than ResumeLimit products or not a watermark this
// database handed out; then the live changes. The caller must Unsubscribe.
func (h *Hub) Subscribe(ctx context.Context, lastEventID uint64) (*Subscription, error) {
	s := &Subscription{frames: make(chan []byte, h.cfg.ClientBuffer), gone: make(chan struct{})}
	h.mu.Lock()
	switch {
	case h.closed:
		h.mu.Unlock()
		return nil, ErrClosed
	case len(h.clients) >= h.cfg.MaxStreams:
		open := len(h.clients) // read under the lock: Unsubscribe changes it
		h.mu.Unlock()
		return nil, fmt.Errorf("%w: %d are open, the most this server allows", ErrTooManyStreams, open)
	}
	// Take the slot now, so that concurrent subscribers cannot pass the
	// bound and the hub does not go idle meanwhile; broadcasts skip it
	// until its first frame is queued.
	h.clients[s] = false
	h.mu.Unlock()

	first, err := h.firstFrame(ctx, lastEventID)
	if err != nil {
		h.Unsubscribe(s)
		return nil, err
	}
	s.frames <- first // the buffer is empty: this cannot block
	h.mu.Lock()
	if _, ok := h.clients[s]; ok {
		h.clients[s] = true
		// The last summary at once, rather than up to SummaryEvery later.
		if h.lastSummary != nil && h.cfg.ClientBuffer > 1 {
			s.frames <- h.lastSummary
		}
	}
	h.mu.Unlock()
	select {
	case h.activate <- struct{}{}:
	default:
	}
	return s, nil
}

// firstFrame reads a new client's first frame, under readMu so that the
// hub's next broadcast comes from a later snapshot.
func (h *Hub) firstFrame(ctx context.Context, lastEventID uint64) ([]byte, error) {
	h.readMu.Lock()
	defer h.readMu.Unlock()
	if lastEventID == 0 {
		if !h.following {
			ch, err := h.readChanges(ctx, 0)
			if err != nil {
				return nil, err
			}
			h.follow(ch.Watermark)
		}
		return frame(ReadyEvent, h.cursor, map[string]uint64{"watermark": h.cursor}), nil
	}
	if lastEventID > h.tooOld {
		ch, err := h.readChanges(ctx, lastEventID)
		if err != nil {
			return nil, err
		}
		switch {
		case !ch.Complete:
			h.tooOld = max(h.tooOld, lastEventID)
		case lastEventID <= ch.Watermark:
			if !h.following {
				h.follow(ch.Watermark)
			}
			return frame(ChangesEvent, ch.Watermark, changesData{Products: nonNil(ch.Products)}), nil
		}
		// Watermarks only grow, so a lastEventID above this one was never
		// handed out by this database (a restored database, a made-up
		// header): the client's state is unknown, and it gets a reset.
	}
	return h.resetFrame(ctx)
}

// resetFrame returns a reset built from a snapshot at or after the cursor,
// shared by every client that asks before the cursor moves.
func (h *Hub) resetFrame(ctx context.Context) ([]byte, error) {
	if h.following && h.reset != nil && h.resetCursor == h.cursor {
		return h.reset, nil
	}
	h.reads.WithLabelValues("top").Inc()
	snap, err := h.src.TopProducts(ctx, h.cfg.ResetTop)
	if err != nil {
		return nil, err
	}
	if !h.following {
		h.follow(snap.Watermark)
	}
	h.reset = frame(ResetEvent, snap.Watermark, resetData{Top: h.cfg.ResetTop, Products: nonNil(snap.Products)})
	h.resetCursor = h.cursor
	return h.reset, nil
}

// follow starts following changes from watermark; readMu must be held.
func (h *Hub) follow(watermark uint64) {
	h.following, h.cursor = true, watermark
}

// readChanges reads the changes since since, counted; readMu must be held.
func (h *Hub) readChanges(ctx context.Context, since uint64) (store.Changes, error) {
	h.reads.WithLabelValues("changes").Inc()
	return h.src.ChangesSince(ctx, since, h.cfg.ResumeLimit)
}

// Unsubscribe ends s and frees its slot.
func (h *Hub) Unsubscribe(s *Subscription) {
	h.mu.Lock()
	delete(h.clients, s)
	h.mu.Unlock()
	s.end()
}

// Open returns how many streams are open.
func (h *Hub) Open() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.clients)
}

// Run reads and broadcasts while streams are open, until ctx ends; then it
// ends every stream.
func (h *Hub) Run(ctx context.Context) error {
	defer h.stop()
	poll := time.NewTicker(h.cfg.Coalesce)
	defer poll.Stop()
	summary := time.NewTicker(h.cfg.SummaryEvery)
	defer summary.Stop()
	for {
		if h.idle() {
			select {
			case <-ctx.Done():
				return nil
			case <-h.activate:
			}
			// The first client gets a summary at once, not a second later.
			h.broadcastSummary(ctx)
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-summary.C:
			h.broadcastSummary(ctx)
		case <-poll.C:
			h.flush(ctx)
		}
	}
}

// idle reports whether no stream is open, and if so forgets what the hub
// followed: the next stream starts from its own read.
func (h *Hub) idle() bool {
	h.readMu.Lock()
	defer h.readMu.Unlock()
	if h.Open() > 0 {
		return false
	}
	h.following, h.reset, h.tooOld = false, nil, 0
	clear(h.sent)
	h.mu.Lock()
	h.lastSummary = nil
	h.mu.Unlock()
	return true
}

func (h *Hub) stop() {
	h.mu.Lock()
	h.closed = true
	for s := range h.clients {
		delete(h.clients, s)
		s.end()
	}
	h.mu.Unlock()
}

type changesData struct {
	Products []store.ProductChange `json:"products"`
}

// resetData is a reset's payload: the client's whole new state.
type resetData struct {
	Top      int                   `json:"top"` // products per aggregate
	Products []store.ProductChange `json:"products"`
}

// flush reads what changed since the cursor and broadcasts it; more than
// ResumeLimit changes at once (a bulk update) are broadcast as a reset.
func (h *Hub) flush(ctx context.Context) {
	h.readMu.Lock()
	defer h.readMu.Unlock()
	if !h.following {
		// A reset that failed below: the clients still need one.
		h.broadcastReset(ctx)
		return
	}
	ch, err := h.readChanges(ctx, h.cursor)
	if err != nil {
		if ctx.Err() == nil {
			h.log.WarnContext(ctx, "stream: read product changes", logkey.Err, err)
		}
		return
	}
	if !ch.Complete {
		h.following = false // resetFrame follows from its own snapshot
		clear(h.sent)
		h.broadcastReset(ctx)
		return
	}
	var fresh []store.ProductChange
	for _, c := range ch.Products {
		if prev, ok := h.sent[c.ID]; ok && prev == c {
			continue
		}
		h.sent[c.ID] = c
		fresh = append(fresh, c)
	}
	h.cursor = max(h.cursor, ch.Watermark)
	for id, c := range h.sent {
		if c.XID < h.cursor {
			delete(h.sent, id) // no read from the cursor returns it again
		}
	}
	if len(fresh) > 0 {
		h.broadcast(ChangesEvent, frame(ChangesEvent, h.cursor, changesData{Products: fresh}))
	}
}

// broadcastReset sends every client a reset; readMu must be held and the
// hub not following. On failure the next flush tries again.
func (h *Hub) broadcastReset(ctx context.Context) {
	f, err := h.resetFrame(ctx)
	if err != nil {
		if ctx.Err() == nil {
			h.log.WarnContext(ctx, "stream: read the top products", logkey.Err, err)
		}
		return
	}
	h.broadcast(ResetEvent, f)
}

// broadcast queues f for every client, dropping those whose buffer is full:
// a slow client must not hold memory or the others back. A dropped client
// reconnects with its Last-Event-ID and loses nothing.
func (h *Hub) broadcast(event string, f []byte) {
	h.frames.WithLabelValues(event).Inc()
	h.mu.Lock()
	defer h.mu.Unlock()
	for s, live := range h.clients {
		if !live {
			continue
		}
		select {
		case s.frames <- f:
		default:
			delete(h.clients, s)
			s.end()
			h.dropped.Inc()
			h.log.Info("stream: dropped a client that fell behind", "buffer", h.cfg.ClientBuffer)
		}
	}
}

func (h *Hub) broadcastSummary(ctx context.Context) {
	h.reads.WithLabelValues("summary").Inc()
	sum, err := h.summary(ctx)
	if err != nil {
		if ctx.Err() == nil {
			h.log.WarnContext(ctx, "stream: read pipeline summary", logkey.Err, err)
		}
		return
	}
	f := frame(SummaryEvent, 0, sum)
	h.mu.Lock()
	h.lastSummary = f
	h.mu.Unlock()
	h.broadcast(SummaryEvent, f)
}

// frame encodes one SSE event; id 0 means none (the browser keeps the last).
func frame(event string, id uint64, data any) []byte {
	body, err := json.Marshal(data)
	if err != nil {
		// Our own structs always encode.
		panic(fmt.Sprintf("stream: encode %s: %v", event, err))
	}
	var b bytes.Buffer
	b.WriteString("event: " + event + "\n")
	if id != 0 {
		b.WriteString("id: " + strconv.FormatUint(id, 10) + "\n")
	}
	b.WriteString("data: ")
	b.Write(body) // JSON from encoding/json has no raw newline
	b.WriteString("\n\n")
	return b.Bytes()
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
