package e2e

import (
	"context"
	"errors"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/loopers/commerce-pipeline/pkg/events"
)

// TestIncidentParkedRedrive is the incident of docs/operations.md, end to end: a deploy
// makes the database refuse the consumers' writes as data (a constraint),
// so likes, the order and the views are dead-lettered for a permanent
// reason and the scheduled reclaimer parks them at once; the dead-letter
// topics' retention then deletes them there (the broker's own retention:
// their log start offsets move past them); the deploy is rolled back; and
// one `pipelinectl parked redrive` per topic brings every event back. The
// aggregates come out exact, and nothing is re-driven twice.
//
//nolint:paralleltest // starts the real service processes, which on 2 shared cores would break the timing bounds of the other end-to-end tests (the live page's 2 s)
func TestIncidentParkedRedrive(t *testing.T) {
	parked := map[string]int64{"like-events": 3, "order-events": 1, "product-events": 2}
	// Retention deletes whole segments, once the newest record of one is
	// older than retention.ms: the dead-letter topics start a new segment
	// for a record that comes a second after the segment's first, so that
	// a later record never holds an earlier one's segment (a busy DLT's
	// segments close by size; segment.bytes cannot go below 1 MiB on Kafka
	// 4). Their retention stays the pipeline's 7 days until the records are
	// parked: a retention short from the start would race the reclaimer,
	// and a record deleted before it is parked is lost, in production as
	// here.
	dlt := kafkaSetup{TopicConfig: map[string]map[string]string{}}
	for topic := range parked {
		dlt.TopicConfig[events.DLTOf(topic)] = map[string]string{"segment.ms": "1000"}
	}
	s := newSystemOn(t, dlt)
	s.startRelay("relay-a")
	env := s.consumerEnv
	// Permanent dead letters are parked at once; nothing else is re-driven
	// by the schedule during the test.
	env["PRODUCT_CONSUMERS_RECLAIM_INTERVAL"], env["PRODUCT_CONSUMERS_RECLAIM_MIN_IDLE"] = "200ms", "1h"
	s.startConsumers()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	exec1 := func(sql string) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}

	var p struct{ ID int64 }
	if st := s.call("POST", "/products", "", map[string]any{"name": "lamp", "price": 700, "stock": 10}, &p); st != http.StatusCreated {
		t.Fatalf("create product: %d", st)
	}
	pid := strconv.FormatInt(p.ID, 10)

	// The bad deploy: every write of the consumers is refused as data.
	exec1(`CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'refused by the bad deploy' USING ERRCODE = 'check_violation'; END $$`)
	for _, table := range []string{"event_handled", "product_like_state"} {
		exec1(`CREATE TRIGGER poison BEFORE INSERT ON ` + table + ` FOR EACH STATEMENT EXECUTE FUNCTION poison()`)
	}
	for _, u := range []string{"u1", "u2", "u3"} {
		s.expect(s.call("POST", "/products/"+pid+"/likes", u, nil, nil), http.StatusOK)
	}
	var o struct{ ID int64 }
	if st := s.call("POST", "/orders", "buyer", map[string]any{"items": []map[string]any{{"productId": p.ID, "quantity": 2}}}, &o); st != http.StatusCreated {
		t.Fatalf("create order: %d", st)
	}
	s.expect(s.call("POST", "/orders/"+strconv.FormatInt(o.ID, 10)+"/payments", "buyer", nil, nil), http.StatusOK)
	for range 2 {
		s.expect(s.call("GET", "/products/"+pid, "viewer", nil, nil), http.StatusOK)
	}

	client, err := sarama.NewClient(s.kafka.Brokers, adminConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	// offsets returns the first (sarama.OffsetOldest: the log start) or
	// next (sarama.OffsetNewest) offset of each partition of the pipeline's
	// topic.
	offsets := func(topic string, which int64) map[int32]int64 {
		t.Helper()
		out := map[int32]int64{}
		for p := range int32(3) {
			n, err := client.GetOffset(s.topic(topic), p, which)
			if err != nil {
				t.Fatalf("offsets of %s/%d: %v", s.topic(topic), p, err)
			}
			out[p] = n
		}
		return out
	}
	ends := func(topic string) map[int32]int64 { return offsets(topic, sarama.OffsetNewest) }
	sum := func(m map[int32]int64) (n int64) {
		for _, v := range m {
			n += v
		}
		return n
	}
	deadline := time.Now().Add(60 * time.Second)
	for topic, n := range parked {
		for sum(ends(events.ParkedOf(topic))) < n {
			if time.Now().After(deadline) {
				t.Fatalf("%s holds %d parked records, want %d", s.topic(events.ParkedOf(topic)), sum(ends(events.ParkedOf(topic))), n)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if got := readMetrics(t, conn, map[int64]aggregate{p.ID: {}}); got[p.ID] != (aggregate{}) {
		t.Fatalf("aggregates moved during the bad deploy: %+v", got[p.ID])
	}

	// The dead-letter topics' retention passes: shortened to a second, the
	// broker's retention check (every second on the test brokers) deletes
	// their segments, and each partition's log start offset moves past
	// every record it held. The parked copies stay where they are.
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		t.Fatal(err)
	}
	dltEnds := map[string]map[int32]int64{}
	short := "1000"
	for topic, n := range parked {
		// Parking copies a dead letter; only retention removes it.
		dltEnds[topic] = ends(events.DLTOf(topic))
		if starts, got := offsets(events.DLTOf(topic), sarama.OffsetOldest), sum(dltEnds[topic]); sum(starts) != 0 || got < n {
			t.Fatalf("%s: log start offsets %v and %d records, want 0 and at least the %d parked", s.topic(events.DLTOf(topic)), starts, got, n)
		}
		if err := admin.IncrementalAlterConfig(sarama.TopicResource, s.topic(events.DLTOf(topic)), map[string]sarama.IncrementalAlterConfigsEntry{
			"retention.ms": {Operation: sarama.IncrementalAlterConfigsOperationSet, Value: &short},
		}, false); err != nil {
			t.Fatalf("shorten the retention of %s: %v", s.topic(events.DLTOf(topic)), err)
		}
	}
	retention := time.Now()
	// A broker's first retention check runs 30 s after it started
	// (log.initial.task.delay.ms), then every second.
	deadline = time.Now().Add(60 * time.Second)
	for topic := range parked {
		for {
			starts := offsets(events.DLTOf(topic), sarama.OffsetOldest)
			gone := true
			for p, end := range dltEnds[topic] {
				gone = gone && starts[p] >= end
			}
			if gone {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: log start offsets %v, want them past %v: retention did not delete the dead letters (a broker of one's own needs testenv.BrokerProps' log.retention.check.interval.ms)", s.topic(events.DLTOf(topic)), starts, dltEnds[topic])
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	t.Logf("retention deleted every dead letter %v after it was shortened", time.Since(retention).Round(time.Millisecond))
	for topic, n := range parked {
		if starts, got := offsets(events.ParkedOf(topic), sarama.OffsetOldest), sum(ends(events.ParkedOf(topic))); sum(starts) != 0 || got < n {
			t.Fatalf("%s: log start offsets %v and %d records, want 0 and at least %d", s.topic(events.ParkedOf(topic)), starts, got, n)
		}
	}

	// Roll the deploy back, and re-drive what was parked.
	for _, table := range []string{"event_handled", "product_like_state"} {
		exec1(`DROP TRIGGER poison ON ` + table)
	}
	start := time.Now()
	for topic := range parked {
		ctl(t, s, "parked", "redrive", "--topic", topic)
	}
	want := map[int64]aggregate{p.ID: {Likes: 3, Sales: 2, Amount: 1400, Views: 2}}
	if diff := cmp.Diff(want, waitMetrics(t, conn, want, 60*time.Second)); diff != "" {
		t.Fatalf("aggregates after the parked re-drive (-want +got):\n%s", diff)
	}
	t.Logf("parked events re-driven and applied %v after the first command", time.Since(start).Round(time.Millisecond))
	// A second call finds nothing to do, and nothing changes.
	for topic := range parked {
		if out := ctl(t, s, "parked", "redrive", "--topic", topic, "--dry-run"); len(strings.Split(strings.TrimSpace(out), "\n")) != 1 {
			t.Errorf("a dry run after the re-drive of %s still finds records:\n%s", topic, out)
		}
	}
	time.Sleep(time.Second)
	if diff := cmp.Diff(want, readMetrics(t, conn, want)); diff != "" {
		t.Errorf("aggregates a second later (-want +got):\n%s", diff)
	}
}

// ctl runs the pipelinectl binary with the system's settings and returns
// its output, failing the test unless it exits 0.
func ctl(t *testing.T, s *system, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(binaries(t).Dir, "pipelinectl"), args...)
	for k, v := range s.withKafka(map[string]string{"DATABASE_URL": s.dbURL}) {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("pipelinectl %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
	}
	return string(out)
}
