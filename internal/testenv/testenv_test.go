package testenv_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/loopers/commerce-pipeline/internal/testenv"
)

func TestDatabaseIsFreshAndMigrated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for i := range 2 {
		url := testenv.DatabaseURL(t)
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM products`).Scan(&n); err != nil {
			t.Fatalf("database %d is not migrated: %v", i, err)
		}
		if n != 0 {
			t.Fatalf("database %d has %d products, want a fresh one", i, n)
		}
		if _, err := conn.Exec(ctx, `INSERT INTO products (name, price, stock) VALUES ('x', 1, 1)`); err != nil {
			t.Fatal(err)
		}
		conn.Close(ctx)
	}
}

func TestRedisDatabasesAreIsolated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := testenv.RedisURL(t), testenv.RedisURL(t)
	if a == b {
		t.Fatalf("two claims returned the same database %s", a)
	}
	oa, _ := redis.ParseURL(a)
	ca := redis.NewClient(oa)
	defer ca.Close()
	if err := ca.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	ob, _ := redis.ParseURL(b)
	cb := redis.NewClient(ob)
	defer cb.Close()
	if n, err := cb.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("key leaked across databases: exists=%d err=%v", n, err)
	}
}
