package lease

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/loopers/commerce-pipeline/internal/pg"
	"github.com/loopers/commerce-pipeline/internal/testenv"
	"github.com/loopers/commerce-pipeline/services/outbox-relay/internal/store"
)

// term is one node's belief that it led: from when it learned it led to the
// last moment it checked it still did.
type term struct {
	token      int64
	owner      string
	from, till time.Time
}

// TestNeverTwoLeaders races 8 nodes for 100 lease terms. A node holds the
// lease for a moment, then either releases it or dies holding it (the next
// node must wait for the TTL); a dead node comes back under a new id. No two
// terms may overlap in time, each token belongs to one owner, and tokens grow
// with time.
//
//nolint:paralleltest // leadership race: 8 electors on a 150 ms lease, judged on the wall clock; it flaked under parallel load
func TestNeverTwoLeaders(t *testing.T) {
	st, err := store.Open(context.Background(), testenv.DatabaseURL(t), pg.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	logger := slog.New(slog.DiscardHandler)
	const nodes, terms, ttl = 8, 100, 150 * time.Millisecond

	var (
		mu  sync.Mutex
		log []term
		wg  sync.WaitGroup
	)
	// Run until terms terms were observed, not until the token reached
	// terms: on a loaded machine a term can end before its holder logs it.
	done := func() bool {
		mu.Lock()
		defer mu.Unlock()
		seen := map[int64]bool{}
		for _, x := range log {
			seen[x.token] = true
		}
		return len(seen) >= terms
	}
	for i := range nodes {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			life := 0
			newElector := func() *Elector {
				life++
				e, err := New(st, "race", fmt.Sprintf("node-%d-life-%d", i, life), ttl, logger, nil)
				if err != nil {
					panic(err)
				}
				return e
			}
			e := newElector()
			for !done() {
				ok, err := e.TryAcquire(context.Background())
				if err != nil || !ok {
					time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
					continue
				}
				f, held := e.Fence()
				if !held {
					continue
				}
				from := time.Now()
				time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
				till := time.Now()
				if _, still := e.Fence(); !still {
					till = e.until
				}
				mu.Lock()
				log = append(log, term{token: f.Token, owner: f.Owner, from: from, till: till})
				mu.Unlock()
				if rng.IntN(5) == 0 {
					e = newElector() // died holding the lease
					continue
				}
				if err := e.Release(context.Background()); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()

	owners := map[int64]string{}
	for _, x := range log {
		if o, ok := owners[x.token]; ok && o != x.owner {
			t.Errorf("token %d held by %s and %s", x.token, o, x.owner)
		}
		owners[x.token] = x.owner
	}
	slices.SortFunc(log, func(a, b term) int { return a.from.Compare(b.from) })
	for i := 1; i < len(log); i++ {
		prev, cur := log[i-1], log[i]
		if prev.owner != cur.owner && !prev.till.Before(cur.from) {
			t.Errorf("two leaders: %s (token %d) until %s, %s (token %d) from %s",
				prev.owner, prev.token, prev.till.Format(time.StampMicro), cur.owner, cur.token, cur.from.Format(time.StampMicro))
		}
		if cur.token < prev.token {
			t.Errorf("token went back from %d to %d", prev.token, cur.token)
		}
	}
	if len(owners) < terms {
		t.Errorf("%d terms, want at least %d", len(owners), terms)
	}
}
