package api_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/loopers/commerce-pipeline/internal/productcache"
	"github.com/loopers/commerce-pipeline/internal/testenv"
	"github.com/loopers/commerce-pipeline/services/commerce-api/internal/api"
)

//nolint:paralleltest // the steps run in turn on one product's cache entry
func TestProductCache(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
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
	e := newEnv(t, func(d *api.Deps) { d.Cache = c })

	p := e.createProduct(t, "cached", 100, 1)
	key := productcache.Key(p)
	path := fmt.Sprintf("/api/v1/products/%d", p)
	get := func() productBody {
		t.Helper()
		return decode[productBody](t, e.do(t, "GET", path, "viewer", ""), http.StatusOK)
	}
	exists := func() bool {
		t.Helper()
		e, err := c.Get(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return e.Hit
	}

	first := get()
	if ttl := rdb.TTL(ctx, key).Val(); ttl <= 0 || ttl > 30*time.Second {
		t.Errorf("key %s has TTL %s, want (0, 30s]", key, ttl)
	}
	// A change behind the service's back shows only once the entry is gone:
	// the second read is served from the cache.
	e.db.Exec(t, `UPDATE products SET name = 'renamed' WHERE id = $1`, p)
	if diff := cmp.Diff(first, get()); diff != "" {
		t.Errorf("second read was not served from the cache (-first +second):\n%s", diff)
	}
	if n := len(e.db.Events(t, 0)); n != 2 {
		t.Errorf("%d view events, want one per read (2), cached or not", n)
	}

	// A payment changes the stock the page shows; a like or a cancel
	// changes only the likes table (like_count moves when the like
	// consumer applies the event, and it invalidates then), so its request
	// leaves the entry, and Redis, alone.
	steps := []struct {
		name, method, path, user string
		invalidates              bool
	}{
		{"like", "POST", path + "/likes", "fan", false},
		{"unlike", "DELETE", path + "/likes", "fan", false},
		{"payment", "POST", fmt.Sprintf("/api/v1/orders/%d/payments", e.createOrder(t, "buyer", [2]int64{p, 1}).ID), "buyer", true},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			get()
			if !exists() {
				t.Fatalf("no cache entry %s after a read", key)
			}
			if r := e.do(t, st.method, st.path, st.user, ""); r.Status != http.StatusOK {
				t.Fatalf("%d %s", r.Status, r.Body)
			}
			if got := !exists(); got != st.invalidates {
				t.Errorf("%s: cache entry %s gone %t, want %t", st.name, key, got, st.invalidates)
			}
		})
	}
	if got := get(); got.Name != "renamed" || got.Stock != 0 {
		t.Errorf("after invalidation got %+v, want the database's name and stock", got)
	}
}

// TestSlowCacheServesFromDatabase: a cache that accepts connections and
// never answers costs a request its cache timeouts, not the request's
// deadline: the page is served from the database.
func TestSlowCacheServesFromDatabase(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() }) // read nothing, answer nothing
		}
	}()
	slow, err := productcache.Open("redis://"+ln.Addr().String()+"/0", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { slow.Close() })
	e := newEnv(t, func(d *api.Deps) {
		d.Cache = slow
		d.RequestTimeout = 2 * time.Second
	})
	p := e.createProduct(t, "lamp", 100, 1)
	for _, step := range []struct{ method, path, user string }{
		{"GET", fmt.Sprintf("/api/v1/products/%d", p), ""},
		{"POST", fmt.Sprintf("/api/v1/products/%d/likes", p), "fan"}, // touches no cache: the like consumer invalidates
		{"GET", fmt.Sprintf("/api/v1/products/%d", p), "fan"},
	} {
		if r := e.do(t, step.method, step.path, step.user, ""); r.Status != http.StatusOK {
			t.Errorf("%s %s with a cache that never answers: %d %s", step.method, step.path, r.Status, r.Body)
		}
	}
}
