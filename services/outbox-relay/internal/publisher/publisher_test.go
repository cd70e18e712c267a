package publisher

import (
	"context"
	"fmt"
	"testing"

	"github.com/IBM/sarama"

	"github.com/loopers/commerce-pipeline/pkg/events"
)

func TestUnpublishable(t *testing.T) {
	t.Parallel()
	wrap := func(err error) error { return fmt.Errorf("send: %w", &sarama.ProducerError{Err: err}) }
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"success", nil, false},
		{"message too large", wrap(sarama.ErrMessageSizeTooLarge), true},
		{"record list too large", wrap(sarama.ErrMessageSetSizeTooLarge), true},
		{"invalid record", wrap(sarama.ErrInvalidRecord), true},
		{"invalid topic", wrap(sarama.ErrInvalidTopic), true},
		{"producer's own size check", wrap(sarama.ConfigurationError("Attempt to produce message larger than configured Producer.MaxMessageBytes")), true},
		{"unknown event type", fmt.Errorf("x: %w", events.ErrUnknownType), true},
		{"unknown topic is transient", wrap(sarama.ErrUnknownTopicOrPartition), false},
		{"not enough replicas", wrap(sarama.ErrNotEnoughReplicas), false},
		{"leader moved", wrap(sarama.ErrNotLeaderForPartition), false},
		{"send timeout", ErrSendTimeout, false},
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
