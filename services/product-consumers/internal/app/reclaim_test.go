package app_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/loopers/commerce-pipeline/internal/kafka"
	"github.com/loopers/commerce-pipeline/internal/reclaim"
	"github.com/loopers/commerce-pipeline/internal/testenv"
	"github.com/loopers/commerce-pipeline/pkg/events"
)

// stack is product-consumers running on a fixture, with a connection to its
// database.
type stack struct {
	*fixture
	t     *testing.T
	db    *pgx.Conn
	admin string
	emit  func(topic string, rec events.Record, id string)
	event func(ev any) events.Record
}

// startStack runs the like and order consumers with env added to the
// fixture's settings, and waits for them to stop when the test ends.
func startStack(t *testing.T, env map[string]string) *stack {
	t.Helper()
	f := newFixture(t)
	vars := map[string]string{"PRODUCT_CONSUMERS_GROUPS": "like,order"}
	for k, v := range env {
		vars[k] = v
	}
	admin, done, stop := f.start(t, vars)
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run returned %v after shutdown", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Run did not return after shutdown")
		}
	})
	return &stack{fixture: f, t: t, db: f.conn(t), admin: admin, emit: f.sender(t), event: f.event(t)}
}

// send publishes ev as the relay would, with the given event id and the
// fixture's next sequence.
func (s *stack) send(ev any, id string) {
	s.t.Helper()
	rec := s.event(ev)
	topic, err := events.TopicOf(rec.Type)
	if err != nil {
		s.t.Fatal(err)
	}
	s.emit(topic, rec, id)
}

// breakDatabase makes the consumers' writes fail (the idempotency records
// of orders, the like states), as an unreachable database would; the returned
// function repairs it.
func (s *stack) breakDatabase() (repair func()) {
	s.t.Helper()
	s.exec(`CREATE FUNCTION outage() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'database unavailable (test outage)'; END $$`)
	for _, table := range []string{"event_handled", "product_like_state"} {
		s.exec(`CREATE TRIGGER outage BEFORE INSERT ON ` + table + ` FOR EACH STATEMENT EXECUTE FUNCTION outage()`)
	}
	return func() {
		s.exec(`DROP TRIGGER outage ON event_handled`)
		s.exec(`DROP TRIGGER outage ON product_like_state`)
		s.exec(`DROP FUNCTION outage()`)
	}
}

func (s *stack) exec(sql string) {
	s.t.Helper()
	if _, err := s.db.Exec(context.Background(), sql); err != nil {
		s.t.Fatalf("%s: %v", sql, err)
	}
}

type metricsRow struct{ Likes, Sales, Amount int64 }

func (s *stack) metrics() map[int64]metricsRow {
	s.t.Helper()
	rows, err := s.db.Query(context.Background(), `SELECT product_id, like_count, sales_count, sales_amount FROM product_metrics`)
	if err != nil {
		s.t.Fatal(err)
	}
	defer rows.Close()
	out := map[int64]metricsRow{}
	for rows.Next() {
		var id int64
		var m metricsRow
		if err := rows.Scan(&id, &m.Likes, &m.Sales, &m.Amount); err != nil {
			s.t.Fatal(err)
		}
		out[id] = m
	}
	return out
}

// handled returns how many events consumer handled (applied or found to be
// duplicates), from the service's own metrics.
func (s *stack) handled(consumer string) int {
	s.t.Helper()
	n := 0
	for _, line := range strings.Split(s.scrape(), "\n") {
		rest, ok := strings.CutPrefix(line, `product_consumer_events_total{consumer="`+consumer+`",`)
		if !ok {
			continue
		}
		_, v, _ := strings.Cut(rest, "} ")
		x, err := strconv.Atoi(v)
		if err != nil {
			s.t.Fatalf("metrics line %q: %v", line, err)
		}
		n += x
	}
	return n
}

func (s *stack) scrape() string {
	s.t.Helper()
	req, err := http.NewRequestWithContext(s.t.Context(), http.MethodGet, "http://"+s.admin+"/metrics", nil)
	if err != nil {
		s.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	return string(body)
}

// waitFor polls cond until it holds or 30 s passed.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// dltSize is the number of records in topic's DLT.
func (s *stack) dltSize(topic string) int64 {
	s.t.Helper()
	return testenv.EndOffsets(s.t, s.brokers, s.kafka.Topic(topic+events.DLTSuffix))
}

// reclaimer is a re-driver of the like and order DLTs, as pipelinectl's:
// in the scheduled reclaimer's group.
func (s *stack) reclaimer(count int) *reclaim.Reclaimer {
	s.t.Helper()
	r, err := reclaim.New(reclaim.Config{
		Kafka: s.kafka.Settings, Topics: s.kafka.Topics([]string{"like-events", "order-events"}), DLTSuffix: events.DLTSuffix,
		Group: s.kafka.Group(reclaim.Group), MinIdle: time.Nanosecond, Count: count, MaxRedrives: 3,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(r.Close)
	return r
}

// TestScheduledReclaimAfterDatabaseOutage: the consumers' database fails long
// enough for every event to reach the DLT; once it is back, the scheduled
// reclaimer re-drives them and the aggregates end exact.
func TestScheduledReclaimAfterDatabaseOutage(t *testing.T) {
	t.Parallel()
	s := startStack(t, map[string]string{"PRODUCT_CONSUMERS_RECLAIM_INTERVAL": "100ms", "PRODUCT_CONSUMERS_RECLAIM_MIN_IDLE": "1s"})
	repair := s.breakDatabase()
	orderID := "00000000-0000-0000-0000-0000000000a1"
	s.send(events.OrderPaidV1{OrderID: 1, PaymentID: 1, Amount: 500, Items: []events.OrderItem{{ProductID: 1, Quantity: 5, UnitPrice: 100}}}, orderID)
	for _, u := range []string{"u1", "u2", "u3"} {
		s.send(events.LikeCreatedV1{UserID: u, ProductID: 1}, uuid.NewString())
	}
	waitFor(t, "4 dead letters", func() bool { return s.dltSize("like-events")+s.dltSize("order-events") >= 4 })
	repair()
	// The order event is redelivered as well: it must count once.
	s.send(events.OrderPaidV1{OrderID: 1, PaymentID: 1, Amount: 500, Items: []events.OrderItem{{ProductID: 1, Quantity: 5, UnitPrice: 100}}}, orderID)

	want := map[int64]metricsRow{1: {Likes: 3, Sales: 5, Amount: 500}}
	waitFor(t, "exact aggregates", func() bool { return cmp.Equal(want, s.metrics()) })
	// Let further passes run: nothing may be applied twice.
	time.Sleep(1500 * time.Millisecond)
	if diff := cmp.Diff(want, s.metrics()); diff != "" {
		t.Errorf("product_metrics (-want +got):\n%s", diff)
	}
	body := s.scrape()
	for _, series := range []string{
		`reclaim_messages_total{domain="like",outcome="redriven",shard=`,
		`reclaim_messages_total{domain="order",outcome="redriven",shard=`,
		`reclaim_latency_seconds_bucket{domain="like",shard="0"`,
	} {
		if !strings.Contains(body, series) {
			t.Errorf("/metrics lacks %s", series)
		}
	}
}

// TestRedrivenLikeAfterNewerCancel: a like dead-lettered, then a newer cancel
// of it applied, then the like re-driven: the like keeps its sequence, so the
// consumer's sequence guard ignores it and the count stays right.
func TestRedrivenLikeAfterNewerCancel(t *testing.T) {
	t.Parallel()
	s := startStack(t, map[string]string{"PRODUCT_CONSUMERS_RECLAIM_ENABLED": "false"})
	s.send(events.LikeCreatedV1{UserID: "other", ProductID: 7}, uuid.NewString())
	waitFor(t, "the first like", func() bool { return s.metrics()[7].Likes == 1 })
	repair := s.breakDatabase()
	s.send(events.LikeCreatedV1{UserID: "u1", ProductID: 7}, uuid.NewString())
	waitFor(t, "the like in the DLT", func() bool { return s.dltSize("like-events") == 1 })
	repair()
	s.send(events.LikeCanceledV1{UserID: "u1", ProductID: 7}, uuid.NewString())
	waitFor(t, "the cancel handled", func() bool { return s.handled("like") == 2 })

	res := s.reclaimer(100).Pass(context.Background(), reclaim.Options{})
	if got := res.Totals()[reclaim.Redriven]; got != 1 || res.Err() != nil {
		t.Fatalf("re-drove %d (%v), want 1", got, res.Err())
	}
	waitFor(t, "the re-driven like handled", func() bool { return s.handled("like") == 3 })
	if got := s.metrics()[7].Likes; got != 1 {
		t.Errorf("like_count %d after the re-driven old like, want 1", got)
	}
}

// TestReclaimCrashBeforeCommit: the DLT offset commit fails after the
// republish, as if the reclaimer died between the two; the next pass
// republishes the same records, and the aggregates stay exact.
func TestReclaimCrashBeforeCommit(t *testing.T) {
	t.Parallel()
	s := startStack(t, map[string]string{"PRODUCT_CONSUMERS_RECLAIM_ENABLED": "false"})
	repair := s.breakDatabase()
	for _, u := range []string{"a", "b"} {
		s.send(events.LikeCreatedV1{UserID: u, ProductID: 3}, uuid.NewString())
	}
	s.send(events.OrderPaidV1{OrderID: 9, PaymentID: 9, Amount: 30, Items: []events.OrderItem{{ProductID: 3, Quantity: 3, UnitPrice: 10}}}, uuid.NewString())
	waitFor(t, "3 dead letters", func() bool { return s.dltSize("like-events")+s.dltSize("order-events") == 3 })
	repair()

	// Only the reclaimer's commits fail: the consumers' groups are others.
	leave := occupyGroup(t, s.kafka, s.kafka.Group(reclaim.Group))
	first := s.reclaimer(100).Pass(context.Background(), reclaim.Options{})
	if first.Err() == nil || first.Totals()[reclaim.Redriven] != 3 {
		t.Fatalf("pass with failing commits: %v re-driven, error %v; want 3 and an error", first.Totals(), first.Err())
	}
	if !errors.Is(first.Err(), sarama.ErrUnknownMemberId) {
		t.Errorf("pass with failing commits: error %v, want the broker's refusal of the commit (%v)", first.Err(), sarama.ErrUnknownMemberId)
	}
	want := map[int64]metricsRow{3: {Likes: 2, Sales: 3, Amount: 30}}
	waitFor(t, "exact aggregates after the first pass", func() bool { return cmp.Equal(want, s.metrics()) })

	leave()
	second := s.reclaimer(100).Pass(context.Background(), reclaim.Options{})
	if second.Err() != nil || second.Totals()[reclaim.Redriven] != 3 {
		t.Fatalf("pass after the crash: %v re-driven, error %v; want the same 3 again", second.Totals(), second.Err())
	}
	waitFor(t, "the second copies handled", func() bool { return s.handled("like") == 4 && s.handled("order") == 2 })
	if diff := cmp.Diff(want, s.metrics()); diff != "" {
		t.Errorf("product_metrics after the records came twice (-want +got):\n%s", diff)
	}
	if third := s.reclaimer(100).Pass(context.Background(), reclaim.Options{}); third.Totals()[reclaim.Redriven] != 0 {
		t.Errorf("a pass after the commit re-drove %v", third.Totals())
	}
}

// occupyGroup makes a consumer of the test's own a member of group, and
// returns the function that takes it out and waits until the group is
// empty again. While the group has a member, the broker refuses a commit
// made without a membership (generation -1, no member id: the re-drivers'
// way) with UNKNOWN_MEMBER_ID, after the re-driver republished: what a
// crash between the two leaves behind.
func occupyGroup(t *testing.T, k *testenv.KafkaEnv, group string) (leave func()) {
	t.Helper()
	topic := k.Topic("group-holder")
	k.CreateTopics(t, kafka.TopicSpec{Name: topic, Partitions: 1, Replication: 1})
	cg, err := sarama.NewConsumerGroup(k.Brokers, group, k.Config("group-holder"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &holder{joined: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		for ctx.Err() == nil {
			if err := cg.Consume(ctx, []string{topic}, h); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	stop := func() error {
		cancel()
		return errors.Join(<-done, cg.Close())
	}
	select {
	case <-h.joined:
	case err := <-done:
		t.Fatalf("join %s: %v", group, err)
	case <-time.After(time.Minute):
		_ = stop()
		t.Fatalf("%s: no assignment within a minute", group)
	}
	var once sync.Once
	leave = func() {
		t.Helper()
		once.Do(func() {
			if err := stop(); err != nil {
				t.Fatalf("leave %s: %v", group, err)
			}
			admin, err := sarama.NewClusterAdmin(k.Brokers, k.Config("group-holder-admin"))
			if err != nil {
				t.Fatal(err)
			}
			defer admin.Close()
			waitFor(t, group+" empty", func() bool {
				gs, err := admin.DescribeConsumerGroups([]string{group})
				return err == nil && len(gs) == 1 && gs[0].State == "Empty"
			})
		})
	}
	t.Cleanup(leave)
	return leave
}

// holder is a consumer group handler that only holds its membership.
type holder struct {
	joined chan struct{}
	once   sync.Once
}

func (h *holder) Setup(sarama.ConsumerGroupSession) error {
	h.once.Do(func() { close(h.joined) })
	return nil
}

func (*holder) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (*holder) ConsumeClaim(_ sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for range claim.Messages() { //nolint:revive // nothing is published to the topic; the loop ends with the session
	}
	return nil
}
