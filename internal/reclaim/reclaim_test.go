package reclaim_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/loopers/commerce-pipeline/internal/config"
	"github.com/loopers/commerce-pipeline/internal/kafka"
	"github.com/loopers/commerce-pipeline/internal/kafkabroker"
	"github.com/loopers/commerce-pipeline/internal/pg"
	"github.com/loopers/commerce-pipeline/internal/reclaim"
	"github.com/loopers/commerce-pipeline/internal/testenv"
	"github.com/loopers/commerce-pipeline/pkg/pcon"
)

var domains = []string{"like-events", "order-events"}

// env is a test's topics: the domains' topics with their DLT and parked
// topics. Tests name them as the pipeline does (like-events); the
// reclaimer gets them as named on the cluster (e.topic).
type env struct {
	t       *testing.T
	kafka   kafka.Settings
	brokers []string
	prod    sarama.SyncProducer
	// reclaimAs, when set, is how the reclaimer connects: as a principal
	// of its own, where the set-up (kafka) is a super user's.
	reclaimAs *kafka.Settings
}

func envTopics() []string {
	var topics []string
	for _, d := range domains {
		topics = append(topics, d, d+".DLT", d+".PARKED")
	}
	return topics
}

// newEnv puts the topics under a prefix of the test's own on Apache Kafka.
func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvOn(t, testenv.Kafka(t, envTopics()...).Settings)
}

// securedUser is the reclaimer's SASL user on the broker of newSecuredEnv.
const securedUser = "reclaimer"

// newSecuredEnv puts the topics on a broker of the test's own with the
// authorizer on (testenv.SecureKafkaCluster), under a prefix as a shared
// cluster names them. The set-up (topics, dead letters, reading what was
// republished) goes through its plain listener, whose principal is a super
// user; the reclaimer connects over SASL_PLAINTEXT with SCRAM-SHA-512 as
// securedUser, who may do nothing until an ACL allows it.
func newSecuredEnv(t *testing.T) (*env, *testenv.SecureKafka) {
	t.Helper()
	const prefix = "secured."
	k := testenv.SecureKafkaCluster(t, securedUser)
	s := kafka.Settings{Brokers: k.Brokers(), Prefix: prefix}
	var specs []kafka.TopicSpec
	for _, topic := range envTopics() {
		specs = append(specs, kafka.TopicSpec{Name: s.Topic(topic), Partitions: 3, Replication: 1})
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.CreateTopics(ctx, specs); err != nil {
		t.Fatal(err)
	}
	as, err := config.Parse(config.FromMap(k.Env(t, testenv.ListenerSASLPlaintext, securedUser, kafka.MechanismSCRAMSHA512, prefix)), kafka.Load)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvOn(t, s)
	e.reclaimAs = &as
	return e, k
}

// refuseWrite is refuse for an env of newSecuredEnv: it grants the
// reclaimer's principal what kafka.ACLs grants the reclaimer's role, but
// Write on topic, and instead the operations also on topic; fix grants
// the Write.
func refuseWrite(t *testing.T, e *env, k *testenv.SecureKafka, also ...string) func(topic string) func() {
	return func(topic string) func() {
		t.Helper()
		const principal = "User:" + securedUser
		write := kafka.ACL{Resource: "topic", Pattern: "literal", Name: topic, Operation: "Write"}
		role := kafka.ACLs(e.kafka.Prefix)[kafka.RoleReclaimer]
		if !slices.Contains(role, write) {
			// Else nothing would be taken away, and the case would
			// prove nothing.
			t.Fatalf("the reclaimer's ACLs %v do not allow %s", role, write)
		}
		acls := slices.DeleteFunc(slices.Clone(role), func(a kafka.ACL) bool { return a == write })
		for _, op := range also {
			acls = append(acls, kafka.ACL{Resource: "topic", Pattern: "literal", Name: topic, Operation: op})
		}
		testenv.GrantACLs(t, kafka.Settings{Brokers: k.Brokers()}, principal, acls)
		return func() { testenv.GrantACLs(t, kafka.Settings{Brokers: k.Brokers()}, principal, []kafka.ACL{write}) }
	}
}

func newEnvOn(t *testing.T, k kafka.Settings) *env {
	t.Helper()
	sc := k.Config("dead-letterer")
	sc.Producer.Partitioner = sarama.NewManualPartitioner
	// A batch of dead letters lands in the order it was given.
	sc.Net.MaxOpenRequests = 1
	// And once: a retry of a send the leader appended but did not get
	// acknowledged by its followers in time (a partition that has just
	// moved, a loaded machine) would dead-letter the record twice, and a
	// pass re-drive both.
	sc.Producer.Idempotent = true
	p, err := sarama.NewSyncProducer(k.Brokers, sc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return &env{t: t, kafka: k, brokers: k.Brokers, prod: p}
}

// placeTopics creates the test's topics on k (no prefix), every replica of
// a topic's 3 partitions on the broker node(topic) names.
func placeTopics(t *testing.T, k kafka.Settings, node func(topic string) int32) {
	t.Helper()
	admin, err := sarama.NewClusterAdmin(k.Brokers, k.Config("topic-admin"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	var specs []kafka.TopicSpec
	for _, topic := range envTopics() {
		n := node(topic)
		detail := &sarama.TopicDetail{NumPartitions: -1, ReplicationFactor: -1, ReplicaAssignment: map[int32][]int32{0: {n}, 1: {n}, 2: {n}}}
		if err := admin.CreateTopic(topic, detail, false); err != nil {
			t.Fatalf("create %s on node %d: %v", topic, n, err)
		}
		specs = append(specs, kafka.TopicSpec{Name: topic})
	}
	// Created already: CreateTopics only waits until they have leaders.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := k.CreateTopics(ctx, specs); err != nil {
		t.Fatal(err)
	}
}

// topic names a pipeline topic (like-events, like-events.DLT) on the
// cluster.
func (e *env) topic(name string) string { return e.kafka.Topic(name) }

// topics maps topic over names.
func (e *env) topics(names ...string) []string { return e.kafka.Topics(names) }

// dead is a DLT record as pcon writes it.
type dead struct {
	topic     string // the original topic
	partition int32
	key       string
	age       time.Duration // since it was dead-lettered
	redrives  int
	foreign   bool          // no pcon headers at all
	reason    string        // pcon.HeaderReason ("" for ReasonFailed)
	eventAge  time.Duration // since the event happened (ce_time); 0: no ce_time
}

// deadLetter writes ds, in order, in one batch.
func (e *env) deadLetter(ds ...dead) {
	e.t.Helper()
	msgs := make([]*sarama.ProducerMessage, 0, len(ds))
	for _, d := range ds {
		m := &sarama.ProducerMessage{Topic: e.topic(d.topic + ".DLT"), Partition: d.partition, Key: sarama.StringEncoder(d.key),
			Value: sarama.StringEncoder("value-" + d.key)}
		h := map[string]string{"ce_id": "id-" + d.key}
		if !d.foreign {
			h[pcon.HeaderOriginalTopic] = e.topic(d.topic)
			h[pcon.HeaderOriginalPartition] = strconv.Itoa(int(d.partition))
			h[pcon.HeaderOriginalOffset] = "7"
			h[pcon.HeaderError] = "database unavailable"
			h[pcon.HeaderDeadLetteredAt] = time.Now().Add(-d.age).UTC().Format(time.RFC3339Nano)
			h[pcon.HeaderReason] = pcon.ReasonFailed
			if d.reason != "" {
				h[pcon.HeaderReason] = d.reason
			}
		}
		if d.redrives > 0 {
			h[reclaim.HeaderRedriveCount] = strconv.Itoa(d.redrives)
		}
		if d.eventAge > 0 {
			h["ce_time"] = time.Now().Add(-d.eventAge).UTC().Format(time.RFC3339Nano)
		}
		for k, v := range h {
			m.Headers = append(m.Headers, sarama.RecordHeader{Key: []byte(k), Value: []byte(v)})
		}
		msgs = append(msgs, m)
	}
	if err := e.prod.SendMessages(msgs); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) reclaimer(reg prometheus.Registerer, change func(*reclaim.Config)) *reclaim.Reclaimer {
	e.t.Helper()
	k := e.kafka
	if e.reclaimAs != nil {
		k = *e.reclaimAs
	}
	cfg := reclaim.Config{
		Kafka: k, Topics: e.topics(domains...), DLTSuffix: ".DLT", Group: e.kafka.Group(reclaim.Group),
		MinIdle: time.Minute, Count: 100, MaxRedrives: 3, ReadTimeout: 5 * time.Second,
		Logger: slog.New(slog.DiscardHandler), Registerer: reg,
	}
	if change != nil {
		change(&cfg)
	}
	r, err := reclaim.New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(r.Close)
	return r
}

// got is a republished record as the test compares it.
type got struct {
	Partition int32
	Key       string
	Headers   map[string]string
}

// republished reads n records of topic (the pipeline's name).
func (e *env) republished(topic string, n int) []got {
	e.t.Helper()
	var out []got
	for _, m := range testenv.ReadTopic(e.t, e.brokers, e.topic(topic), n, 10*time.Second) {
		out = append(out, got{m.Partition, string(m.Key), testenv.Headers(m)})
	}
	return out
}

func counts(r reclaim.Result) map[reclaim.Outcome]int {
	t := r.Totals()
	for k, v := range t {
		if v == 0 {
			delete(t, k)
		}
	}
	return t
}

func TestPassOutcomes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.deadLetter(
		dead{topic: "like-events", partition: 1, key: "old", age: time.Hour},
		dead{topic: "like-events", partition: 1, key: "foreign", age: time.Hour, foreign: true},
		dead{topic: "like-events", partition: 1, key: "tired", age: time.Hour, redrives: 3},
		dead{topic: "like-events", partition: 1, key: "again", age: time.Hour, redrives: 1},
		dead{topic: "like-events", partition: 1, key: "young", age: 0},
		dead{topic: "like-events", partition: 1, key: "after-young", age: time.Hour},
	)
	reg := prometheus.NewRegistry()
	r := e.reclaimer(reg, nil)
	res := r.Pass(context.Background(), reclaim.Options{})
	if err := res.Err(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[reclaim.Outcome]int{reclaim.Redriven: 2, reclaim.Parked: 1, reclaim.Skipped: 1}, counts(res)); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
	want := []got{
		{1, "old", map[string]string{"ce_id": "id-old", reclaim.HeaderRedriveCount: "1"}},
		{1, "again", map[string]string{"ce_id": "id-again", reclaim.HeaderRedriveCount: "2"}},
	}
	if diff := cmp.Diff(want, e.republished("like-events", 2)); diff != "" {
		t.Errorf("republished (-want +got):\n%s", diff)
	}
	// The pass stopped before the young record: it and what follows it wait.
	var p1 reclaim.PartitionResult
	for _, p := range res.Domains[0].Partitions {
		if p.Partition == 1 {
			p1 = p
		}
	}
	if p1.Committed != 4 || p1.End != 6 {
		t.Errorf("partition 1 committed %d of %d, want 4 of 6", p1.Committed, p1.End)
	}
	for _, tc := range []struct {
		outcome string
		want    float64
	}{{"redriven", 2}, {"parked", 1}, {"skipped", 1}, {"failed", 0}} {
		if v := testutil.ToFloat64(mustCounter(t, reg, tc.outcome)); v != tc.want {
			t.Errorf("reclaim_messages_total{domain=like,shard=1,outcome=%s} = %v, want %v", tc.outcome, v, tc.want)
		}
	}

	// A second pass finds nothing new to do.
	if got := counts(r.Pass(context.Background(), reclaim.Options{})); len(got) != 0 {
		t.Errorf("second pass took %v, want nothing", got)
	}
	// With no minimum idle time the young records go too.
	third := r.Pass(context.Background(), reclaim.Options{MinIdle: time.Nanosecond})
	if err := third.Err(); err != nil {
		t.Fatal(err)
	}
	if got := counts(third); !cmp.Equal(got, map[reclaim.Outcome]int{reclaim.Redriven: 2}) {
		t.Errorf("third pass took %v, want 2 re-driven", got)
	}
}

func mustCounter(t *testing.T, reg *prometheus.Registry, outcome string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "reclaim_messages_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if l["domain"] == "like" && l["shard"] == "1" && l["outcome"] == outcome {
				c := prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
				c.Add(m.GetCounter().GetValue())
				return c
			}
		}
	}
	t.Fatalf("no reclaim_messages_total series for outcome %s", outcome)
	return nil
}

func TestCountLimitPerPartitionAndPass(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for i := range 5 {
		e.deadLetter(dead{topic: "order-events", partition: 0, key: strconv.Itoa(i), age: time.Hour},
			dead{topic: "order-events", partition: 2, key: "p2-" + strconv.Itoa(i), age: time.Hour})
	}
	r := e.reclaimer(nil, func(c *reclaim.Config) { c.Count = 2 })
	var per []int
	for range 4 {
		per = append(per, r.Pass(context.Background(), reclaim.Options{}).Totals()[reclaim.Redriven])
	}
	if diff := cmp.Diff([]int{4, 4, 2, 0}, per); diff != "" {
		t.Errorf("re-driven per pass over two partitions (-want +got):\n%s", diff)
	}
}

func TestPartitionsInOrderDomainsInParallel(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for p := range int32(3) {
		e.deadLetter(dead{topic: "like-events", partition: p, key: "l", age: time.Hour},
			dead{topic: "order-events", partition: p, key: "o", age: time.Hour})
	}
	r := e.reclaimer(nil, nil)
	var (
		mu        sync.Mutex
		order     = map[string][]int32{}
		orderDone = make(chan struct{})
	)
	r.SetBeforeCommit(func(topic string, p int32) error {
		mu.Lock()
		order[topic] = append(order[topic], p)
		n := len(order[topic])
		mu.Unlock()
		switch {
		case topic == e.topic("order-events.DLT") && n == 3:
			close(orderDone)
		case topic == e.topic("like-events.DLT") && p == 0:
			// A slow like domain: it finishes only after the order domain
			// did. Run one after the other, this would never return.
			select {
			case <-orderDone:
			case <-time.After(5 * time.Second):
				return errors.New("the order domain waited for the like domain")
			}
		}
		return nil
	})
	res := r.Pass(context.Background(), reclaim.Options{})
	if err := res.Err(); err != nil {
		t.Fatal(err)
	}
	want := map[string][]int32{e.topic("like-events.DLT"): {0, 1, 2}, e.topic("order-events.DLT"): {0, 1, 2}}
	if diff := cmp.Diff(want, order); diff != "" {
		t.Errorf("partition order per domain (-want +got):\n%s", diff)
	}
}

func TestFailedDomainDoesNotStopOthers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.deadLetter(dead{topic: "order-events", partition: 0, key: "o", age: time.Hour})
	// stock-events.DLT does not exist in this cluster.
	var logs bytes.Buffer
	r := e.reclaimer(nil, func(c *reclaim.Config) {
		c.Topics = e.topics("stock-events", "order-events")
		c.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	})
	res := r.Pass(context.Background(), reclaim.Options{})
	if res.Domains[0].Err == nil {
		t.Error("the stock domain reported no error")
	}
	if got := res.Totals()[reclaim.Redriven]; got != 1 {
		t.Errorf("order domain re-drove %d, want 1", got)
	}
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprint(rec["level"], " ", rec["msg"], " ", rec["domain"], rec["redriven"]))
	}
	if diff := cmp.Diff([]string{"ERROR reclaim domain error stock<nil>", "INFO reclaim completed <nil> 1"}, got); diff != "" {
		t.Errorf("log lines (-want +got):\n%s", diff)
	}
}

func TestCrashBetweenRepublishAndCommit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.deadLetter(dead{topic: "like-events", partition: 0, key: "a", age: time.Hour},
		dead{topic: "like-events", partition: 0, key: "b", age: time.Hour})
	crashing := e.reclaimer(nil, nil)
	crashing.SetBeforeCommit(func(string, int32) error { return errors.New("crash") })
	if got := crashing.Pass(context.Background(), reclaim.Options{}).Totals()[reclaim.Redriven]; got != 2 {
		t.Fatalf("first pass re-drove %d, want 2", got)
	}
	crashing.Close()
	// The restarted reclaimer starts from the last commit: both again.
	restarted := e.reclaimer(nil, nil)
	if got := restarted.Pass(context.Background(), reclaim.Options{}).Totals()[reclaim.Redriven]; got != 2 {
		t.Fatalf("pass after the crash re-drove %d, want 2", got)
	}
	ids := map[string]int{}
	for _, g := range e.republished("like-events", 4) {
		ids[g.Headers["ce_id"]]++
	}
	if diff := cmp.Diff(map[string]int{"id-a": 2, "id-b": 2}, ids); diff != "" {
		t.Errorf("republished event ids (-want +got):\n%s", diff)
	}
	if got := restarted.Pass(context.Background(), reclaim.Options{}).Totals()[reclaim.Redriven]; got != 0 {
		t.Errorf("pass after the commit re-drove %d, want 0", got)
	}
}

func TestDryRunAndList(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.deadLetter(dead{topic: "like-events", partition: 2, key: "a", age: time.Hour},
		dead{topic: "like-events", partition: 2, key: "b", age: time.Hour, redrives: 3},
		dead{topic: "like-events", partition: 2, key: "c", age: time.Hour, foreign: true})
	r := e.reclaimer(nil, nil)
	res := r.Pass(context.Background(), reclaim.Options{DryRun: true, Topics: e.topics("like-events")})
	var recs []string
	for _, p := range res.Domains[0].Partitions {
		for _, x := range p.Records {
			recs = append(recs, x.Key+":"+string(x.Outcome))
		}
	}
	if diff := cmp.Diff([]string{"a:redriven", "b:parked", "c:skipped"}, recs); diff != "" {
		t.Errorf("dry run (-want +got):\n%s", diff)
	}
	list, err := r.List(context.Background(), e.topics("like-events"))
	if err != nil {
		t.Fatal(err)
	}
	p2 := list[2]
	p2.OldestPending = p2.OldestPending.Round(time.Hour)
	want := reclaim.PartitionSummary{Topic: e.topic("like-events.DLT"), Partition: 2, Records: 3, Pending: 3, OldestPending: time.Hour,
		Redrives: map[int]int64{0: 2, 3: 1}, AtMax: 1, Foreign: 1, Errors: map[string]int64{"database unavailable": 2}}
	if diff := cmp.Diff(want, p2); diff != "" {
		t.Errorf("list after a dry run (-want +got):\n%s", diff)
	}
}

// TestRepublishFailureCommitsNothingPastIt: a republish that fails for a
// cause that passes or an operator can fix (its partition's broker down, a
// missing authorization; unlike a record too large) is counted as failed,
// the offset stays before it, and once the cause is gone the next pass
// re-drives it.
func TestRepublishFailureCommitsNothingPastIt(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// env gives the test its topics, and refuse, which makes the
		// broker refuse what is produced to topic (named on the cluster)
		// and returns what fixes it.
		env func(t *testing.T) (e *env, refuse func(topic string) (fix func()))
		// cause, when set, is the error the refused pass must report.
		cause error
	}{
		{"the origin's broker stopped", func(t *testing.T) (*env, func(string) func()) {
			// Three nodes, so that the cluster keeps its controller quorum
			// and the group's offsets (replicated on all three) with one
			// stopped. The DLT and parked topics live on node 1, the
			// origins on node 3: stopping node 3 takes away only the
			// partitions the pass republishes to.
			c := testenv.KafkaCluster(t, kafkabroker.Options{Nodes: 3})
			k := kafka.Settings{Brokers: c.Brokers()}
			placeTopics(t, k, func(topic string) int32 {
				if slices.Contains(domains, topic) {
					return int32(c.Node(3).ID())
				}
				return int32(c.Node(1).ID())
			})
			return newEnvOn(t, k), func(topic string) func() {
				if err := c.Node(3).Stop(); err != nil {
					t.Fatal(err)
				}
				return func() {
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
					defer cancel()
					if err := c.Node(3).Start(ctx); err != nil {
						t.Fatal(err)
					}
					// The node answers before its partitions have their leader
					// back; the existing topics are only waited for.
					if err := k.CreateTopics(ctx, []kafka.TopicSpec{{Name: topic}}); err != nil {
						t.Fatal(err)
					}
				}
			}
		}, nil},
		{"no ACL lets the reclaimer write the origin", func(t *testing.T) (*env, func(string) func()) {
			// The reclaimer's role without Write on the origin, as a
			// deployment that lost that one ACL: the broker refuses the
			// reclaimer the origin's metadata (Write implies Describe),
			// so the producer fails the records before it sends them.
			e, k := newSecuredEnv(t)
			return e, refuseWrite(t, e, k)
		}, sarama.ErrTopicAuthorizationFailed},
		{"the reclaimer may describe the origin but not write it", func(t *testing.T) (*env, func(string) func()) {
			// With Describe the metadata is the reclaimer's: the broker
			// refuses the produce request itself.
			e, k := newSecuredEnv(t)
			return e, refuseWrite(t, e, k, "Describe")
		}, sarama.ErrTopicAuthorizationFailed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e, refuse := tc.env(t)
			// Two records: a third refused its topic's metadata in one
			// pass would open sarama's circuit breaker for the topic, and
			// for 10 s every send to it, after the fix too, would fail
			// without reaching the broker.
			e.deadLetter(dead{topic: "order-events", partition: 1, key: "a", age: time.Hour},
				dead{topic: "order-events", partition: 1, key: "b", age: time.Hour})
			fix := refuse(e.topic("order-events"))
			r := e.reclaimer(nil, func(c *reclaim.Config) { c.Topics = e.topics("order-events") })
			res := r.Pass(context.Background(), reclaim.Options{})
			p1 := res.Domains[0].Partitions[1]
			if res.Err() == nil || p1.Counts[reclaim.Failed] != 1 || p1.Counts[reclaim.Redriven] != 0 || p1.Committed != 0 {
				t.Fatalf("pass while the broker refuses: counts %v, committed %d, error %v", p1.Counts, p1.Committed, res.Err())
			}
			if tc.cause != nil && !errors.Is(res.Err(), tc.cause) {
				t.Fatalf("pass while the broker refuses: error %v, want %v", res.Err(), tc.cause)
			}
			fix()
			if got := r.Pass(context.Background(), reclaim.Options{}).Totals()[reclaim.Redriven]; got != 2 {
				t.Errorf("pass after the cause was fixed re-drove %d, want 2", got)
			}
			back := e.republished("order-events", 2)
			if diff := cmp.Diff([]got{{1, "a", map[string]string{"ce_id": "id-a", reclaim.HeaderRedriveCount: "1"}},
				{1, "b", map[string]string{"ce_id": "id-b", reclaim.HeaderRedriveCount: "1"}}}, back); diff != "" {
				t.Errorf("republished (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPermanentParkedAtOnce: records dead-lettered for a permanent reason
// (refused as data, refused by the overflow policy) are parked on the first
// pass, young or not, and never republished; the failed one behind them is
// re-driven once idle. An operator's forced pass re-drives a permanent one.
func TestPermanentParkedAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.deadLetter(
		dead{topic: "like-events", partition: 0, key: "poison", reason: pcon.ReasonPermanent},
		dead{topic: "like-events", partition: 0, key: "overflow", reason: pcon.ReasonKeyQueueFull},
		dead{topic: "like-events", partition: 0, key: "transient", age: time.Hour},
	)
	r := e.reclaimer(nil, func(c *reclaim.Config) { c.Topics = e.topics("like-events") })
	res := r.Pass(context.Background(), reclaim.Options{})
	if err := res.Err(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[reclaim.Outcome]int{reclaim.Parked: 2, reclaim.Redriven: 1}, counts(res)); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
	if got := e.republished("like-events", 1); len(got) != 1 || got[0].Key != "transient" {
		t.Errorf("republished %v, want only the transient failure", got)
	}
	if c := res.Domains[0].Partitions[0].Committed; c != 3 {
		t.Errorf("committed %d, want 3 (past the parked records)", c)
	}

	e.deadLetter(dead{topic: "like-events", partition: 0, key: "fixed", reason: pcon.ReasonPermanent})
	dry := r.Pass(context.Background(), reclaim.Options{DryRun: true})
	if recs := dry.Domains[0].Partitions[0].Records; len(recs) != 1 || recs[0].Outcome != reclaim.Parked || !strings.Contains(recs[0].Why, "permanent") {
		t.Errorf("dry run: %+v, want the record shown as parked for a permanent reason", recs)
	}
	forced := r.Pass(context.Background(), reclaim.Options{Force: true, MinIdle: time.Nanosecond})
	if got := counts(forced); !cmp.Equal(got, map[reclaim.Outcome]int{reclaim.Redriven: 1}) {
		t.Errorf("forced pass: %v, want the permanent record re-driven", got)
	}
}

// TestFutureDeadSinceDoesNotBlock: a dead-lettered time in the future does
// not hold the record (and its partition) back for ever.
func TestFutureDeadSinceDoesNotBlock(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.deadLetter(dead{topic: "like-events", partition: 2, key: "from-the-future", age: -24 * time.Hour},
		dead{topic: "like-events", partition: 2, key: "behind-it", age: 0})
	r := e.reclaimer(nil, func(c *reclaim.Config) { c.Topics = e.topics("like-events"); c.MinIdle = 50 * time.Millisecond })
	time.Sleep(100 * time.Millisecond) // both were appended at least MinIdle ago
	res := r.Pass(context.Background(), reclaim.Options{})
	if got := counts(res); !cmp.Equal(got, map[reclaim.Outcome]int{reclaim.Redriven: 2}) {
		t.Errorf("outcomes %v (err %v), want both re-driven", got, res.Err())
	}
}

// TestUnhealableRepublishParks: a record whose republish cannot succeed
// (its partition does not exist) is parked, and the pass re-drives what is
// behind it instead of failing on it at every pass.
func TestUnhealableRepublishParks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.deadLetter(dead{topic: "order-events", partition: 0, key: "a", age: time.Hour})
	// The same record but from a partition the topic does not have.
	m := &sarama.ProducerMessage{Topic: e.topic("order-events.DLT"), Partition: 0, Key: sarama.StringEncoder("gone"), Value: sarama.StringEncoder("v"),
		Headers: []sarama.RecordHeader{
			{Key: []byte(pcon.HeaderOriginalTopic), Value: []byte(e.topic("order-events"))},
			{Key: []byte(pcon.HeaderOriginalPartition), Value: []byte("99")},
			{Key: []byte(pcon.HeaderDeadLetteredAt), Value: []byte(time.Now().Add(-time.Hour).UTC().Format(time.RFC3339Nano))},
		}}
	if _, _, err := e.prod.SendMessage(m); err != nil {
		t.Fatal(err)
	}
	e.deadLetter(dead{topic: "order-events", partition: 0, key: "b", age: time.Hour})
	r := e.reclaimer(nil, func(c *reclaim.Config) { c.Topics = e.topics("order-events") })
	res := r.Pass(context.Background(), reclaim.Options{})
	if err := res.Err(); err != nil {
		t.Fatal(err)
	}
	p0 := res.Domains[0].Partitions[0]
	if diff := cmp.Diff(map[reclaim.Outcome]int{reclaim.Redriven: 2, reclaim.Parked: 1}, counts(res)); diff != "" || p0.Committed != 3 {
		t.Errorf("outcomes (-want +got):\n%s\ncommitted %d, want 3", diff, p0.Committed)
	}
}

// TestCommitNeverGoesBack: a pass that commits after another re-driver
// committed further leaves the offset where the other put it, so nothing
// is re-driven twice.
func TestCommitNeverGoesBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, k := range []string{"a", "b", "c"} {
		e.deadLetter(dead{topic: "like-events", partition: 1, key: k, age: time.Hour})
	}
	only := func(c *reclaim.Config) { c.Topics = e.topics("like-events") }
	slow := e.reclaimer(nil, func(c *reclaim.Config) { only(c); c.Count = 1 })
	fast := e.reclaimer(nil, only)
	slow.SetBeforeCommit(func(topic string, p int32) error {
		if p == 1 { // another re-driver takes the whole partition meanwhile
			if got := fast.Pass(context.Background(), reclaim.Options{}).Totals()[reclaim.Redriven]; got != 3 {
				t.Errorf("the other re-driver re-drove %d, want 3", got)
			}
		}
		return nil
	})
	res := slow.Pass(context.Background(), reclaim.Options{})
	if err := res.Err(); err != nil {
		t.Fatal(err)
	}
	if c := res.Domains[0].Partitions[1].Committed; c != 3 {
		t.Errorf("the slow pass left partition 1 at %d, want 3 (where the other committed)", c)
	}
	if got := counts(fast.Pass(context.Background(), reclaim.Options{})); len(got) != 0 {
		t.Errorf("a later pass took %v, want nothing", got)
	}
}

// TestRedriversExcludeEachOther: two scheduled reclaimers with overlapping
// topic sets and a pipelinectl-style run, three processes with their own
// connections, work through 3,000 dead letters at once: each is re-driven
// exactly once.
func TestRedriversExcludeEachOther(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const total = 3000
	ds := make([]dead, total)
	for i := range ds {
		ds[i] = dead{topic: "like-events", partition: int32(i % 3), key: "k" + strconv.Itoa(i), age: time.Hour}
	}
	e.deadLetter(ds...)
	url := testenv.DatabaseURL(t)
	sets := [][]string{{"like-events"}, {"like-events", "order-events"}, {"order-events", "like-events"}}
	var (
		wg       sync.WaitGroup
		redriven atomic.Int64
	)
	deadline := time.Now().Add(60 * time.Second)
	for _, topics := range sets {
		db, err := pg.Open(context.Background(), url, pg.Options{MaxConns: 3})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(db.Close)
		r := e.reclaimer(nil, func(c *reclaim.Config) {
			c.Topics, c.Count, c.MinIdle, c.Lock = e.topics(topics...), 50, 0, reclaim.PGLock(db)
		})
		wg.Go(func() {
			for redriven.Load() < total && time.Now().Before(deadline) {
				res := r.Pass(context.Background(), reclaim.Options{MinIdle: time.Nanosecond})
				if err := res.Err(); err != nil {
					t.Error(err)
					return
				}
				redriven.Add(int64(res.Totals()[reclaim.Redriven]))
			}
		})
	}
	wg.Wait()
	if n := redriven.Load(); n != total {
		t.Fatalf("%d re-drives counted for %d dead letters", n, total)
	}
	testenv.EachKeyOnce(t, e.brokers, e.topic("like-events"), total)
}

// TestExpiredPastHorizon: a dead letter whose event is older than its
// consumers' idempotency horizon is shown as expired by the dry run and the
// list, and a pass parks it with that reason instead of re-driving it to be
// skipped; a topic without a horizon (likes) re-drives old events.
func TestExpiredPastHorizon(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const week = 7 * 24 * time.Hour
	e.deadLetter(
		dead{topic: "order-events", partition: 0, key: "stale", age: time.Hour, eventAge: 8 * 24 * time.Hour},
		dead{topic: "order-events", partition: 0, key: "fresh", age: time.Hour, eventAge: time.Hour},
		dead{topic: "like-events", partition: 0, key: "old-like", age: time.Hour, eventAge: 8 * 24 * time.Hour},
	)
	r := e.reclaimer(nil, func(c *reclaim.Config) {
		c.ParkSuffix, c.Horizon, c.HorizonTopics = ".PARKED", week-time.Hour, e.topics("order-events")
	})
	list, err := r.List(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	expired := map[string]int64{}
	for _, p := range list {
		expired[p.Topic] += p.Expired
	}
	if diff := cmp.Diff(map[string]int64{e.topic("like-events.DLT"): 0, e.topic("order-events.DLT"): 1}, expired); diff != "" {
		t.Errorf("list: expired records (-want +got):\n%s", diff)
	}
	dry := r.Pass(context.Background(), reclaim.Options{DryRun: true})
	var shown []string
	for _, d := range dry.Domains {
		for _, p := range d.Partitions {
			for _, rec := range p.Records {
				shown = append(shown, rec.Key+":"+string(rec.Outcome))
				if rec.Outcome == reclaim.Expired && !strings.Contains(rec.Why, "idempotency horizon") {
					t.Errorf("expired record's why: %q", rec.Why)
				}
			}
		}
	}
	if diff := cmp.Diff([]string{"old-like:redriven", "stale:expired", "fresh:redriven"}, shown); diff != "" {
		t.Errorf("dry run (-want +got):\n%s", diff)
	}
	res := r.Pass(context.Background(), reclaim.Options{})
	if diff := cmp.Diff(map[reclaim.Outcome]int{reclaim.Redriven: 2, reclaim.Expired: 1}, counts(res)); diff != "" || res.Err() != nil {
		t.Errorf("pass (-want +got):\n%s\nerror %v", diff, res.Err())
	}
	if got := e.republished("order-events", 1); got[0].Key != "fresh" {
		t.Errorf("order-events got %v, want only the fresh event", got)
	}
	parked := e.republished("order-events.PARKED", 1)
	if parked[0].Key != "stale" || !strings.Contains(parked[0].Headers[reclaim.HeaderParkedReason], "idempotency horizon") {
		t.Errorf("parked copy %+v", parked[0])
	}
}

// TestChunksCommitAsTheyGo: a partition of 1,200 dead letters is taken in
// chunks of reclaim.Chunk, each committed before the next is read; a commit
// that fails keeps the chunks before it, and the next pass goes on from
// there.
func TestChunksCommitAsTheyGo(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const total = 1200
	ds := make([]dead, total)
	for i := range ds {
		ds[i] = dead{topic: "like-events", partition: 2, key: strconv.Itoa(i), age: time.Hour}
	}
	e.deadLetter(ds...)
	r := e.reclaimer(nil, func(c *reclaim.Config) { c.Topics, c.Count = e.topics("like-events"), reclaim.MaxTotal })
	commits := 0
	r.SetBeforeCommit(func(_ string, p int32) error {
		if p != 2 {
			return nil
		}
		if commits++; commits == 2 {
			return errors.New("crashed before the second commit")
		}
		return nil
	})
	first := r.Pass(context.Background(), reclaim.Options{})
	if p := first.Domains[0].Partitions[2]; p.Err == nil || p.Committed != reclaim.Chunk {
		t.Fatalf("first pass: committed %d (error %v); want the first chunk, %d, and the crash", p.Committed, p.Err, reclaim.Chunk)
	}
	second := r.Pass(context.Background(), reclaim.Options{})
	p := second.Domains[0].Partitions[2]
	if p.Err != nil || p.From != reclaim.Chunk || p.Committed != total || p.Counts[reclaim.Redriven] != total-reclaim.Chunk {
		t.Errorf("second pass: from %d, committed %d, re-drove %d (error %v); want %d, %d, %d",
			p.From, p.Committed, p.Counts[reclaim.Redriven], p.Err, reclaim.Chunk, total, total-reclaim.Chunk)
	}
	if commits != 2+2 {
		t.Errorf("%d commits of partition 2, want 2 in the first pass (the second failing) and 2 in the second (500 and 200 records)", commits)
	}
}

// TestTotalBoundsThePass: Options.Total bounds the records a pass takes
// over every domain and partition together.
func TestTotalBoundsThePass(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for i := range 10 {
		for _, d := range domains {
			e.deadLetter(dead{topic: d, partition: int32(i % 3), key: d + strconv.Itoa(i), age: time.Hour})
		}
	}
	r := e.reclaimer(nil, nil)
	if got := r.Pass(context.Background(), reclaim.Options{Total: 7}).Totals()[reclaim.Redriven]; got != 7 {
		t.Errorf("a pass of at most 7 re-drove %d", got)
	}
	if got := r.Pass(context.Background(), reclaim.Options{}).Totals()[reclaim.Redriven]; got != 13 {
		t.Errorf("the next pass re-drove %d, want the other 13", got)
	}
}

// TestChosenRecords: a pass over chosen records re-drives just those, says
// which named record does not exist, and commits nothing: the others stay
// pending.
func TestChosenRecords(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for i := range 5 {
		e.deadLetter(dead{topic: "like-events", partition: 1, key: strconv.Itoa(i), age: time.Hour})
	}
	r := e.reclaimer(nil, func(c *reclaim.Config) { c.Topics = e.topics("like-events") })
	res := r.Pass(context.Background(), reclaim.Options{Only: map[string]bool{"1:1": true, "1:3": true, "1:99": true}})
	if got := res.Totals()[reclaim.Redriven]; got != 2 || res.Err() == nil || !strings.Contains(res.Err().Error(), "@99: no such record") {
		t.Errorf("re-drove %d (error %v); want 2 and an error naming offset 99", got, res.Err())
	}
	var keys []string
	for _, g := range e.republished("like-events", 2) {
		keys = append(keys, g.Key)
	}
	if diff := cmp.Diff([]string{"1", "3"}, keys); diff != "" {
		t.Errorf("republished (-want +got):\n%s", diff)
	}
	if got := r.Pass(context.Background(), reclaim.Options{}).Totals()[reclaim.Redriven]; got != 5 {
		t.Errorf("a full pass afterwards re-drove %d, want all 5 (the choice committed nothing)", got)
	}
}
