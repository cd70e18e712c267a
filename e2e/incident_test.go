package e2e

import (
	"context"
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

// TestIncidentParkedRedrive is the README's incident, end to end: a deploy
// makes the database refuse the consumers' writes as data (a constraint),
// so likes, the order and the views are dead-lettered for a permanent
// reason and the scheduled reclaimer parks them at once; the dead-letter
// topics' retention then deletes them there; the deploy is rolled back; and
// one `pipelinectl parked redrive` per topic brings every event back. The
// aggregates come out exact, and nothing is re-driven twice.
//
//nolint:paralleltest // starts the real service processes, which on 2 shared cores would break the timing bounds of the other end-to-end tests (the live page's 2 s)
func TestIncidentParkedRedrive(t *testing.T) {
	s := newSystem(t)
	s.startRelay("relay-a")
	env := s.consumerEnv
	// Permanent dead letters are parked at once; nothing else is re-driven
	// by the schedule during the test.
	env["RECLAIM_INTERVAL"], env["RECLAIM_MIN_IDLE"] = "200ms", "1h"
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

	brokers := strings.Split(s.brokers, ",")
	client, err := sarama.NewClient(brokers, sarama.NewConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ends := func(topic string) map[int32]int64 {
		t.Helper()
		out := map[int32]int64{}
		for p := range int32(3) {
			n, err := client.GetOffset(topic, p, sarama.OffsetNewest)
			if err != nil {
				t.Fatal(err)
			}
			out[p] = n
		}
		return out
	}
	sum := func(m map[int32]int64) (n int64) {
		for _, v := range m {
			n += v
		}
		return n
	}
	parked := map[string]int64{"like-events": 3, "order-events": 1, "product-events": 2}
	deadline := time.Now().Add(60 * time.Second)
	for topic, n := range parked {
		for sum(ends(topic+events.ParkedSuffix)) < n {
			if time.Now().After(deadline) {
				t.Fatalf("%s holds %d parked records, want %d", topic+events.ParkedSuffix, sum(ends(topic+events.ParkedSuffix)), n)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if got := readMetrics(t, conn, map[int64]aggregate{p.ID: {}}); got[p.ID] != (aggregate{}) {
		t.Fatalf("aggregates moved during the bad deploy: %+v", got[p.ID])
	}

	// The dead-letter topics' retention passes: their records are gone.
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		t.Fatal(err)
	}
	for topic := range parked {
		if err := admin.DeleteRecords(topic+events.DLTSuffix, ends(topic+events.DLTSuffix)); err != nil {
			t.Fatalf("retention of %s: %v", topic+events.DLTSuffix, err)
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
	cmd := exec.Command(filepath.Join(bins.Dir, "pipelinectl"), args...)
	cmd.Env = []string{"DATABASE_URL=" + s.dbURL, "KAFKA_BROKERS=" + s.brokers}
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("pipelinectl %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
	}
	return string(out)
}
