package pcon_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/loopers/commerce-pipeline/pkg/pcon"
)

// keptRecord is what a Record says: its key, value and header "i".
type keptRecord struct {
	Key, Value, Header string
}

func keptOf(r *pcon.Record) keptRecord {
	k := keptRecord{Key: string(r.Key), Value: string(r.Value)}
	for _, h := range r.Headers {
		if string(h.Key) == "i" {
			k.Header = string(h.Value)
		}
	}
	return k
}

// TestHandlersMayKeepRecords: a handler that keeps the *Records it was given
// (for work after returning, say) finds in them, once every record was
// handled, the data they had during its call, not a later record's, with
// either engine. Runs on kfake: the point is pcon's Records, not the broker.
func TestHandlersMayKeepRecords(t *testing.T) {
	t.Parallel()
	const n = 2000
	tests := []struct {
		name    string
		handler func(keep func(...*pcon.Record)) pcon.Handler
	}{
		{"per record", func(keep func(...*pcon.Record)) pcon.Handler {
			return pcon.RecordHandler(func(_ context.Context, r *pcon.Record) error { keep(r); return nil })
		}},
		{"micro-batch", func(keep func(...*pcon.Record)) pcon.Handler {
			return pcon.BatchHandler(func(_ context.Context, rs []*pcon.Record) error { keep(rs...); return nil })
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			addrs := newFakeCluster(t)
			fakeProduce(t, addrs, n, 50)
			var (
				mu   sync.Mutex
				kept []*pcon.Record
				// during is what each kept Record said during its call.
				during []keptRecord
				seen   = map[string]bool{}
				done   = make(chan struct{})
			)
			keep := func(rs ...*pcon.Record) {
				mu.Lock()
				defer mu.Unlock()
				for _, r := range rs {
					kept = append(kept, r)
					during = append(during, keptOf(r))
					seen[string(r.Value)] = true
				}
				if len(seen) == n && done != nil {
					close(done)
					done = nil
				}
			}
			wait := done
			runUntil(t, fakeConfig(addrs, "kept"), tt.handler(keep), wait, time.Minute)
			mu.Lock()
			defer mu.Unlock()
			got := make([]keptRecord, len(kept))
			for i, r := range kept {
				got[i] = keptOf(r)
			}
			if diff := cmp.Diff(during, got); diff != "" {
				t.Errorf("kept records after the calls (-during the call +after):\n%s", diff)
			}
		})
	}
}
