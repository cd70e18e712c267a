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
	"fmt"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/loopers/commerce-pipeline/pkg/pcon/brokerwatch"
)

// Reclaimer reclaims DLT records. Its methods may be called concurrently.
type Reclaimer struct {
	cfg      Config
	client   sarama.Client
	consumer sarama.Consumer
	producer sarama.SyncProducer
	metrics  *metrics
	// stopWatch ends the brokerwatch of the client's connections and
	// waits for it.
	stopWatch func()

	closeOnce sync.Once
	mu        sync.Mutex // guards partLock
	partLock  map[tp]*sync.Mutex

	// commits moves a partition's committed position once its records
	// were republished: the Reclaimer itself, through Kafka.
	commits committer
}

// committer commits offset as k's position, never backwards, and returns
// the position k is left at (Reclaimer.commitForward).
type committer interface {
	commitForward(k tp, offset int64) (int64, error)
}

// New connects to the brokers.
func New(cfg Config) (*Reclaimer, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("reclaim: %w", err)
	}
	sc := cfg.Kafka.Config(cfg.ClientID)
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
	// A fetch, commit or republish sent to a broker that stopped answering
	// is given up within seconds, not after Net.ReadTimeout: the pass
	// follows the partition to its new leader once Kafka fences the broker.
	watch := brokerwatch.New(sc, brokerwatch.Options{Timeout: cfg.SilentBroker, Logger: cfg.Logger})
	ctx, cancel := context.WithCancel(context.Background())
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		watch.Run(ctx)
	}()
	stopWatch := func() {
		cancel()
		<-watched
	}
	client, err := sarama.NewClient(cfg.Kafka.Brokers, sc)
	if err != nil {
		stopWatch()
		return nil, fmt.Errorf("reclaim: connect to Kafka %v: %w", cfg.Kafka.Brokers, err)
	}
	r := &Reclaimer{cfg: cfg, client: client, stopWatch: stopWatch, partLock: map[tp]*sync.Mutex{}}
	r.commits = r
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
	r.stopWatch()
}
