package main

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/loopers/commerce-pipeline/internal/config"
	"github.com/loopers/commerce-pipeline/internal/outboxops"
	"github.com/loopers/commerce-pipeline/internal/reclaim"
	"github.com/loopers/commerce-pipeline/internal/testenv"
	"github.com/loopers/commerce-pipeline/pkg/events"
	"github.com/loopers/commerce-pipeline/pkg/pcon"
)

// stack is a database and a broker holding what a running pipeline leaves
// behind: published and failed outbox rows, a relay lease, dead letters.
type stack struct {
	t        *testing.T
	db       *pgx.Conn
	kafka    *testenv.KafkaEnv // the pipeline's topics, under a prefix of the test's own
	brokers  []string
	vars     map[string]string
	failed   []int64 // outbox ids moved to outbox_failed
	producer sarama.SyncProducer
}

func newProducer(t *testing.T, k *testenv.KafkaEnv) sarama.SyncProducer {
	t.Helper()
	sc := k.Config("dead-letterer")
	sc.Producer.Partitioner = sarama.NewManualPartitioner
	// A batch lands in the order it was given.
	sc.Net.MaxOpenRequests = 1
	p, err := sarama.NewSyncProducer(k.Brokers, sc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// pconHeaders are the headers pcon gives a like record of partition p it
// dead-lettered age ago: its origin as named on the cluster.
func (s *stack) pconHeaders(p int32, age time.Duration) map[string]string {
	return map[string]string{
		pcon.HeaderOriginalTopic: s.kafka.Topic("like-events"), pcon.HeaderOriginalPartition: strconv.Itoa(int(p)),
		pcon.HeaderError: "database unavailable", pcon.HeaderDeadLetteredAt: time.Now().Add(-age).UTC().Format(time.RFC3339Nano),
	}
}

// deadLetter writes a record to like-events.DLT partition p with headers h
// and the further header name/value pairs kv.
func (s *stack) deadLetter(p int32, key string, h map[string]string, kv ...string) {
	s.t.Helper()
	m := &sarama.ProducerMessage{Topic: s.kafka.Topic("like-events.DLT"), Partition: p, Key: sarama.StringEncoder(key), Value: sarama.StringEncoder("{}")}
	for k, v := range h {
		m.Headers = append(m.Headers, sarama.RecordHeader{Key: []byte(k), Value: []byte(v)})
	}
	for i := 0; i+1 < len(kv); i += 2 {
		m.Headers = append(m.Headers, sarama.RecordHeader{Key: []byte(kv[i]), Value: []byte(kv[i+1])})
	}
	if _, _, err := s.producer.SendMessage(m); err != nil {
		s.t.Fatal(err)
	}
}

func newStack(t *testing.T) *stack {
	t.Helper()
	ctx := context.Background()
	url := testenv.DatabaseURL(t)
	k := testenv.Kafka(t, events.NewRegistry().AllTopics()...)
	db, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close(context.Background()) })
	s := &stack{t: t, db: db, kafka: k, brokers: k.Brokers, vars: map[string]string{"DATABASE_URL": url, "USER": "ops"}}
	maps.Copy(s.vars, k.Env())

	// Three events; the first and the third failed, the relay's cursor is
	// past all of them, and a fourth waits.
	var ids []int64
	for i := range 4 {
		var id int64
		if err := db.QueryRow(ctx, `INSERT INTO outbox (event_id, event_type, source, aggregate_type, aggregate_id, payload, created_at)
			VALUES ($1, 'loopers.like.created.v1', 'commerce-api', 'Product', $2, '{}', now() - interval '1 minute')
			RETURNING id`, uuid.NewString(), strconv.Itoa(i)).Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	s.failed = []int64{ids[0], ids[2]}
	s.exec(`UPDATE outbox_cursor SET last_processed_id = $1`, ids[2])
	s.exec(`INSERT INTO outbox_failed (outbox_id, event_id, event_type, source, aggregate_type, aggregate_id, payload, created_at, error_message)
		SELECT id, event_id, event_type, source, aggregate_type, aggregate_id, payload, created_at, 'record too large'
		FROM outbox WHERE id = ANY($1) ORDER BY id`, s.failed)
	s.exec(`INSERT INTO relay_lease (name, owner, token, lease_until, acquired_at)
		VALUES ('outbox-relay', 'relay-1', 7, now() + interval '10 s', now())`)

	// Dead letters: two like records of partition 0 (one re-driven thrice
	// already), one foreign record.
	s.producer = newProducer(t, k)
	s.deadLetter(0, "1", s.pconHeaders(0, time.Hour), "ce_id", "ev-1")
	s.deadLetter(0, "2", s.pconHeaders(0, time.Hour), "ce_id", "ev-2", reclaim.HeaderRedriveCount, "3")
	s.deadLetter(0, "3", nil, "ce_id", "ev-3")
	return s
}

func (s *stack) exec(sql string, args ...any) {
	s.t.Helper()
	if _, err := s.db.Exec(context.Background(), sql, args...); err != nil {
		s.t.Fatalf("%s: %v", sql, err)
	}
}

// ctl runs pipelinectl with args and returns its exit code and output.
func (s *stack) ctl(args ...string) (code int, stdout, stderr string) {
	s.t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, env{lookup: config.FromMap(s.vars), stdout: &out, stderr: &errOut})
	return code, out.String(), errOut.String()
}

// ok runs pipelinectl, wants exit 0 and returns the output.
func (s *stack) ok(args ...string) string {
	s.t.Helper()
	code, out, errOut := s.ctl(args...)
	if code != exitOK {
		s.t.Fatalf("pipelinectl %s: exit %d, stderr:\n%s", strings.Join(args, " "), code, errOut)
	}
	return out
}

// state is what the commands may change.
func (s *stack) state() string {
	s.t.Helper()
	var st string
	if err := s.db.QueryRow(context.Background(), `SELECT
		(SELECT string_agg(id || ':' || event_id || ':' || COALESCE(sequence, id), ',' ORDER BY id) FROM outbox) || '|' ||
		(SELECT COALESCE(string_agg(id::text, ',' ORDER BY id), '') FROM outbox_failed) || '|' ||
		(SELECT count(*) FROM outbox_redrive)`).Scan(&st); err != nil {
		s.t.Fatal(err)
	}
	return st
}

func lines(out string) [][]string {
	var rows [][]string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		rows = append(rows, strings.Fields(l))
	}
	return rows
}

func TestOutboxCommands(t *testing.T) {
	t.Parallel()
	s := newStack(t)

	status := lines(s.ok("outbox", "status"))
	if diff := cmp.Diff([]string{"CURSOR", "BACKLOG", "OLDEST", "UNPUBLISHED", "FAILED", "LEADER", "TOKEN", "LEASE"}, status[0]); diff != "" {
		t.Errorf("status header (-want +got):\n%s", diff)
	}
	if got := status[1]; got[0] != strconv.FormatInt(s.failed[1], 10) || got[1] != "1" || got[3] != "2" || got[4] != "relay-1" || got[5] != "7" || got[6] != "live" {
		t.Errorf("status row %q", got)
	}
	var js outboxops.Status
	if err := json.Unmarshal([]byte(s.ok("outbox", "status", "-o", "json")), &js); err != nil {
		t.Fatal(err)
	}
	if js.Backlog != 1 || js.OldestAge < time.Minute || js.Leader == nil || js.Leader.Token != 7 {
		t.Errorf("status JSON %+v", js)
	}

	list := lines(s.ok("outbox", "failed", "list"))
	if len(list) != 3 || list[1][1] != strconv.FormatInt(s.failed[0], 10) || list[2][1] != strconv.FormatInt(s.failed[1], 10) {
		t.Fatalf("failed list:\n%q", list)
	}
	var failed []outboxops.Failed
	if err := json.Unmarshal([]byte(s.ok("outbox", "failed", "list", "-o", "json")), &failed); err != nil {
		t.Fatal(err)
	}
	if len(failed) != 2 || failed[0].Sequence != s.failed[0] || failed[0].Error != "record too large" {
		t.Fatalf("failed list JSON %+v", failed)
	}

	before := s.state()
	dry := lines(s.ok("outbox", "failed", "redrive", "--all", "--dry-run"))
	if len(dry) != 3 || dry[1][len(dry[1])-2] != "(dry" {
		t.Errorf("dry run output %q", dry)
	}
	if after := s.state(); after != before {
		t.Errorf("--dry-run changed the outbox:\nbefore %s\nafter  %s", before, after)
	}

	var moved []outboxops.Redriven
	first := strconv.FormatInt(failed[0].ID, 10)
	if err := json.Unmarshal([]byte(s.ok("outbox", "failed", "redrive", "--id", first, "-o", "json")), &moved); err != nil {
		t.Fatal(err)
	}
	if len(moved) != 1 || moved[0].Sequence != s.failed[0] || moved[0].NewOutboxID <= s.failed[1] {
		t.Fatalf("redrive %+v", moved)
	}
	var by string
	if err := s.db.QueryRow(context.Background(), `SELECT redriven_by FROM outbox_redrive`).Scan(&by); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(by, "ops@") {
		t.Errorf("audit names %q, want ops@host", by)
	}
	// The re-driven row is now the backlog's second row.
	if err := json.Unmarshal([]byte(s.ok("outbox", "status", "-o", "json")), &js); err != nil || js.Backlog != 2 || js.Failed != 1 {
		t.Errorf("status after the re-drive %+v (%v)", js, err)
	}

	// Re-driving it again, with the other one, fails (it is gone) and
	// changes nothing.
	before = s.state()
	code, _, errOut := s.ctl("outbox", "failed", "redrive", "--id", strconv.FormatInt(failed[1].ID, 10), first)
	if code != exitFailed || !strings.Contains(errOut, "no such outbox_failed row") || s.state() != before {
		t.Errorf("second re-drive: exit %d, stderr %q", code, errOut)
	}
}

func TestDLTCommands(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	list := lines(s.ok("dlt", "list", "--topic", "like"))
	// Topics are shown as named on the cluster, where an operator finds them.
	dlt := s.kafka.Topic("like-events.DLT")
	want := [][]string{
		{"TOPIC", "PART", "RECORDS", "PENDING", "OLDEST", "PENDING", "EXPIRED", "REDRIVES", "AT", "MAX", "FOREIGN", "TOP", "ERROR"},
		{dlt, "0", "3", "3", "1h", "0", "0×2", "3×1", "1", "1", "2×", "database", "unavailable"},
		{dlt, "1", "0", "0", "-", "0", "-", "0", "0", "-"},
		{dlt, "2", "0", "0", "-", "0", "-", "0", "0", "-"},
	}
	// The oldest pending record was dead-lettered an hour before it was
	// written; the seconds since then are the machine's.
	if len(list) > 1 && len(list[1]) > 4 {
		if age, err := time.ParseDuration(list[1][4]); err == nil && age >= time.Hour && age < 2*time.Hour {
			list[1][4] = "1h"
		}
	}
	if diff := cmp.Diff(want, list); diff != "" {
		t.Errorf("dlt list (-want +got):\n%s", diff)
	}

	dry := lines(s.ok("dlt", "redrive", "--topic", "like-events", "--dry-run"))
	var outcomes []string
	for _, r := range dry[1:] {
		outcomes = append(outcomes, r[3]+":"+r[4])
	}
	if diff := cmp.Diff([]string{"1:redriven", "2:parked", "3:skipped"}, outcomes); diff != "" {
		t.Errorf("dry run (-want +got):\n%s", diff)
	}
	if after := lines(s.ok("dlt", "list", "--topic", "like")); after[1][3] != "3" {
		t.Errorf("after the dry run %s records pending, want 3 (nothing committed)", after[1][3])
	}

	var res reclaim.Result
	if err := json.Unmarshal([]byte(s.ok("dlt", "redrive", "--topic", "like", "-o", "json")), &res); err != nil {
		t.Fatal(err)
	}
	p0 := res.Domains[0].Partitions[0]
	if diff := cmp.Diff(map[reclaim.Outcome]int{reclaim.Redriven: 1, reclaim.Parked: 1, reclaim.Skipped: 1}, p0.Counts); diff != "" || p0.Committed != 3 {
		t.Errorf("redrive of partition 0 committed %d (-want +got counts):\n%s", p0.Committed, diff)
	}
	recs := testenv.ReadTopic(t, s.brokers, s.kafka.Topic("like-events"), 1, 10*time.Second)
	if h := testenv.Headers(recs[0]); h["ce_id"] != "ev-1" || h[reclaim.HeaderRedriveCount] != "1" || recs[0].Partition != 0 {
		t.Errorf("republished record on partition %d with headers %v", recs[0].Partition, h)
	}
	table := lines(s.ok("dlt", "redrive", "--topic", "like"))
	if diff := cmp.Diff([]string{dlt, "0", "3", "3", "0", "0", "0", "0", "0", "-"}, table[1]); diff != "" {
		t.Errorf("second redrive finds nothing (-want +got):\n%s", diff)
	}
	// The parked record was kept in like-events.PARKED with its reason: the
	// DLT's retention may delete it there, and one command brings it back.
	parked := testenv.ReadTopic(t, s.brokers, s.kafka.Topic("like-events.PARKED"), 1, 10*time.Second)
	if h := testenv.Headers(parked[0]); string(parked[0].Key) != "2" || !strings.Contains(h[reclaim.HeaderParkedReason], "re-driven 3 times") || h[pcon.HeaderOriginalTopic] != s.kafka.Topic("like-events") {
		t.Errorf("parked copy: key %s, headers %v", parked[0].Key, h)
	}
	admin, err := sarama.NewClusterAdmin(s.brokers, s.kafka.Config("retention"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.DeleteRecords(dlt, map[int32]int64{0: 3}); err != nil {
		t.Fatalf("retention of the DLT: %v", err)
	}
	if pl := lines(s.ok("parked", "list", "--topic", "like")); pl[1][0] != s.kafka.Topic("like-events.PARKED") || pl[1][2] != "1" || pl[1][3] != "1" {
		t.Errorf("parked list: %v, want one pending record in like-events.PARKED/0", pl)
	}
	if dry := lines(s.ok("parked", "redrive", "--topic", "like", "--dry-run")); len(dry) != 2 || dry[1][3] != "2" || dry[1][4] != "redriven" {
		t.Errorf("parked redrive --dry-run: %v, want record 2 re-driven", dry)
	}
	s.ok("parked", "redrive", "--topic", "like")
	back := testenv.ReadTopic(t, s.brokers, s.kafka.Topic("like-events"), 2, 10*time.Second)
	if h := testenv.Headers(back[1]); string(back[1].Key) != "2" || h["ce_id"] != "ev-2" || h[reclaim.HeaderRedriveCount] != "4" || back[1].Partition != 0 {
		t.Errorf("re-driven from the parked topic: key %s on partition %d, headers %v", back[1].Key, back[1].Partition, h)
	}
	if pl := lines(s.ok("parked", "list", "--topic", "like")); pl[1][3] != "0" {
		t.Errorf("after the parked redrive %s pending, want 0", pl[1][3])
	}
}

//nolint:paralleltest // the cases unset variables of the shared stack in turn
func TestBadInvocations(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	tests := []struct {
		name   string
		args   []string
		unset  string
		set    map[string]string
		stderr string
	}{
		{"no command", nil, "", nil, "a subcommand is required"},
		{"unknown command", []string{"clusters"}, "", nil, `unknown command "clusters"; one of: dlt, parked, outbox, cluster`},
		{"unknown flag", []string{"dlt", "list", "--bogus"}, "", nil, "flag provided but not defined: -bogus"},
		{"bad output", []string{"outbox", "status", "-o", "yaml"}, "", nil, "-o must be table or json"},
		{"redrive without topic", []string{"dlt", "redrive"}, "", nil, "--topic is required"},
		{"unknown topic", []string{"dlt", "redrive", "--topic", "refund"}, "", nil, `unknown topic "refund"`},
		{"bad duration", []string{"dlt", "redrive", "--topic", "like", "--older-than", "soon"}, "", nil, "invalid value \"soon\" for flag -older-than"},
		{"zero limit", []string{"dlt", "redrive", "--topic", "like", "--limit", "0"}, "", nil, "--limit must be 1 to 10000"},
		{"limit past 10,000", []string{"dlt", "redrive", "--topic", "like", "--limit", "10001"}, "", nil, "--limit must be 1 to 10000"},
		{"listing past 10,000", []string{"outbox", "failed", "list", "--limit", "10001"}, "", nil, "--limit must be 1 to 10000"},
		{"bad record", []string{"parked", "redrive", "--topic", "like", "--record", "7"}, "", nil, `want PARTITION:OFFSET, got "7"`},
		{"no horizon", []string{"dlt", "list", "--horizon", "0s"}, "", nil, "--horizon must be positive"},
		{"ids and all", []string{"outbox", "failed", "redrive", "--all", "--id", "1"}, "", nil, "give either --id N… or --all"},
		{"neither ids nor all", []string{"outbox", "failed", "redrive"}, "", nil, "give either --id N… or --all"},
		{"bad id", []string{"outbox", "failed", "redrive", "--id", "x"}, "", nil, "want a positive outbox_failed id"},
		{"bad later id", []string{"outbox", "failed", "redrive", "--id", "1", "2", "x"}, "", nil, `--id: want a positive outbox_failed id, got "x"`},
		{"stray argument", []string{"outbox", "status", "now"}, "", nil, "unexpected arguments: now"},
		{"no database", []string{"outbox", "status"}, "DATABASE_URL", nil, "DATABASE_URL: is required"},
		{"no brokers", []string{"dlt", "list"}, "KAFKA_BROKERS", nil, "KAFKA_BROKERS: is required"},
		{"bad prefix", []string{"dlt", "redrive", "--topic", "like"}, "", map[string]string{"KAFKA_PREFIX": "ops/"}, `KAFKA_PREFIX: must be at most 200 of the characters a-z A-Z 0-9 . _ -, got "ops/"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := s.state()
			if tc.unset != "" {
				saved := s.vars[tc.unset]
				delete(s.vars, tc.unset)
				defer func() { s.vars[tc.unset] = saved }()
			}
			for k, v := range tc.set {
				saved := s.vars[k]
				s.vars[k] = v
				defer func() { s.vars[k] = saved }()
			}
			code, _, errOut := s.ctl(tc.args...)
			if code != exitUsage || !strings.Contains(errOut, tc.stderr) {
				t.Errorf("exit %d, stderr:\n%s\nwant exit 2 and %q", code, errOut, tc.stderr)
			}
			if s.state() != before {
				t.Error("a refused command changed the outbox")
			}
		})
	}
	if code, out, _ := s.ctl("help"); code != exitOK || !strings.Contains(out, "outbox") {
		t.Errorf("help: exit %d, output %q", code, out)
	}
}
