// Package cache keeps product detail bodies in Redis (cache-aside) under
// productcache.Key, the key product-consumers also deletes when a product's
// stock runs out.
package cache

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/loopers/commerce-pipeline/internal/productcache"
)

// Redis is a product detail cache in Redis.
type Redis struct {
	client *redis.Client
	ttl    time.Duration
}

// NewRedis connects to the Redis at url; entries live for ttl, which bounds
// how stale a detail can be after a change this service did not invalidate
// (aggregates updated by product-consumers, or a read racing a write).
func NewRedis(ctx context.Context, url string, ttl time.Duration) (*Redis, error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	c := redis.NewClient(opts)
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		return nil, fmt.Errorf("redis: ping: %w", err)
	}
	return &Redis{client: c, ttl: ttl}, nil
}

// Close closes the connections.
func (r *Redis) Close() error { return r.client.Close() }

// Get returns the cached body of product id, if any.
func (r *Redis) Get(ctx context.Context, id int64) ([]byte, bool, error) {
	b, err := r.client.Get(ctx, productcache.Key(id)).Bytes()
	switch {
	case errors.Is(err, redis.Nil):
		return nil, false, nil
	case err != nil:
		return nil, false, fmt.Errorf("redis: get product %d: %w", id, err)
	}
	return b, true, nil
}

// Set caches the body of product id.
func (r *Redis) Set(ctx context.Context, id int64, body []byte) error {
	if err := r.client.Set(ctx, productcache.Key(id), body, r.ttl).Err(); err != nil {
		return fmt.Errorf("redis: set product %d: %w", id, err)
	}
	return nil
}

// Delete drops the cached bodies of the given products.
func (r *Redis) Delete(ctx context.Context, ids ...int64) error {
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = productcache.Key(id)
	}
	if err := r.client.Del(ctx, keys...).Err(); err != nil {
		return fmt.Errorf("redis: delete %v: %w", keys, err)
	}
	return nil
}
