package publisher

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/loopers/commerce-pipeline/internal/kafka"
	"github.com/loopers/commerce-pipeline/pkg/events"
)

func TestUnpublishable(t *testing.T) {
	t.Parallel()
	wrap := func(err error) error { return fmt.Errorf("send: %w", err) }
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"success", nil, false},
		{"message too large", wrap(kerr.MessageTooLarge), true},
		{"record list too large", wrap(kerr.RecordListTooLarge), true},
		{"invalid record", wrap(kerr.InvalidRecord), true},
		{"invalid topic", wrap(kerr.InvalidTopicException), true},
		{"unknown event type", fmt.Errorf("x: %w", events.ErrUnknownType), true},
		{"unknown topic is transient", wrap(kerr.UnknownTopicOrPartition), false},
		{"not enough replicas", wrap(kerr.NotEnoughReplicas), false},
		{"leader moved", wrap(kerr.NotLeaderForPartition), false},
		{"record timed out in the producer", wrap(kgo.ErrRecordTimeout), false},
		{"shutdown", context.Canceled, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := Unpublishable(tt.err); got != tt.want {
				t.Errorf("Unpublishable(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

// TestPartitionsAsSarama: the producer puts every key on the partition
// sarama's hash partitioner chose, so that an aggregate's events published
// before and after the producer changed share a partition, in order.
func TestPartitionsAsSarama(t *testing.T) {
	t.Parallel()
	part := kafka.SaramaPartitioner().ForTopic("t")
	for _, n := range []int32{1, 3, 7, 12} {
		ref, err := sarama.NewHashPartitioner("t").Partition(&sarama.ProducerMessage{Key: sarama.StringEncoder("x")}, n)
		if err != nil || ref < 0 {
			t.Fatal(ref, err)
		}
		for i := range 2000 {
			key := strconv.Itoa(i)
			if i%3 == 0 {
				key = "product-" + key
			}
			want, err := sarama.NewHashPartitioner("t").Partition(&sarama.ProducerMessage{Key: sarama.StringEncoder(key)}, n)
			if err != nil {
				t.Fatal(err)
			}
			if got := part.Partition(&kgo.Record{Key: []byte(key)}, int(n)); int32(got) != want {
				t.Fatalf("key %q of %d partitions: partition %d, sarama's %d", key, n, got, want)
			}
		}
	}
}
