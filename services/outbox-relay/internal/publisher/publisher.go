// Package publisher sends outbox rows to Kafka as CloudEvents in binary
// content mode, with an idempotent producer that never lets a later record
// of a partition pass a failed earlier one, and classifies failures as
// retriable or permanent.
package publisher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/loopers/commerce-pipeline/internal/kafka"
	"github.com/loopers/commerce-pipeline/pkg/events"
)

// ErrUnpublishable marks a message that can never be published however often it
// is retried. Match with errors.Is or use [Unpublishable].
var ErrUnpublishable = errors.New("unpublishable message")

// ErrSendTimeout is the result of a message whose outcome did not arrive
// within the send timeout. It is retriable: the record may or may not be in
// the log (consumers are idempotent).
var ErrSendTimeout = errors.New("send timed out")

// Message is one event to publish.
type Message struct {
	Sequence      int64 // the outbox id
	EventID       string
	Type          string
	Source        string
	AggregateType string
	AggregateID   string
	Data          []byte // the record shares it: it must not change until the outcome is known
	Time          time.Time
	// TraceParent and TraceState are the W3C trace context stored with the
	// row by its writer. The record carries them unchanged, as the plain
	// headers traceparent and tracestate and as the CloudEvents
	// distributed-tracing extension (ce_traceparent, ce_tracestate). Empty:
	// no such header.
	TraceParent, TraceState string
}

// Unpublishable reports whether err can never succeed on retry:
//   - an event type whose topic cannot be derived;
//   - MESSAGE_TOO_LARGE / RECORD_LIST_TOO_LARGE / INVALID_RECORD from the
//     broker (the producer's own size check answers MESSAGE_TOO_LARGE too);
//   - INVALID_TOPIC_EXCEPTION (an illegal topic name).
//
// UNKNOWN_TOPIC_OR_PARTITION is deliberately retriable: topics are created by
// infrastructure, and a topic being created, or a partition whose leader is
// moving, answers that for a while. If the topic truly never appears the row
// reaches max-age and moves to outbox_failed, which is the same end without
// losing events to a deployment race.
func Unpublishable(err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, ErrUnpublishable), errors.Is(err, events.ErrUnprocessable):
		return true
	}
	for _, perm := range []error{kerr.MessageTooLarge, kerr.RecordListTooLarge, kerr.InvalidRecord, kerr.InvalidTopicException} {
		if errors.Is(err, perm) {
			return true
		}
	}
	return false
}

// TooLarge reports whether err is the broker's refusal of a record or a
// batch as too large. The producer fails a refused batch as a whole, so a
// record refused with others may be innocent.
func TooLarge(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge)
}

// Publisher wraps one idempotent producer shared by every batch.
//
// The producer is franz-go's, not sarama's, for one property the relay's
// ordered retry needs: when it gives up on a record it fails every record
// buffered behind it for the same partition, so a later event never lands
// in Kafka before an earlier one of the same aggregate. sarama's async
// producer fails the record, starts a new idempotent epoch and delivers the
// records behind it: after a broker restart the relay would find later
// events published ahead of the head it retries
// (TestIdempotentProducerAcrossBrokerRestart).
type Publisher struct {
	client      *kgo.Client
	records     *recordWriter
	sendTimeout time.Duration
}

type result struct {
	index int
	err   error
	at    time.Time // when the outcome arrived: a success's acknowledgement
}

// New connects to Kafka and starts the producer. Records go to the event
// topics named under k's prefix.
func New(k kafka.Settings, sendTimeout time.Duration, reg *events.Registry, logger *slog.Logger) (*Publisher, error) {
	if reg == nil || logger == nil {
		return nil, errors.New("publisher: registry and logger are required")
	}
	client, err := kgo.NewClient(k.ProducerOptions("outbox-relay", sendTimeout)...)
	if err != nil {
		return nil, fmt.Errorf("connect to Kafka %v: %w", k.Brokers, err)
	}
	return &Publisher{client: client, records: &recordWriter{reg: reg, prefix: k.Prefix}, sendTimeout: sendTimeout}, nil
}

// Close waits up to the send timeout for records still in the producer,
// then closes it; records still unsent are failed.
func (p *Publisher) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), p.sendTimeout)
	defer cancel()
	err := p.client.Flush(ctx)
	p.client.Close()
	if err != nil {
		return fmt.Errorf("flush the producer: %w", err)
	}
	return nil
}

// Ping checks that Kafka answers a metadata request.
func (p *Publisher) Ping(ctx context.Context) error {
	if err := p.client.Ping(ctx); err != nil {
		return fmt.Errorf("kafka metadata: %w", err)
	}
	return nil
}

// Record maps m to a Kafka record: topic derived from the type, key =
// aggregate id, CloudEvents attributes as ce_* headers, data as the value.
//
// Any type whose topic derives by convention is published, known to this
// build's registry or not: the relay is transport, and a type no consumer
// understands belongs in that topic's dead-letter topic, where consumers
// put it, not silently in outbox_failed.
func (p *Publisher) Record(ctx context.Context, m Message) (*kgo.Record, error) {
	return p.records.write(ctx, m)
}

// Pending is a batch handed to the producer whose outcomes are not yet all
// known.
type Pending struct {
	out      []error
	acked    []time.Time
	arrived  []bool
	results  chan result
	pending  int
	deadline time.Time
}

// Prepared is a batch mapped to Kafka records, not yet handed to the
// producer.
type Prepared struct {
	pms  []*kgo.Record
	errs []error // mapping errors; the record is nil then
}

// Prepare maps msgs to records, on every CPU for a large batch; callers
// prepare the next batch while the previous one is in flight.
func (p *Publisher) Prepare(ctx context.Context, msgs []Message) Prepared {
	prep := Prepared{pms: make([]*kgo.Record, len(msgs)), errs: make([]error, len(msgs))}
	workers := min(runtime.GOMAXPROCS(0), max(1, len(msgs)/64))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(msgs); i += workers {
				prep.pms[i], prep.errs[i] = p.Record(ctx, msgs[i])
			}
		})
	}
	wg.Wait()
	return prep
}

// Feed hands a prepared batch to the producer, in order. Batches must be fed
// one after the other, in id order, for per-partition order to hold.
func (p *Publisher) Feed(ctx context.Context, prep Prepared) *Pending {
	n := len(prep.pms)
	pd := &Pending{out: prep.errs, acked: make([]time.Time, n), arrived: make([]bool, n), results: make(chan result, n)}
	for i, pm := range prep.pms {
		if pm == nil {
			pd.arrived[i] = true
			continue
		}
		if ctx.Err() != nil {
			for j := i; j < n; j++ {
				if prep.pms[j] != nil {
					pd.out[j], pd.arrived[j] = ctx.Err(), true
				}
			}
			pd.deadline = time.Now()
			return pd
		}
		pd.pending++
		// The promise runs on the producer's goroutine; the channel has room
		// for every outcome, so it never blocks it, also when the batch's
		// waiter gave up.
		results := pd.results
		p.client.Produce(ctx, pm, func(_ *kgo.Record, err error) {
			results <- result{index: i, err: err, at: time.Now()}
		})
	}
	// The producer retries a record until the cluster answers; the waiter
	// reports it missing (ErrSendTimeout, retriable) after twice the send
	// timeout: the broker's wait for its replicas and a retry.
	pd.deadline = time.Now().Add(2 * p.sendTimeout)
	return pd
}

// Wait returns the outcomes, in message order, once all have arrived, the
// send timeout has passed (ErrSendTimeout for the missing ones) or ctx ends.
func (pd *Pending) Wait(ctx context.Context) []error {
	timer := time.NewTimer(time.Until(pd.deadline))
	defer timer.Stop()
	for pd.pending > 0 {
		select {
		case r := <-pd.results:
			pd.out[r.index], pd.arrived[r.index] = r.err, true
			if r.err == nil {
				pd.acked[r.index] = r.at
			}
			pd.pending--
			continue
		case <-timer.C:
		case <-ctx.Done():
		}
		cause := ErrSendTimeout
		if ctx.Err() != nil {
			cause = ctx.Err()
		}
		for i := range pd.out {
			if !pd.arrived[i] {
				pd.out[i], pd.arrived[i] = cause, true
			}
		}
		pd.pending = 0
	}
	return pd.out
}

// AckedAt returns when the broker's acknowledgement of message i reached the
// producer (this process's clock), once Wait has returned; zero for a
// message that did not succeed.
func (pd *Pending) AckedAt(i int) time.Time {
	if pd.out[i] != nil {
		return time.Time{}
	}
	return pd.acked[i]
}
