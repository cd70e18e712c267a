package reclaim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/loopers/commerce-pipeline/internal/logkey"
	"github.com/loopers/commerce-pipeline/pkg/pcon"
)

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
	var budget *atomic.Int64
	if o.Total > 0 {
		budget = new(atomic.Int64)
		budget.Store(int64(o.Total))
	}
	res := Result{Domains: make([]DomainResult, len(topics))}
	var wg sync.WaitGroup
	for i, topic := range topics {
		wg.Go(func() { res.Domains[i] = r.domain(ctx, topic, o, budget) })
	}
	wg.Wait()
	for _, d := range res.Domains {
		if d.Err != nil {
			r.cfg.Logger.Error("reclaim domain error", "domain", d.Domain, logkey.Err, d.Err)
		}
		for _, p := range d.Partitions {
			if p.Err != nil {
				r.cfg.Logger.Error("reclaim domain error", "domain", d.Domain, "partition", p.Partition, logkey.Err, p.Err)
			}
		}
	}
	t := res.Totals()
	level := slog.LevelDebug
	if t[Redriven]+t[Parked]+t[Skipped]+t[Failed]+t[Expired] > 0 {
		level = slog.LevelInfo
	}
	r.cfg.Logger.Log(ctx, level, "reclaim completed", "redriven", t[Redriven], "parked", t[Parked],
		"skipped", t[Skipped], "failed", t[Failed], "expired", t[Expired], "dryRun", o.DryRun)
	return res
}

func (r *Reclaimer) domain(ctx context.Context, topic string, o Options, budget *atomic.Int64) DomainResult {
	d := DomainResult{Domain: r.cfg.Kafka.Domain(topic), Topic: topic}
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
		pr := r.partition(ctx, topic, dlt, p, o, budget)
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

func (r *Reclaimer) partition(ctx context.Context, topic, dlt string, p int32, o Options, budget *atomic.Int64) (pr PartitionResult) {
	start := time.Now()
	k := tp{dlt, p}
	defer r.lockPartition(k)()
	pr = PartitionResult{Topic: dlt, Partition: p, Counts: map[Outcome]int{}}
	shard := strconv.Itoa(int(p))
	domain := r.cfg.Kafka.Domain(topic)
	if !o.DryRun {
		r.metrics.touch(domain, shard)
		defer func() { r.metrics.observe(domain, shard, pr, time.Since(start)) }()
	}
	defer func() { pr.Elapsed = time.Since(start) }()

	if r.cfg.Lock != nil {
		unlock, ok, err := r.cfg.Lock.TryLock(ctx, dlt, p)
		if err != nil {
			pr.Err = fmt.Errorf("lock %s/%d: %w", dlt, p, err)
			return pr
		}
		if !ok {
			pr.Busy = true
			return pr
		}
		defer unlock()
	}
	if o.Only != nil {
		r.chosen(ctx, topic, k, o, &pr)
		return pr
	}
	next, hwm, err := r.position(k)
	if err != nil {
		pr.Err = err
		return pr
	}
	pr.From, pr.Committed, pr.End = next, next, hwm
	// Chunk by chunk: each is read, republished as one batch (one round
	// trip, every acknowledgement awaited) and committed before the next.
	for taken := 0; next < hwm && taken < o.Count && ctx.Err() == nil; {
		c := r.chunk(ctx, topic, k, next, hwm, min(Chunk, o.Count-taken), o, budget)
		taken += len(c.took)
		for _, x := range c.took {
			pr.Counts[x.out]++
		}
		if c.failed > 0 {
			pr.Counts[Failed] += c.failed
		}
		pr.Records = append(pr.Records, c.records...)
		pr.Err = errors.Join(pr.Err, c.err)
		if o.DryRun {
			next = c.through
		} else if c.commitTo > next {
			committed, err := r.commits.commitForward(k, c.commitTo)
			if err != nil {
				pr.Err = errors.Join(pr.Err, err)
				return pr
			}
			pr.Committed, next = committed, committed
		}
		if c.done || c.err != nil || len(c.took) == 0 {
			break
		}
	}
	return pr
}

// taken is one record a chunk took, with what the pass does with it.
type taken struct {
	m    *sarama.ConsumerMessage
	info Info
	out  Outcome
	why  string
}

// chunkResult is what one chunk of a partition did.
type chunkResult struct {
	took     []taken // acknowledged (or, dry, classified) records, in order
	failed   int     // the record the commit stopped at, when one failed
	records  []Record
	through  int64 // the offset after the last record read
	commitTo int64 // the offset after the last record acknowledged in order
	done     bool  // the partition has nothing more for this pass
	err      error
}

// chunk takes up to want records of k from next and, unless the pass is
// dry, republishes (or parks) them. It stops early at a record younger than
// MinIdle, or when the pass's budget is spent.
func (r *Reclaimer) chunk(ctx context.Context, topic string, k tp, next, hwm int64, want int, o Options, budget *atomic.Int64) chunkResult {
	c := chunkResult{through: next, commitTo: next}
	var (
		took  []taken
		batch []*sarama.ProducerMessage
	)
	readErr := r.read(ctx, k, next, hwm, func(m *sarama.ConsumerMessage) (bool, error) {
		if len(took) >= want {
			return false, nil
		}
		info := Inspect(m)
		out, why := r.classify(topic, info, o.Force)
		// A record parked for a permanent reason, or past the horizon,
		// waits for nothing; any other waits until it has rested MinIdle
		// in the DLT.
		if out != Parked && out != Expired && info.Origin != "" && time.Since(info.DeadSince) < o.MinIdle {
			c.done = true // the rest of the partition is younger still
			return false, nil
		}
		if budget != nil && budget.Add(-1) < 0 {
			c.done = true
			return false, nil
		}
		took = append(took, taken{m, info, out, why})
		c.through = m.Offset + 1
		if msg := r.outgoing(m, topic, info, out, why); msg != nil {
			batch = append(batch, msg)
		}
		if o.DryRun {
			c.records = append(c.records, record(m, info, out, why))
		}
		return true, nil
	})
	c.err = readErr
	if o.DryRun {
		c.took = took
		return c
	}
	failed := r.send(k, topic, took, batch)
	// The commit stops at the first record whose republish may heal (the
	// broker down, say); the records after it are taken again next pass.
	for _, x := range took {
		if err, ok := failed[x.m.Offset]; ok {
			c.failed = 1
			c.err = errors.Join(c.err, fmt.Errorf("%s %s/%d@%d: %w", verb(x.out), k.topic, k.partition, x.m.Offset, err))
			c.done = true
			break
		}
		c.took = append(c.took, x)
		c.commitTo = x.m.Offset + 1
	}
	return c
}

// send republishes (or parks) batch and returns the records not
// acknowledged, by DLT offset. A republish that cannot heal (its partition
// gone, the record too large) parks that record instead, and the pass goes
// on past it rather than holding the partition back for good: took is
// updated in place.
func (r *Reclaimer) send(k tp, topic string, took []taken, batch []*sarama.ProducerMessage) map[int64]error {
	if len(batch) == 0 {
		return nil
	}
	failed := r.republish(batch)
	var late []*sarama.ProducerMessage
	for i := range took {
		x := &took[i]
		if err, ok := failed[x.m.Offset]; ok && x.out == Redriven && unhealable(err) {
			x.out, x.why = Parked, "its republish cannot succeed: "+err.Error()
			delete(failed, x.m.Offset)
			r.cfg.Logger.Warn("dead letter parked: its republish cannot succeed", "topic", k.topic, "partition", k.partition, "offset", x.m.Offset, logkey.Err, err)
			if r.cfg.ParkSuffix != "" {
				late = append(late, parked(x.m, topic+r.cfg.ParkSuffix, x.why))
			}
		}
	}
	if len(late) > 0 {
		maps.Copy(failed, r.republish(late))
	}
	return failed
}

// outgoing is the record a pass sends for m: m back to its origin when it is
// re-driven, its copy in the parked topic when it is parked or expired (and
// the Reclaimer parks), nothing otherwise.
func (r *Reclaimer) outgoing(m *sarama.ConsumerMessage, topic string, info Info, out Outcome, why string) *sarama.ProducerMessage {
	switch {
	case out == Redriven:
		return redriven(m, info)
	case (out == Parked || out == Expired) && r.cfg.ParkSuffix != "":
		return parked(m, topic+r.cfg.ParkSuffix, why)
	}
	return nil
}

func record(m *sarama.ConsumerMessage, info Info, out Outcome, why string) Record {
	return Record{Offset: m.Offset, Outcome: out, Key: string(m.Key), Redrives: info.Redrives, DeadSince: info.DeadSince,
		Error: info.Error, EventTime: info.EventTime, Why: why}
}

// commitForward commits offset as k's position unless another re-driver (a
// replica, pipelinectl) committed further since this pass read it: offsets
// only go forward. It returns the position k is left at.
func (r *Reclaimer) commitForward(k tp, offset int64) (int64, error) {
	if cur, err := r.committed(k); err == nil && cur >= offset {
		return cur, nil
	}
	if err := r.commit(k, offset); err != nil {
		return 0, err
	}
	return offset, nil
}

// chosen takes the records of k that o.Only names ("partition:offset"),
// wherever they are in the log, and republishes them, committing nothing.
// A named record the log no longer holds is an error.
func (r *Reclaimer) chosen(ctx context.Context, topic string, k tp, o Options, pr *PartitionResult) {
	var offsets []int64
	for key := range o.Only {
		part, off, _ := strings.Cut(key, ":")
		n, err := strconv.ParseInt(off, 10, 64)
		if part == strconv.Itoa(int(k.partition)) && err == nil {
			offsets = append(offsets, n)
		}
	}
	if len(offsets) == 0 {
		return
	}
	slices.Sort(offsets)
	committed, hwm, err := r.position(k)
	if err != nil {
		pr.Err = err
		return
	}
	pr.From, pr.Committed, pr.End = offsets[0], committed, hwm
	var (
		took  []taken
		batch []*sarama.ProducerMessage
	)
	for _, off := range offsets {
		var m *sarama.ConsumerMessage
		err := fmt.Errorf("%s/%d@%d: no such record (past the end, or removed by retention)", k.topic, k.partition, off)
		if off < hwm {
			if rerr := r.read(ctx, k, off, hwm, func(got *sarama.ConsumerMessage) (bool, error) { m = got; return false, nil }); rerr != nil {
				err = rerr
			} else if m != nil && m.Offset == off {
				err = nil
			}
		}
		if err != nil {
			pr.Err = errors.Join(pr.Err, err)
			continue
		}
		info := Inspect(m)
		out, why := r.classify(topic, info, o.Force)
		took = append(took, taken{m, info, out, why})
		if msg := r.outgoing(m, topic, info, out, why); msg != nil && out == Redriven {
			batch = append(batch, msg) // a chosen record is re-driven or reported, never parked again
		}
		if o.DryRun {
			pr.Records = append(pr.Records, record(m, info, out, why))
		}
	}
	var failed map[int64]error
	if !o.DryRun {
		failed = r.send(k, topic, took, batch)
	}
	for _, x := range took {
		if err, ok := failed[x.m.Offset]; ok {
			pr.Counts[Failed]++
			pr.Err = errors.Join(pr.Err, fmt.Errorf("republish %s/%d@%d: %w", k.topic, k.partition, x.m.Offset, err))
			continue
		}
		pr.Counts[x.out]++
	}
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

func (r *Reclaimer) classify(topic string, info Info, force bool) (Outcome, string) {
	switch {
	case info.Origin != topic || info.Partition < 0:
		return Skipped, "not dead-lettered by pcon from " + topic
	case r.expired(topic, info):
		return Expired, "its event (" + info.EventTime.UTC().Format(time.RFC3339) + ") is older than the idempotency horizon (" +
			r.cfg.Horizon.String() + "): its consumer would skip it"
	case info.Permanent() && !force:
		return Parked, "dead-lettered for a permanent reason (" + info.Reason + "); re-drive with force once fixed"
	case info.Redrives >= r.cfg.MaxRedrives:
		return Parked, "re-driven " + strconv.Itoa(info.Redrives) + " times already"
	}
	return Redriven, ""
}

// expired reports whether the event is older than its consumers' horizon.
func (r *Reclaimer) expired(topic string, info Info) bool {
	return r.cfg.Horizon > 0 && !info.EventTime.IsZero() && slices.Contains(r.cfg.HorizonTopics, topic) &&
		time.Since(info.EventTime) > r.cfg.Horizon
}

// unhealable reports whether a republish error will recur however often it
// is retried: the partition or topic does not exist, or the record is too
// large for the broker.
func unhealable(err error) bool {
	for _, e := range []error{sarama.ErrUnknownTopicOrPartition, sarama.ErrInvalidPartition, sarama.ErrInvalidTopic,
		sarama.ErrMessageSizeTooLarge, sarama.ErrInvalidMessage} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func verb(o Outcome) string {
	if o == Parked || o == Expired {
		return "park"
	}
	return "republish"
}

// parked builds the copy of m kept in the parked topic: m's key, value and
// every header (its origin, error and re-drive count among them), plus why
// and when it was parked. It goes to the partition of the same number.
func parked(m *sarama.ConsumerMessage, topic, why string) *sarama.ProducerMessage {
	msg := &sarama.ProducerMessage{Topic: topic, Partition: m.Partition, Value: sarama.ByteEncoder(m.Value), Metadata: m.Offset}
	if m.Key != nil {
		msg.Key = sarama.ByteEncoder(m.Key)
	}
	for _, h := range m.Headers {
		if h == nil || string(h.Key) == HeaderParkedReason || string(h.Key) == HeaderParkedAt {
			continue
		}
		msg.Headers = append(msg.Headers, sarama.RecordHeader{Key: h.Key, Value: h.Value})
	}
	msg.Headers = append(msg.Headers,
		sarama.RecordHeader{Key: []byte(HeaderParkedReason), Value: []byte(why)},
		sarama.RecordHeader{Key: []byte(HeaderParkedAt), Value: []byte(time.Now().UTC().Format(time.RFC3339Nano))})
	return msg
}

// redriven builds the record that sends m back to the partition it was
// dead-lettered from, without the previous DLT headers (pcon's, and the
// reclaimer's own, which share pcon's prefix), with the re-drive
// counter raised. Metadata carries m's DLT offset.
func redriven(m *sarama.ConsumerMessage, info Info) *sarama.ProducerMessage {
	msg := &sarama.ProducerMessage{Topic: info.Origin, Partition: info.Partition, Value: sarama.ByteEncoder(m.Value), Metadata: m.Offset}
	if m.Key != nil {
		msg.Key = sarama.ByteEncoder(m.Key)
	}
	for _, h := range m.Headers {
		if h == nil || strings.HasPrefix(string(h.Key), pcon.HeaderPrefix) {
			continue
		}
		msg.Headers = append(msg.Headers, sarama.RecordHeader{Key: h.Key, Value: h.Value})
	}
	msg.Headers = append(msg.Headers, sarama.RecordHeader{Key: []byte(HeaderRedriveCount), Value: []byte(strconv.Itoa(info.Redrives + 1))})
	return msg
}

// republish sends batch and waits for every acknowledgement (acks=all). It
// returns the records not acknowledged, by DLT offset, with their errors.
func (r *Reclaimer) republish(batch []*sarama.ProducerMessage) map[int64]error {
	err := r.producer.SendMessages(batch)
	if err == nil {
		return nil
	}
	failed := map[int64]error{}
	var perrs sarama.ProducerErrors
	if !errors.As(err, &perrs) || len(perrs) == 0 {
		for _, m := range batch {
			failed[m.Metadata.(int64)] = err
		}
		return failed
	}
	for _, pe := range perrs {
		failed[pe.Msg.Metadata.(int64)] = pe.Err
	}
	return failed
}
