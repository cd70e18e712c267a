package pcon

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"github.com/loopers/commerce-pipeline/pkg/pcon/brokerwatch"
)

// Ordering says which records of a partition may run at the same time.
type Ordering int

const (
	// KeyOrder runs one record per key at a time, keys in parallel. The key
	// comes from Config.KeyResolver.
	KeyOrder Ordering = iota
	// PartitionOrder runs one record per partition at a time.
	PartitionOrder
	// Unordered runs records as capacity allows.
	Unordered
)

// String returns the ordering's name.
func (o Ordering) String() string {
	switch o {
	case KeyOrder:
		return "key"
	case PartitionOrder:
		return "partition"
	case Unordered:
		return "unordered"
	}
	return fmt.Sprintf("Ordering(%d)", int(o))
}

// Config configures a Consumer. Zero values take the documented defaults.
type Config struct {
	// Brokers to bootstrap from. Required.
	Brokers []string
	// Group is the consumer group. Required.
	Group string
	// Topics to consume. Required.
	Topics []string
	// Sarama is the base client configuration (TLS, SASL, version, session
	// and rebalance timeouts, initial offset, ...). nil means
	// sarama.NewConfig(). pcon copies it and overrides what offset safety
	// depends on: Consumer.Offsets.AutoCommit.Enable is turned off because
	// pcon commits itself, only offsets below which every record is
	// complete; Consumer.Return.Errors and Producer.Return.Successes are
	// turned on.
	Sarama *sarama.Config

	// Ordering defaults to KeyOrder.
	Ordering Ordering
	// KeyResolver defaults to RecordKey.
	KeyResolver KeyResolver
	// OrderEmptyKeys, in KeyOrder, orders records without a key as if they
	// shared one key, instead of running them unordered.
	OrderEmptyKeys bool
	// MaxConcurrency bounds the handler calls of a RecordHandler running at
	// once across all partitions: the concurrency a handler that waits on
	// I/O needs, thousands for handlers that wait milliseconds. Handlers
	// that only compute run on GOMAXPROCS workers whatever the bound (see
	// RecordHandler). A BatchHandler's calls are bounded by
	// Batch.Concurrency instead. Default MaxInFlight, which must not be
	// below it.
	MaxConcurrency int
	// MaxInFlight bounds the records held in memory: those being handled,
	// those buffered behind them, and those waiting for a retry. Fetching
	// pauses when they reach it and resumes at 70 %. It must leave room
	// for a buffer beyond MaxConcurrency: under KeyOrder a freed handler
	// slot is filled only if a record of an idle key is buffered, which
	// takes a few buffered records per running handler. Too small a buffer
	// (a hundred) also pauses fetching so often that the workers of
	// compute-only handlers wait. Default the larger of 1000 and four times
	// MaxConcurrency.
	MaxInFlight int

	// MaxAttempts is how many times a failing record is tried before it is
	// dead-lettered. Default 3.
	MaxAttempts int
	// Backoff is the wait after the first failure. Default 1s.
	Backoff time.Duration
	// BackoffMultiplier grows the wait after each further failure; 1 (the
	// default) keeps it constant, 2 doubles it.
	BackoffMultiplier float64
	// MaxBackoff caps the wait. Default 30s.
	MaxBackoff time.Duration
	// DLTSuffix is appended to a record's topic to name its dead-letter
	// topic. Default ".DLT".
	DLTSuffix string

	// CommitInterval is how often progress is committed. Default 1s.
	CommitInterval time.Duration
	// RevokeGrace is how long a revoked partition (and, on shutdown, every
	// partition) waits for its records in flight before committing and
	// letting go. It must be shorter than the group's rebalance timeout.
	// Default 5s.
	RevokeGrace time.Duration
	// SilentBroker is how long a broker may leave a probe unanswered before
	// pcon gives up every request waiting on it (brokerwatch): a fetch,
	// heartbeat or commit sent to a frozen broker then fails within about
	// this long plus a second, and the consumer follows the partitions'
	// and the coordinator's new leaders once Kafka fences the broker,
	// instead of waiting out Sarama's Net.ReadTimeout, which a group needs
	// longer than its rebalance timeout for JoinGroup. Default 3s.
	SilentBroker time.Duration

	// KeyQueueCapacity bounds the records one key (one partition, in
	// PartitionOrder) may hold queued behind its running records, so that a
	// flooded key cannot take the whole MaxInFlight budget from the others.
	// Default MaxInFlight/4; at most MaxInFlight.
	KeyQueueCapacity int
	// KeyOverflow says what happens to a record that finds its key's queue
	// full. Default Block.
	KeyOverflow Overflow

	// HandlerTimeout, when set, gives every handler call a context with
	// this deadline. A call that returns after it fails all its records
	// with ErrHandlerTimeout, whatever it returned; they are retried and
	// then dead-lettered like any failure. pcon never abandons a handler
	// that has not returned (its key stays busy), so handlers must honour
	// their context. Default 0: no deadline.
	HandlerTimeout time.Duration

	// Batch tunes the micro-batch engine used with a BatchHandler.
	Batch BatchConfig

	// OnAssigned is called when this Consumer starts owning partitions, and
	// OnRevoked when it stops owning them (rebalance or shutdown), after
	// the final commit. Each call describes one partition of one topic,
	// from that partition's own goroutine: calls for different partitions
	// may run concurrently, calls for one partition are ordered. They are
	// called outside pcon's locks but hold up the partition's start or
	// release, so they must return quickly. Either may be nil.
	OnAssigned func(group string, ps []PartitionEvent)
	OnRevoked  func(group string, ps []PartitionEvent)

	// OnDeadLetter, when set, is called before a record is published to its
	// dead-letter topic dlt, from the goroutine that publishes it; the
	// function it returns, when not nil, is called with the publish's
	// outcome. Like a handler it must not keep the Record. It is how a
	// tracing package (pcontrace) adds a span per dead-letter publish
	// without pcon depending on one. The record is published with its own
	// headers whatever the hook does.
	OnDeadLetter func(r *Record, dlt string) (done func(error))

	// OnCommit, when set, is called before pcon sends the group
	// coordinator a commit (the periodic one every CommitInterval, the
	// last one when partitions are released, one again with shorter
	// metadata after the broker refused it), from the goroutine that
	// commits, with the group and the offsets marked since the previous
	// commit, in topic and partition order (each PartitionEvent's Epoch and
	// Offset: the offset committed, the next to read); a commit that
	// changes nothing sends no request and calls nothing. The function it
	// returns, when not nil, is called once the request has returned, with
	// an error wrapping ErrCommitRefused when pcon has learned by then that
	// the broker refused some of it (a refusal reported later shows as the
	// commit made again). The commit waits for both calls: they must
	// return quickly. It is how a tracing package (pcontrace) adds a span
	// per commit without pcon depending on one.
	OnCommit func(group string, offsets []PartitionEvent) (done func(error))

	// InstanceID makes this Consumer a static member of the group (KIP-345):
	// a member restarted with the same InstanceID within the session
	// timeout gets its partitions back without a rebalance of the others.
	// Each running member needs its own; a stable name per replica (a
	// Kubernetes StatefulSet pod name) is what it is for. Empty means a
	// dynamic member.
	InstanceID string

	// Logger receives structured logs. nil discards them.
	Logger *slog.Logger
}

// BatchConfig tunes the micro-batch engine.
type BatchConfig struct {
	// MaxRecords per batch. Default 100.
	MaxRecords int
	// MaxBytes of keys and values per batch; a larger single record still
	// runs, alone. Default 1 MiB.
	MaxBytes int
	// MaxWait is an optional linger: how long a batch that is not full may
	// wait for more records while a batch slot is free. With the default,
	// 0, a batch starts as soon as a slot is free, with whatever records
	// are ready; while all slots are busy records accumulate, so batches
	// grow with the load and an idle consumer adds no latency.
	MaxWait time.Duration
	// Concurrency is how many batches run at once. Default 4.
	Concurrency int
	// MaxRun is how many records of one key a batch may hold (in
	// PartitionOrder, of one partition). Default MaxRecords; 1 gives one
	// record per key per batch, for a handler that cannot take a key's
	// records together.
	MaxRun int
}

// Overflow says what happens to a record that finds its key's queue full
// (Config.KeyQueueCapacity).
type Overflow int

const (
	// Block stops taking records of the key's partition until the key's
	// queue has drained to 70 % of its capacity; other partitions go on.
	Block Overflow = iota
	// DropOldest completes the key's oldest queued record without running
	// it (counted in PartitionStats.Dropped, logged), and queues the new one.
	DropOldest
	// DeadLetter sends the arriving record to the dead-letter topic, with
	// HeaderReason "key-queue-full".
	DeadLetter
)

// String returns the policy's name.
func (o Overflow) String() string {
	switch o {
	case Block:
		return "block"
	case DropOldest:
		return "drop-oldest"
	case DeadLetter:
		return "dead-letter"
	}
	return fmt.Sprintf("Overflow(%d)", int(o))
}

// PartitionEvent describes one partition in an assignment hook.
type PartitionEvent struct {
	Topic     string
	Partition int32
	// Epoch is the assignment epoch pcon gave the partition; it grows with
	// each assignment of the partition to this Consumer.
	Epoch uint64
	// Offset is, in OnAssigned, the committed offset the assignment starts
	// at (the reset offset if none was committed); in OnRevoked, the offset
	// committed at release.
	Offset int64
	// Completed counts, in OnRevoked, the records completed during the
	// assignment.
	Completed uint64
}

// ConfigError reports an invalid Config field.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string {
	return "pcon: invalid config: " + e.Field + ": " + e.Reason
}

// Validate reports every invalid field of c, joined; each is a *ConfigError.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)})
	}
	if len(c.Brokers) == 0 {
		bad("Brokers", "must not be empty")
	}
	for i, b := range c.Brokers {
		if strings.TrimSpace(b) == "" {
			bad(fmt.Sprintf("Brokers[%d]", i), "must not be blank")
		}
	}
	if strings.TrimSpace(c.Group) == "" {
		bad("Group", "must not be empty")
	}
	if len(c.Topics) == 0 {
		bad("Topics", "must not be empty")
	}
	for i, t := range c.Topics {
		if strings.TrimSpace(t) == "" {
			bad(fmt.Sprintf("Topics[%d]", i), "must not be blank")
		}
	}
	if c.Ordering < KeyOrder || c.Ordering > Unordered {
		bad("Ordering", "unknown ordering %d", int(c.Ordering))
	}
	if c.KeyOverflow < Block || c.KeyOverflow > DeadLetter {
		bad("KeyOverflow", "unknown policy %d", int(c.KeyOverflow))
	}
	nonNegative := map[string]int64{
		"MaxInFlight":       int64(c.MaxInFlight),
		"MaxConcurrency":    int64(c.MaxConcurrency),
		"KeyQueueCapacity":  int64(c.KeyQueueCapacity),
		"HandlerTimeout":    int64(c.HandlerTimeout),
		"MaxAttempts":       int64(c.MaxAttempts),
		"Backoff":           int64(c.Backoff),
		"MaxBackoff":        int64(c.MaxBackoff),
		"CommitInterval":    int64(c.CommitInterval),
		"RevokeGrace":       int64(c.RevokeGrace),
		"SilentBroker":      int64(c.SilentBroker),
		"Batch.MaxRecords":  int64(c.Batch.MaxRecords),
		"Batch.MaxBytes":    int64(c.Batch.MaxBytes),
		"Batch.MaxWait":     int64(c.Batch.MaxWait),
		"Batch.Concurrency": int64(c.Batch.Concurrency),
		"Batch.MaxRun":      int64(c.Batch.MaxRun),
	}
	// Sorted so that the joined error reads the same every time.
	for _, f := range slices.Sorted(maps.Keys(nonNegative)) {
		if nonNegative[f] < 0 {
			bad(f, "must not be negative")
		}
	}
	if c.BackoffMultiplier != 0 && c.BackoffMultiplier < 1 {
		bad("BackoffMultiplier", "must be at least 1, got %v", c.BackoffMultiplier)
	}
	d := c.withDefaults()
	if c.Sarama != nil || c.InstanceID != "" {
		if err := d.Sarama.Validate(); err != nil {
			field := "Sarama"
			if strings.Contains(strings.ToLower(err.Error()), "instance") {
				field = "InstanceID"
			}
			bad(field, "%v", err)
		}
	}
	if d.MaxInFlight > 0 && d.MaxConcurrency > d.MaxInFlight {
		bad("MaxConcurrency", "%d must not exceed MaxInFlight (%d)", d.MaxConcurrency, d.MaxInFlight)
	}
	if d.MaxInFlight > 0 && d.KeyQueueCapacity > d.MaxInFlight {
		bad("KeyQueueCapacity", "%d must not exceed MaxInFlight (%d)", d.KeyQueueCapacity, d.MaxInFlight)
	}
	if rt := d.Sarama.Consumer.Group.Rebalance.Timeout; d.RevokeGrace >= rt {
		bad("RevokeGrace", "%v must be shorter than Sarama.Consumer.Group.Rebalance.Timeout (%v)", d.RevokeGrace, rt)
	}
	return errors.Join(errs...)
}

// withDefaults returns c with zero values replaced by defaults and its own
// copy of the sarama configuration.
func (c Config) withDefaults() Config {
	var sc sarama.Config
	if c.Sarama != nil {
		sc = *c.Sarama
	} else {
		sc = *sarama.NewConfig()
	}
	sc.Consumer.Offsets.AutoCommit.Enable = false
	sc.Consumer.Return.Errors = true
	sc.Producer.Return.Successes = true
	sc.Producer.Return.Errors = true
	if c.InstanceID != "" {
		sc.Consumer.Group.InstanceId = c.InstanceID
	}
	c.Sarama = &sc
	if c.KeyResolver == nil {
		c.KeyResolver = RecordKey
	}
	// The buffer scales with the concurrency asked for: see MaxInFlight.
	setDefault(&c.MaxInFlight, max(1000, 4*c.MaxConcurrency))
	setDefault(&c.MaxConcurrency, c.MaxInFlight)
	setDefault(&c.KeyQueueCapacity, max(1, c.MaxInFlight/4))
	setDefault(&c.MaxAttempts, 3)
	setDefault(&c.Backoff, time.Second)
	setDefault(&c.BackoffMultiplier, 1)
	setDefault(&c.MaxBackoff, 30*time.Second)
	setDefault(&c.DLTSuffix, ".DLT")
	setDefault(&c.CommitInterval, time.Second)
	setDefault(&c.RevokeGrace, 5*time.Second)
	setDefault(&c.SilentBroker, brokerwatch.DefaultTimeout)
	setDefault(&c.Batch.MaxRecords, 100)
	setDefault(&c.Batch.MaxBytes, 1<<20)
	setDefault(&c.Batch.Concurrency, 4)
	setDefault(&c.Batch.MaxRun, c.Batch.MaxRecords)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// backoff returns the wait after the attempt-th consecutive failure.
func (c Config) backoff(attempt int) time.Duration {
	d := float64(c.Backoff)
	for i := 1; i < attempt && d < float64(c.MaxBackoff); i++ {
		d *= c.BackoffMultiplier
	}
	return min(time.Duration(d), c.MaxBackoff)
}
