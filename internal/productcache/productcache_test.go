package productcache_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/loopers/commerce-pipeline/internal/productcache"
	"github.com/loopers/commerce-pipeline/internal/testenv"
)

func newCache(t *testing.T) (*productcache.Cache, *redis.Client) {
	t.Helper()
	url := testenv.RedisURL(t)
	c, err := productcache.Open(url, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	return c, rdb
}

// TestFillRace: a reader that read the database before a writer's commit
// (and so before the commit's invalidation) must not cache what it read;
// one that read after the invalidation caches; a later invalidation drops
// the entry again. Each case is a reader's Get, then what happens before
// its Fill.
func TestFillRace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name       string
		before     func(c *productcache.Cache, id int64) // before the reader's Get
		between    func(c *productcache.Cache, id int64) // between its Get and its Fill
		wantFilled bool
	}{
		{name: "no entry, no invalidation", wantFilled: true},
		{
			name:       "no entry, an invalidation while the database is read",
			between:    func(c *productcache.Cache, id int64) { mustInvalidate(t, c, id) },
			wantFilled: false,
		},
		{
			name:       "a tombstone seen, no invalidation since",
			before:     func(c *productcache.Cache, id int64) { mustInvalidate(t, c, id) },
			wantFilled: true,
		},
		{
			name:       "a tombstone seen, another invalidation since",
			before:     func(c *productcache.Cache, id int64) { mustInvalidate(t, c, id) },
			between:    func(c *productcache.Cache, id int64) { mustInvalidate(t, c, id) },
			wantFilled: false,
		},
		{
			name: "another reader filled meanwhile",
			between: func(c *productcache.Cache, id int64) {
				if ok, err := c.Fill(ctx, id, productcache.Entry{}, []byte(`{"other":true}`)); err != nil || !ok {
					t.Fatalf("the other reader's fill: %v %v", ok, err)
				}
			},
			wantFilled: false,
		},
	}
	c, _ := newCache(t)
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			id := time.Now().UnixNano()%1_000_000_000*100 + int64(i) // a key no other test uses
			if tc.before != nil {
				tc.before(c, id)
			}
			seen, err := c.Get(ctx, id)
			if err != nil || seen.Hit {
				t.Fatalf("first read: hit %v, err %v; want a miss", seen.Hit, err)
			}
			if tc.between != nil {
				tc.between(c, id)
			}
			filled, err := c.Fill(ctx, id, seen, []byte(`{"mine":true}`))
			if err != nil {
				t.Fatal(err)
			}
			if filled != tc.wantFilled {
				t.Errorf("filled %v, want %v", filled, tc.wantFilled)
			}
			got, err := c.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if got.Hit && string(got.Body) == `{"mine":true}` && !tc.wantFilled {
				t.Errorf("the stale body is cached")
			}
			mustInvalidate(t, c, id)
			if got, err := c.Get(ctx, id); err != nil || got.Hit {
				t.Errorf("after an invalidation: hit %v, err %v; want a miss", got.Hit, err)
			}
		})
	}
}

// TestEntriesExpire: bodies take the cache's TTL, tombstones TombstoneTTL.
func TestEntriesExpire(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, rdb := newCache(t)
	id := time.Now().UnixNano()%1_000_000_000*100 + 99
	if ok, err := c.Fill(ctx, id, productcache.Entry{}, []byte(`{}`)); err != nil || !ok {
		t.Fatalf("fill: %v %v", ok, err)
	}
	if ttl := rdb.PTTL(ctx, productcache.Key(id)).Val(); ttl <= 29*time.Second || ttl > 30*time.Second {
		t.Errorf("body TTL %v, want 30s", ttl)
	}
	mustInvalidate(t, c, id)
	if ttl := rdb.PTTL(ctx, productcache.Key(id)).Val(); ttl <= productcache.TombstoneTTL-time.Second || ttl > productcache.TombstoneTTL {
		t.Errorf("tombstone TTL %v, want %v", ttl, productcache.TombstoneTTL)
	}
}

func mustInvalidate(t *testing.T, c *productcache.Cache, ids ...int64) {
	t.Helper()
	if err := c.Invalidate(context.Background(), ids...); err != nil {
		t.Fatal(err)
	}
}
