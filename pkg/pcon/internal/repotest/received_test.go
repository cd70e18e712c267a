package pcon_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/loopers/commerce-pipeline/pkg/pcon"
)

// TestReceivedTime: every record reaches the handler with the time it was
// fetched, after it was produced and before the handler runs, and keeps that
// time on a retry.
func TestReceivedTime(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	produced := time.Now()
	recs := e.produce(200, keyMod(10))
	var (
		mu       sync.Mutex
		received = map[int64]time.Time{} // by offset, of partition 0
		retried  = map[int64]bool{}
		bad      []string
	)
	group := e.group("received")
	_, stop := start(t, e.config(group), pcon.RecordHandler(func(ctx context.Context, r *pcon.Record) error {
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		switch {
		case r.Received.Before(produced), r.Received.After(now):
			bad = append(bad, "received "+r.Received.String()+", produced from "+produced.String()+", handled "+now.String())
		case r.Received.Before(r.Timestamp.Truncate(time.Millisecond)):
			bad = append(bad, "received "+r.Received.String()+" before its timestamp "+r.Timestamp.String())
		}
		if r.Partition != 0 {
			return nil
		}
		if first, ok := received[r.Offset]; ok {
			if !first.Equal(r.Received) {
				bad = append(bad, "the retry was received at "+r.Received.String()+", the first attempt at "+first.String())
			}
			retried[r.Offset] = true
			return nil
		}
		received[r.Offset] = r.Received
		return errors.New("fail once")
	}))
	e.waitCommitted(group, endOffsets(recs))
	stop()
	mu.Lock()
	defer mu.Unlock()
	for _, b := range bad {
		t.Error(b)
	}
	if len(retried) == 0 || len(retried) != len(received) {
		t.Errorf("%d records of partition 0 retried, %d failed once", len(retried), len(received))
	}
}
