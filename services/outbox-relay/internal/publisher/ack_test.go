package publisher

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/loopers/commerce-pipeline/internal/testenv"
	"github.com/loopers/commerce-pipeline/pkg/events"
)

// TestProduceOutcomes: each produced record's outcome arrives once, with
// the time its acknowledgement arrived (between the send and the callback's
// return); a message without a derivable topic fails at mapping, before the
// producer; a record refused alone as too large is the one too large.
func TestProduceOutcomes(t *testing.T) {
	t.Parallel()
	reg := events.NewRegistry()
	kafka := testenv.Kafka(t, reg.AllTopics()...)
	p, err := New(kafka.Settings, 5*time.Second, reg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	rec, err := reg.Marshal(events.ProductViewedV1{ProductID: 7, UserID: "u1"})
	if err != nil {
		t.Fatal(err)
	}
	msg := Message{Sequence: 1, EventID: "6f1c1a52-2f4e-4c1e-9a53-8f0f2a1d7e01", Type: rec.Type, Source: "test",
		AggregateType: rec.AggregateType, AggregateID: rec.AggregateID, Data: rec.Data, Time: time.Now()}
	bad := msg
	bad.Type = "no-topic"
	ctx := context.Background()
	prep := p.Prepare(ctx, []Message{msg, bad, msg})
	if _, err := prep.Record(1); !Unpublishable(err) {
		t.Fatalf("message without a topic: mapping error %v, want an unpublishable one", err)
	}
	type outcome struct {
		err error
		at  time.Time
	}
	outs := make(chan outcome, 2)
	sent := time.Now()
	for _, i := range []int{0, 2} {
		r, err := prep.Record(i)
		if err != nil {
			t.Fatal(err)
		}
		p.Produce(ctx, r, func(err error, at time.Time) { outs <- outcome{err, at} })
	}
	for range 2 {
		o := <-outs
		if o.err != nil || o.at.Before(sent) || o.at.After(time.Now()) {
			t.Errorf("outcome %v at %v, want success between %v and now", o.err, o.at, sent)
		}
	}

	huge := msg
	huge.Data = make([]byte, 2<<20) // past the producer's batch limit
	r, err := p.Prepare(ctx, []Message{huge}).Record(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.ProduceAlone(ctx, r); !errors.Is(err, kerr.MessageTooLarge) || !TooLarge(err) {
		t.Errorf("a record too large sent alone: %v, want MESSAGE_TOO_LARGE", err)
	}
}
