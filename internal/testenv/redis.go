package testenv

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	tcredis "github.com/testcontainers/testcontainers-go/modules/redis"
)

const localRedis = "redis://127.0.0.1:6379/0"

var (
	redisOnce sync.Once
	redisURL  string
	redisErr  error
)

// redisDBs is how many logical databases a default Redis server has. Index 0
// is left to people; tests claim 1..15.
const redisDBs = 16

// RedisURL claims a logical Redis database for the test, empties it and
// returns its URL. Test binaries run in parallel, so the claim is a key with
// an expiry in database 0 that other binaries respect; it is released when
// the test ends.
func RedisURL(t testing.TB) string {
	t.Helper()
	Needs(t, needsRedis)
	redisOnce.Do(func() { redisURL, redisErr = findRedis() })
	if redisErr != nil {
		t.Fatalf("testenv: no Redis for tests: %v\nRun the tests with `make test` (it provides one), or set TEST_REDIS_URL.", redisErr)
	}
	opts, err := redis.ParseURL(redisURL)
	if err != nil {
		t.Fatalf("testenv: parse Redis URL: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base := redis.NewClient(opts)
	defer base.Close()
	owner := randomHex(8)
	for {
		for db := 1; db < redisDBs; db++ {
			key := "testenv:redis-db:" + strconv.Itoa(db)
			ok, err := base.SetNX(ctx, key, owner, 10*time.Minute).Result()
			if err != nil {
				t.Fatalf("testenv: claim a Redis database: %v", err)
			}
			if !ok {
				continue
			}
			o := *opts
			o.DB = db
			c := redis.NewClient(&o)
			err = c.FlushDB(ctx).Err()
			c.Close()
			if err != nil {
				t.Fatalf("testenv: flush Redis database %d: %v", db, err)
			}
			t.Cleanup(func() {
				c := redis.NewClient(opts)
				defer c.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if v, _ := c.Get(ctx, key).Result(); v == owner {
					c.Del(ctx, key)
				}
			})
			return fmt.Sprintf("redis://%s/%d", o.Addr, db)
		}
		select {
		case <-ctx.Done():
			t.Fatal("testenv: every Redis test database stayed claimed for a minute")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func findRedis() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if u := os.Getenv("TEST_REDIS_URL"); u != "" {
		if err := pingRedis(ctx, u); err != nil {
			return "", fmt.Errorf("TEST_REDIS_URL is set but does not answer: %w", err)
		}
		return u, nil
	}
	if dockerAnswers(ctx) {
		c, err := tcredis.Run(ctx, "redis:7-alpine")
		if err != nil {
			return "", fmt.Errorf("start Redis container: %w", err)
		}
		return c.ConnectionString(ctx)
	}
	if err := pingRedis(ctx, localRedis); err != nil {
		return "", fmt.Errorf("TEST_REDIS_URL is not set, no Docker engine answers, and %s does not answer: %w", localRedis, err)
	}
	return localRedis, nil
}

func pingRedis(ctx context.Context, u string) error {
	opts, err := redis.ParseURL(u)
	if err != nil {
		return err
	}
	c := redis.NewClient(opts)
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return c.Ping(ctx).Err()
}
