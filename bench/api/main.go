// Command api measures commerce-api's throughput for like + unlike pairs
// (POST then DELETE /api/v1/products/{id}/likes) over real HTTP against the
// real service binary, and, in the same run, the same SQL transactions
// issued directly with pgx at the same concurrency. It prints both and their
// ratio; the target is that the API reaches 70 % of the direct figure.
//
//	eval "$(scripts/testenv.sh)" && go run ./bench/api
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/loopers/commerce-pipeline/internal/testenv"
	"github.com/loopers/commerce-pipeline/pkg/events"
)

type options struct {
	duration time.Duration
	clients  int
	products int
	pool     int
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	var o options
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "how long each side runs")
	flag.IntVar(&o.clients, "clients", 32, "concurrent clients")
	flag.IntVar(&o.products, "products", 100, "products the clients like and unlike at random")
	flag.IntVar(&o.pool, "pool", 32, "database connections, for the service (DB_POOL_SIZE) and the direct pool alike")
	flag.Parse()
	if err := run(ctx, logger, o); err != nil {
		logger.Error("bench api failed", "err", err)
		os.Exit(1)
	}
}

type result struct {
	name  string
	pairs int64
	secs  float64
}

func (r result) rate() float64 { return float64(r.pairs) / r.secs }

func run(ctx context.Context, logger *slog.Logger, o options) error {
	direct, err := withDatabase(ctx, o, func(url string, products []int64) (result, error) {
		return benchDirect(ctx, url, products, o)
	})
	if err != nil {
		return fmt.Errorf("direct SQL: %w", err)
	}
	viaAPI, err := withDatabase(ctx, o, func(url string, products []int64) (result, error) {
		return benchAPI(ctx, logger, url, products, o)
	})
	if err != nil {
		return fmt.Errorf("API: %w", err)
	}
	fmt.Printf("like+unlike pairs, %d clients, %d products, %d DB connections, %s each\n\n", o.clients, o.products, o.pool, o.duration)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "path\tpairs\tpairs/s\tstate changes/s\tvs direct\t")
	for _, r := range []result{direct, viaAPI} {
		fmt.Fprintf(w, "%s\t%d\t%.0f\t%.0f\t%.1f%%\t\n", r.name, r.pairs, r.rate(), 2*r.rate(), 100*r.rate()/direct.rate())
	}
	w.Flush()
	ratio := viaAPI.rate() / direct.rate()
	verdict := "meets"
	if ratio < 0.70 {
		verdict = "is below"
	}
	fmt.Printf("\nAPI/direct = %.2f; %s the 0.70 target\n", ratio, verdict)
	return nil
}

// withDatabase runs f on a fresh migrated database holding o.products
// products, and drops the database afterwards.
func withDatabase(ctx context.Context, o options, f func(url string, products []int64) (result, error)) (result, error) {
	url, drop, err := testenv.NewDatabase(ctx)
	if err != nil {
		return result{}, err
	}
	defer drop() //nolint:errcheck // a leftover scratch database is harmless
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return result{}, err
	}
	var products []int64
	rows, err := conn.Query(ctx, `INSERT INTO products (name, price, stock)
		SELECT 'bench ' || g, 1000, 1000 FROM generate_series(1, $1) g RETURNING id`, o.products)
	if err == nil {
		products, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	}
	conn.Close(ctx)
	if err != nil {
		return result{}, fmt.Errorf("create products: %w", err)
	}
	return f(url, products)
}

// drive runs o.clients loops of pair(client, product) for o.duration and
// counts the pairs that completed.
func drive(ctx context.Context, name string, o options, products []int64, pair func(ctx context.Context, client int, product int64) error) (result, error) {
	ctx, cancel := context.WithTimeout(ctx, o.duration)
	defer cancel()
	var (
		pairs    atomic.Int64
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	start := time.Now()
	for c := range o.clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 1))
			for ctx.Err() == nil {
				err := pair(ctx, c, products[rng.IntN(len(products))])
				if err != nil {
					if ctx.Err() == nil {
						errOnce.Do(func() { firstErr = err; cancel() })
					}
					return
				}
				pairs.Add(1)
			}
		})
	}
	wg.Wait()
	return result{name: name, pairs: pairs.Load(), secs: time.Since(start).Seconds()}, firstErr
}

func user(client int) string { return "bench-user-" + strconv.Itoa(client) }

// benchDirect issues the transactions commerce-api issues for a like and an
// unlike, straight through pgx.
func benchDirect(ctx context.Context, url string, products []int64, o options) (result, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return result{}, err
	}
	cfg.MaxConns = int32(o.pool)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return result{}, err
	}
	defer pool.Close()
	reg := events.NewRegistry()
	change := func(ctx context.Context, product int64, stmt string, ev any) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var id int64
			if err := tx.QueryRow(ctx, `SELECT id FROM products WHERE id = $1 FOR UPDATE`, product).Scan(&id); err != nil {
				return err
			}
			tag, err := tx.Exec(ctx, stmt, userOf(ev), product)
			if err != nil || tag.RowsAffected() == 0 {
				return err
			}
			rec, err := reg.Marshal(ev)
			if err != nil {
				return err
			}
			_, err = tx.Exec(ctx, `INSERT INTO outbox (event_id, event_type, source, aggregate_type, aggregate_id, payload)
				VALUES ($1, $2, $3, $4, $5, $6)`, uuid.NewString(), rec.Type, "commerce-api", rec.AggregateType, rec.AggregateID, string(rec.Data))
			return err
		})
	}
	return drive(ctx, "direct SQL (pgx)", o, products, func(ctx context.Context, c int, p int64) error {
		if err := change(ctx, p, `INSERT INTO likes (user_id, product_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`,
			events.LikeCreatedV1{UserID: user(c), ProductID: p}); err != nil {
			return err
		}
		return change(ctx, p, `DELETE FROM likes WHERE user_id = $1 AND product_id = $2`,
			events.LikeCanceledV1{UserID: user(c), ProductID: p})
	})
}

func userOf(ev any) string {
	switch e := ev.(type) {
	case events.LikeCreatedV1:
		return e.UserID
	case events.LikeCanceledV1:
		return e.UserID
	}
	return ""
}

// benchAPI builds and starts the service binary on a free loopback port and
// drives it over HTTP with keep-alive connections.
func benchAPI(ctx context.Context, logger *slog.Logger, url string, products []int64, o options) (result, error) {
	addr, stop, err := startService(ctx, logger, url, o.pool)
	if err != nil {
		return result{}, err
	}
	defer stop()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.clients, MaxConnsPerHost: o.clients}}
	call := func(ctx context.Context, method, path, user string) error {
		req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+path, nil)
		if err != nil {
			return err
		}
		req.Header.Set("X-User-ID", user)
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, body)
		}
		return nil
	}
	return drive(ctx, "API (HTTP)", o, products, func(ctx context.Context, c int, p int64) error {
		path := "/api/v1/products/" + strconv.FormatInt(p, 10) + "/likes"
		if err := call(ctx, http.MethodPost, path, user(c)); err != nil {
			return err
		}
		return call(ctx, http.MethodDelete, path, user(c))
	})
}

func startService(ctx context.Context, logger *slog.Logger, databaseURL string, pool int) (addr string, stop func(), err error) {
	root, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		return "", nil, fmt.Errorf("find the module root: %w", err)
	}
	dir, err := os.MkdirTemp("", "bench-api-")
	if err != nil {
		return "", nil, err
	}
	bin := filepath.Join(dir, "commerce-api")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./services/commerce-api")
	build.Dir = strings.TrimSpace(string(root))
	if out, err := build.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("build commerce-api: %w\n%s", err, out)
	}
	addr, err = freeAddr()
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+databaseURL, "HTTP_ADDR="+addr, "DB_POOL_SIZE="+strconv.Itoa(pool), "REDIS_URL=")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	stop = func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		os.RemoveAll(dir)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				logger.Info("commerce-api ready", "addr", addr)
				return addr, stop, nil
			}
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, errors.New("commerce-api did not become ready within 30s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
