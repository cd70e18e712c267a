// Package publisher sends outbox rows to Kafka as CloudEvents in binary
// content mode, with an idempotent sarama producer, and classifies failures
// as retriable or permanent.
package publisher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/IBM/sarama"

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
}

// Unpublishable reports whether err can never succeed on retry:
//   - an event type whose topic cannot be derived;
//   - MESSAGE_TOO_LARGE / RECORD_LIST_TOO_LARGE / INVALID_RECORD from the
//     broker, or the producer's own size check (a ConfigurationError: the
//     producer's configuration is validated when it is built, so one that
//     comes back for a message is about that message);
//   - INVALID_TOPIC_EXCEPTION (an illegal topic name).
//
// UNKNOWN_TOPIC_OR_PARTITION is deliberately retriable: topics are created by
// infrastructure, and a topic being created, or a partition whose leader is
// moving, answers that for a while. If the topic truly never appears the row
// reaches max-age and moves to outbox_failed, which is the same end without
// losing events to a deployment race.
func Unpublishable(err error) bool {
	var cfgErr sarama.ConfigurationError
	switch {
	case err == nil:
		return false
	case errors.Is(err, ErrUnpublishable), errors.Is(err, events.ErrUnprocessable), errors.As(err, &cfgErr):
		return true
	}
	var kerr sarama.KError
	if errors.As(err, &kerr) {
		switch kerr {
		case sarama.ErrMessageSizeTooLarge, sarama.ErrMessageSetSizeTooLarge, sarama.ErrInvalidRecord, sarama.ErrInvalidTopic:
			return true
		}
	}
	return false
}

// Publisher wraps one idempotent async producer shared by every batch.
type Publisher struct {
	client      sarama.Client
	producer    sarama.AsyncProducer
	records     *recordWriter
	sendTimeout time.Duration
	done        sync.WaitGroup
}

// slot routes a producer result back to the batch and position it belongs
// to. Results of a batch that already timed out land in its buffered channel
// and are dropped with it.
type slot struct {
	results chan<- result
	index   int
}

type result struct {
	index int
	err   error
	at    time.Time // when the outcome arrived: a success's acknowledgement
}

// Config builds the producer configuration: acks=all, idempotent (which
// sarama allows only with one request in flight per broker, and that also
// keeps per-partition order across retries), 3 retries, and sendTimeout as
// the broker's ack timeout.
func Config(sendTimeout time.Duration) *sarama.Config {
	cfg := kafka.Config("outbox-relay")
	cfg.Producer.Idempotent = true
	cfg.Net.MaxOpenRequests = 1
	cfg.Producer.Retry.Max = 3
	cfg.Producer.Retry.Backoff = 50 * time.Millisecond
	cfg.Producer.Timeout = sendTimeout
	cfg.Producer.Partitioner = sarama.NewHashPartitioner
	cfg.ChannelBufferSize = 4096
	cfg.Metadata.AllowAutoTopicCreation = false
	return cfg
}

// New connects to brokers and starts the producer.
func New(brokers []string, sendTimeout time.Duration, reg *events.Registry, logger *slog.Logger) (*Publisher, error) {
	if reg == nil || logger == nil {
		return nil, errors.New("publisher: registry and logger are required")
	}
	client, err := sarama.NewClient(brokers, Config(sendTimeout))
	if err != nil {
		return nil, fmt.Errorf("connect to Kafka %v: %w", brokers, err)
	}
	producer, err := sarama.NewAsyncProducerFromClient(client)
	if err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("start Kafka producer: %w", err)
	}
	p := &Publisher{client: client, producer: producer, records: &recordWriter{reg: reg}, sendTimeout: sendTimeout}
	p.done.Add(2)
	go func() {
		defer p.done.Done()
		for m := range producer.Successes() {
			s := m.Metadata.(slot)
			s.results <- result{index: s.index, at: time.Now()}
		}
	}()
	go func() {
		defer p.done.Done()
		for e := range producer.Errors() {
			s := e.Msg.Metadata.(slot)
			s.results <- result{index: s.index, err: e.Err}
		}
	}()
	return p, nil
}

// Close flushes and stops the producer and closes the client.
func (p *Publisher) Close() error {
	err := p.producer.Close()
	p.done.Wait()
	return errors.Join(err, p.client.Close())
}

// Ping checks that Kafka answers a metadata request.
func (p *Publisher) Ping(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- p.client.RefreshMetadata() }()
	select {
	case err := <-errc:
		if err != nil {
			return fmt.Errorf("kafka metadata: %w", err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("kafka metadata: %w", ctx.Err())
	}
}

// ProducerMessage maps m to a Kafka record: topic derived from the type, key
// = aggregate id, CloudEvents attributes as ce_* headers, data as the value.
//
// Any type whose topic derives by convention is published, known to this
// build's registry or not: the relay is transport, and a type no consumer
// understands belongs in that topic's dead-letter topic, where consumers
// put it, not silently in outbox_failed.
func (p *Publisher) ProducerMessage(ctx context.Context, m Message) (*sarama.ProducerMessage, error) {
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
	pms  []*sarama.ProducerMessage
	errs []error // mapping errors; the record is nil then
}

// Prepare maps msgs to records, on every CPU for a large batch; callers
// prepare the next batch while the previous one is in flight.
func (p *Publisher) Prepare(ctx context.Context, msgs []Message) Prepared {
	prep := Prepared{pms: make([]*sarama.ProducerMessage, len(msgs)), errs: make([]error, len(msgs))}
	workers := min(runtime.GOMAXPROCS(0), max(1, len(msgs)/64))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(msgs); i += workers {
				prep.pms[i], prep.errs[i] = p.ProducerMessage(ctx, msgs[i])
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
		pm.Metadata = slot{results: pd.results, index: i}
		select {
		case p.producer.Input() <- pm:
			pd.pending++
		case <-ctx.Done():
			for j := i; j < n; j++ {
				if prep.pms[j] != nil {
					pd.out[j], pd.arrived[j] = ctx.Err(), true
				}
			}
			pd.deadline = time.Now()
			return pd
		}
	}
	pd.deadline = time.Now().Add(p.sendTimeout)
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
			pd.out[r.index], pd.acked[r.index], pd.arrived[r.index] = r.err, r.at, true
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
