// Command flashsale measures what a flash sale costs: -clients clients send
// -views views and -likes new likes, interleaved, all on ONE product, and
// then the same load spread over -products products, through commerce-api
// with the whole pipeline running as `make dev` runs it (commerce-api,
// outbox-relay and product-consumers, on the broker the KAFKA variable
// chooses: Apache Kafka's own, KAFKA=real, the default, or kfake,
// KAFKA=embedded), with the services' shipped defaults. On Apache Kafka it
// runs on three nodes first (every topic with three replicas and
// min.insync.replicas=2, as in production), then on one node, whose figures
// come beside, each on a fresh cluster, database and stack (-nodes
// chooses). It prints the requests/s of each, their ratio (the
// target: the hot product at 0.9× the spread load or better) and how long
// after the last answer the aggregates were current, every product's
// view_count and like_count exactly what was answered.
//
// The two loads take turns over -rounds rounds, in alternating order, so
// that a change in the machine's load hits both alike; each round has
// products of its own. The hot product's end-to-end latency is bench/e2e's
// (its hot mode).
//
//	eval "$(scripts/testenv.sh kafka)" && go run ./bench/flashsale
//	eval "$(scripts/testenv.sh kafka)" && go run ./bench/flashsale -views 1000 -likes 500 -rounds 1
//	eval "$(scripts/testenv.sh kafka)" && go run ./bench/flashsale -clients 4 -views 100 -likes 50 -products 5 -rounds 1 -warmup 0   # a quick check that it runs
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/loopers/commerce-pipeline/bench/internal/benchkit"
	"github.com/loopers/commerce-pipeline/internal/devkafka"
	"github.com/loopers/commerce-pipeline/internal/kafka"
	"github.com/loopers/commerce-pipeline/internal/stack"
	"github.com/loopers/commerce-pipeline/internal/testenv"
)

type options struct {
	clients  int
	views    int
	likes    int
	products int
	rounds   int
	warmup   int
	current  time.Duration
	nodes    string
}

func main() {
	var o options
	flag.IntVar(&o.clients, "clients", 32, "concurrent clients, each sending its next request when the last is answered")
	flag.IntVar(&o.views, "views", 6000, "views per load")
	flag.IntVar(&o.likes, "likes", 3000, "new likes per load, interleaved with the views")
	flag.IntVar(&o.products, "products", 100, "products the spread load goes to")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds; the loads alternate which goes first")
	flag.IntVar(&o.warmup, "warmup", 3000, "requests of the same mix, spread, per warm-up round before measuring; rounds go on until the brokers' JIT compilers settle (0 skips)")
	flag.DurationVar(&o.current, "current-within", 2*time.Minute, "how long the aggregates may take to be current after a load")
	flag.StringVar(&o.nodes, "nodes", benchkit.DefaultNodes, "cluster sizes to run on, in turn, each a fresh cluster and stack (KAFKA=real): three nodes, one node's figures beside")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench/flashsale:", err)
		os.Exit(1)
	}
}

// side is one load's sums over the rounds.
type side struct {
	name     string
	requests int
	secs     float64
	api      []time.Duration // every request's answer time
	current  []time.Duration // per round: last answer → aggregates current
	rates    []float64       // per round
}

func (s *side) rate() float64 { return float64(s.requests) / s.secs }

func run(o options) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.clients < 1 || o.views < 0 || o.likes < 0 || o.views+o.likes == 0 || o.products < 1 || o.rounds < 1 {
		return errors.New("clients, products and rounds must be positive, views and likes not negative, and not both zero")
	}
	kind, err := devkafka.Kind(devkafka.Real)
	if err != nil {
		return err
	}
	root, err := stack.ModuleRoot()
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "building the services...")
	bins, err := stack.Build(ctx, root, stack.Services...)
	if err != nil {
		return err
	}
	defer bins.Remove() //nolint:errcheck // best effort
	sizes, err := benchkit.ParseNodes(o.nodes, kind)
	if err != nil {
		return err
	}
	for i, n := range sizes {
		if i > 0 {
			fmt.Println()
		}
		fmt.Printf("## on %s\n\n", benchkit.ClusterLabel(n))
		if err := runOn(ctx, o, kind, n, bins); err != nil {
			return fmt.Errorf("on %s: %w", benchkit.ClusterLabel(n), err)
		}
	}
	return nil
}

// runOn measures on a fresh cluster of n nodes (KAFKA=real) or the
// embedded broker, with a fresh database and stack.
func runOn(ctx context.Context, o options, kind string, n int, bins *stack.Binaries) error {
	kb, err := devkafka.Start(ctx, devkafka.Options{Kind: kind, Nodes: n, Topics: kafka.Settings{}.PipelineTopics(3, 1)})
	if err != nil {
		return fmt.Errorf("start the broker (KAFKA=%s): %w", kind, err)
	}
	defer kb.Close() //nolint:errcheck // best effort
	fmt.Printf("broker: %s, %s; KAFKA=%s, %s\n", kb.Version, benchkit.ClusterLabel(n), kind, strings.Join(kb.Brokers, ","))
	dbURL, drop, err := testenv.NewDatabase(ctx)
	if err != nil {
		return err
	}
	defer drop() //nolint:errcheck // best effort
	redisURL := os.Getenv("TEST_REDIS_URL")
	if redisURL == "" {
		redisURL = "redis://127.0.0.1:6379/0"
	}
	logs, err := os.MkdirTemp("", "bench-flashsale-logs-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(logs)
	pipe, err := bins.StartPipeline(ctx, stack.PipelineOptions{
		Env:  map[string]string{"DATABASE_URL": dbURL, "REDIS_URL": redisURL, "KAFKA_BROKERS": strings.Join(kb.Brokers, ",")},
		Logs: logs,
	})
	if err != nil {
		return err
	}
	defer pipe.Stop(20 * time.Second)
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	b := &flash{o: o, api: pipe.API, conn: conn, client: &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: o.clients, MaxConnsPerHost: o.clients}}}

	// The consumers join their groups asynchronously: one view made
	// visible first, then the warm-up, unmeasured.
	first, err := b.newProducts(ctx, 1, "first view")
	if err != nil {
		return err
	}
	if _, err := b.load(ctx, first, 1, 0, "first"); err != nil {
		return fmt.Errorf("first view: %w", err)
	}
	if o.warmup > 0 {
		views := o.warmup * o.views / (o.views + o.likes)
		// Rounds of -warmup requests until the brokers' JIT compilers have
		// settled (benchkit.WarmUp): cold, they take a core from the first
		// round measured.
		var pids []int
		if kb.Cluster != nil {
			for _, node := range kb.Cluster.Nodes() {
				pids = append(pids, node.Pid())
			}
		}
		took, settled, err := benchkit.WarmUp(ctx, pids, 0, 3*time.Minute, func(ctx context.Context) error {
			// Products of its own each round: a round checks what it sent.
			warm, err := b.newProducts(ctx, o.products, "warm-up")
			if err != nil {
				return err
			}
			_, err = b.load(ctx, warm, views, o.warmup-views, "warm")
			return err
		})
		if err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
		fmt.Fprintf(os.Stderr, "warm-up: rounds of %d requests over %d products for %s, not measured (the brokers' JIT compilers settled: %v)\n", o.warmup, o.products, took.Round(time.Second), settled)
	}

	hot := &side{name: "one product (flash sale)"}
	spread := &side{name: fmt.Sprintf("%d products", o.products)}
	for r := range o.rounds {
		order := []*side{hot, spread}
		if r%2 == 1 {
			order = []*side{spread, hot}
		}
		var line []string
		for _, s := range order {
			n := o.products
			if s == hot {
				n = 1
			}
			products, err := b.newProducts(ctx, n, fmt.Sprintf("round %d %s", r+1, s.name))
			if err != nil {
				return err
			}
			res, err := b.load(ctx, products, o.views, o.likes, fmt.Sprintf("r%d-%d", r+1, n))
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", r+1, s.name, err)
			}
			s.requests += res.requests
			s.secs += res.elapsed.Seconds()
			s.api = append(s.api, res.api...)
			s.current = append(s.current, res.current)
			rate := float64(res.requests) / res.elapsed.Seconds()
			s.rates = append(s.rates, rate)
			line = append(line, fmt.Sprintf("%s %.0f req/s, current %s after", s.name, rate, res.current.Round(time.Millisecond)))
		}
		fmt.Printf("round %d: %s\n", r+1, strings.Join(line, "; "))
	}

	fmt.Println()
	fmt.Printf("### flash sale on %s: %d views + %d new likes, interleaved, %d clients, through the API with the pipeline running; %d rounds, alternating order\n\n",
		benchkit.ClusterLabel(n), o.views, o.likes, o.clients, o.rounds)
	fmt.Println("| load | requests | requests/s | API answer p50 / p99 | aggregates current after the last answer (median / max of rounds) |")
	fmt.Println("|---|---|---|---|---|")
	for _, s := range []*side{hot, spread} {
		slices.Sort(s.api)
		cur := slices.Clone(s.current)
		slices.Sort(cur)
		fmt.Printf("| %s | %d | %.0f | %s / %s | %s / %s |\n", s.name, s.requests, s.rate(),
			q(s.api, .5).Round(100*time.Microsecond), q(s.api, .99).Round(100*time.Microsecond),
			q(cur, .5).Round(time.Millisecond), cur[len(cur)-1].Round(time.Millisecond))
	}
	ratio := hot.rate() / spread.rate()
	verdict := "met"
	if ratio < 0.9 {
		verdict = "MISSED"
	}
	fmt.Printf("\none product / %d products = %.2f×; target ≥ 0.90×: %s\n", o.products, ratio, verdict)
	fmt.Println("(requests/s: the requests of every round over their time, first request to last answer; current: every product's")
	fmt.Println(" view_count and like_count equal to the views and likes answered; the hot product's end-to-end p99 is bench/e2e's hot mode)")
	return nil
}

// q is the quantile f of sorted ds.
func q(ds []time.Duration, f float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return ds[int(f*float64(len(ds)-1))]
}

type flash struct {
	o      options
	api    string
	conn   *pgx.Conn
	client *http.Client
}

// result is one load's.
type result struct {
	requests int
	elapsed  time.Duration   // first request → last answer
	api      []time.Duration // each request's answer time
	current  time.Duration   // last answer → aggregates current
}

// load sends views views and likes new likes, interleaved evenly, to
// products in turn from o.clients clients, then waits until every
// product's aggregates show exactly what was answered.
func (b *flash) load(ctx context.Context, products []int64, views, likes int, tag string) (result, error) {
	n := views + likes
	// Request i is a like when the count of likes up to it steps up: the
	// likes fall evenly among the views (view, view, like, ... for 2:1).
	isLike := func(i int) bool { return likes > 0 && (i+1)*likes/n > i*likes/n }
	want := make(map[int64][2]int64, len(products))
	for i := range n {
		k := 0
		if isLike(i) {
			k = 1
		}
		c := want[products[i%len(products)]]
		c[k]++
		want[products[i%len(products)]] = c
	}
	var (
		next  atomic.Int64
		mu    sync.Mutex
		times = make([]time.Duration, 0, n)
		wg    sync.WaitGroup
		errs  = make(chan error, b.o.clients)
	)
	began := time.Now()
	for range b.o.clients {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				pid := strconv.FormatInt(products[i%len(products)], 10)
				t := time.Now()
				var err error
				if isLike(i) {
					err = benchkit.Call(ctx, b.client, "POST", b.api+"/products/"+pid+"/likes", "fs-"+tag+"-"+strconv.Itoa(i), "", nil)
				} else {
					err = benchkit.Call(ctx, b.client, "GET", b.api+"/products/"+pid, "", "", nil)
				}
				if err != nil {
					errs <- err
					next.Store(int64(n)) // the others stop too
					return
				}
				d := time.Since(t)
				mu.Lock()
				times = append(times, d)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	last := time.Now()
	close(errs)
	if err := <-errs; err != nil {
		return result{}, err
	}
	if err := ctx.Err(); err != nil {
		return result{}, err
	}
	if err := b.waitCurrent(ctx, want); err != nil {
		return result{}, err
	}
	return result{requests: n, elapsed: last.Sub(began), api: times, current: time.Since(last)}, nil
}

// waitCurrent polls the aggregates of want's products until each shows
// exactly the views and likes wanted. More than wanted is a bug (an event
// applied twice) and fails at once.
func (b *flash) waitCurrent(ctx context.Context, want map[int64][2]int64) error {
	ids := make([]int64, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	deadline := time.Now().Add(b.o.current)
	for {
		got, err := benchkit.ReadCounts(ctx, b.conn, ids)
		if err != nil {
			return err
		}
		current := true
		for id, w := range want {
			g := [2]int64{got[id].Views, got[id].Likes}
			if g[0] > w[0] || g[1] > w[1] {
				return fmt.Errorf("product %d shows %d views and %d likes, more than the %d and %d answered", id, g[0], g[1], w[0], w[1])
			}
			current = current && g == w
		}
		if current {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the aggregates not current %s after the load", b.o.current)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// newProducts creates n products named after what.
func (b *flash) newProducts(ctx context.Context, n int, what string) ([]int64, error) {
	products := make([]int64, n)
	for i := range products {
		var p struct{ ID int64 }
		if err := benchkit.Call(ctx, b.client, "POST", b.api+"/products", "", fmt.Sprintf(`{"name":"%s %d","price":1000,"stock":1000000}`, what, i), &p); err != nil {
			return nil, err
		}
		products[i] = p.ID
	}
	return products, nil
}
