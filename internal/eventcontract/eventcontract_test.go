package eventcontract_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/cloudevents/sdk-go/protocol/kafka_sarama/v2"
	"github.com/cloudevents/sdk-go/v2/binding"

	"github.com/loopers/commerce-pipeline/internal/eventcontract"
	"github.com/loopers/commerce-pipeline/internal/reclaim"
	"github.com/loopers/commerce-pipeline/pkg/events"
	"github.com/loopers/commerce-pipeline/pkg/pcon"
)

// record is a like event as the relay writes it: the registry's CloudEvent
// through the Kafka binding in binary mode, keyed by the aggregate id.
func record(t *testing.T) eventcontract.Record {
	t.Helper()
	reg := events.NewRegistry()
	rec, err := reg.Marshal(events.LikeCreatedV1{UserID: "alice", ProductID: 227})
	if err != nil {
		t.Fatal(err)
	}
	ce, err := reg.ToCloudEvent(events.Envelope{ID: "0b7c2b4e-9a0f-4d7e-8f1a-4f3f1d2c5e6a", Source: "commerce-api",
		Time: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), Sequence: 42, Record: rec})
	if err != nil {
		t.Fatal(err)
	}
	pm := &sarama.ProducerMessage{Topic: "like-events"}
	if err := kafka_sarama.WriteProducerMessage(context.Background(), binding.ToMessage(&ce), pm); err != nil {
		t.Fatal(err)
	}
	r := eventcontract.Record{Topic: "like-events", Key: []byte(rec.AggregateID), Value: rec.Data}
	for _, h := range pm.Headers {
		r.Headers = append(r.Headers, eventcontract.Header{Key: string(h.Key), Value: string(h.Value)})
	}
	return r
}

func without(hs []eventcontract.Header, key string) []eventcontract.Header {
	return slices.DeleteFunc(slices.Clone(hs), func(h eventcontract.Header) bool { return h.Key == key })
}

func set(hs []eventcontract.Header, key, value string) []eventcontract.Header {
	return append(without(hs, key), eventcontract.Header{Key: key, Value: value})
}

// TestCheck: the checker accepts what the relay writes and refuses each way
// a record can drift from the document.
func TestCheck(t *testing.T) {
	t.Parallel()
	c, err := eventcontract.Default()
	if err != nil {
		t.Fatal(err)
	}
	good := record(t)
	if m, err := c.Check(good); err != nil || m.Name != "loopers.like.created.v1" {
		t.Fatalf("Check(the relay's record) = %v, %v", m, err)
	}
	change := func(f func(r *eventcontract.Record)) eventcontract.Record {
		r := good
		r.Headers = slices.Clone(good.Headers)
		f(&r)
		return r
	}
	// A record re-driven from a dead-letter or parked topic carries how often.
	if _, err := c.Check(change(func(r *eventcontract.Record) { r.Headers = set(r.Headers, reclaim.HeaderRedriveCount, "2") })); err != nil {
		t.Fatalf("Check(a re-driven record) = %v", err)
	}
	tests := []struct {
		name, want string
		r          eventcontract.Record
	}{
		{"a header the document does not know", "ce_traceparent", change(func(r *eventcontract.Record) { r.Headers = set(r.Headers, "ce_traceparent", "00-1") })},
		{"a re-drive count of zero", reclaim.HeaderRedriveCount, change(func(r *eventcontract.Record) { r.Headers = set(r.Headers, reclaim.HeaderRedriveCount, "0") })},
		{"a header missing", "ce_sequence", change(func(r *eventcontract.Record) { r.Headers = without(r.Headers, "ce_sequence") })},
		{"a header renamed", "ce_aggregateId", change(func(r *eventcontract.Record) {
			r.Headers = set(without(r.Headers, "ce_aggregateid"), "ce_aggregateId", "227")
		})},
		{"a header given twice", "twice", change(func(r *eventcontract.Record) {
			r.Headers = append(r.Headers, eventcontract.Header{Key: "ce_id", Value: "0b7c2b4e-9a0f-4d7e-8f1a-4f3f1d2c5e6a"})
		})},
		{"a header of the wrong form", "ce_id", change(func(r *eventcontract.Record) { r.Headers = set(r.Headers, "ce_id", "id-1") })},
		{"structured mode", "content-type", change(func(r *eventcontract.Record) {
			r.Headers = set(r.Headers, "content-type", "application/cloudevents+json")
		})},
		{"a type of another topic", "no message", change(func(r *eventcontract.Record) {
			r.Headers = set(r.Headers, "ce_type", "loopers.order.paid.v1")
		})},
		{"the wrong aggregate type", "ce_aggregatetype", change(func(r *eventcontract.Record) { r.Headers = set(r.Headers, "ce_aggregatetype", "Order") })},
		{"a key that is not the aggregate", "key", change(func(r *eventcontract.Record) { r.Key = []byte("228") })},
		{"no key", "key", change(func(r *eventcontract.Record) { r.Key = nil })},
		{"a payload member renamed", "additional", change(func(r *eventcontract.Record) { r.Value = []byte(`{"userID":"alice","productId":227}`) })},
		{"the old payload form", "missing", change(func(r *eventcontract.Record) { r.Value = []byte(`{"UserID":"alice","ProductID":227}`) })},
		{"a payload out of bounds", "productId", change(func(r *eventcontract.Record) { r.Value = []byte(`{"userId":"alice","productId":0}`) })},
		{"a topic of no channel", "not in the contract", change(func(r *eventcontract.Record) { r.Topic = "likes" })},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := c.Check(tc.r)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Check error = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

// TestCheckDeadLetter: a dead letter keeps whatever the original had, the
// reason it is there, and must carry pcon's headers.
func TestCheckDeadLetter(t *testing.T) {
	t.Parallel()
	c, err := eventcontract.Default()
	if err != nil {
		t.Fatal(err)
	}
	dl := record(t)
	dl.Topic = "like-events.DLT"
	dl.Value = []byte("not JSON at all")
	dl.Headers = set(dl.Headers, "ce_id", "forged")
	for k, v := range map[string]string{
		pcon.HeaderOriginalTopic: "like-events", pcon.HeaderOriginalPartition: "2", pcon.HeaderOriginalOffset: "17",
		pcon.HeaderOriginalTimestamp: "2026-01-02T03:04:05.000000006Z", pcon.HeaderConsumerGroup: "product-like-consumer",
		pcon.HeaderError: "bad event data", pcon.HeaderAttempts: "1", pcon.HeaderReason: "permanent", pcon.HeaderDeadLetteredAt: "2026-01-02T03:04:06Z",
	} {
		dl.Headers = append(dl.Headers, eventcontract.Header{Key: k, Value: v})
	}
	if _, err := c.Check(dl); err != nil {
		t.Fatalf("Check(dead letter) = %v", err)
	}
	parked := dl
	parked.Topic = "like-events.PARKED"
	if _, err := c.Check(parked); err == nil || !strings.Contains(err.Error(), reclaim.HeaderParkedReason) {
		t.Fatalf("Check(parked record without why) = %v, want it refused", err)
	}
	parked.Headers = append(slices.Clone(dl.Headers), eventcontract.Header{Key: reclaim.HeaderParkedReason, Value: "permanent"},
		eventcontract.Header{Key: reclaim.HeaderParkedAt, Value: "2026-01-02T03:04:07Z"})
	if _, err := c.Check(parked); err != nil {
		t.Fatalf("Check(parked) = %v", err)
	}
	dl.Headers = without(dl.Headers, pcon.HeaderReason)
	if _, err := c.Check(dl); err == nil || !strings.Contains(err.Error(), pcon.HeaderReason) {
		t.Fatalf("Check(dead letter without %s) = %v, want it refused", pcon.HeaderReason, err)
	}
}
