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
	settings    kafka.Settings
	sendTimeout time.Duration

	// lone sends a record in a batch of its own (ProduceAlone); made on
	// first use, which is rare.
	loneOnce sync.Once
	lone     *kgo.Client
	loneErr  error
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
	return &Publisher{client: client, records: &recordWriter{reg: reg, prefix: k.Prefix}, settings: k, sendTimeout: sendTimeout}, nil
}

// Close waits up to the send timeout for records still in the producer,
// then closes it; records still unsent are failed.
func (p *Publisher) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), p.sendTimeout)
	defer cancel()
	err := p.client.Flush(ctx)
	p.client.Close()
	p.loneOnce.Do(func() {})
	if p.lone != nil {
		p.lone.Close()
	}
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

// Prepared is a batch mapped to Kafka records, not yet handed to the
// producer.
type Prepared struct {
	pms  []*kgo.Record
	errs []error // mapping errors; the record is nil then
}

// Len returns the number of messages mapped.
func (p Prepared) Len() int { return len(p.pms) }

// Record returns message i's record, or nil and the mapping error (an
// unpublishable message).
func (p Prepared) Record(i int) (*kgo.Record, error) { return p.pms[i], p.errs[i] }

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

// Produce hands rec to the producer. done is called once, on the producer's
// goroutine, with the outcome and the time it arrived; it must not block.
// Records of a partition go out in the order they are produced, and when
// the producer fails one it fails every record buffered behind it in the
// partition too.
//
// A record may be produced again once its outcome has arrived; ctx is its
// context each time (the producer keeps a record's first context unless
// told otherwise, and cancelling it aborts the record if it is first in a
// batch not yet sent).
func (p *Publisher) Produce(ctx context.Context, rec *kgo.Record, done func(err error, at time.Time)) {
	rec.Context = ctx
	p.client.Produce(ctx, rec, func(_ *kgo.Record, err error) { done(err, time.Now()) })
}

// ProduceAlone sends rec in a produce batch of its own, on a producer of its
// own, and returns the outcome. A broker refuses a batch too large as a
// whole, so a record refused with others may be innocent; refused alone,
// it is not.
func (p *Publisher) ProduceAlone(ctx context.Context, rec *kgo.Record) error {
	p.loneOnce.Do(func() {
		p.lone, p.loneErr = kgo.NewClient(p.settings.ProducerOptions("outbox-relay-alone", p.sendTimeout)...)
	})
	if p.loneErr != nil {
		return fmt.Errorf("connect the lone producer: %w", p.loneErr)
	}
	rec.Context = ctx
	return p.lone.ProduceSync(ctx, rec).FirstErr()
}
