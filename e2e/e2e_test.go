// Package e2e runs the real service binaries as processes against real
// PostgreSQL, Redis and Apache Kafka, drives the REST API like users would,
// kills processes on the way, and checks that the aggregates end exactly
// equal to what the domain tables say they must be.
//
// Each test's pipeline lives under a Kafka prefix of its own (KAFKA_PREFIX)
// on the broker the package shares, or on a broker of the test's own
// (kafkaSetup.Cluster) when the test kills brokers or needs their settings.
// The tests that start the service processes run one at a time: on the 2
// shared cores of the machines they run on, a second test's processes and
// traffic would break the timing bounds they check (the live page's 2 s,
// the product page's 1 s).
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/loopers/commerce-pipeline/internal/kafka"
	"github.com/loopers/commerce-pipeline/internal/kafkabroker"
	"github.com/loopers/commerce-pipeline/internal/outbox"
	"github.com/loopers/commerce-pipeline/internal/stack"
	"github.com/loopers/commerce-pipeline/internal/testenv"
	"github.com/loopers/commerce-pipeline/pkg/events"
	"github.com/loopers/commerce-pipeline/pkg/pcon"
)

// The service binaries, built while the first test starts the shared Kafka
// broker (a JVM) rather than before it: the two overlap.
var (
	bins     *stack.Binaries
	buildErr error
	built    = make(chan struct{})
)

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		// Every test here runs the services on PostgreSQL and Apache
		// Kafka, so -short skips them all (binaries): no build for them.
		close(built)
		os.Exit(m.Run())
	}
	go func() {
		defer close(built)
		root, err := stack.ModuleRoot()
		if err == nil {
			// pipelinectl too: the incident test runs it as an operator would.
			bins, err = stack.Build(context.Background(), root, slices.Concat(stack.Services, []string{"./cmd/pipelinectl"})...)
		}
		if err != nil {
			buildErr = fmt.Errorf("e2e: build the services: %w", err)
		}
	}()
	code := m.Run()
	<-built
	if bins != nil {
		if err := bins.Remove(); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: remove the built services:", err)
		}
	}
	os.Exit(code)
}

// binaries waits for the service binaries, failing the test if they could
// not be built.
func binaries(t *testing.T) *stack.Binaries {
	t.Helper()
	testenv.Needs(t, "PostgreSQL and Apache Kafka, for the services")
	<-built
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return bins
}

// start runs a service binary for the test; it is stopped when the test ends
// and its log is shown if the test failed. Its log is checked then: it must
// hold JSON records, none giving a key twice (checkLogKeys).
func start(t *testing.T, name, bin string, env map[string]string) *stack.Proc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	p, err := binaries(t).Start(bin, env, logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Stop(20 * time.Second)
		checkLogKeys(t, name, logPath)
		if t.Failed() {
			t.Logf("%s log (last 4 KiB):\n%s", name, p.Log(4096))
		}
	})
	return p
}

// The addresses freeAddr handed out.
var (
	addrMu     sync.Mutex
	addrsGiven = map[string]bool{}
)

// freeAddr returns a loopback address nothing listens on now and that no
// earlier call returned: an address handed to a process that has not bound
// it yet looks free to the kernel, and a second process given it would fail
// to listen while the first one answered its health checks in its stead.
func freeAddr(t *testing.T) string {
	t.Helper()
	addrMu.Lock()
	defer addrMu.Unlock()
	for {
		addr, err := stack.FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		if !addrsGiven[addr] {
			addrsGiven[addr] = true
			return addr
		}
	}
}

func waitHTTP(t *testing.T, url string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := stack.WaitHTTP(ctx, url); err != nil {
		t.Fatal(err)
	}
}

// system is the running pipeline.
type system struct {
	t           *testing.T
	dbURL       string
	kafka       *testenv.KafkaEnv // the brokers and the pipeline's names on them
	api         string            // commerce-api's public address
	apiAdmin    string            // its admin address: the cluster view, /metrics
	apiClient   *http.Client
	relayEnv    func(node string) map[string]string
	consumerEnv map[string]string
	apiEnv      map[string]string
	apiProc     *stack.Proc
}

// kafkaSetup says where a system's Kafka is and how its topics are made, as
// infrastructure makes them (kafka.Settings.PipelineTopics: 3 partitions
// each, the pipeline's retention). The zero value is a prefix of the test's
// own on the broker the package shares, replication 1.
type kafkaSetup struct {
	// Cluster, when set, is a broker or cluster of the test's own
	// (testenv.KafkaCluster), for a test that kills, stops or reconfigures
	// brokers; the pipeline uses its own names there, unprefixed.
	Cluster *kafkabroker.Cluster
	// Replication is every topic's replication factor (1 when 0): 3 on a
	// three-node cluster.
	Replication int16
	// Config holds settings of every topic (min.insync.replicas=2 with
	// three replicas, say).
	Config map[string]string
	// TopicConfig holds settings of single topics, by the pipeline's name
	// (like-events.DLT), over Config.
	TopicConfig map[string]map[string]string
	// Admin, when set, is how a secured cluster's administrator reaches
	// the pipeline's Kafka (its listener, credentials and the pipeline's
	// prefix): the topics are created through it, as infrastructure
	// creates them, and Cluster is not used.
	Admin *kafka.Settings
	// ServiceEnv holds variables by service binary (outbox-relay,
	// product-consumers, commerce-api), set over the system's own: a
	// secured listener with the service's own credentials, commerce-api's
	// AUTH_*.
	ServiceEnv map[string]map[string]string
	// Prefix, with Cluster, puts the pipeline's names under it, for a test
	// that runs one pipeline after another on its cluster, each with topics
	// of its own.
	Prefix string
	// ShippedDefaults runs the relay and the consumers with the timings
	// they ship with (lease, poll and retry intervals, consumer session),
	// not the harness's shorter ones: for a test whose figures are quoted
	// as what an operator gets.
	ShippedDefaults bool
}

// kafka returns the pipeline's Kafka with its topics created; they are
// deleted when the test ends.
func (ks kafkaSetup) kafka(t *testing.T) *testenv.KafkaEnv {
	t.Helper()
	k := &testenv.KafkaEnv{}
	switch {
	case ks.Admin != nil:
		k.Settings = *ks.Admin
	case ks.Cluster == nil:
		k = testenv.Kafka(t) // a fresh prefix, no topics yet
	default:
		k.Brokers, k.Prefix = ks.Cluster.Brokers(), ks.Prefix
	}
	specs := k.PipelineTopics(3, max(ks.Replication, 1))
	for i := range specs {
		maps.Copy(specs[i].Config, ks.Config)
		maps.Copy(specs[i].Config, ks.TopicConfig[strings.TrimPrefix(specs[i].Name, k.Prefix)])
	}
	k.CreateTopics(t, specs...)
	return k
}

// newSystem starts commerce-api with its pipeline's topics on the shared
// broker; the test starts relays and consumers.
func newSystem(t *testing.T) *system { return newSystemOn(t, kafkaSetup{}) }

// newSystemOn is newSystem with the pipeline's Kafka as ks says.
func newSystemOn(t *testing.T, ks kafkaSetup) *system {
	t.Helper()
	s := &system{t: t, dbURL: testenv.DatabaseURL(t), kafka: ks.kafka(t)}
	redisURL := testenv.RedisURL(t)
	apiAddr, adminAddr := freeAddr(t), freeAddr(t)
	s.apiEnv = map[string]string{"DATABASE_URL": s.dbURL, "REDIS_URL": redisURL, "HTTP_ADDR": apiAddr, "ADMIN_ADDR": adminAddr}
	maps.Copy(s.apiEnv, ks.ServiceEnv["commerce-api"])
	s.apiProc = start(t, "commerce-api", "commerce-api", s.apiEnv)
	s.api, s.apiAdmin = "http://"+apiAddr, "http://"+adminAddr
	s.apiClient = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	// The harness's shorter timings, unless the test wants the shipped ones.
	relayTimings := map[string]string{"OUTBOX_RELAY_LEASE_TTL": "2s", "OUTBOX_RELAY_INTERVAL": "200ms", "OUTBOX_RELAY_RETRY_INTERVAL": "500ms"}
	consumerTimings := map[string]string{
		"PRODUCT_CONSUMERS_RETRY_BACKOFF": "100ms",
		// A SIGKILLed member that does not come back holds its partitions
		// until its session ends (the brokers allow sessions from 500 ms,
		// testenv.BrokerProps).
		"PRODUCT_CONSUMERS_SESSION_TIMEOUT": "6s", "PRODUCT_CONSUMERS_REBALANCE_TIMEOUT": "10s",
	}
	if ks.ShippedDefaults {
		relayTimings, consumerTimings = nil, nil
	}
	s.relayEnv = func(node string) map[string]string {
		env := s.withKafka(map[string]string{"DATABASE_URL": s.dbURL, "ADMIN_ADDR": freeAddr(t), "CLUSTER_NODE_ID": node})
		maps.Copy(env, relayTimings)
		maps.Copy(env, ks.ServiceEnv["outbox-relay"])
		return env
	}
	s.consumerEnv = s.withKafka(map[string]string{"DATABASE_URL": s.dbURL, "REDIS_URL": redisURL, "ADMIN_ADDR": freeAddr(t)})
	maps.Copy(s.consumerEnv, consumerTimings)
	maps.Copy(s.consumerEnv, ks.ServiceEnv["product-consumers"])
	waitHTTP(t, s.api+"/readyz")
	return s
}

// withKafka adds the variables that point a process at the pipeline's
// Kafka (KAFKA_BROKERS, KAFKA_PREFIX) to env and returns it.
func (s *system) withKafka(env map[string]string) map[string]string {
	maps.Copy(env, s.kafka.Env())
	return env
}

// topic names the pipeline's topic on the cluster.
func (s *system) topic(name string) string { return s.kafka.Topic(name) }

// adminConfig is the tests' own Kafka clients' configuration.
func adminConfig() *sarama.Config { return kafka.Settings{}.Config("e2e") }

func (s *system) startRelay(node string) (*stack.Proc, string) {
	env := s.relayEnv(node)
	p := start(s.t, "outbox-relay-"+node, "outbox-relay", env)
	admin := "http://" + env["ADMIN_ADDR"]
	waitHTTP(s.t, admin+"/healthz")
	return p, admin
}

func (s *system) startConsumers() *stack.Proc {
	p := start(s.t, "product-consumers", "product-consumers", s.consumerEnv)
	waitHTTP(s.t, "http://"+s.consumerEnv["ADMIN_ADDR"]+"/healthz")
	return p
}

// call sends one API request and decodes the JSON answer into out (when not
// nil). It returns the status.
func (s *system) call(method, path, user string, body, out any) int {
	s.t.Helper()
	return s.callAt(s.api, method, path, user, body, out)
}

// callAt is call on the listener at base.
func (s *system) callAt(base, method, path, user string, body, out any) int {
	s.t.Helper()
	h := http.Header{}
	if user != "" {
		h.Set("X-User-ID", user)
	}
	return s.send(base, method, path, h, body, out)
}

// send is callAt with the request's headers beside its JSON body.
func (s *system) send(base, method, path string, h http.Header, body, out any) int {
	s.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequestWithContext(s.t.Context(), method, base+"/api/v1"+path, rd)
	req.Header.Set("Content-Type", "application/json")
	for k := range h {
		req.Header.Set(k, h.Get(k))
	}
	resp, err := s.apiClient.Do(req)
	if err != nil {
		s.t.Errorf("%s %s: %v", method, path, err)
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			s.t.Errorf("%s %s: decode %s: %v", method, path, b, err)
		}
	}
	return resp.StatusCode
}

func isLeader(ctx context.Context, admin string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, admin+"/metrics", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "outbox_relay_is_leader ") {
			return strings.TrimSpace(strings.TrimPrefix(line, "outbox_relay_is_leader ")) == "1"
		}
	}
	return false
}

type aggregate struct{ Likes, Sales, Amount, Views int64 }

// envInt reads a positive integer setting of the suite (make e2e raises them).
func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// TestScenario: 20 products, 50 users doing a seeded random mix of likes,
// unlikes, views, orders and payments, while product-consumers is SIGKILLed
// twice and the leading relay once; then product_metrics must equal the
// oracle computed from the domain tables and the views made, exactly.
//
//nolint:paralleltest // starts the real service processes, which on 2 shared cores would break the timing bounds of the other end-to-end tests (the live page's 2 s)
func TestScenario(t *testing.T) {
	s := newSystem(t)
	relayA, adminA := s.startRelay("relay-a")
	relayB, adminB := s.startRelay("relay-b")
	consumers := s.startConsumers()

	const nProducts, nUsers, workers = 20, 50, 16
	products := make([]int64, nProducts)
	for i := range products {
		var p struct{ ID int64 }
		stock := 100000
		if i < 3 {
			stock = 40 // a few products sell out, exercising StockDepleted
		}
		if st := s.call("POST", "/products", "", map[string]any{"name": fmt.Sprintf("product %d", i), "price": 1000 + 100*i, "stock": stock}, &p); st != http.StatusCreated {
			t.Fatalf("create product: status %d", st)
		}
		products[i] = p.ID
	}

	// Paced so that the faults fall well apart, as crashes do, rather than
	// within one consumer group rebalance.
	total := envInt("E2E_ACTIONS", 5000)
	pace := time.NewTicker(time.Second / time.Duration(envInt("E2E_RATE", 200)))
	defer pace.Stop()
	var next, viewsMade atomic.Int64
	views := make([]atomic.Int64, nProducts)
	faults := map[int64]func(){
		int64(total) / 4: func() { consumers.Kill(); consumers = s.startConsumers() },
		int64(total) / 2: func() {
			leader, admin := relayA, adminA
			if !isLeader(t.Context(), adminA) {
				leader, admin = relayB, adminB
			}
			if !isLeader(t.Context(), admin) {
				t.Error("no relay reports being the leader")
				return
			}
			leader.Kill()
		},
		int64(total) * 3 / 4: func() { consumers.Kill(); consumers = s.startConsumers() },
	}
	var faultMu sync.Mutex
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(42, uint64(w)))
			for {
				<-pace.C
				n := next.Add(1)
				if n > int64(total) {
					return
				}
				if f, ok := faults[n]; ok {
					faultMu.Lock()
					f()
					faultMu.Unlock()
				}
				user := "user-" + strconv.Itoa(rng.IntN(nUsers))
				pi := rng.IntN(nProducts)
				pid := strconv.FormatInt(products[pi], 10)
				switch r := rng.IntN(100); {
				case r < 30:
					s.expect(s.call("POST", "/products/"+pid+"/likes", user, nil, nil), http.StatusOK)
				case r < 45:
					s.expect(s.call("DELETE", "/products/"+pid+"/likes", user, nil, nil), http.StatusOK)
				case r < 75:
					if s.expect(s.call("GET", "/products/"+pid, user, nil, nil), http.StatusOK) {
						views[pi].Add(1)
						viewsMade.Add(1)
					}
				default:
					items := []map[string]any{{"productId": products[pi], "quantity": 1 + rng.IntN(3)}}
					if rng.IntN(3) == 0 {
						items = append(items, map[string]any{"productId": products[(pi+1+rng.IntN(nProducts-1))%nProducts], "quantity": 1})
					}
					var order struct{ ID int64 }
					if !s.expect(s.call("POST", "/orders", user, map[string]any{"items": items}, &order), http.StatusCreated) {
						continue
					}
					// Paying may find a sold-out product: 409, nothing changes.
					s.expect(s.call("POST", "/orders/"+strconv.FormatInt(order.ID, 10)+"/payments", user, nil, nil), http.StatusOK, http.StatusConflict)
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	// The oracle: likes and paid orders from the domain tables, views as made.
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	want := map[int64]aggregate{}
	for i, id := range products {
		want[id] = aggregate{Views: views[i].Load()}
	}
	rows, _ := conn.Query(ctx, `SELECT product_id, count(*), 0::bigint FROM likes GROUP BY product_id`)
	scanInto(t, rows, func(id, n, _ int64) { a := want[id]; a.Likes = n; want[id] = a })
	rows, _ = conn.Query(ctx, `
		SELECT oi.product_id, sum(oi.quantity)::bigint, sum(oi.quantity * oi.unit_price)::bigint
		FROM order_items oi JOIN orders o ON o.id = oi.order_id
		WHERE o.status = 'PAID' GROUP BY oi.product_id`)
	scanInto(t, rows, func(id, q, amount int64) { a := want[id]; a.Sales, a.Amount = q, amount; want[id] = a })

	got := waitMetrics(t, conn, want, 120*time.Second)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("product_metrics differ from the oracle after %d actions (%d views) (-want +got):\n%s", total, viewsMade.Load(), diff)
	}
	t.Logf("%d actions, %d views; aggregates equal the oracle for all %d products", total, viewsMade.Load(), nProducts)
}

func (s *system) expect(got int, want ...int) bool {
	s.t.Helper()
	for _, w := range want {
		if got == w {
			return w < 300
		}
	}
	s.t.Errorf("status %d, want one of %v", got, want)
	return false
}

func scanInto(t *testing.T, rows pgx.Rows, f func(a, b, c int64)) {
	t.Helper()
	defer rows.Close()
	for rows.Next() {
		var a, b, c int64
		if err := rows.Scan(&a, &b, &c); err != nil {
			t.Fatal(err)
		}
		f(a, b, c)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

func readMetrics(t *testing.T, conn *pgx.Conn, products map[int64]aggregate) map[int64]aggregate {
	t.Helper()
	got := map[int64]aggregate{}
	for id := range products {
		got[id] = aggregate{}
	}
	rows, err := conn.Query(context.Background(), `SELECT product_id, like_count, sales_count, sales_amount, view_count FROM product_metrics`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var a aggregate
		if err := rows.Scan(&id, &a.Likes, &a.Sales, &a.Amount, &a.Views); err != nil {
			t.Fatal(err)
		}
		got[id] = a
	}
	return got
}

func waitMetrics(t *testing.T, conn *pgx.Conn, want map[int64]aggregate, limit time.Duration) map[int64]aggregate {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		got := readMetrics(t, conn, want)
		if cmp.Equal(want, got) || time.Now().After(deadline) {
			return got
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestPoisonEvent: an event of a type no consumer knows, written straight
// into the outbox, ends in its topic's DLT with its origin, and the events
// after it are still processed.
//
//nolint:paralleltest // starts the real service processes, which on 2 shared cores would break the timing bounds of the other end-to-end tests (the live page's 2 s)
func TestPoisonEvent(t *testing.T) {
	s := newSystem(t)
	s.startRelay("relay-a")
	s.startConsumers()
	var p struct{ ID int64 }
	if st := s.call("POST", "/products", "", map[string]any{"name": "p", "price": 100, "stock": 5}, &p); st != http.StatusCreated {
		t.Fatalf("create product: %d", st)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	poisonID := insertPoison(t, conn, strconv.FormatInt(p.ID, 10))
	for range 3 {
		s.expect(s.call("GET", "/products/"+strconv.FormatInt(p.ID, 10), "u", nil, nil), http.StatusOK)
	}
	want := map[int64]aggregate{p.ID: {Views: 3}}
	if diff := cmp.Diff(want, waitMetrics(t, conn, want, 60*time.Second)); diff != "" {
		t.Fatalf("views after the poison event (-want +got):\n%s", diff)
	}

	dlt := testenv.ReadTopic(t, s.kafka.Brokers, s.topic("product-events.DLT"), 1, 30*time.Second)
	h := testenv.Headers(dlt[0])
	// The original topic and the group as they are named on the cluster.
	wantHeaders := map[string]string{
		"ce_id": poisonID, "ce_type": "loopers.product.exploded.v1",
		pcon.HeaderOriginalTopic: s.topic("product-events"), pcon.HeaderConsumerGroup: s.kafka.Group("product-view-consumer"),
	}
	for k, v := range wantHeaders {
		if h[k] != v {
			t.Errorf("DLT header %s = %q, want %q (all: %v)", k, h[k], v, h)
		}
	}
	if h[pcon.HeaderError] == "" || h[pcon.HeaderOriginalOffset] == "" || h[pcon.HeaderOriginalPartition] == "" {
		t.Errorf("DLT record lacks origin headers: %v", h)
	}
}

// insertPoison writes an event of a type no consumer knows, about product
// id, straight into the outbox, and returns its event id: the relay
// publishes it to product-events, where the view consumer dead-letters it.
func insertPoison(t *testing.T, conn *pgx.Conn, product string) string {
	t.Helper()
	id := uuid.NewString()
	poison := outbox.Entry{EventID: id, Source: "e2e", Record: events.Record{
		Type: "loopers.product.exploded.v1", AggregateType: "Product", AggregateID: product, Data: []byte("{}")}}
	if _, err := outbox.Insert(t.Context(), conn.QueryRow, poison); err != nil {
		t.Fatal(err)
	}
	return id
}
