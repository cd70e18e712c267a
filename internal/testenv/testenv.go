// Package testenv gives tests real infrastructure: a fresh PostgreSQL database
// per test cloned from a template migrated once, a private Redis database, and
// topics of their own on Apache Kafka's broker (kafka.go), or a broker of
// their own; kfake only for the faults it alone injects.
//
// PostgreSQL comes from TEST_DATABASE_URL when it is set (scripts/testenv.sh,
// run by `make test`, sets it, starting the machine's server if needed); else
// from a testcontainers container when a Docker engine answers; else from a
// server on 127.0.0.1:5432 with trust auth. Redis is found the same way
// through TEST_REDIS_URL. When none answers the test fails: a missing
// database never turns into a silent skip.
package testenv

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"

	"github.com/loopers/commerce-pipeline/db/migrations"
	"github.com/loopers/commerce-pipeline/internal/pg"
)

const localPostgres = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

var (
	adminOnce sync.Once
	adminURL  string
	adminErr  error

	templateOnce sync.Once
	templateName string
	templateErr  error
)

// DatabaseURL creates a fresh database, cloned from the migrated template, and
// returns its URL. The database is dropped when the test ends.
func DatabaseURL(t testing.TB) string {
	t.Helper()
	Needs(t, needsPostgres)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url, drop, err := NewDatabase(ctx)
	if err != nil {
		t.Fatalf("testenv: %v\nRun the tests with `make test` (it provides PostgreSQL), or set TEST_DATABASE_URL.", err)
	}
	t.Cleanup(func() {
		if err := drop(); err != nil {
			t.Errorf("testenv: %v", err)
		}
	})
	return url
}

// NewDatabase is DatabaseURL for programs that are not tests, such as
// benchmark commands: it returns the URL of a fresh migrated database and a
// function that drops it.
func NewDatabase(ctx context.Context) (url string, drop func() error, err error) {
	adminOnce.Do(func() { adminURL, adminErr = findPostgres() })
	if adminErr != nil {
		return "", nil, fmt.Errorf("no PostgreSQL: %w", adminErr)
	}
	admin := adminURL
	templateOnce.Do(func() { templateName, templateErr = ensureTemplate(ctx, admin) })
	if templateErr != nil {
		return "", nil, fmt.Errorf("migrate the template database: %w", templateErr)
	}
	name := "t_" + randomHex(8)
	if err := exec(ctx, admin, fmt.Sprintf(`CREATE DATABASE %s TEMPLATE %s`, name, templateName)); err != nil {
		return "", nil, fmt.Errorf("create database: %w", err)
	}
	drop = func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := exec(ctx, admin, fmt.Sprintf(`DROP DATABASE IF EXISTS %s WITH (FORCE)`, name)); err != nil {
			return fmt.Errorf("drop database %s: %w", name, err)
		}
		return nil
	}
	return withDatabase(admin, name), drop, nil
}

func findPostgres() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		if err := ping(ctx, u); err != nil {
			return "", fmt.Errorf("TEST_DATABASE_URL is set but does not answer: %w", err)
		}
		return u, nil
	}
	if dockerAnswers(ctx) {
		c, err := tcpostgres.Run(ctx, "postgres:16-alpine",
			tcpostgres.WithUsername("postgres"), tcpostgres.WithPassword("postgres"),
			tcpostgres.WithDatabase("postgres"), tcpostgres.BasicWaitStrategies())
		if err != nil {
			return "", fmt.Errorf("start PostgreSQL container: %w", err)
		}
		// The container lives as long as the test binary; the testcontainers
		// reaper removes it when the binary exits.
		return c.ConnectionString(ctx, "sslmode=disable")
	}
	if err := ping(ctx, localPostgres); err != nil {
		return "", fmt.Errorf("TEST_DATABASE_URL is not set, no Docker engine answers, and %s does not answer: %w", localPostgres, err)
	}
	return localPostgres, nil
}

// dockerAnswers reports whether a Docker engine is reachable. The socket check
// first keeps machines without Docker from waiting on the provider.
func dockerAnswers(ctx context.Context) bool {
	if os.Getenv("DOCKER_HOST") == "" {
		if _, err := os.Stat("/var/run/docker.sock"); err != nil {
			return false
		}
	}
	p, err := testcontainers.NewDockerProvider()
	if err != nil {
		return false
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return p.Health(ctx) == nil
}

// ensureTemplate returns the name of a template database holding the current
// migrations. Its name is derived from the migration files, so every test
// binary of a run, and later runs, share it; an advisory lock makes sure only
// one of them builds it.
func ensureTemplate(ctx context.Context, admin string) (string, error) {
	sum, err := migrationsDigest()
	if err != nil {
		return "", err
	}
	name := "tpl_" + sum
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, int64(pg.TemplateLock)); err != nil {
		return "", err
	}
	defer conn.Exec(context.Background(), `SELECT pg_advisory_unlock($1)`, int64(pg.TemplateLock)) //nolint:errcheck // closing the session releases it too
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return "", err
	}
	if exists {
		return name, nil
	}
	// Build under a scratch name and rename when complete, so a run killed
	// half-way never leaves a half-migrated template behind.
	build := name + "_build"
	for _, stmt := range []string{
		`DROP DATABASE IF EXISTS ` + build + ` WITH (FORCE)`,
		`CREATE DATABASE ` + build,
	} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return "", err
		}
	}
	if err := migrations.Up(ctx, withDatabase(admin, build)); err != nil {
		return "", err
	}
	if _, err := conn.Exec(ctx, `ALTER DATABASE `+build+` RENAME TO `+name); err != nil {
		return "", err
	}
	return name, nil
}

func migrationsDigest() (string, error) {
	h := sha256.New()
	var names []string
	if err := fs.WalkDir(migrations.FS(), ".", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			names = append(names, path)
		}
		return err
	}); err != nil {
		return "", err
	}
	sort.Strings(names)
	for _, n := range names {
		b, err := fs.ReadFile(migrations.FS(), n)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", n, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

func exec(ctx context.Context, dsn, stmt string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, stmt)
	return err
}

func ping(ctx context.Context, dsn string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.Ping(ctx)
}

func withDatabase(dsn, name string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		panic(errors.Join(errors.New("testenv: unparsable database URL"), err))
	}
	u.Path = "/" + name
	return u.String()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
