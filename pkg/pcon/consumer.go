package pcon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/loopers/commerce-pipeline/pkg/pcon/brokerwatch"
	"github.com/loopers/commerce-pipeline/pkg/pcon/internal/core"
	"github.com/loopers/commerce-pipeline/pkg/pcon/internal/engine"
)

// HeaderPrefix begins the name of every header pcon writes, so that a tool
// handling dead-lettered records (a re-drive, say) can drop pcon's headers
// without listing them.
const HeaderPrefix = "pcon-"

// Dead-letter headers added to a record published to the dead-letter topic,
// next to the record's own headers.
const (
	HeaderOriginalTopic     = HeaderPrefix + "original-topic"
	HeaderOriginalPartition = HeaderPrefix + "original-partition"
	HeaderOriginalOffset    = HeaderPrefix + "original-offset"
	HeaderOriginalTimestamp = HeaderPrefix + "original-timestamp" // RFC 3339, nanoseconds
	HeaderConsumerGroup     = HeaderPrefix + "consumer-group"
	HeaderError             = HeaderPrefix + "error"
	HeaderAttempts          = HeaderPrefix + "attempts"
	HeaderDeadLetteredAt    = HeaderPrefix + "dead-lettered-at" // RFC 3339, nanoseconds
	// HeaderReason says why the record was dead-lettered: ReasonFailed,
	// ReasonPermanent or ReasonKeyQueueFull.
	HeaderReason = HeaderPrefix + "reason"
)

// Values of HeaderReason.
const (
	ReasonFailed       = "failed"         // every attempt failed
	ReasonPermanent    = "permanent"      // the handler's error was wrapped with Permanent
	ReasonKeyQueueFull = "key-queue-full" // refused on arrival by the DeadLetter overflow policy
)

// ErrHandlerTimeout is the error of records whose handler call returned
// after Config.HandlerTimeout. It wraps context.DeadlineExceeded.
var ErrHandlerTimeout = engine.ErrTimeout

// ErrKeyQueueFull is the error recorded for a record refused because its
// key's queue was full, under the DeadLetter overflow policy.
var ErrKeyQueueFull = core.ErrKeyQueueFull

// ErrCommitRefused is what Config.OnCommit's done function is given
// (wrapped, naming the partitions) for a commit the broker refused: its
// metadata was longer than the broker's offset.metadata.max.bytes. pcon
// commits the offsets again with less metadata.
var ErrCommitRefused = errors.New("pcon: commit refused: metadata too large")

// ErrAlreadyRunning is returned by Run on a Consumer that is running or ran.
var ErrAlreadyRunning = errors.New("pcon: Run called twice")

// ErrClosed is returned by Run after Close.
var ErrClosed = errors.New("pcon: consumer closed")

// Consumer consumes topics as a member of a consumer group and runs a
// handler on their records in parallel. See the package documentation for
// its guarantees and goroutine contract.
type Consumer struct {
	cfg     Config
	handler Handler
	core    *core.Core
	engine  engine.Engine
	pause   pauser
	log     *slog.Logger
	// rawKey: the key is the record key (the default resolver), which the
	// control plane can take as bytes.
	rawKey bool

	producer atomic.Pointer[sarama.SyncProducer]
	// refusedMu guards refused: partitions whose commit metadata the
	// broker refused as too large since the committer last looked.
	refusedMu sync.Mutex
	refused   map[engine.TP]bool
	// metadataWarned: the metadata limit came down once already; later
	// steps are logged at Info.
	metadataWarned atomic.Bool

	mu        sync.Mutex
	started   bool
	closed    bool
	cancelRun context.CancelFunc // set while Run runs; Close calls it
	done      chan struct{}      // closed when Run has released everything
}

// New validates cfg and returns a Consumer that will run h. It does not
// connect; Run does.
func New(cfg Config, h Handler) (*Consumer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if h == nil || isNilHandler(h) {
		return nil, &ConfigError{Field: "handler", Reason: "must not be nil"}
	}
	rawKey := cfg.KeyResolver == nil
	cfg = cfg.withDefaults()
	c := &Consumer{
		cfg: cfg, handler: h, log: cfg.Logger, rawKey: rawKey,
		done: make(chan struct{}),
	}
	ordering := map[Ordering]core.Ordering{KeyOrder: core.ByKey, PartitionOrder: core.ByPartition, Unordered: core.None}
	cc := core.Config{
		MaxInFlight:      cfg.MaxInFlight,
		Ordering:         ordering[cfg.Ordering],
		OrderEmptyKeys:   cfg.OrderEmptyKeys,
		MaxAttempts:      cfg.MaxAttempts,
		Backoff:          cfg.backoff,
		KeyQueueCapacity: cfg.KeyQueueCapacity,
		Overflow:         core.Overflow(cfg.KeyOverflow),
	}
	if _, ok := h.(BatchHandler); ok {
		// A batch may hold a key's run of records; a run never exceeds
		// one batch. The batch engine bounds its calls itself
		// (Batch.Concurrency) and batches what it is handed, so every
		// record held may be handed to it.
		cc.MaxRun, cc.MaxRunBytes = min(cfg.Batch.MaxRun, cfg.Batch.MaxRecords), cfg.Batch.MaxBytes
	} else {
		// A record handed to the per-record engine gets a handler call at
		// once: dispatching only up to MaxConcurrency is what bounds the
		// calls running, while the records buffered behind them count
		// against MaxInFlight only.
		cc.MaxRunning = cfg.MaxConcurrency
	}
	c.core = core.New(cc, core.Deps{
		Submit:     func(ts ...engine.Task) error { return c.engine.Submit(ts...) },
		SetPaused:  c.pause.set,
		DeadLetter: c.deadLetter,
		Permanent:  isPermanent,
		Logger:     cfg.Logger,
	})
	c.engine = c.newEngine(h)
	return c, nil
}

func isNilHandler(h Handler) bool {
	switch f := h.(type) {
	case RecordHandler:
		return f == nil
	case BatchHandler:
		return f == nil
	}
	return true
}

// newEngine is the only place that knows which engine a handler runs on.
func (c *Consumer) newEngine(h Handler) engine.Engine {
	cfg, sink := c.cfg, c.core.Complete
	switch f := h.(type) {
	case BatchHandler:
		return engine.NewBatch(c.batchRunner(f), sink, engine.BatchOptions{
			MaxRecords:  cfg.Batch.MaxRecords,
			MaxBytes:    cfg.Batch.MaxBytes,
			MaxWait:     cfg.Batch.MaxWait,
			Concurrency: cfg.Batch.Concurrency,
			Timeout:     cfg.HandlerTimeout,
		})
	default:
		return engine.NewPerRecord(c.recordRunner(h.(RecordHandler)), sink, cfg.MaxConcurrency, cfg.HandlerTimeout)
	}
}

// message is the record behind t.
func message(t engine.Task) *fetched { return core.Payload(t).(*fetched) }

// The runners build each call's Records afresh (newRecord, newRecords): a
// handler may keep them.
func (c *Consumer) recordRunner(h RecordHandler) engine.Runner {
	return func(ctx context.Context, ts []engine.Task) []error {
		if err := h(ctx, newRecord(message(ts[0]))); err != nil {
			return []error{err}
		}
		return nil
	}
}

func (c *Consumer) batchRunner(h BatchHandler) engine.Runner {
	return func(ctx context.Context, ts []engine.Task) []error {
		fs := make([]*fetched, len(ts))
		for i, t := range ts {
			fs[i] = message(t)
		}
		err := h(ctx, newRecords(fs))
		if err == nil {
			return nil
		}
		errs := make([]error, len(ts))
		var be *BatchError
		if !errors.As(err, &be) {
			if len(ts) > 1 && isPermanent(err) {
				// Nothing says which record made the batch fail: try
				// each alone (retries run alone) before giving up on any.
				err = &unattributed{err}
			}
			for i := range errs {
				errs[i] = err
			}
			return errs
		}
		for i, e := range be.Failed {
			if i >= 0 && i < len(errs) {
				errs[i] = e
			}
		}
		return errs
	}
}

// unattributed is a batch's Permanent error that names no record: its
// records are retried, alone, rather than all dead-lettered. It keeps the
// message but hides the Permanent mark.
type unattributed struct{ err error }

func (e *unattributed) Error() string { return "batch failed: " + e.err.Error() }

// Run joins the group and consumes until ctx ends, Close is called, or a
// fatal error occurs, which it returns. On the way out every partition is
// revoked as in a rebalance: dispatching stops, records in flight get
// Config.RevokeGrace to finish, progress is committed, and every goroutine
// the Consumer started has exited when Run returns. Run returns nil after a
// clean shutdown. A Consumer runs once.
func (c *Consumer) Run(ctx context.Context) error {
	c.mu.Lock()
	switch {
	case c.closed:
		c.mu.Unlock()
		return ErrClosed
	case c.started:
		c.mu.Unlock()
		return ErrAlreadyRunning
	}
	c.started = true
	ctx, cancel := context.WithCancel(ctx)
	c.cancelRun = cancel
	c.mu.Unlock()
	defer close(c.done)
	defer cancel()

	// A client of this run's own, its connections watched: a request to a
	// broker that stopped answering is given up after SilentBroker.
	sc := *c.cfg.Sarama
	watch := brokerwatch.New(&sc, brokerwatch.Options{Timeout: c.cfg.SilentBroker, Logger: c.log})
	watchCtx, stopWatch := context.WithCancel(ctx)
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		watch.Run(watchCtx)
	}()
	defer func() {
		stopWatch()
		<-watchDone
	}()
	client, err := sarama.NewClient(c.cfg.Brokers, &sc)
	if err != nil {
		c.shutdownEngine()
		return fmt.Errorf("pcon: connect: %w", err)
	}
	defer closeLogged(c.log, "client", client.Close)
	producer, err := sarama.NewSyncProducerFromClient(client)
	if err != nil {
		c.shutdownEngine()
		return fmt.Errorf("pcon: dead-letter producer: %w", err)
	}
	c.producer.Store(&producer)
	defer closeLogged(c.log, "producer", producer.Close)
	group, err := sarama.NewConsumerGroupFromClient(c.cfg.Group, client)
	if err != nil {
		c.shutdownEngine()
		return fmt.Errorf("pcon: consumer group: %w", err)
	}
	errsDone := make(chan struct{})
	go func() {
		defer close(errsDone)
		for err := range group.Errors() {
			var ce *sarama.ConsumerError
			if errors.Is(err, sarama.ErrOffsetMetadataTooLarge) && errors.As(err, &ce) {
				c.noteRefusal(engine.TP{Topic: ce.Topic, Partition: ce.Partition})
				continue
			}
			c.log.Warn("pcon: consumer group error", "group", c.cfg.Group, core.ErrKey, err)
		}
	}()
	defer func() {
		c.shutdownEngine()
		closeLogged(c.log, "consumer group", group.Close)
		<-errsDone
	}()

	h := &groupHandler{c: c, client: client}
	for ctx.Err() == nil {
		err := group.Consume(ctx, c.cfg.Topics, h)
		switch {
		case err == nil || ctx.Err() != nil:
		case errors.Is(err, sarama.ErrClosedConsumerGroup):
			return fmt.Errorf("pcon: consume: %w", err)
		default:
			c.log.Warn("pcon: consume failed, rejoining", "group", c.cfg.Group, core.ErrKey, err)
			select {
			case <-ctx.Done():
			case <-time.After(c.cfg.Sarama.Consumer.Group.Rebalance.Retry.Backoff):
			}
		}
	}
	return nil
}

// noteRefusal takes note of a broker's OFFSET_METADATA_TOO_LARGE answer to
// a commit of tp: the broker's offset.metadata.max.bytes is below what pcon
// wrote. sarama reports it and keeps the commit pending, which the broker
// would refuse again as long as the metadata stays as long: the committed
// offset would stop moving. The committer confirms its last commit of tp
// and, if it is not there, commits it again with less metadata
// (groupHandler.confirm). The answer does not say which commit it refused,
// so it alone does not change the limit.
func (c *Consumer) noteRefusal(tp engine.TP) {
	c.log.Debug("pcon: commit metadata refused as too large", "group", c.cfg.Group, "topic", tp.Topic, "partition", tp.Partition)
	c.refusedMu.Lock()
	defer c.refusedMu.Unlock()
	if c.refused == nil {
		c.refused = make(map[engine.TP]bool)
	}
	c.refused[tp] = true
}

// refusedAmong reports, for Config.OnCommit, the partitions of offsets
// whose refusal noteRefusal has noted and the committer not yet handled:
// an error wrapping ErrCommitRefused that names them, or nil.
func (c *Consumer) refusedAmong(offsets []PartitionEvent) error {
	c.refusedMu.Lock()
	defer c.refusedMu.Unlock()
	var names []string
	for _, o := range offsets {
		if c.refused[engine.TP{Topic: o.Topic, Partition: o.Partition}] {
			names = append(names, o.Topic+"/"+strconv.Itoa(int(o.Partition)))
		}
	}
	if len(names) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrCommitRefused, strings.Join(names, ", "))
}

// takeRefusals returns the partitions noted by noteRefusal since the last
// call.
func (c *Consumer) takeRefusals() map[engine.TP]bool {
	c.refusedMu.Lock()
	defer c.refusedMu.Unlock()
	r := c.refused
	c.refused = nil
	return r
}

// msgMetadataRefused is logged at Warn the first time a broker refuses
// commit metadata, and at Info each time the limit comes down further.
const msgMetadataRefused = "pcon: commit metadata refused as too large; committing less of it"

// metadataLimitLowered logs that the metadata limit came down to limit
// after tp's metadata of refused bytes was refused.
func (c *Consumer) metadataLimitLowered(tp engine.TP, refused, limit int) {
	level := slog.LevelInfo
	if c.metadataWarned.CompareAndSwap(false, true) {
		level = slog.LevelWarn
	}
	c.log.Log(context.Background(), level, msgMetadataRefused,
		"group", c.cfg.Group, "topic", tp.Topic, "partition", tp.Partition, "refusedBytes", refused, "limit", limit,
		"hint", "the broker's offset.metadata.max.bytes is below pcon's limit: a new owner of a partition handles again the completed records the shorter metadata leaves out")
}

// shutdownEngine stops dispatching and dead-letter retries, then gives
// running handlers what is left of the grace period before cancelling
// their context.
func (c *Consumer) shutdownEngine() {
	c.core.Close()
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.RevokeGrace)
	defer cancel()
	if err := c.engine.Close(ctx); err != nil {
		c.log.Warn("pcon: handlers still running at shutdown were cancelled", core.ErrKey, err)
	}
}

func closeLogged(log *slog.Logger, what string, close func() error) {
	if err := close(); err != nil {
		log.Warn("pcon: close "+what, core.ErrKey, err)
	}
}

// Close stops the Consumer and waits for Run to return. It is idempotent
// and safe to call from any goroutine. It takes at most twice
// Config.RevokeGrace (once for the partitions' records in flight, once more
// for handlers that outlived it, whose context is then cancelled) plus the
// time to commit, leave the group, and finish a dead-letter publish under
// way. Close on a Consumer that never ran releases it at once.
func (c *Consumer) Close() {
	c.mu.Lock()
	first := !c.closed
	c.closed = true
	started := c.started
	if c.cancelRun != nil {
		c.cancelRun()
	}
	c.mu.Unlock()
	if started {
		<-c.done
		return
	}
	if first {
		c.shutdownEngine()
	}
}

func (c *Consumer) deadLetter(_ context.Context, payload any, cause error, attempts int) error {
	p := c.producer.Load()
	if p == nil {
		return errors.New("pcon: dead-letter producer not ready")
	}
	r := payload.(*fetched).msg
	msg := &sarama.ProducerMessage{
		Topic:   r.Topic + c.cfg.DLTSuffix,
		Headers: make([]sarama.RecordHeader, 0, len(r.Headers)+8),
	}
	if r.Key != nil {
		msg.Key = sarama.ByteEncoder(r.Key)
	}
	if r.Value != nil {
		msg.Value = sarama.ByteEncoder(r.Value)
	}
	for _, h := range r.Headers {
		msg.Headers = append(msg.Headers, sarama.RecordHeader{Key: h.Key, Value: h.Value})
	}
	add := func(k, v string) {
		msg.Headers = append(msg.Headers, sarama.RecordHeader{Key: []byte(k), Value: []byte(v)})
	}
	add(HeaderOriginalTopic, r.Topic)
	add(HeaderOriginalPartition, strconv.Itoa(int(r.Partition)))
	add(HeaderOriginalOffset, strconv.FormatInt(r.Offset, 10))
	add(HeaderOriginalTimestamp, r.Timestamp.UTC().Format(time.RFC3339Nano))
	add(HeaderConsumerGroup, c.cfg.Group)
	add(HeaderError, cause.Error())
	add(HeaderAttempts, strconv.Itoa(attempts))
	add(HeaderReason, deadLetterReason(cause))
	add(HeaderDeadLetteredAt, time.Now().UTC().Format(time.RFC3339Nano))
	var done func(error)
	if c.cfg.OnDeadLetter != nil {
		var rec Record
		fill(&rec, payload.(*fetched), nil)
		done = c.cfg.OnDeadLetter(&rec, msg.Topic)
	}
	_, _, err := (*p).SendMessage(msg)
	if done != nil {
		done(err)
	}
	if err != nil {
		return fmt.Errorf("pcon: publish to %s: %w", msg.Topic, err)
	}
	c.log.Warn("pcon: record dead-lettered", "topic", r.Topic, "partition", r.Partition,
		"offset", r.Offset, "attempts", attempts, core.ErrKey, cause)
	return nil
}

func deadLetterReason(cause error) string {
	switch {
	case errors.Is(cause, ErrKeyQueueFull):
		return ReasonKeyQueueFull
	case isPermanent(cause):
		return ReasonPermanent
	}
	return ReasonFailed
}

// pauser applies backpressure by stopping the partition feeders: they stop
// taking records from sarama, whose bounded buffers then hold back further
// fetches. sarama's own Pause API is not used: a consumer with every
// partition paused sleeps 100 ms before it notices a resume, which at high
// rates leaves the handlers idle on every resume.
type pauser struct {
	mu      sync.Mutex
	resumed chan struct{} // nil while not paused; closed on resume
}

func (p *pauser) set(paused bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case paused && p.resumed == nil:
		p.resumed = make(chan struct{})
	case !paused && p.resumed != nil:
		close(p.resumed)
		p.resumed = nil
	}
}

// wait returns a channel that is closed when fetching may continue, or nil
// if it may continue now.
func (p *pauser) wait() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.resumed == nil {
		return nil
	}
	return p.resumed
}

func (p *pauser) isPaused() bool { return p.wait() != nil }
