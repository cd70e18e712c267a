package pcontrace_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/loopers/commerce-pipeline/internal/kafka"
	"github.com/loopers/commerce-pipeline/internal/testenv"
	"github.com/loopers/commerce-pipeline/pkg/pcon"
	"github.com/loopers/commerce-pipeline/pkg/pcon/pcontrace"
)

const waitLong = 90 * time.Second

// traced is a test's topic with records each created under a span of its
// own, and the recorder of the consumer's spans.
type traced struct {
	k        *testenv.KafkaEnv
	topic    string
	created  map[string]trace.SpanContext // record value → creation context
	recorder *tracetest.SpanRecorder
	tp       *sdktrace.TracerProvider
}

func newTraced(t *testing.T) *traced {
	t.Helper()
	k := testenv.Kafka(t, "t", "t.DLT")
	rec := tracetest.NewSpanRecorder()
	return &traced{k: k, topic: k.Topic("t"), created: map[string]trace.SpanContext{}, recorder: rec,
		tp: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))}
}

// produce writes one record per key, each carrying the W3C context of a
// create span of its own (from a provider apart from the consumer's), in
// the header names headers maps the W3C names to.
func (tr *traced) produce(t *testing.T, keys []string, headers map[string]string) {
	t.Helper()
	producer := sdktrace.NewTracerProvider().Tracer("producer")
	cl, err := kgo.NewClient(kgo.SeedBrokers(tr.k.Brokers...), kgo.DefaultProduceTopic(tr.topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i, key := range keys {
		ctx, span := producer.Start(context.Background(), "create")
		span.End()
		c := propagation.MapCarrier{}
		propagation.TraceContext{}.Inject(ctx, c)
		value := fmt.Sprintf("v%d", i)
		r := &kgo.Record{Key: []byte(key), Value: []byte(value)}
		for w3c, name := range headers {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: name, Value: []byte(c[w3c])})
		}
		if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		tr.created[value] = span.SpanContext()
	}
}

func (tr *traced) config(group string) pcon.Config {
	sc := kafka.Settings{}.Config("pcontrace-test")
	sc.Consumer.Offsets.Initial = sarama.OffsetOldest
	sc.Consumer.MaxWaitTime = 50 * time.Millisecond
	return pcon.Config{Brokers: tr.k.Brokers, Group: tr.k.Prefix + group, Topics: []string{tr.topic}, Sarama: sc,
		Backoff: 10 * time.Millisecond, CommitInterval: 50 * time.Millisecond, RevokeGrace: 3 * time.Second,
		Logger: slog.New(slog.DiscardHandler)}
}

// run consumes until done is closed.
func run(t *testing.T, cfg pcon.Config, h pcon.Handler, done <-chan struct{}) {
	t.Helper()
	c, err := pcon.New(cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- c.Run(context.Background()) }()
	select {
	case <-done:
	case <-time.After(waitLong):
		t.Error("the records were not all handled in time")
	}
	c.Close()
	if err := <-errc; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// TestBatchLinks: a hot key's records are handled in key-run batches; every
// process span has exactly one link per record it handled, each record is
// linked exactly once overall, to its own creation context, and no span is
// without a link.
func TestBatchLinks(t *testing.T) {
	t.Parallel()
	tr := newTraced(t)
	keys := make([]string, 40)
	for i := range keys {
		keys[i] = "hot"
		if i%5 == 0 {
			keys[i] = fmt.Sprintf("cold-%d", i)
		}
	}
	tr.produce(t, keys, map[string]string{"traceparent": "traceparent", "tracestate": "tracestate"})
	var (
		mu      sync.Mutex
		handled = map[string]bool{}
		done    = make(chan struct{})
		runs    int // calls with more than one record of a key
	)
	h := pcontrace.BatchHandler(func(ctx context.Context, rs []*pcon.Record) error {
		time.Sleep(20 * time.Millisecond) // let the hot key's records queue up into runs
		mu.Lock()
		defer mu.Unlock()
		perKey := map[string]int{}
		for _, r := range rs {
			handled[string(r.Value)] = true
			perKey[string(r.Key)]++
		}
		if perKey["hot"] > 1 {
			runs++
		}
		if len(handled) == len(keys) && done != nil {
			close(done)
			done = nil
		}
		return nil
	}, pcontrace.Options{Group: "g", TracerProvider: tr.tp})
	run(t, tr.config("batch"), h, done)
	if runs == 0 {
		t.Error("no batch held a run of the hot key")
	}

	linked := map[string]int{}
	for _, s := range tr.recorder.Ended() {
		if s.Name() == "wait "+tr.topic {
			continue // TestWaitSpans
		}
		if !strings.HasPrefix(s.Name(), "process ") || s.SpanKind() != trace.SpanKindConsumer {
			t.Errorf("span %q kind %s", s.Name(), s.SpanKind())
			continue
		}
		var count int64
		for _, kv := range s.Attributes() {
			if kv.Key == "messaging.batch.message_count" {
				count = kv.Value.AsInt64()
			}
		}
		if len(s.Links()) == 0 || int64(len(s.Links())) != count {
			t.Errorf("%s: %d links for %d records", s.Name(), len(s.Links()), count)
		}
		for _, l := range s.Links() {
			for value, sc := range tr.created {
				if sc.Equal(l.SpanContext.WithRemote(false)) {
					linked[value]++
				}
			}
		}
	}
	want := map[string]int{}
	for value := range tr.created {
		want[value] = 1
	}
	if diff := cmp.Diff(want, linked); diff != "" {
		t.Errorf("links per record (-want +got):\n%s", diff)
	}
}

// TestDeadLetterKeepsTheContext: a record that fails permanently waits
// and is processed as children of its creation context (Options.Parent, read from
// the CloudEvents ce_traceparent header), dead-lettered with its headers
// unchanged, and its dead-letter publish is a send span linked to the
// creation context.
func TestDeadLetterKeepsTheContext(t *testing.T) {
	t.Parallel()
	tr := newTraced(t)
	tr.produce(t, []string{"k"}, map[string]string{"traceparent": "ce_traceparent"})
	created := tr.created["v0"]
	opts := pcontrace.Options{Group: "g", Parent: true, TracerProvider: tr.tp}
	cfg := tr.config("dlt")
	cfg.MaxAttempts = 1
	dlt := pcontrace.DeadLetter(opts)
	done := make(chan struct{})
	cfg.OnDeadLetter = func(r *pcon.Record, topic string) func(error) {
		end := dlt(r, topic)
		return func(err error) { end(err); close(done) }
	}
	h := pcontrace.RecordHandler(func(context.Context, *pcon.Record) error {
		return pcon.Permanent(errors.New("poison"))
	}, opts)
	run(t, cfg, h, done)

	cl, err := kgo.NewClient(kgo.SeedBrokers(tr.k.Brokers...), kgo.ConsumeTopics(tr.topic+".DLT"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	fs := cl.PollRecords(ctx, 1)
	if fs.Err() != nil || len(fs.Records()) != 1 {
		t.Fatalf("read the dead letter: %v, %d records", fs.Err(), len(fs.Records()))
	}
	want := fmt.Sprintf("00-%s-%s-01", created.TraceID(), created.SpanID())
	kept := ""
	for _, h := range fs.Records()[0].Headers {
		if h.Key == "ce_traceparent" {
			kept = string(h.Value)
		}
	}
	if kept != want {
		t.Errorf("dead letter's ce_traceparent %q, want the original %q", kept, want)
	}

	got := map[string]string{}
	for _, s := range tr.recorder.Ended() {
		switch s.Name() {
		case "process " + tr.topic:
			got["process parent"] = s.Parent().SpanID().String()
		case "wait " + tr.topic:
			got["wait parent"] = s.Parent().SpanID().String()
		case "send " + tr.topic + ".DLT":
			if len(s.Links()) == 1 {
				got["send link"] = s.Links()[0].SpanContext.SpanID().String()
			}
			got["send kind"] = s.SpanKind().String()
		default:
			t.Errorf("unexpected span %q", s.Name())
		}
	}
	if diff := cmp.Diff(map[string]string{"process parent": created.SpanID().String(), "send link": created.SpanID().String(), "wait parent": created.SpanID().String(),
		"send kind": trace.SpanKindProducer.String()}, got); diff != "" {
		t.Errorf("spans (-want +got):\n%s", diff)
	}
}

// TestCommitSpans: every offset commit is a root client span "commit
// <topic>" with an event per partition it commits (no partition twice),
// as many as its pcon.commit.partitions says; the last event of each
// partition, over the spans in the order they ended, names the offset the
// broker holds for the group once the consumer has closed.
func TestCommitSpans(t *testing.T) {
	t.Parallel()
	tr := newTraced(t)
	keys := make([]string, 30)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
	}
	tr.produce(t, keys, map[string]string{"traceparent": "traceparent"})
	opts := pcontrace.Options{Group: "g", TracerProvider: tr.tp}
	cfg := tr.config("commit")
	cfg.OnCommit = pcontrace.Commit(opts)
	var (
		mu      sync.Mutex
		handled = map[string]bool{}
		done    = make(chan struct{})
	)
	h := pcontrace.RecordHandler(func(_ context.Context, r *pcon.Record) error {
		mu.Lock()
		defer mu.Unlock()
		handled[string(r.Value)] = true
		if len(handled) == len(keys) && done != nil {
			// Let a periodic commit or two pass before the final one.
			all := done
			time.AfterFunc(200*time.Millisecond, func() { close(all) })
			done = nil
		}
		return nil
	}, opts)
	run(t, cfg, h, done)

	last := map[int32]int64{} // partition → offset of its last commit event
	commits := 0
	for _, s := range tr.recorder.Ended() {
		if !strings.HasPrefix(s.Name(), "commit") {
			continue
		}
		commits++
		if s.Name() != "commit "+tr.topic || s.SpanKind() != trace.SpanKindClient || s.Parent().IsValid() {
			t.Errorf("commit span %q kind %s parent %v: want a root client span named after the topic", s.Name(), s.SpanKind(), s.Parent().SpanID())
		}
		var partitions int64
		for _, kv := range s.Attributes() {
			if kv.Key == "pcon.commit.partitions" {
				partitions = kv.Value.AsInt64()
			}
		}
		seen := map[int32]bool{}
		for _, e := range s.Events() {
			var p, off int64 = -1, -1
			for _, kv := range e.Attributes {
				switch kv.Key {
				case "messaging.destination.partition.id":
					fmt.Sscan(kv.Value.AsString(), &p) //nolint:errcheck // a missing id stays -1, reported below
				case "messaging.kafka.commit.offset":
					off = kv.Value.AsInt64()
				}
			}
			if e.Name != "partition committed" || p < 0 || off < 0 || seen[int32(p)] {
				t.Errorf("%s: event %q partition %d offset %d (seen before: %t)", s.Name(), e.Name, p, off, seen[int32(p)])
				continue
			}
			seen[int32(p)] = true
			last[int32(p)] = off
		}
		if int64(len(s.Events())) != partitions || partitions == 0 {
			t.Errorf("%s: %d events for %d partitions", s.Name(), len(s.Events()), partitions)
		}
	}
	if commits == 0 {
		t.Fatal("no commit span")
	}

	admin, err := sarama.NewClusterAdmin(tr.k.Brokers, kafka.Settings{}.Config("pcontrace-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	resp, err := admin.ListConsumerGroupOffsets(cfg.Group, nil)
	if err != nil {
		t.Fatal(err)
	}
	broker := map[int32]int64{}
	for p, b := range resp.Blocks[tr.topic] {
		if b.Err == sarama.ErrNoError && b.Offset >= 0 {
			broker[p] = b.Offset
		}
	}
	if diff := cmp.Diff(broker, last); diff != "" {
		t.Errorf("committed offset by partition, the broker's vs the last commit span's (-broker +spans):\n%s", diff)
	}
	t.Logf("%d commit spans; committed %v", commits, broker)
}

// TestWaitSpans: records of one key queue behind each other; each record's
// wait, from its fetch to its handler's start, is one span "wait <topic>",
// a child of its creation context, ending once the key's previous record's
// processing ended. A record retried once still has one wait span.
func TestWaitSpans(t *testing.T) {
	t.Parallel()
	tr := newTraced(t)
	keys := make([]string, 8)
	for i := range keys {
		keys[i] = "hot"
	}
	tr.produce(t, keys, map[string]string{"traceparent": "traceparent"})
	opts := pcontrace.Options{Group: "g", TracerProvider: tr.tp}
	var (
		mu       sync.Mutex
		attempts = map[string]int{}
		handled  = map[string]bool{}
		done     = make(chan struct{})
	)
	h := pcontrace.RecordHandler(func(_ context.Context, r *pcon.Record) error {
		time.Sleep(10 * time.Millisecond) // the key's later records queue up meanwhile
		mu.Lock()
		defer mu.Unlock()
		v := string(r.Value)
		if attempts[v]++; v == "v3" && attempts[v] == 1 {
			return errors.New("transient")
		}
		handled[v] = true
		if len(handled) == len(keys) && done != nil {
			close(done)
			done = nil
		}
		return nil
	}, opts)
	run(t, tr.config("wait"), h, done)

	type bounds struct{ start, end time.Time }
	waits := map[string][]bounds{} // record value → its wait spans
	processEnds := map[int64][]time.Time{}
	offsetOf := map[string]int64{}
	for _, s := range tr.recorder.Ended() {
		var off int64 = -1
		for _, kv := range s.Attributes() {
			if kv.Key == "messaging.kafka.offset" {
				off = kv.Value.AsInt64()
			}
		}
		switch s.Name() {
		case "process " + tr.topic:
			processEnds[off] = append(processEnds[off], s.EndTime())
		case "wait " + tr.topic:
			for value, sc := range tr.created {
				if s.Parent().SpanID() == sc.SpanID() && s.SpanContext().TraceID() == sc.TraceID() {
					waits[value] = append(waits[value], bounds{s.StartTime(), s.EndTime()})
					offsetOf[value] = off
				}
			}
		}
	}
	count := map[string]int{}
	want := map[string]int{}
	for value := range tr.created {
		count[value] = len(waits[value])
		want[value] = 1
	}
	if diff := cmp.Diff(want, count); diff != "" {
		t.Fatalf("wait spans per record, each the child of its creation context (-want +got):\n%s", diff)
	}
	// The key's records run one after another, in offset order: a record's
	// wait ends after the previous record's (last) processing ended.
	for value, w := range waits {
		off := offsetOf[value]
		if !w[0].end.After(w[0].start) && !w[0].end.Equal(w[0].start) {
			t.Errorf("%s: wait ends %s before it starts", value, w[0].start.Sub(w[0].end))
		}
		prev := processEnds[off-1]
		if len(prev) > 0 && w[0].end.Before(prev[len(prev)-1]) {
			t.Errorf("offset %d: its wait ended %s before offset %d's processing did", off, prev[len(prev)-1].Sub(w[0].end), off-1)
		}
	}
	if n := len(processEnds[offsetOf["v3"]]); n != 2 {
		t.Errorf("v3 was processed %d times, want 2 (one retry)", n)
	}
}
