package relay

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/loopers/commerce-pipeline/internal/kafkabroker"
	"github.com/loopers/commerce-pipeline/internal/testenv"
	"github.com/loopers/commerce-pipeline/pkg/events"
	"github.com/loopers/commerce-pipeline/services/outbox-relay/internal/relaytest"
)

// TestIdempotentProducerAcrossBrokerRestart: the broker is killed (SIGKILL)
// and started again while the relay drains a stream of events; batches in
// flight at the kill are retried by the idempotent producer, and the broker,
// which rebuilt each producer's sequence state from its log, appends none of
// them twice. Every event reaches Kafka exactly once, in per-key order.
func TestIdempotentProducerAcrossBrokerRestart(t *testing.T) {
	t.Parallel()
	c := testenv.KafkaCluster(t, kafkabroker.Options{})
	env := relaytest.NewOn(t, c)
	cfg := testConfig(env, "node-a")
	cfg.LeaseTTL = time.Minute
	// Long enough for the broker to come back inside one send, so that the
	// producer's own retries, not the relay's, carry the batches across.
	cfg.SendTimeout = 30 * time.Second
	n := newNode(t, env, cfg)
	n.lead(t)
	n.start(t, true)

	const total, products = 3000, 20
	var (
		wg      sync.WaitGroup
		written []relaytest.Row
		mu      sync.Mutex
	)
	ctx, stopWriting := context.WithCancel(context.Background())
	defer stopWriting()
	wg.Go(func() {
		for i := 0; i < total && ctx.Err() == nil; i++ {
			r := env.Insert(t, env.Pool, events.ProductViewedV1{ProductID: int64(i%products + 1), UserID: "u" + itoa(int64(i))})
			mu.Lock()
			written = append(written, r)
			mu.Unlock()
		}
	})
	published := func() int64 { return testenv.EndOffsets(t, env.Kafka.Brokers, env.Topic("product-events")) }
	eventually(t, time.Minute, "the relay to publish a first part", func() bool { return published() >= total/5 })
	mu.Lock()
	writing := len(written) < total
	mu.Unlock()
	if err := c.Node(1).Kill(); err != nil {
		t.Fatal(err)
	}
	if !writing {
		t.Fatal("every event was written before the kill: the broker died after the stream, not during it")
	}
	time.Sleep(time.Second) // the relay's sends meet a dead broker meanwhile
	if err := c.Node(1).Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	mu.Lock()
	last := written[len(written)-1].ID
	mu.Unlock()
	eventually(t, 2*time.Minute, "the relay to publish every event", func() bool { return env.Cursor(t) >= last })

	recs := env.Records(t, total, time.Minute)
	if d := duplicates(recs); d != 0 {
		t.Errorf("%d of %d records are duplicates", d, len(recs))
	}
	if len(recs) != total {
		t.Errorf("%d records in Kafka, want %d", len(recs), total)
	}
	if err := orderedPerKey(recs); err != nil {
		t.Error(err)
	}
}
