package publisher

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/loopers/commerce-pipeline/internal/testenv"
	"github.com/loopers/commerce-pipeline/pkg/events"
)

// TestAckedAt: each published message carries the time its acknowledgement
// arrived, between the send and the end of Wait; a message that failed has
// none.
func TestAckedAt(t *testing.T) {
	t.Parallel()
	reg := events.NewRegistry()
	kafka := testenv.Kafka(t, reg.AllTopics()...)
	p, err := New(kafka.Settings, 5*time.Second, reg, slog.New(slog.NewJSONHandler(io.Discard, nil)))
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
	sent := time.Now()
	pd := p.Feed(ctx, p.Prepare(ctx, []Message{msg, bad, msg}))
	errs := pd.Wait(ctx)
	waited := time.Now()
	for i, want := range []bool{true, false, true} {
		if (errs[i] == nil) != want {
			t.Fatalf("message %d: error %v", i, errs[i])
		}
		at := pd.AckedAt(i)
		switch {
		case !want && !at.IsZero():
			t.Errorf("failed message %d acknowledged at %v", i, at)
		case want && (at.Before(sent) || at.After(waited)):
			t.Errorf("message %d acknowledged at %v, outside the send (%v) and the end of Wait (%v)", i, at, sent, waited)
		}
	}
}
