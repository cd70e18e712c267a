// Package productcache is the Redis cache of product detail bodies that
// commerce-api fills (cache-aside) and every writer of a product's state
// invalidates: commerce-api after a stock change, product-consumers after
// each aggregate commit. Both sides use this package, so they agree on the
// keys and on the protocol below.
//
// An entry is either a cached body or a tombstone. Invalidate replaces the
// entry with a tombstone unique to that invalidation (not a delete), and a
// reader fills only if the entry is still what it saw before reading the
// database (Fill is a compare-and-set). So a reader that read the database
// before a commit cannot cache what it read after the commit's invalidation:
// the tombstone it would overwrite is not the one it saw. Staleness is then
// bounded by the time between a commit and its invalidation (milliseconds),
// not by the TTL; the TTL only bounds an entry whose invalidation failed
// (Redis unreachable from the writer at that moment).
//
//	c, err := productcache.Open(redisURL, 30*time.Second)
//	e, err := c.Get(ctx, id)        // e.Hit: serve e.Body
//	body := readFromDatabase()
//	err = c.Fill(ctx, id, e, body)  // cached only if no invalidation came between
//	...
//	err = c.Invalidate(ctx, ids...) // after the writer's commit
package productcache

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// TombstoneTTL is how long an invalidation's tombstone lives. It must
// outlast the window between a reader's Get and its Fill (one request, at
// most its deadline); a longer one only costs a little memory per product
// changed.
const TombstoneTTL = time.Minute

// tombstonePrefix marks a tombstone. Bodies are JSON objects, which start
// with '{', so no body is mistaken for one.
const tombstonePrefix = "~"

// Key is the Redis key of the cached detail of product id.
func Key(id int64) string { return "product:" + strconv.FormatInt(id, 10) }

// Cache is the product detail cache. It is safe for concurrent use.
type Cache struct {
	client *redis.Client
	ttl    time.Duration
}

// Open returns a cache on the Redis at url (redis:// or rediss://) whose
// bodies live for ttl (only fills use it). It does not connect: see Ping.
// Every call honours its context's deadline, so a caller bounds what a slow
// Redis costs it (go-redis would otherwise wait its own read timeout).
func Open(url string, ttl time.Duration) (*Cache, error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	opts.ContextTimeoutEnabled = true
	return &Cache{client: redis.NewClient(opts), ttl: ttl}, nil
}

// Ping checks that Redis answers.
func (c *Cache) Ping(ctx context.Context) error {
	if err := c.client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis: ping: %w", err)
	}
	return nil
}

// Close closes the connections.
func (c *Cache) Close() error { return c.client.Close() }

// Entry is what Get saw: a body to serve, or the state a Fill must find.
type Entry struct {
	Hit  bool
	Body []byte
	seen string // the tombstone seen, or "" when there was no entry
}

// Get reads product id's entry.
func (c *Cache) Get(ctx context.Context, id int64) (Entry, error) {
	v, err := c.client.Get(ctx, Key(id)).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return Entry{}, nil
	case err != nil:
		return Entry{}, fmt.Errorf("redis: get product %d: %w", id, err)
	case strings.HasPrefix(v, tombstonePrefix):
		return Entry{seen: v}, nil
	}
	return Entry{Hit: true, Body: []byte(v)}, nil
}

// fill sets KEYS[1] to ARGV[2] for ARGV[3] ms if it still holds ARGV[1]
// ("" for absent).
var fill = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if (cur == false and ARGV[1] == '') or cur == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0`)

// Fill caches body for product id if the entry is still as seen by the Get
// that returned e; it reports whether it did.
func (c *Cache) Fill(ctx context.Context, id int64, e Entry, body []byte) (bool, error) {
	n, err := fill.Run(ctx, c.client, []string{Key(id)}, e.seen, body, c.ttl.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("redis: fill product %d: %w", id, err)
	}
	return n == 1, nil
}

// Invalidate replaces the entries of ids with fresh tombstones, in one round
// trip. Call it after the change's commit.
func (c *Cache) Invalidate(ctx context.Context, ids ...int64) error {
	if len(ids) == 0 {
		return nil
	}
	var nonce [12]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return fmt.Errorf("tombstone nonce: %w", err)
	}
	tomb := tombstonePrefix + hex.EncodeToString(nonce[:])
	_, err := c.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, id := range ids {
			p.Set(ctx, Key(id), tomb, TombstoneTTL)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("redis: invalidate products %v: %w", ids, err)
	}
	return nil
}
