package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/loopers/commerce-pipeline/internal/pg"
	"github.com/loopers/commerce-pipeline/internal/reclaim"
	"github.com/loopers/commerce-pipeline/internal/testenv"
	"github.com/loopers/commerce-pipeline/pkg/events"
	"github.com/loopers/commerce-pipeline/pkg/pcon"
)

// TestRedriversAndPipelinectlAtOnce: two scheduled reclaimers with
// overlapping topic sets (each its own connections, as replicas have) and
// `pipelinectl dlt redrive` calls run at once over 3,000 dead letters: each
// is re-driven exactly once, and every partition's committed offset ends at
// its end.
func TestRedriversAndPipelinectlAtOnce(t *testing.T) {
	t.Parallel()
	s := newStack(t) // its like-events.DLT/0 holds one record to re-drive, one parked, one foreign
	const total = 3000
	msgs := make([]*sarama.ProducerMessage, 0, total)
	for i := range total {
		p := int32(i % 3)
		m := &sarama.ProducerMessage{Topic: s.kafka.Topic("like-events.DLT"), Partition: p, Key: sarama.StringEncoder("k" + strconv.Itoa(i)), Value: sarama.StringEncoder("{}")}
		for k, v := range s.pconHeaders(p, time.Hour) {
			m.Headers = append(m.Headers, sarama.RecordHeader{Key: []byte(k), Value: []byte(v)})
		}
		msgs = append(msgs, m)
	}
	if err := s.producer.SendMessages(msgs); err != nil {
		t.Fatal(err)
	}
	const want = total + 1 // and ev-1 of the stack
	var (
		redriven, byCtl atomic.Int64
		wg              sync.WaitGroup
	)
	deadline := time.Now().Add(90 * time.Second)
	more := func() bool { return redriven.Load() < want && time.Now().Before(deadline) }
	start := time.Now()
	for _, topics := range [][]string{{"like-events"}, {"order-events", "like-events"}} {
		db, err := pg.Open(context.Background(), s.vars["DATABASE_URL"], pg.Options{MaxConns: 3})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(db.Close)
		// As product-consumers' scheduled reclaimers do: their topics and
		// group under the prefix.
		r, err := reclaim.New(reclaim.Config{
			Kafka: s.kafka.Settings, Topics: s.kafka.Topics(topics), DLTSuffix: events.DLTSuffix, ParkSuffix: events.ParkedSuffix, Group: s.kafka.Group(reclaim.Group),
			Count: 100, MaxRedrives: 3, Logger: slog.New(slog.DiscardHandler), Lock: reclaim.PGLock(db),
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Close)
		wg.Go(func() {
			for more() {
				res := r.Pass(context.Background(), reclaim.Options{MinIdle: time.Nanosecond})
				if err := res.Err(); err != nil {
					t.Error(err)
					return
				}
				redriven.Add(int64(res.Totals()[reclaim.Redriven]))
			}
		})
	}
	wg.Go(func() {
		for more() {
			code, out, errOut := s.ctl("dlt", "redrive", "--topic", "like", "--limit", "700", "-o", "json")
			var res reclaim.Result
			if code != exitOK || json.Unmarshal([]byte(out), &res) != nil {
				t.Errorf("pipelinectl dlt redrive: exit %d\n%s", code, errOut)
				return
			}
			redriven.Add(int64(res.Totals()[reclaim.Redriven]))
			byCtl.Add(int64(res.Totals()[reclaim.Redriven]))
		}
	})
	wg.Wait()
	elapsed := time.Since(start)
	if n := redriven.Load(); n != want {
		t.Fatalf("%d re-drives counted for %d dead letters", n, want)
	}
	testenv.EachKeyOnce(t, s.brokers, s.kafka.Topic("like-events"), want)
	list := lines(s.ok("dlt", "list", "--topic", "like"))
	for _, row := range list[1:] {
		if row[3] != "0" {
			t.Errorf("%s/%s: %s pending after the re-drive", row[0], row[1], row[3])
		}
	}
	t.Logf("3 re-drivers at once: %d dead letters re-driven in %v (%.0f/s), %d of them by pipelinectl",
		want, elapsed.Round(time.Millisecond), float64(want)/elapsed.Seconds(), byCtl.Load())
}

// TestRedriveBoundsAndChoice: --limit bounds a call over every partition
// together; --record re-drives just the named records and commits nothing;
// an old order event is shown as expired.
func TestRedriveBoundsAndChoice(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	for i := range 6 {
		s.deadLetter(int32(1+i%2), "b"+strconv.Itoa(i), s.pconHeaders(int32(1+i%2), time.Hour))
	}
	var res reclaim.Result
	if err := json.Unmarshal([]byte(s.ok("dlt", "redrive", "--topic", "like", "--limit", "4", "-o", "json")), &res); err != nil {
		t.Fatal(err)
	}
	if got := res.Totals(); got[reclaim.Redriven]+got[reclaim.Parked]+got[reclaim.Skipped] != 4 {
		t.Errorf("--limit 4 took %v", got)
	}

	// Partition 2 holds b1, b3, b5 at offsets 0, 1, 2; the call above took
	// at most b1 of them.
	before := lines(s.ok("dlt", "list", "--topic", "like"))[3][3]
	out := lines(s.ok("dlt", "redrive", "--topic", "like", "--record", "2:2"))
	if out[3][4] != "1" {
		t.Errorf("--record 2:2: %v, want one record re-driven from partition 2", out)
	}
	if after := lines(s.ok("dlt", "list", "--topic", "like"))[3][3]; after != before {
		t.Errorf("pending in partition 2 went from %s to %s; a chosen re-drive commits nothing", before, after)
	}
	if code, _, errOut := s.ctl("dlt", "redrive", "--topic", "like", "--record", "2:9"); code != exitFailed || !strings.Contains(errOut, "@9: no such record") {
		t.Errorf("--record of a missing record: exit %d, %s", code, errOut)
	}

	// An order event of 8 days ago is past the shipped horizon.
	h := s.pconHeaders(0, time.Hour)
	h[pcon.HeaderOriginalTopic] = s.kafka.Topic("order-events")
	m := &sarama.ProducerMessage{Topic: s.kafka.Topic("order-events.DLT"), Partition: 0, Key: sarama.StringEncoder("old-order"), Value: sarama.StringEncoder("{}")}
	for k, v := range h {
		m.Headers = append(m.Headers, sarama.RecordHeader{Key: []byte(k), Value: []byte(v)})
	}
	m.Headers = append(m.Headers, sarama.RecordHeader{Key: []byte("ce_time"), Value: []byte(time.Now().Add(-8 * 24 * time.Hour).UTC().Format(time.RFC3339))})
	if _, _, err := s.producer.SendMessage(m); err != nil {
		t.Fatal(err)
	}
	if l := lines(s.ok("dlt", "list", "--topic", "order")); l[1][5] != "1" {
		t.Errorf("dlt list --topic order: %v, want 1 expired in partition 0", l)
	}
	dry := s.ok("dlt", "redrive", "--topic", "order", "--dry-run")
	if !strings.Contains(dry, "expired") || !strings.Contains(dry, "older than the idempotency horizon") {
		t.Errorf("dry run does not show the expired record:\n%s", dry)
	}
}

// TestTableEscapes: a key or error carrying tabs, newlines, terminal escape
// sequences or bidirectional overrides cannot break a table row or reach
// the terminal raw.
func TestTableEscapes(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	h := s.pconHeaders(2, time.Hour)
	h[pcon.HeaderError] = "boom\n\x1b[31mred\u202e"
	s.deadLetter(2, "k\x1b[2J\tx\ny\xff", h)
	for _, args := range [][]string{{"dlt", "redrive", "--topic", "like", "--dry-run"}, {"dlt", "list", "--topic", "like"}} {
		out := s.ok(args...)
		if strings.Contains(out, "\x1b") || strings.Contains(out, "\u202e") || strings.Contains(out, "\xff") {
			t.Errorf("%v wrote control characters raw:\n%q", args, out)
		}
		rows := strings.Split(strings.TrimSpace(out), "\n")
		if want := map[string]int{"redrive": 5, "list": 4}[args[1]]; len(rows) != want {
			t.Errorf("%v: %d lines, want %d:\n%s", args, len(rows), want, out)
		}
		if args[1] == "redrive" && !strings.Contains(out, `k\x1b[2J\tx\ny\xff`) {
			t.Errorf("the key is not shown escaped:\n%s", out)
		}
	}
}
