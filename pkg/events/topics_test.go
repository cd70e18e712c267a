package events_test

import (
	"errors"
	"testing"

	"github.com/loopers/commerce-pipeline/pkg/events"
)

// TestDomainTopics: DomainOf inverts DomainTopic for every registered topic,
// and TopicFor agrees with the type's TopicOf.
func TestDomainTopics(t *testing.T) {
	t.Parallel()
	reg := events.NewRegistry()
	for _, topic := range reg.Topics() {
		d := events.DomainOf(topic)
		if d == topic || events.DomainTopic(d) != topic {
			t.Errorf("topic %q: domain %q, back to %q", topic, d, events.DomainTopic(d))
		}
	}
	tests := []struct {
		name string
		ev   any
		want string
	}{
		{"like", events.LikeCanceledV1{}, "like-events"},
		{"order", events.OrderPaidV1{}, "order-events"},
		{"view", events.ProductViewedV1{}, "product-events"},
		{"stock", events.StockDepletedV1{}, "stock-events"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := reg.TopicFor(tc.ev)
			if err != nil || got != tc.want {
				t.Errorf("TopicFor(%T) = %q, %v; want %q", tc.ev, got, err, tc.want)
			}
		})
	}
	if _, err := reg.TopicFor(&events.LikeCreatedV1{}); !errors.Is(err, events.ErrUnknownType) {
		t.Errorf("TopicFor(a pointer) error %v, want ErrUnknownType", err)
	}
}
