package app_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/loopers/commerce-pipeline/internal/kafka"
	"github.com/loopers/commerce-pipeline/internal/kafkabroker"
	"github.com/loopers/commerce-pipeline/internal/testenv"
	"github.com/loopers/commerce-pipeline/pkg/events"
	"github.com/loopers/commerce-pipeline/services/product-consumers/internal/consumer"
)

// TestTwoInstancesUnderInitialRebalanceDelay runs two product-consumers
// instances, as shipped, against a broker with Kafka's default
// group.initial.rebalance.delay.ms (3 s; compose, Kafka's own sample
// server.properties and the other tests' brokers set 0).
//
// What users of the default see: a group that starts from empty (the first
// deployment, or every instance down for longer than the session timeout)
// is held by the broker for 3 s after its first member joins, and for
// another 3 s whenever more members joined during the last 3 s, up to the
// rebalance timeout (15 s). One instance starts consuming after 3 s;
// replicas started together, as here, after 6 s; replicas that come up one
// by one, a few seconds apart, after up to 15 s. The service is ready
// (/readyz) all along, and what is published meanwhile waits in Kafka. In
// exchange, replicas that start together form each group in one
// generation: one rebalance instead of one per replica, no partition handed
// from one to the other, nothing processed twice.
func TestTwoInstancesUnderInitialRebalanceDelay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// Kafka's defaults, where the test brokers differ from them.
	c := testenv.KafkaCluster(t, kafkabroker.Options{Props: map[string]string{
		"group.initial.rebalance.delay.ms": "3000",
		"group.min.session.timeout.ms":     "6000",
	}})
	k := &testenv.KafkaEnv{Settings: kafka.Settings{Brokers: c.Brokers()}} // the shipped prefix: none
	k.CreateTopics(t, k.PipelineTopics(3, 1)...)
	f := newFixtureOn(t, k)
	admin, err := sarama.NewClusterAdmin(k.Brokers, k.Config("test-admin"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	groups := []string{consumer.LikeGroup, consumer.OrderGroup, consumer.ViewGroup, consumer.StockGroup}
	// A new cluster creates __consumer_offsets on the first group request
	// and answers "coordinator not available" until it is loaded, which
	// would hold up whichever instance asked first by its own retry
	// backoff. A cluster that runs the pipeline has it already.
	waitFor(t, "the group coordinator", func() bool {
		_, err := admin.DescribeConsumerGroups(groups)
		return err == nil
	})

	// Products 1 to 9 and orders 1 to 9 and 101 to 109: every partition of
	// every topic gets records (key 7 hashes to partition 0, 1 to 1, 3 to 2).
	const products = 9
	batch := func(phase int) []*sarama.ProducerMessage {
		event := f.event(t)
		var msgs []*sarama.ProducerMessage
		for p := int64(1); p <= products; p++ {
			user := fmt.Sprintf("user%d-%d", phase, p)
			order := int64(100*phase) + p
			qty := int64(1 + phase) // 1 before the start, 2 during the delay
			msgs = append(msgs,
				f.message(t, "like-events", event(events.LikeCreatedV1{UserID: user, ProductID: p}), uuid.NewString()),
				f.message(t, "order-events", event(events.OrderPaidV1{OrderID: order, PaymentID: order, Amount: 100 * qty,
					Items: []events.OrderItem{{ProductID: p, Quantity: qty, UnitPrice: 100}}}), uuid.NewString()),
				f.message(t, "product-events", event(events.ProductViewedV1{ProductID: p, UserID: user}), uuid.NewString()))
			if phase == 0 {
				msgs = append(msgs,
					f.message(t, "product-events", event(events.ProductViewedV1{ProductID: p}), uuid.NewString()),
					f.message(t, "stock-events", event(events.StockDepletedV1{ProductID: p}), uuid.NewString()))
			}
		}
		return msgs
	}
	send := func(msgs []*sarama.ProducerMessage) {
		t.Helper()
		if err := f.producer.SendMessages(msgs); err != nil {
			t.Fatal(err)
		}
	}
	published := map[string]int{} // records per topic, on the cluster
	count := func(msgs []*sarama.ProducerMessage) {
		for _, m := range msgs {
			published[m.Topic]++
		}
	}
	before := batch(0)
	send(before)
	count(before)

	// Two replicas started together, each with an identity of its own and
	// nothing else set but where the database, Redis and Kafka are.
	launched := time.Now()
	var instances []instance
	for i := range 2 {
		vars := f.required()
		vars["CLUSTER_NODE_ID"] = "consumers-" + strconv.Itoa(i)
		instances = append(instances, f.launch(t, vars))
	}
	var admins []string
	for _, in := range instances {
		select {
		case a := <-in.admin:
			admins = append(admins, a)
		case err := <-in.done:
			t.Fatalf("Run returned: %v", err)
		}
	}
	states := func() map[string]string {
		t.Helper()
		ds, err := admin.DescribeConsumerGroups(groups)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, d := range ds {
			out[d.GroupId] = fmt.Sprintf("%s, %d members", d.State, len(d.Members))
		}
		return out
	}
	allIn := func(state string) bool {
		ds, err := admin.DescribeConsumerGroups(groups)
		if err != nil {
			return false
		}
		for _, d := range ds {
			if d.State != state {
				return false
			}
		}
		return len(ds) == len(groups)
	}
	// The groups' delay has begun: their first members joined, and the
	// broker holds the joins.
	waitFor(t, "every group preparing its first rebalance", func() bool { return allIn("PreparingRebalance") })
	preparing := time.Now()
	during := batch(1)
	send(during)
	count(during)
	if !allIn("PreparingRebalance") {
		t.Fatalf("a group completed its first rebalance before the events of the delay were published: %v", states())
	}
	db := f.conn(t)
	var assigned int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM cluster_assignments`).Scan(&assigned); err != nil || assigned != 0 {
		t.Fatalf("%d partitions assigned during the delay (%v), want none", assigned, err)
	}
	for _, a := range admins {
		if code, _, err := get(t.Context(), "http://"+a+"/readyz"); err != nil || code != http.StatusOK {
			t.Errorf("/readyz of %s during the delay: %d %v, want 200: readiness does not wait for the groups", a, code, err)
		}
	}

	type m struct{ Likes, Sales, Amount, Views int64 }
	want := map[int64]m{}
	for p := int64(1); p <= products; p++ {
		want[p] = m{Likes: 2, Sales: 1 + 2, Amount: 100 + 200, Views: 3}
	}
	metrics := func() map[int64]m {
		rows, err := db.Query(ctx, `SELECT product_id, like_count, sales_count, sales_amount, view_count FROM product_metrics`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		got := map[int64]m{}
		for rows.Next() {
			var id int64
			var v m
			if err := rows.Scan(&id, &v.Likes, &v.Sales, &v.Amount, &v.Views); err != nil {
				t.Fatal(err)
			}
			got[id] = v
		}
		return got
	}
	waitFor(t, "exact aggregates", func() bool { return cmp.Equal(want, metrics()) })

	// The registry: every partition assigned once (pcon's assignment
	// epoch 1: one generation gave it out), never released or moved,
	// spread over both instances, and handled since. (The row's version
	// counts the writes of an assignment, and a write whose answer was lost
	// is written again.)
	type assignment struct {
		Group, Topic string
		Partition    int32
		Node         string
		Epoch        int64
		Moves        int64
		Released     bool
		Handled      bool
	}
	var rows []assignment
	var first time.Time
	waitFor(t, "every partition's first record handled, in the registry", func() bool {
		rs, err := db.Query(ctx, `SELECT group_id, topic, partition, node_id, epoch, moves, released_at IS NOT NULL,
			first_handled_at IS NOT NULL, min(assigned_at) OVER () FROM cluster_assignments ORDER BY group_id, topic, partition`)
		if err != nil {
			t.Fatal(err)
		}
		defer rs.Close()
		rows = nil
		handled := 0
		for rs.Next() {
			var a assignment
			if err := rs.Scan(&a.Group, &a.Topic, &a.Partition, &a.Node, &a.Epoch, &a.Moves, &a.Released, &a.Handled, &first); err != nil {
				t.Fatal(err)
			}
			rows = append(rows, a)
			if a.Handled {
				handled++
			}
		}
		return len(rows) == len(groups)*3 && handled == len(rows)
	})
	nodes := map[string]map[string]bool{} // group → the nodes that own some of its partitions
	for _, a := range rows {
		if a.Epoch != 1 || a.Moves != 0 || a.Released {
			t.Errorf("%s %s/%d: epoch %d, moves %d, released %v; want assigned once, never moved or released", a.Group, a.Topic, a.Partition, a.Epoch, a.Moves, a.Released)
		}
		if nodes[a.Group] == nil {
			nodes[a.Group] = map[string]bool{}
		}
		nodes[a.Group][a.Node] = true
	}
	for _, g := range groups {
		if got := slices.Sorted(maps.Keys(nodes[g])); !slices.Equal(got, []string{"consumers-0", "consumers-1"}) {
			t.Errorf("group %s's partitions are owned by %v, want both instances: one joined after the first generation", g, got)
		}
	}
	var handoffs int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM cluster_handoffs`).Scan(&handoffs); err != nil || handoffs != 0 {
		t.Errorf("%d partitions released while both instances ran (%v), want none", handoffs, err)
	}
	for g, s := range states() {
		if s != "Stable, 2 members" {
			t.Errorf("group %s: %s, want Stable, 2 members", g, s)
		}
	}
	// The broker held the first rebalance for the delay and, since the
	// second member joined within it, once more: no assignment came
	// sooner after the start.
	if held := first.Sub(launched); held < 6*time.Second {
		t.Errorf("the first partition was assigned %v after the start, want at least the 3 s delay twice", held)
	}
	t.Logf("every group was seen waiting %v after the instances started; the first partition was assigned %v later",
		preparing.Sub(launched).Round(time.Millisecond), first.Sub(preparing).Round(time.Millisecond))

	// Nothing processed twice, nothing dead-lettered: pcon processed each
	// record once over both instances, and no event was found a duplicate.
	processed, outcomes := map[string]float64{}, map[string]float64{}
	for _, a := range admins {
		fams := scrapeFamilies(t, "http://"+a+"/metrics")
		for _, s := range fams["pcon_processed_total"].GetMetric() {
			processed[label(s.GetLabel(), "topic")] += s.GetCounter().GetValue()
		}
		for _, s := range fams["pcon_dead_lettered_total"].GetMetric() {
			if v := s.GetCounter().GetValue(); v != 0 {
				t.Errorf("%v records of %s dead-lettered", v, label(s.GetLabel(), "topic"))
			}
		}
		for _, s := range fams["product_consumer_events_total"].GetMetric() {
			if v := s.GetCounter().GetValue(); v != 0 {
				outcomes[label(s.GetLabel(), "outcome")] += v
			}
		}
	}
	wantProcessed := map[string]float64{}
	total := 0
	for topic, n := range published {
		wantProcessed[topic] = float64(n)
		total += n
	}
	if diff := cmp.Diff(wantProcessed, processed); diff != "" {
		t.Errorf("records processed per topic over both instances (-published +processed):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]float64{"applied": float64(total)}, outcomes); diff != "" {
		t.Errorf("events by outcome over both instances (-want +got):\n%s", diff)
	}

	for _, in := range instances {
		in.stop()
		if err := <-in.done; err != nil {
			t.Errorf("Run returned %v after shutdown, want nil", err)
		}
	}
}

// scrapeFamilies reads a /metrics page.
func scrapeFamilies(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	code, body, err := get(t.Context(), url)
	if err != nil || code != http.StatusOK {
		t.Fatalf("%s: %d %v", url, code, err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("%s: %v", url, err)
	}
	return fams
}

// label returns the value of the label called name.
func label(ls []*dto.LabelPair, name string) string {
	for _, l := range ls {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// get fetches url, bound to ctx.
func get(ctx context.Context, url string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}
