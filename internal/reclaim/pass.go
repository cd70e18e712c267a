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
	"time"

	"github.com/IBM/sarama"

	"github.com/loopers/commerce-pipeline/internal/service"
	"github.com/loopers/commerce-pipeline/pkg/events"
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
	d := DomainResult{Domain: events.DomainOf(topic), Topic: topic}
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

func (r *Reclaimer) partition(ctx context.Context, topic, dlt string, p int32, o Options) (pr PartitionResult) {
	start := time.Now()
	k := tp{dlt, p}
	defer r.lockPartition(k)()
	pr = PartitionResult{Topic: dlt, Partition: p, Counts: map[Outcome]int{}}
	shard := strconv.Itoa(int(p))
	domain := events.DomainOf(topic)
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
		m    *sarama.ConsumerMessage
		info Info
		out  Outcome
		why  string
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
		out, why := r.classify(topic, info, o.Force)
		// A record parked for a permanent reason waits for nothing; any
		// other waits until it has rested MinIdle in the DLT.
		if out != Parked && info.Origin != "" && time.Since(info.DeadSince) < o.MinIdle {
			return false, nil // the rest of the partition is younger still
		}
		took = append(took, taken{m, info, out, why})
		switch {
		case out == Redriven:
			batch = append(batch, redriven(m, info))
		case out == Parked && r.cfg.ParkSuffix != "":
			batch = append(batch, parked(m, topic+r.cfg.ParkSuffix, why))
		}
		if o.DryRun {
			pr.Records = append(pr.Records, Record{Offset: m.Offset, Outcome: out, Key: string(m.Key),
				Redrives: info.Redrives, DeadSince: info.DeadSince, Error: info.Error, Why: why})
		}
		return true, nil
	})
	// failed holds the records whose republish (or parking) was not
	// acknowledged. The commit stops at the first that may heal (the broker
	// down, say); a republish that cannot (its partition gone, too large)
	// parks the record instead, and the pass goes on past it rather than
	// holding the partition back for good.
	var failed map[int64]error
	if !o.DryRun && len(batch) > 0 {
		failed = r.republish(batch)
		var late []*sarama.ProducerMessage
		for i := range took {
			x := &took[i]
			if err, ok := failed[x.m.Offset]; ok && x.out == Redriven && unhealable(err) {
				x.out, x.why = Parked, "its republish cannot succeed: "+err.Error()
				delete(failed, x.m.Offset)
				r.cfg.Logger.Warn("dead letter parked: its republish cannot succeed", "topic", dlt, "partition", p, "offset", x.m.Offset, service.ErrKey, err)
				if r.cfg.ParkSuffix != "" {
					late = append(late, parked(x.m, topic+r.cfg.ParkSuffix, x.why))
				}
			}
		}
		if len(late) > 0 {
			maps.Copy(failed, r.republish(late))
		}
	}
	commitTo := next
	var sendErr error
	for _, x := range took {
		if err, ok := failed[x.m.Offset]; ok {
			pr.Counts[Failed]++
			sendErr = fmt.Errorf("%s %s/%d@%d: %w", verb(x.out), dlt, p, x.m.Offset, err)
			break
		}
		pr.Counts[x.out]++
		commitTo = x.m.Offset + 1
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
	// Offsets only go forward: another re-driver (a replica, pipelinectl)
	// may have committed further since this pass read its position.
	if cur, cerr := r.committed(k); cerr == nil && cur >= commitTo {
		pr.Committed = cur
		return pr
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

func (r *Reclaimer) classify(topic string, info Info, force bool) (Outcome, string) {
	switch {
	case info.Origin != topic || info.Partition < 0:
		return Skipped, "not dead-lettered by pcon from " + topic
	case info.Permanent() && !force:
		return Parked, "dead-lettered for a permanent reason (" + info.Reason + "); re-drive with force once fixed"
	case info.Redrives >= r.cfg.MaxRedrives:
		return Parked, "re-driven " + strconv.Itoa(info.Redrives) + " times already"
	}
	return Redriven, ""
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
	if o == Parked {
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
