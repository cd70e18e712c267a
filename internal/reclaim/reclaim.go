// Package reclaim re-drives dead-lettered records: it reads each domain's
// dead-letter topic ({topic}.DLT, written by pkg/pcon), takes the records
// that have rested there long enough, and republishes them to the partition
// they came from with a re-drive counter. It serves the scheduled reclaimer
// of product-consumers and pipelinectl's `dlt` commands.
//
// The position in each DLT partition is a committed offset of its own
// consumer group (Config.Group), committed only after every record below it
// was republished and acknowledged or deliberately left parked: a crash
// between republish and commit republishes again (consumers de-duplicate by
// event id), and nothing is lost.
//
// Domains (topics) are reclaimed in parallel, the partitions of one domain
// one after another, as in the Redis Streams reclaimer the design follows: a
// slow or failing domain delays and stops no other.
package reclaim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/loopers/commerce-pipeline/internal/service"
	"github.com/loopers/commerce-pipeline/pkg/pcon"
)

// HeaderRedriveCount counts how often a record was re-driven from a DLT. It
// travels with the record, so a record dead-lettered again carries it into
// the DLT (pcon copies the record's headers) and is parked once it reached
// Config.MaxRedrives.
const HeaderRedriveCount = "pcon-redrive-count"

// Group is the consumer group whose committed offsets in the .DLT topics
// mark how far reclaiming got. The scheduled reclaimer and pipelinectl share
// it, so a record re-driven by hand is not re-driven again by the schedule.
const Group = "pcon-reclaimer"

// Outcome is what a pass did with one DLT record.
type Outcome string

// The outcomes, used as the `outcome` metric label.
const (
	Redriven Outcome = "redriven" // republished to its original topic
	Parked   Outcome = "parked"   // re-driven MaxRedrives times already: left in the DLT
	Skipped  Outcome = "skipped"  // not written by pcon (no origin headers): left in the DLT
	Failed   Outcome = "failed"   // the republish failed: retried next pass
)

var outcomes = []Outcome{Redriven, Parked, Skipped, Failed}

// Config configures a Reclaimer.
type Config struct {
	Brokers []string
	// Topics are the original topics (one per domain); their dead-letter
	// topics are topic+DLTSuffix.
	Topics    []string
	DLTSuffix string
	// Group is the consumer group whose committed offsets mark how far each
	// DLT partition was reclaimed.
	Group string
	// MinIdle is how long a record must have been in the DLT before it is
	// re-driven: a pass stops at the first younger record of a partition.
	MinIdle time.Duration
	// Count bounds the records taken from one partition in one pass.
	Count int
	// MaxRedrives is how often a record may be re-driven; after that it
	// stays parked.
	MaxRedrives int
	// ReadTimeout bounds the wait for a record known to exist (default 10 s).
	ReadTimeout time.Duration
	Logger      *slog.Logger
	// Registerer receives the reclaim metrics; nil registers none.
	Registerer prometheus.Registerer
	// Sarama is the client configuration to start from (nil: a default).
	// Producer and offset settings are overridden where correctness needs it.
	Sarama *sarama.Config
}

func (c *Config) validate() error {
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("no brokers"))
	}
	if len(c.Topics) == 0 {
		errs = append(errs, errors.New("no topics"))
	}
	if c.DLTSuffix == "" || c.Group == "" {
		errs = append(errs, errors.New("DLTSuffix and Group are required"))
	}
	if c.Count <= 0 || c.MaxRedrives < 0 || c.MinIdle < 0 {
		errs = append(errs, fmt.Errorf("count %d must be positive, max re-drives %d and min idle %s not negative", c.Count, c.MaxRedrives, c.MinIdle))
	}
	if c.Logger == nil {
		errs = append(errs, errors.New("no logger"))
	}
	if c.ReadTimeout <= 0 {
		c.ReadTimeout = 10 * time.Second
	}
	return errors.Join(errs...)
}

// Domain names a topic's domain for logs and metrics: "like-events" → "like".
func Domain(topic string) string { return strings.TrimSuffix(topic, "-events") }

type tp struct {
	topic     string
	partition int32
}

// Reclaimer reclaims DLT records. Its methods may be called concurrently.
type Reclaimer struct {
	cfg      Config
	client   sarama.Client
	consumer sarama.Consumer
	producer sarama.SyncProducer
	metrics  *metrics

	closeOnce sync.Once
	mu        sync.Mutex // guards partLock
	partLock  map[tp]*sync.Mutex

	// beforeCommit runs after a partition's records were republished and
	// before its offset is committed; an error stops the commit, as a crash
	// at that point would. Tests use it.
	beforeCommit func(topic string, partition int32) error
}

// New connects to the brokers.
func New(cfg Config) (*Reclaimer, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("reclaim: %w", err)
	}
	sc := cfg.Sarama
	if sc == nil {
		sc = sarama.NewConfig()
		sc.Version = sarama.V3_6_0_0
		sc.ClientID = "reclaimer"
	} else {
		c := *sc
		sc = &c
	}
	sc.Producer.RequiredAcks = sarama.WaitForAll
	sc.Producer.Return.Successes = true
	sc.Producer.Return.Errors = true
	sc.Producer.Retry.Max = 3
	// One request in flight per broker keeps a batch in DLT order on its
	// way back, retries included.
	sc.Net.MaxOpenRequests = 1
	// A record goes back to the partition it came from (its origin header),
	// whatever the key hashes to, so it meets the same consumer ordering.
	sc.Producer.Partitioner = sarama.NewManualPartitioner
	// A pass reads only records below the high water mark it saw, so a
	// fetch has nothing to wait for.
	sc.Consumer.MaxWaitTime = 50 * time.Millisecond
	client, err := sarama.NewClient(cfg.Brokers, sc)
	if err != nil {
		return nil, fmt.Errorf("reclaim: connect to Kafka %v: %w", cfg.Brokers, err)
	}
	r := &Reclaimer{cfg: cfg, client: client, partLock: map[tp]*sync.Mutex{}}
	fail := func(what string, err error) (*Reclaimer, error) {
		r.Close()
		return nil, fmt.Errorf("reclaim: %s: %w", what, err)
	}
	if r.consumer, err = sarama.NewConsumerFromClient(client); err != nil {
		return fail("consumer", err)
	}
	if r.producer, err = sarama.NewSyncProducerFromClient(client); err != nil {
		return fail("producer", err)
	}
	if cfg.Registerer != nil {
		if r.metrics, err = newMetrics(cfg.Registerer); err != nil {
			return fail("metrics", err)
		}
	}
	return r, nil
}

// Close releases the Kafka connections. It may be called more than once.
func (r *Reclaimer) Close() { r.closeOnce.Do(r.close) }

func (r *Reclaimer) close() {
	if r.producer != nil {
		_ = r.producer.Close()
	}
	if r.consumer != nil {
		_ = r.consumer.Close()
	}
	_ = r.client.Close()
}

// Options narrows or overrides one pass. The zero value takes the Config's.
type Options struct {
	Topics  []string      // a subset of Config.Topics; nil: all
	MinIdle time.Duration // 0: Config.MinIdle
	Count   int           // 0: Config.Count
	// DryRun reads and classifies records but republishes and commits
	// nothing, and records no metrics.
	DryRun bool
}

// Record is one record a pass took, reported only by a dry run.
type Record struct {
	Offset    int64     `json:"offset"`
	Outcome   Outcome   `json:"outcome"`
	Key       string    `json:"key"`
	Redrives  int       `json:"redrives"`
	DeadSince time.Time `json:"deadLetteredAt"`
	Error     string    `json:"error,omitempty"`
}

// PartitionResult is what a pass did in one DLT partition.
type PartitionResult struct {
	Topic     string          `json:"topic"` // the DLT topic
	Partition int32           `json:"partition"`
	From      int64           `json:"from"`      // the first offset taken
	Committed int64           `json:"committed"` // the offset committed (From when none)
	End       int64           `json:"end"`       // the high water mark when the pass began
	Counts    map[Outcome]int `json:"counts"`
	Records   []Record        `json:"records,omitempty"`
	Elapsed   time.Duration   `json:"elapsedNs"`
	Err       error           `json:"-"`
	ErrText   string          `json:"error,omitempty"`
}

// DomainResult is what a pass did in one domain.
type DomainResult struct {
	Domain     string            `json:"domain"`
	Topic      string            `json:"topic"`
	Partitions []PartitionResult `json:"partitions"`
	Err        error             `json:"-"`
	ErrText    string            `json:"error,omitempty"`
}

// Result is what one pass did, domains in Config.Topics order.
type Result struct {
	Domains []DomainResult `json:"domains"`
}

// Totals sums the outcomes over every partition.
func (r Result) Totals() map[Outcome]int {
	t := map[Outcome]int{}
	for _, d := range r.Domains {
		for _, p := range d.Partitions {
			for o, n := range p.Counts {
				t[o] += n
			}
		}
	}
	return t
}

// Err joins the errors of every domain and partition.
func (r Result) Err() error {
	var errs []error
	for _, d := range r.Domains {
		if d.Err != nil {
			errs = append(errs, d.Err)
		}
		for _, p := range d.Partitions {
			if p.Err != nil {
				errs = append(errs, p.Err)
			}
		}
	}
	return errors.Join(errs...)
}

// Pass runs one reclaim pass over every domain in parallel and logs its
// totals ("reclaim completed") and each failed domain ("reclaim domain
// error"). Errors are in the Result; a failed domain does not stop others.
func (r *Reclaimer) Pass(ctx context.Context, o Options) Result {
	topics := r.cfg.Topics
	if o.Topics != nil {
		topics = o.Topics
	}
	if o.MinIdle == 0 {
		o.MinIdle = r.cfg.MinIdle
	}
	if o.Count == 0 {
		o.Count = r.cfg.Count
	}
	res := Result{Domains: make([]DomainResult, len(topics))}
	var wg sync.WaitGroup
	for i, topic := range topics {
		wg.Go(func() { res.Domains[i] = r.domain(ctx, topic, o) })
	}
	wg.Wait()
	for _, d := range res.Domains {
		if d.Err != nil {
			r.cfg.Logger.Error("reclaim domain error", "domain", d.Domain, service.ErrKey, d.Err)
		}
		for _, p := range d.Partitions {
			if p.Err != nil {
				r.cfg.Logger.Error("reclaim domain error", "domain", d.Domain, "partition", p.Partition, service.ErrKey, p.Err)
			}
		}
	}
	t := res.Totals()
	level := slog.LevelDebug
	if t[Redriven]+t[Parked]+t[Skipped]+t[Failed] > 0 {
		level = slog.LevelInfo
	}
	r.cfg.Logger.Log(ctx, level, "reclaim completed", "redriven", t[Redriven], "parked", t[Parked],
		"skipped", t[Skipped], "failed", t[Failed], "dryRun", o.DryRun)
	return res
}

func (r *Reclaimer) domain(ctx context.Context, topic string, o Options) DomainResult {
	d := DomainResult{Domain: Domain(topic), Topic: topic}
	if !slices.Contains(r.cfg.Topics, topic) {
		d.Err = fmt.Errorf("domain %s: topic %s is not configured", d.Domain, topic)
		d.ErrText = d.Err.Error()
		return d
	}
	dlt := topic + r.cfg.DLTSuffix
	parts, err := r.client.Partitions(dlt)
	if err != nil {
		d.Err = fmt.Errorf("domain %s: partitions of %s: %w", d.Domain, dlt, err)
		d.ErrText = d.Err.Error()
		return d
	}
	slices.Sort(parts)
	for _, p := range parts {
		if ctx.Err() != nil {
			break
		}
		pr := r.partition(ctx, topic, dlt, p, o)
		if pr.Err != nil {
			pr.ErrText = pr.Err.Error()
		}
		d.Partitions = append(d.Partitions, pr)
	}
	return d
}

// lockPartition keeps two passes (a scheduled one and a command in the same
// process) from taking the same partition at once.
func (r *Reclaimer) lockPartition(k tp) func() {
	r.mu.Lock()
	l, ok := r.partLock[k]
	if !ok {
		l = &sync.Mutex{}
		r.partLock[k] = l
	}
	r.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// position returns the first offset to take (the committed one, or the
// oldest when none is) and the partition's high water mark.
func (r *Reclaimer) position(k tp) (next, hwm int64, err error) {
	if hwm, err = r.client.GetOffset(k.topic, k.partition, sarama.OffsetNewest); err != nil {
		return 0, 0, fmt.Errorf("high water mark of %s/%d: %w", k.topic, k.partition, err)
	}
	oldest, err := r.client.GetOffset(k.topic, k.partition, sarama.OffsetOldest)
	if err != nil {
		return 0, 0, fmt.Errorf("oldest offset of %s/%d: %w", k.topic, k.partition, err)
	}
	if next, err = r.committed(k); err != nil {
		return 0, 0, err
	}
	if next < oldest { // nothing committed yet, or retention removed it
		next = oldest
	}
	return next, hwm, nil
}

// committed fetches the group's committed offset of k, -1 when there is none.
// The reclaimer talks to the coordinator itself rather than through sarama's
// offset manager: it needs "no offset yet" for a group that never committed,
// and the commit's own error, which the offset manager only logs.
func (r *Reclaimer) committed(k tp) (int64, error) {
	b, err := r.client.Coordinator(r.cfg.Group)
	if err != nil {
		return 0, fmt.Errorf("coordinator of %s: %w", r.cfg.Group, err)
	}
	req := &sarama.OffsetFetchRequest{Version: 1, ConsumerGroup: r.cfg.Group}
	req.AddPartition(k.topic, k.partition)
	resp, err := b.FetchOffset(req)
	if err != nil {
		_ = r.client.RefreshCoordinator(r.cfg.Group)
		return 0, fmt.Errorf("fetch offset of %s/%d: %w", k.topic, k.partition, err)
	}
	if errors.Is(resp.Err, sarama.ErrGroupIDNotFound) {
		return -1, nil
	}
	if resp.Err != sarama.ErrNoError {
		return 0, fmt.Errorf("fetch offset of %s/%d: %w", k.topic, k.partition, resp.Err)
	}
	blk := resp.GetBlock(k.topic, k.partition)
	switch {
	case blk == nil, errors.Is(blk.Err, sarama.ErrGroupIDNotFound), errors.Is(blk.Err, sarama.ErrUnknownTopicOrPartition):
		return -1, nil
	case blk.Err != sarama.ErrNoError:
		return 0, fmt.Errorf("fetch offset of %s/%d: %w", k.topic, k.partition, blk.Err)
	}
	return blk.Offset, nil
}

// commit stores offset as the group's position in k.
func (r *Reclaimer) commit(k tp, offset int64) error {
	b, err := r.client.Coordinator(r.cfg.Group)
	if err != nil {
		return fmt.Errorf("coordinator of %s: %w", r.cfg.Group, err)
	}
	req := &sarama.OffsetCommitRequest{Version: 2, ConsumerGroup: r.cfg.Group,
		ConsumerGroupGeneration: sarama.GroupGenerationUndefined, RetentionTime: -1}
	req.AddBlock(k.topic, k.partition, offset, 0, "")
	resp, err := b.CommitOffset(req)
	if err != nil {
		_ = r.client.RefreshCoordinator(r.cfg.Group)
		return fmt.Errorf("commit %s/%d at %d: %w", k.topic, k.partition, offset, err)
	}
	if kerr := resp.Errors[k.topic][k.partition]; kerr != sarama.ErrNoError {
		return fmt.Errorf("commit %s/%d at %d: %w", k.topic, k.partition, offset, kerr)
	}
	return nil
}

func (r *Reclaimer) partition(ctx context.Context, topic, dlt string, p int32, o Options) (pr PartitionResult) {
	start := time.Now()
	k := tp{dlt, p}
	defer r.lockPartition(k)()
	pr = PartitionResult{Topic: dlt, Partition: p, Counts: map[Outcome]int{}}
	shard := strconv.Itoa(int(p))
	domain := Domain(topic)
	if !o.DryRun {
		r.metrics.touch(domain, shard)
		defer func() { r.metrics.observe(domain, shard, pr, time.Since(start)) }()
	}
	defer func() { pr.Elapsed = time.Since(start) }()

	next, hwm, err := r.position(k)
	if err != nil {
		pr.Err = err
		return pr
	}
	pr.From, pr.Committed, pr.End = next, next, hwm
	if next >= hwm {
		return pr
	}
	// Take the records first, then republish them as one batch and wait for
	// every acknowledgement: one round trip per pass, not per record.
	type taken struct {
		offset int64
		out    Outcome
	}
	var (
		took  []taken
		batch []*sarama.ProducerMessage
	)
	readErr := r.read(ctx, k, next, hwm, func(m *sarama.ConsumerMessage) (bool, error) {
		if len(took) >= o.Count {
			return false, nil
		}
		info := Inspect(m)
		if info.Origin != "" && time.Since(info.DeadSince) < o.MinIdle {
			return false, nil // the rest of the partition is younger still
		}
		out := r.classify(topic, info)
		took = append(took, taken{m.Offset, out})
		if out == Redriven {
			batch = append(batch, redriven(m, info))
		}
		if o.DryRun {
			pr.Records = append(pr.Records, Record{Offset: m.Offset, Outcome: out, Key: string(m.Key),
				Redrives: info.Redrives, DeadSince: info.DeadSince, Error: info.Error})
		}
		return true, nil
	})
	// firstFailed is the offset of the first record whose republish was not
	// acknowledged; the commit stops there.
	firstFailed, sendErr := int64(-1), error(nil)
	if !o.DryRun && len(batch) > 0 {
		firstFailed, sendErr = r.republish(batch)
		if sendErr != nil {
			sendErr = fmt.Errorf("republish %s/%d@%d to %s: %w", dlt, p, firstFailed, topic, sendErr)
		}
	}
	commitTo := next
	for _, x := range took {
		if x.offset == firstFailed {
			pr.Counts[Failed]++
			break
		}
		pr.Counts[x.out]++
		commitTo = x.offset + 1
	}
	pr.Err = errors.Join(readErr, sendErr)
	if o.DryRun || commitTo == next {
		return pr
	}
	if r.beforeCommit != nil {
		if cerr := r.beforeCommit(dlt, p); cerr != nil {
			pr.Err = errors.Join(pr.Err, cerr)
			return pr
		}
	}
	if cerr := r.commit(k, commitTo); cerr != nil {
		pr.Err = errors.Join(pr.Err, cerr)
		return pr
	}
	pr.Committed = commitTo
	return pr
}

// read delivers the records of k from `from` up to hwm to take, in order,
// until take returns false or an error.
func (r *Reclaimer) read(ctx context.Context, k tp, from, hwm int64, take func(*sarama.ConsumerMessage) (bool, error)) error {
	pc, err := r.consumer.ConsumePartition(k.topic, k.partition, from)
	if err != nil {
		return fmt.Errorf("consume %s/%d from %d: %w", k.topic, k.partition, from, err)
	}
	// Close, not AsyncClose: the consumer accepts one reader per partition,
	// and the next pass must find this one gone.
	defer func() { _ = pc.Close() }()
	timer := time.NewTimer(r.cfg.ReadTimeout)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
			return fmt.Errorf("read %s/%d: no record within %s below the high water mark %d", k.topic, k.partition, r.cfg.ReadTimeout, hwm)
		case cerr := <-pc.Errors():
			if cerr != nil {
				return fmt.Errorf("read %s/%d: %w", k.topic, k.partition, cerr)
			}
		case m, ok := <-pc.Messages():
			if !ok {
				return fmt.Errorf("read %s/%d: consumer closed", k.topic, k.partition)
			}
			timer.Reset(r.cfg.ReadTimeout)
			more, err := take(m)
			if err != nil || !more || m.Offset+1 >= hwm {
				return err
			}
		}
	}
}

func (r *Reclaimer) classify(topic string, info Info) Outcome {
	switch {
	case info.Origin != topic || info.Partition < 0:
		return Skipped
	case info.Redrives >= r.cfg.MaxRedrives:
		return Parked
	}
	return Redriven
}

// redriven builds the record that sends m back to the partition it was
// dead-lettered from, without the previous DLT headers, with the re-drive
// counter raised. Metadata carries m's DLT offset.
func redriven(m *sarama.ConsumerMessage, info Info) *sarama.ProducerMessage {
	msg := &sarama.ProducerMessage{Topic: info.Origin, Partition: info.Partition, Value: sarama.ByteEncoder(m.Value), Metadata: m.Offset}
	if m.Key != nil {
		msg.Key = sarama.ByteEncoder(m.Key)
	}
	for _, h := range m.Headers {
		if h == nil || strings.HasPrefix(string(h.Key), "pcon-") {
			continue
		}
		msg.Headers = append(msg.Headers, sarama.RecordHeader{Key: h.Key, Value: h.Value})
	}
	msg.Headers = append(msg.Headers, sarama.RecordHeader{Key: []byte(HeaderRedriveCount), Value: []byte(strconv.Itoa(info.Redrives + 1))})
	return msg
}

// republish sends batch and waits for every acknowledgement (acks=all). On
// failure it returns the lowest DLT offset among the records not
// acknowledged.
func (r *Reclaimer) republish(batch []*sarama.ProducerMessage) (firstFailed int64, err error) {
	err = r.producer.SendMessages(batch)
	if err == nil {
		return -1, nil
	}
	var perrs sarama.ProducerErrors
	if !errors.As(err, &perrs) || len(perrs) == 0 {
		return batch[0].Metadata.(int64), err
	}
	firstFailed = perrs[0].Msg.Metadata.(int64)
	for _, pe := range perrs {
		firstFailed = min(firstFailed, pe.Msg.Metadata.(int64))
	}
	return firstFailed, perrs[0].Err
}

// Info is what the DLT headers say about a record.
type Info struct {
	Origin    string // pcon.HeaderOriginalTopic; "" when the record is not pcon's
	Partition int32  // pcon.HeaderOriginalPartition; -1 when absent or invalid
	Redrives  int
	Error     string
	DeadSince time.Time // pcon.HeaderDeadLetteredAt, else the record timestamp
}

// Inspect reads a DLT record's headers.
func Inspect(m *sarama.ConsumerMessage) Info {
	info := Info{Partition: -1, DeadSince: m.Timestamp}
	for _, h := range m.Headers {
		if h == nil {
			continue
		}
		v := string(h.Value)
		switch string(h.Key) {
		case pcon.HeaderOriginalTopic:
			info.Origin = v
		case pcon.HeaderOriginalPartition:
			if n, err := strconv.ParseInt(v, 10, 32); err == nil && n >= 0 {
				info.Partition = int32(n)
			}
		case pcon.HeaderError:
			info.Error = v
		case pcon.HeaderDeadLetteredAt:
			if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
				info.DeadSince = t
			}
		case HeaderRedriveCount:
			if n, err := strconv.Atoi(v); err == nil && n > 0 {
				info.Redrives = n
			}
		}
	}
	return info
}

type metrics struct {
	messages *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	pending  *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "reclaim_messages_total",
			Help: "DLT records a reclaim pass took, by domain, shard (partition) and outcome (redriven, parked, skipped, failed).",
		}, []string{"domain", "shard", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "reclaim_latency_seconds",
			Help:    "Time one reclaim pass spent on one DLT partition.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"domain", "shard"}),
		pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "reclaim_pending",
			Help: "DLT records after the reclaimer's committed offset after its last pass: not yet old enough, over the per-pass count, or failed.",
		}, []string{"domain", "shard"}),
	}
	for _, c := range []prometheus.Collector{m.messages, m.latency, m.pending} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// touch creates a partition's series, so dashboards see zeros rather than
// nothing before the first dead letter.
func (m *metrics) touch(domain, shard string) {
	if m == nil {
		return
	}
	for _, o := range outcomes {
		m.messages.WithLabelValues(domain, shard, string(o))
	}
}

func (m *metrics) observe(domain, shard string, pr PartitionResult, elapsed time.Duration) {
	if m == nil {
		return
	}
	for o, n := range pr.Counts {
		m.messages.WithLabelValues(domain, shard, string(o)).Add(float64(n))
	}
	m.latency.WithLabelValues(domain, shard).Observe(elapsed.Seconds())
	if pr.Err == nil {
		m.pending.WithLabelValues(domain, shard).Set(float64(pr.End - pr.Committed))
	}
}
