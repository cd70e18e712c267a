// Command e2e measures the whole pipeline: the latency from commerce-api's
// 2xx answer to the change being visible in product_metrics, with the real
// binaries, at a fixed request rate. Half the requests view a product, half
// add a new like; the k-th answered view (like) of a product is visible once
// the product's view_count (like_count) reaches k.
//
// The broker is the one the KAFKA variable chooses: Apache Kafka's own broker
// (KAFKA=real, the default; a JVM process on loopback) or kfake
// (KAFKA=embedded), which then runs in a devkafka process. Either way it is a
// process of its own, so that its CPU is counted apart from the pipeline's
// and this load generator's. The first line of the output names it.
//
// Beside the end to end it prints, from the services' own histograms over
// the same window, how the time split into the stages of an event's path
// (package internal/stages), and the CPU seconds every process spent per
// 1,000 events (from /proc): the pipeline (the three services and the
// PostgreSQL backends serving the benchmark's database) and, apart, the
// broker.
//
// Before measuring, -warmup of the same load goes to a product of its own,
// unmeasured, so that the windows see warm processes (above all the
// broker's JVM, which compiles its hot paths under load).
//
// Two modes run on the same stack: mixed (requests spread over -products
// products) and hot (every request on one product, a flash sale). The hot
// mode also writes a burst of a hot product's views and likes straight into
// the outbox and clocks the relay and the consumers alone, since the API's
// per-product row lock, not the consumers, bounds what the API can take for
// one product on a small machine.
//
//	eval "$(scripts/testenv.sh)" && go run ./bench/e2e
//	eval "$(scripts/testenv.sh)" && KAFKA=embedded go run ./bench/e2e -duration 5s -hot-duration 3s -burst 5000
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/loopers/commerce-pipeline/internal/devkafka"
	"github.com/loopers/commerce-pipeline/internal/kafka"
	"github.com/loopers/commerce-pipeline/internal/stack"
	"github.com/loopers/commerce-pipeline/internal/testenv"
	"github.com/loopers/commerce-pipeline/pkg/events"
)

type options struct {
	rate        int
	duration    time.Duration
	products    int
	poll        time.Duration
	hotRate     int
	hotDuration time.Duration
	burst       int
	modes       string
	warmup      time.Duration
}

func main() {
	var o options
	flag.IntVar(&o.rate, "rate", 500, "requests per second")
	flag.DurationVar(&o.duration, "duration", 60*time.Second, "how long to send requests")
	flag.IntVar(&o.products, "products", 20, "products to spread requests over")
	flag.DurationVar(&o.poll, "poll", 2*time.Millisecond, "how often product_metrics is read")
	flag.IntVar(&o.hotRate, "hot-rate", 1000, "requests per second on the hot product")
	flag.DurationVar(&o.hotDuration, "hot-duration", 20*time.Second, "how long to send requests to the hot product")
	flag.IntVar(&o.burst, "burst", 50_000, "events of the hot product written straight into the outbox (0 skips)")
	flag.StringVar(&o.modes, "modes", "mixed,hot", "modes to run: mixed, hot")
	flag.DurationVar(&o.warmup, "warmup", 20*time.Second, "how long to send requests, at -rate, to a product of its own before measuring (0 skips)")
	flag.Parse()
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "bench/e2e:", err)
		os.Exit(1)
	}
}

const (
	view = iota
	like
)

// answered records, per product and kind, when each 2xx arrived, in order.
type answered struct {
	mu sync.Mutex
	at [][2][]time.Time
}

func (a *answered) add(p, kind int, t time.Time) {
	a.mu.Lock()
	a.at[p][kind] = append(a.at[p][kind], t)
	a.mu.Unlock()
}

func run(ctx context.Context, o options) error {
	kind, err := devkafka.Kind(devkafka.Real)
	if err != nil {
		return err
	}
	root, err := stack.ModuleRoot()
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "building the services...")
	pkgs := slices.Clone(stack.Services)
	if kind == devkafka.Embedded {
		pkgs = append(pkgs, "./cmd/devkafka")
	}
	bins, err := stack.Build(ctx, root, pkgs...)
	if err != nil {
		return err
	}
	defer func() {
		if err := bins.Remove(); err != nil {
			fmt.Fprintln(os.Stderr, "bench/e2e: remove the built services:", err)
		}
	}()
	dbURL, drop, err := testenv.NewDatabase(ctx)
	if err != nil {
		return err
	}
	defer drop() //nolint:errcheck // best effort
	redisURL := os.Getenv("TEST_REDIS_URL")
	if redisURL == "" {
		redisURL = "redis://127.0.0.1:6379/0"
	}
	logs, err := os.MkdirTemp("", "bench-e2e-logs-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(logs)
	kb, err := startBroker(ctx, kind, bins, logs)
	if err != nil {
		return err
	}
	defer kb.stop()
	fmt.Printf("broker: %s; KAFKA=%s, %s, up in %s\n", kb.version, kind, kb.brokers, kb.started.Round(100*time.Millisecond))
	brokers := kb.brokers

	addr := func() string { a, _ := stack.FreeAddr(); return a }
	apiAddr, relayAdmin, consumersAdmin := addr(), addr(), addr()
	procs := []struct {
		bin, ready string
		env        map[string]string
	}{
		{"commerce-api", "http://" + apiAddr + "/readyz", map[string]string{"DATABASE_URL": dbURL, "REDIS_URL": redisURL, "HTTP_ADDR": apiAddr, "ADMIN_ADDR": "127.0.0.1:0"}},
		{"outbox-relay", "http://" + relayAdmin + "/readyz", map[string]string{"DATABASE_URL": dbURL, "KAFKA_BROKERS": brokers, "ADMIN_ADDR": relayAdmin}},
		{"product-consumers", "http://" + consumersAdmin + "/readyz", map[string]string{"DATABASE_URL": dbURL, "KAFKA_BROKERS": brokers, "REDIS_URL": redisURL, "ADMIN_ADDR": consumersAdmin}},
	}
	var pipeline []proc
	for _, pr := range procs {
		p, err := bins.Start(pr.bin, pr.env, filepath.Join(logs, pr.bin+".log"))
		if err != nil {
			return err
		}
		defer p.Stop(20 * time.Second)
		pipeline = append(pipeline, proc{name: p.Name, pid: p.Pid()})
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err = stack.WaitHTTP(wctx, pr.ready)
		cancel()
		if err != nil {
			return fmt.Errorf("%w\n%s", err, p.Log(2000))
		}
	}
	api := "http://" + apiAddr + "/api/v1"
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 512}}
	products := make([]int64, o.products)
	for i := range products {
		var p struct{ ID int64 }
		if err := call(client, "POST", api+"/products", "", fmt.Sprintf(`{"name":"p%d","price":1000,"stock":1000000}`, i), &p); err != nil {
			return err
		}
		products[i] = p.ID
	}
	// Consumers join their groups asynchronously; let one view go through
	// before timing anything.
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if err := warmUp(ctx, client, api, conn, products[0]); err != nil {
		return err
	}
	if o.warmup > 0 {
		fmt.Printf("warm-up: %d requests/s for %s on a product of its own, not measured\n", o.rate, o.warmup)
		if err := warmPipeline(ctx, client, api, conn, o.rate, o.warmup); err != nil {
			return err
		}
	}
	pr := &probe{
		procs:   pipeline,
		broker:  proc{name: kb.name, pid: kb.pid},
		metrics: []string{"http://" + relayAdmin + "/metrics", "http://" + consumersAdmin + "/metrics"},
		conn:    conn,
	}

	var errs []error
	seen := map[string]bool{}
	for _, mode := range strings.Split(o.modes, ",") {
		if seen[mode] {
			// A window counts what became visible per product from zero.
			return fmt.Errorf("mode %q twice: its second window would count the first's changes", mode)
		}
		seen[mode] = true
		switch mode {
		case "mixed":
			errs = append(errs, load(ctx, client, api, pr, products, o.rate, o.duration, o.poll, "mixed load", "≤ 8ms", "≤ 25ms"))
		case "hot":
			var hot struct{ ID int64 }
			if err := call(client, "POST", api+"/products", "", `{"name":"flash sale","price":1000,"stock":1000000}`, &hot); err != nil {
				return err
			}
			errs = append(errs, load(ctx, client, api, pr, []int64{hot.ID}, o.hotRate, o.hotDuration, o.poll, "hot product", "", "≤ 1s"))
			if o.burst > 0 {
				errs = append(errs, burst(ctx, client, api, conn, o.burst))
			}
		default:
			return fmt.Errorf("unknown mode %q", mode)
		}
	}
	return errors.Join(errs...)
}

// load sends rate requests/s for d, spread over products, and prints the
// latency from each 2xx to its change being visible, its split into stages
// and the CPU it cost.
func load(ctx context.Context, client *http.Client, api string, pr *probe, products []int64, rate int, d, poll time.Duration, title, p50Target, p99Target string) error {
	o := options{rate: rate, duration: d, poll: poll}
	conn := pr.conn
	before, err := pr.read(ctx)
	if err != nil {
		return err
	}
	ans := &answered{at: make([][2][]time.Time, len(products))}
	var sent, failed atomic.Int64
	var latencies []time.Duration
	pollDone := make(chan error, 1)
	stopPoll := make(chan struct{})
	go func() { pollDone <- pollVisible(ctx, conn, products, ans, o.poll, stopPoll, &latencies) }()

	fmt.Printf("sending %d requests/s for %s...\n", o.rate, o.duration)
	began := time.Now()
	tick := time.NewTicker(time.Second / time.Duration(o.rate))
	sem := make(chan struct{}, 512)
	var wg sync.WaitGroup
	var likes atomic.Int64
	for time.Since(began) < o.duration {
		<-tick.C
		sem <- struct{}{}
		sent.Add(1)
		wg.Go(func() {
			defer func() { <-sem }()
			pi := rand.IntN(len(products))
			pid := strconv.FormatInt(products[pi], 10)
			var err error
			kind := rand.IntN(2)
			if kind == view {
				err = call(client, "GET", api+"/products/"+pid, "", "", nil)
			} else {
				err = call(client, "POST", api+"/products/"+pid+"/likes", "bench-"+strconv.FormatInt(likes.Add(1), 10), "", nil)
			}
			if err != nil {
				failed.Add(1)
				return
			}
			ans.add(pi, kind, time.Now())
		})
	}
	tick.Stop()
	wg.Wait()
	elapsed := time.Since(began)
	close(stopPoll)
	if err := <-pollDone; err != nil {
		return err
	}
	after, err := pr.read(ctx)
	if err != nil {
		return err
	}
	answeredN := sent.Load() - failed.Load()
	if int64(len(latencies)) != answeredN {
		return fmt.Errorf("%d answered changes, %d became visible", answeredN, len(latencies))
	}
	slices.Sort(latencies)
	q := func(f float64) time.Duration { return latencies[int(f*float64(len(latencies)-1))] }
	fmt.Println()
	fmt.Printf("| %s, end to end: API 2xx → product_metrics | measured | target |\n", title)
	fmt.Println("|---|---|---|")
	fmt.Printf("| requests (views + new likes) | %d sent, %d failed | 0 failed |\n", sent.Load(), failed.Load())
	fmt.Printf("| throughput reached | %.0f req/s | %d req/s |\n", float64(sent.Load())/elapsed.Seconds(), o.rate)
	fmt.Printf("| changes applied | %.0f events/s | |\n", float64(answeredN)/elapsed.Seconds())
	fmt.Printf("| latency p50 | %s | %s |\n", q(0.50).Round(100*time.Microsecond), p50Target)
	fmt.Printf("| latency p90 | %s | |\n", q(0.90).Round(100*time.Microsecond))
	fmt.Printf("| latency p99 | %s | %s |\n", q(0.99).Round(100*time.Microsecond), p99Target)
	fmt.Printf("| latency max | %s | |\n", latencies[len(latencies)-1].Round(100*time.Microsecond))
	fmt.Printf("(visibility polled every %s, which bounds the resolution)\n", o.poll)
	var sum time.Duration
	for _, l := range latencies {
		sum += l
	}
	pr.report(before, after, answeredN, q, sum/time.Duration(len(latencies)))
	if failed.Load() > 0 {
		return errors.New("some requests failed")
	}
	return nil
}

// pollVisible reads the aggregates every interval and, for each answered
// change that has become visible, records its latency. After stop it keeps
// going until every answered change is visible, for at most 30 s.
func pollVisible(ctx context.Context, conn *pgx.Conn, products []int64, ans *answered, every time.Duration, stop <-chan struct{}, out *[]time.Duration) error {
	index := map[int64]int{}
	for i, id := range products {
		index[id] = i
	}
	seen := make([][2]int, len(products))
	var deadline time.Time
	for {
		now := time.Now()
		rows, err := conn.Query(ctx, `SELECT product_id, view_count, like_count FROM product_metrics`)
		if err != nil {
			return err
		}
		pending := 0
		ans.mu.Lock()
		for rows.Next() {
			var id, views, likes int64
			if err := rows.Scan(&id, &views, &likes); err != nil {
				ans.mu.Unlock()
				return err
			}
			i, ok := index[id]
			if !ok {
				continue
			}
			for kind, visible := range [2]int64{views, likes} {
				at := ans.at[i][kind]
				for seen[i][kind] < len(at) && int64(seen[i][kind]) < visible {
					*out = append(*out, now.Sub(at[seen[i][kind]]))
					seen[i][kind]++
				}
			}
		}
		for i := range ans.at {
			pending += len(ans.at[i][view]) - seen[i][view] + len(ans.at[i][like]) - seen[i][like]
		}
		ans.mu.Unlock()
		if err := rows.Err(); err != nil {
			return err
		}
		select {
		case <-stop:
			if deadline.IsZero() {
				deadline = time.Now().Add(30 * time.Second)
			}
			if pending == 0 || time.Now().After(deadline) {
				return nil
			}
		default:
		}
		time.Sleep(every)
	}
}

// warmUp views a product until the view shows in product_metrics, so that
// the consumers own their partitions before measuring. The warm-up view is
// then taken back out of the count, which must match the measured requests.
func warmUp(ctx context.Context, client *http.Client, api string, conn *pgx.Conn, product int64) error {
	if err := call(client, "GET", api+"/products/"+strconv.FormatInt(product, 10), "", "", nil); err != nil {
		return err
	}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		var n int64
		err := conn.QueryRow(ctx, `SELECT view_count FROM product_metrics WHERE product_id = $1`, product).Scan(&n)
		if err == nil && n == 1 {
			_, err = conn.Exec(ctx, `UPDATE product_views SET view_count = 0 WHERE product_id = $1`, product)
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
	return errors.New("the warm-up view never became visible")
}

// warmPipeline sends rate requests/s for d (views and new likes, as the
// measured windows do) to a product of its own, and waits until
// product_metrics shows every answered one. A JVM compiles its hot paths
// during the first tens of seconds under load: a window measured on a cold
// broker would count the compiler's CPU and its slower answers as the
// broker's (on this machine the broker's CPU per record halved, then halved
// again, over its first three 5-second windows at 500 records/s).
func warmPipeline(ctx context.Context, client *http.Client, api string, conn *pgx.Conn, rate int, d time.Duration) error {
	var p struct{ ID int64 }
	if err := call(client, "POST", api+"/products", "", `{"name":"warm-up","price":1000,"stock":1000000}`, &p); err != nil {
		return err
	}
	pid := strconv.FormatInt(p.ID, 10)
	var views, likes, n atomic.Int64
	sem := make(chan struct{}, 512)
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / time.Duration(rate))
	for began := time.Now(); time.Since(began) < d; {
		<-tick.C
		sem <- struct{}{}
		i := n.Add(1)
		wg.Go(func() {
			defer func() { <-sem }()
			if i%2 == 0 {
				if call(client, "GET", api+"/products/"+pid, "", "", nil) == nil {
					views.Add(1)
				}
			} else if call(client, "POST", api+"/products/"+pid+"/likes", "warm-"+strconv.FormatInt(i, 10), "", nil) == nil {
				likes.Add(1)
			}
		})
	}
	tick.Stop()
	wg.Wait()
	deadline := time.Now().Add(time.Minute)
	for {
		var v, l int64
		err := conn.QueryRow(ctx, `SELECT view_count, like_count FROM product_metrics WHERE product_id = $1`, p.ID).Scan(&v, &l)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if v == views.Load() && l == likes.Load() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("warm-up: %d/%d views and %d/%d likes visible after a minute", v, views.Load(), l, likes.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// broker is the run's Kafka broker, a process of its own.
type broker struct {
	version string        // the broker and its release
	name    string        // its row in the CPU table
	brokers string        // KAFKA_BROKERS
	pid     int           // the process whose CPU is the broker's
	started time.Duration // until it answered, the pipeline's topics created
	stop    func()
}

// startBroker starts the broker kind names with every topic the pipeline
// uses (3 partitions each): Apache Kafka, whose JVM is a process of its own
// already, or kfake in a devkafka process, since in this one its CPU would
// mix with the load generator's.
func startBroker(ctx context.Context, kind string, bins *stack.Binaries, logs string) (*broker, error) {
	if kind == devkafka.Real {
		// The JVM's default compilers: throughput is what is measured.
		b, err := devkafka.Start(ctx, devkafka.Options{Kind: kind, Topics: kafka.Settings{}.PipelineTopics(3, 1)})
		if err != nil {
			return nil, fmt.Errorf("start the broker (KAFKA=%s): %w", kind, err)
		}
		pid := b.Cluster.Node(1).Pid()
		return &broker{
			version: b.Version, name: fmt.Sprintf("broker: %s (its JVM, pid %d)", b.Version, pid),
			brokers: strings.Join(b.Brokers, ","), pid: pid, started: b.Started,
			stop: func() {
				if err := b.Close(); err != nil {
					fmt.Fprintln(os.Stderr, "bench/e2e: stop the broker:", err)
				}
			},
		}, nil
	}
	addr, err := stack.FreeAddr()
	if err != nil {
		return nil, err
	}
	_, port, _ := net.SplitHostPort(addr)
	began := time.Now()
	p, err := bins.StartArgs("devkafka", []string{"-kafka", kind, "-port", port}, nil, filepath.Join(logs, "devkafka.log"))
	if err != nil {
		return nil, err
	}
	version, err := waitReady(ctx, p, 30*time.Second)
	if err != nil {
		p.Stop(10 * time.Second)
		return nil, err
	}
	return &broker{
		version: version, name: fmt.Sprintf("broker: %s (the devkafka process, pid %d)", version, p.Pid()),
		brokers: addr, pid: p.Pid(), started: time.Since(began),
		stop: func() { p.Stop(10 * time.Second) },
	}, nil
}

// waitReady waits for devkafka's log line saying its broker is ready (its
// topics created), and returns the broker it names.
func waitReady(ctx context.Context, p *stack.Proc, limit time.Duration) (string, error) {
	deadline := time.Now().Add(limit)
	for {
		b, err := os.ReadFile(p.LogPath)
		if err != nil {
			return "", err
		}
		for line := range strings.Lines(string(b)) {
			var l struct{ Msg, Broker string }
			if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "Kafka broker ready" {
				return l.Broker, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return "", fmt.Errorf("devkafka not ready after %s\n%s", limit, p.Log(2000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func call(client *http.Client, method, url, user, body string, out any) error {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if user != "" {
		req.Header.Set("X-User-ID", user)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s %s: %d %s", method, url, resp.StatusCode, b)
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// burst writes n events of one new product (half views, half likes by new
// users) straight into the outbox, as commerce-api would in many
// transactions, and clocks them until product_metrics shows all of them:
// what the relay and the like and view consumers sustain on a hot product.
func burst(ctx context.Context, client *http.Client, api string, conn *pgx.Conn, n int) error {
	var hot struct{ ID int64 }
	if err := call(client, "POST", api+"/products", "", `{"name":"burst","price":1000,"stock":1}`, &hot); err != nil {
		return err
	}
	reg := events.NewRegistry()
	const perTx = 1000
	began := time.Now()
	for done := 0; done < n; done += perTx {
		var ids, types, aggTypes, aggIDs, payloads []string
		for i := done; i < min(done+perTx, n); i++ {
			var ev any = events.ProductViewedV1{ProductID: hot.ID, UserID: "burst"}
			if i%2 == 1 {
				ev = events.LikeCreatedV1{UserID: "burst-" + strconv.Itoa(i), ProductID: hot.ID}
			}
			rec, err := reg.Marshal(ev)
			if err != nil {
				return err
			}
			ids = append(ids, uuidString(i))
			types, aggTypes, aggIDs, payloads = append(types, rec.Type), append(aggTypes, rec.AggregateType), append(aggIDs, rec.AggregateID), append(payloads, string(rec.Data))
		}
		if _, err := conn.Exec(ctx, `
			INSERT INTO outbox (event_id, event_type, source, aggregate_type, aggregate_id, payload)
			SELECT e, t, 'commerce-api', a, i, p::jsonb FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[]) AS u(e, t, a, i, p)`,
			ids, types, aggTypes, aggIDs, payloads); err != nil {
			return fmt.Errorf("write the burst: %w", err)
		}
	}
	written := time.Since(began)
	wantViews, wantLikes := int64((n+1)/2), int64(n/2)
	deadline := time.Now().Add(5 * time.Minute)
	for {
		var views, likes int64
		err := conn.QueryRow(ctx, `SELECT view_count, like_count FROM product_metrics WHERE product_id = $1`, hot.ID).Scan(&views, &likes)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if views == wantViews && likes == wantLikes {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("burst: %d/%d views and %d/%d likes visible after 5 minutes", views, wantViews, likes, wantLikes)
		}
		time.Sleep(10 * time.Millisecond)
	}
	elapsed := time.Since(began)
	rate := float64(n) / elapsed.Seconds()
	verdict := "met"
	if rate < 5000 {
		verdict = "MISSED"
	}
	fmt.Println()
	fmt.Println("| hot product burst, outbox → product_metrics | measured | target |")
	fmt.Println("|---|---|---|")
	fmt.Printf("| events (views + likes of one product) | %d, written in %s | |\n", n, written.Round(time.Millisecond))
	fmt.Printf("| all visible after | %s | |\n", elapsed.Round(time.Millisecond))
	fmt.Printf("| sustained | %.0f events/s | ≥ 5,000 events/s: %s |\n", rate, verdict)
	return nil
}

// uuidString makes a distinct, valid event id for the i-th burst event.
func uuidString(i int) string {
	return fmt.Sprintf("00000000-0000-4000-8000-%012x", i)
}
