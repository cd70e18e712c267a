// Package cache connects commerce-api to the product detail cache in Redis;
// the protocol (tombstones, compare-and-set fills) is internal/productcache's,
// shared with product-consumers, which invalidates after its commits.
package cache

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/loopers/commerce-pipeline/internal/productcache"
)

// Redis is a product detail cache in Redis.
type Redis struct {
	*productcache.Cache
	client *redis.Client
}

// NewRedis connects to the Redis at url; bodies live for ttl, which bounds
// staleness only after an invalidation that failed (see productcache).
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
	return &Redis{Cache: productcache.New(c, ttl), client: c}, nil
}

// Close closes the connections.
func (r *Redis) Close() error { return r.client.Close() }
