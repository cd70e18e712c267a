package kafka

import (
	"hash/fnv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ProducerOptions returns the outbox relay's producer options under
// clientID (its benchmark's baseline produces with the very same): the
// brokers, TLS and SASL, acks from every in-sync replica, idempotence
// (franz-go's default: records are retried until they succeed), no linger
// (a batch goes out as soon as the previous request to its broker is
// answered), keys placed on partitions as sarama's hash partitioner placed
// them (SaramaPartitioner), sendTimeout as the broker's wait for its
// replicas, and a request given up on 3 s after that (a broker that hangs),
// to be retried on the partition's leader then; metadata refreshed at most
// every 250 ms rather than franz-go's 5 s, so that records held for a
// partition whose leader moved go to the new leader as soon as the cluster
// names it.
func (s Settings) ProducerOptions(clientID string, sendTimeout time.Duration) []kgo.Opt {
	return append(s.ClientOptions(clientID),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
		kgo.RecordPartitioner(SaramaPartitioner()),
		kgo.ProduceRequestTimeout(sendTimeout),
		// No delivery timeout: a record the producer gave up on for time
		// would take the records buffered behind it with it, but a record
		// fed after that would go out at once, ahead of the retry of the
		// ones before it (the three-broker fault test saw it). Records are
		// retried until the cluster answers; the relay's own wait gives up
		// on them and retries the head, in order.
		kgo.RequestTimeoutOverhead(3*time.Second),
		kgo.MetadataMinAge(250*time.Millisecond),
		kgo.MaxBufferedRecords(100_000),
	)
}

// SaramaPartitioner places a keyed record on the partition sarama's hash
// partitioner (FNV-1a) chose, so that an aggregate's events published by
// sarama and by franz-go share a partition, in order.
func SaramaPartitioner() kgo.Partitioner {
	return kgo.StickyKeyPartitioner(kgo.SaramaCompatHasher(func(b []byte) uint32 {
		h := fnv.New32a()
		_, _ = h.Write(b)
		return h.Sum32()
	}))
}
