// Package stream fans committed product aggregate changes and a pipeline
// summary out to Server-Sent Events clients. One hub per process listens to
// PostgreSQL (LISTEN product_metrics_changed), reads what changed at most
// once per Coalesce, and hands every client the same pre-encoded frames;
// clients never query the database themselves.
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

	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/store"
)

// ChangesEvent and SummaryEvent are the SSE event names; ReadyEvent is the
// first event of a stream that does not resume.
const (
	ChangesEvent = "products"
	SummaryEvent = "summary"
	ReadyEvent   = "ready"
)

// ErrTooManyStreams refuses a stream past Config.MaxStreams.
var ErrTooManyStreams = errors.New("too many open streams")

// ErrClosed refuses a stream once the hub has stopped.
var ErrClosed = errors.New("the stream hub has stopped")

// Source is what the hub reads from the database.
type Source interface {
	ChangesSince(ctx context.Context, since uint64) (watermark uint64, changes []store.ProductChange, err error)
	PipelineStats(ctx context.Context) (store.Pipeline, error)
	Listen(ctx context.Context, channel string, notify func()) error
}

// Config tunes a hub. Zero fields take the defaults of DefaultConfig.
type Config struct {
	MaxStreams   int           // open streams at most; more are refused
	ClientBuffer int           // frames queued per client; a client that falls further behind is dropped
	Coalesce     time.Duration // least time between two reads of changes
	Poll         time.Duration // read changes this often even without a notification
	SummaryEvery time.Duration // how often the pipeline summary is sent
}

// DefaultConfig is the configuration commerce-api runs with.
func DefaultConfig() Config {
	return Config{MaxStreams: 100, ClientBuffer: 64, Coalesce: 100 * time.Millisecond, Poll: 5 * time.Second, SummaryEvery: time.Second}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.MaxStreams <= 0 {
		c.MaxStreams = d.MaxStreams
	}
	if c.ClientBuffer <= 0 {
		c.ClientBuffer = d.ClientBuffer
	}
	if c.Coalesce <= 0 {
		c.Coalesce = d.Coalesce
	}
	if c.Poll <= 0 {
		c.Poll = d.Poll
	}
	if c.SummaryEvery <= 0 {
		c.SummaryEvery = d.SummaryEvery
	}
	return c
}

// Hub is the process's one listener and its subscribers.
type Hub struct {
	src     Source
	cluster Cluster
	cfg     Config
	log     *slog.Logger
	wake    chan struct{} // a notification arrived (capacity 1: they coalesce)
	done    chan struct{} // closed when Run returns

	// readMu orders reads of changes: a resuming client's catch-up read and
	// the hub's reads happen one at a time, so every frame a client gets
	// comes from a later snapshot than the one before it.
	readMu sync.Mutex
	cursor uint64                        // the watermark the next read starts from
	sent   map[int64]store.ProductChange // last state broadcast per product, to skip repeats

	mu          sync.Mutex
	clients     map[*Subscription]bool // true once the first frame is queued
	closed      bool
	lastSummary []byte // the last summary frame, for new clients

	dropped prometheus.Counter
	frames  *prometheus.CounterVec
}

// New returns a hub; cluster may be nil (the summary then has no nodes,
// groups or dead letters).
func New(src Source, cluster Cluster, cfg Config, logger *slog.Logger) *Hub {
	return &Hub{
		src: src, cluster: cluster, cfg: cfg.withDefaults(), log: logger,
		wake: make(chan struct{}, 1), done: make(chan struct{}),
		sent: map[int64]store.ProductChange{}, clients: map[*Subscription]bool{},
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "commerce_api_stream_clients_dropped_total",
			Help: "Stream clients disconnected because they fell a whole buffer behind.",
		}),
		frames: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "commerce_api_stream_events_total",
			Help: "Events broadcast to the stream's clients, by event name (one per broadcast, not per client).",
		}, []string{"event"}),
	}
}

// Register adds the hub's metrics to reg.
func (h *Hub) Register(reg prometheus.Registerer) error {
	open := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "commerce_api_stream_clients",
		Help: "Open GET /api/v1/stream connections.",
	}, func() float64 { return float64(h.Open()) })
	for _, c := range []prometheus.Collector{open, h.dropped, h.frames} {
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
// carrying the current watermark; otherwise with every product changed since
// lastEventID (a watermark this hub or another replica handed out), then the
// live changes. The caller must Unsubscribe.
func (h *Hub) Subscribe(ctx context.Context, lastEventID uint64) (*Subscription, error) {
	s := &Subscription{frames: make(chan []byte, h.cfg.ClientBuffer), gone: make(chan struct{})}
	h.mu.Lock()
	switch {
	case h.closed:
		h.mu.Unlock()
		return nil, ErrClosed
	case len(h.clients) >= h.cfg.MaxStreams:
		h.mu.Unlock()
		return nil, fmt.Errorf("%w: %d are open, the most this server allows", ErrTooManyStreams, len(h.clients))
	}
	// Take the slot now, so that concurrent subscribers cannot pass the
	// bound; broadcasts skip it until its first frame is queued.
	h.clients[s] = false
	h.mu.Unlock()

	h.readMu.Lock()
	defer h.readMu.Unlock()
	var first []byte
	if lastEventID == 0 {
		first = frame(ReadyEvent, h.cursor, map[string]uint64{"watermark": h.cursor})
	} else {
		wm, changes, err := h.src.ChangesSince(ctx, lastEventID)
		if err == nil && lastEventID > wm {
			// Watermarks only grow, so this database never handed out
			// that id (a restored database, a made-up header): the
			// client's state is unknown, send every product.
			wm, changes, err = h.src.ChangesSince(ctx, 1)
		}
		if err != nil {
			h.Unsubscribe(s)
			return nil, err
		}
		first = frame(ChangesEvent, wm, changesData{Products: nonNil(changes)})
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
	return s, nil
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

// Done is closed once Run has returned and every stream has ended.
func (h *Hub) Done() <-chan struct{} { return h.done }

// Run listens and broadcasts until ctx ends, then ends every stream.
func (h *Hub) Run(ctx context.Context) error {
	defer close(h.done)
	defer h.stop()
	wm, _, err := h.src.ChangesSince(ctx, 0)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("stream: first watermark: %w", err)
	}
	h.readMu.Lock()
	h.cursor = wm
	h.readMu.Unlock()

	go h.listen(ctx)
	summary := time.NewTicker(h.cfg.SummaryEvery)
	defer summary.Stop()
	poll := time.NewTicker(h.cfg.Poll)
	defer poll.Stop()
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-summary.C:
			h.broadcastSummary(ctx)
		case <-poll.C:
			h.flush(ctx)
			last = time.Now()
		case <-h.wake:
			// Coalesce: at most one read per Coalesce, however many
			// notifications arrive; those arriving meanwhile wait in wake.
			if wait := h.cfg.Coalesce - time.Since(last); wait > 0 {
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(wait):
				}
			}
			h.flush(ctx)
			last = time.Now()
		}
	}
}

// listen keeps one LISTEN connection open, reconnecting with backoff.
func (h *Hub) listen(ctx context.Context) {
	backoff := 100 * time.Millisecond
	notify := func() {
		backoff = 100 * time.Millisecond
		select {
		case h.wake <- struct{}{}:
		default:
		}
	}
	for ctx.Err() == nil {
		err := h.src.Listen(ctx, store.ChangesChannel, notify)
		if ctx.Err() != nil {
			return
		}
		h.log.WarnContext(ctx, "stream: listening for product changes failed; retrying", "error", err, "backoff", backoff)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
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

// flush reads what changed since the cursor and broadcasts it.
func (h *Hub) flush(ctx context.Context) {
	h.readMu.Lock()
	defer h.readMu.Unlock()
	wm, changes, err := h.src.ChangesSince(ctx, h.cursor)
	if err != nil {
		if ctx.Err() == nil {
			h.log.WarnContext(ctx, "stream: read product changes", "error", err)
		}
		return
	}
	fresh := changes[:0]
	for _, c := range changes {
		// A transaction open for long holds the watermark back, so the
		// same rows come back read after read; send each state once.
		if prev, ok := h.sent[c.ID]; ok && prev == c {
			continue
		}
		h.sent[c.ID] = c
		fresh = append(fresh, c)
	}
	h.cursor = max(h.cursor, wm)
	if len(fresh) > 0 {
		h.broadcast(ChangesEvent, frame(ChangesEvent, h.cursor, changesData{Products: fresh}))
	}
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
	sum, err := h.summary(ctx)
	if err != nil {
		if ctx.Err() == nil {
			h.log.WarnContext(ctx, "stream: read pipeline summary", "error", err)
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
