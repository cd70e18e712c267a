package kafka_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/loopers/commerce-pipeline/internal/config"
	"github.com/loopers/commerce-pipeline/internal/kafka"
	"github.com/loopers/commerce-pipeline/internal/testenv"
)

// TestSecureBroker runs everything that needs a secured broker on one of
// its own (each broker is a JVM start): TLS, SASL and mutual TLS through
// both client libraries, Check naming the variable behind each kind of
// failure, and the ACLs of kafka.ACLs enforced by the real authorizer.
func TestSecureBroker(t *testing.T) {
	t.Parallel()
	k := testenv.SecureKafkaCluster(t, "tester", "relay", "consumers", "reclaimer", "pipelinectl", "nobody")
	// The set-up runs as the admin user over SASL_SSL, as an operator's
	// tooling would; the plain listener stays the broker's own.
	admin := loadSettings(t, k.Env(t, testenv.ListenerSASLSSL, testenv.SecureAdmin, "SCRAM-SHA-512", ""))
	t.Run("produce and consume", func(t *testing.T) {
		t.Parallel()
		testProduceConsume(t, k, admin)
	})
	t.Run("check", func(t *testing.T) {
		t.Parallel()
		testCheck(t, k)
	})
	t.Run("check waits for a broker that starts", func(t *testing.T) {
		t.Parallel()
		testCheckWaits(t, k)
	})
	t.Run("least privilege", func(t *testing.T) {
		t.Parallel()
		testLeastPrivilege(t, k, admin)
	})
}

func loadSettings(t *testing.T, env map[string]string) kafka.Settings {
	t.Helper()
	s, err := config.Parse(config.FromMap(env), kafka.Load)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// testProduceConsume: over every secured listener and mechanism, a record
// produced by each library is read back by each.
func testProduceConsume(t *testing.T, k *testenv.SecureKafka, admin kafka.Settings) {
	testenv.GrantACLs(t, admin, "User:tester", []kafka.ACL{
		{Resource: "topic", Pattern: "prefix", Name: "pc-", Operation: "All"},
	})
	for _, tc := range []struct {
		name, listener, mechanism string
	}{
		{"SASL_SSL SCRAM-SHA-512", testenv.ListenerSASLSSL, kafka.MechanismSCRAMSHA512},
		{"SASL_SSL SCRAM-SHA-256", testenv.ListenerSASLSSL, kafka.MechanismSCRAMSHA256},
		{"SASL_SSL PLAIN", testenv.ListenerSASLSSL, kafka.MechanismPlain},
		{"SASL_PLAINTEXT SCRAM-SHA-512", testenv.ListenerSASLPlaintext, kafka.MechanismSCRAMSHA512},
		// The principal is the certificate's common name: the same ACL
		// as the SASL user tester's applies.
		{"mutual TLS", testenv.ListenerMTLS, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := loadSettings(t, k.Env(t, tc.listener, "tester", tc.mechanism, "pc-"+strings.NewReplacer(" ", "-", "_", "-").Replace(tc.name)+"."))
			if w := s.Warnings(); len(w) > 0 {
				t.Errorf("warnings %v", w)
			}
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			if err := s.Check(ctx); err != nil {
				t.Fatalf("Check: %v", err)
			}
			topic := s.Topic("t")
			if err := admin.CreateTopics(ctx, []kafka.TopicSpec{{Name: topic, Partitions: 1, Replication: 1}}); err != nil {
				t.Fatal(err)
			}
			if err := produceSarama(s, topic, "from sarama"); err != nil {
				t.Fatalf("sarama produce: %v", err)
			}
			if err := produceKgo(ctx, s, topic, "from franz-go"); err != nil {
				t.Fatalf("franz-go produce: %v", err)
			}
			want := []string{"from franz-go", "from sarama"}
			got, err := readSarama(s, topic, 2)
			if err != nil {
				t.Fatalf("sarama consume: %v", err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("sarama read (-want +got):\n%s", diff)
			}
			if got, err = readKgo(ctx, s, topic, 2); err != nil {
				t.Fatalf("franz-go consume: %v", err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("franz-go read (-want +got):\n%s", diff)
			}
		})
	}
}

// testCheck: each wrong setting stops Check at once, with an error naming
// the variable to fix, from each client library alike, and never the
// password.
func testCheck(t *testing.T, k *testenv.SecureKafka) {
	other := testenv.NewCA(t, "other")
	stranger := other.Issue(t, "tester")
	saslSSL := func(user, mechanism string) map[string]string {
		return k.Env(t, testenv.ListenerSASLSSL, user, mechanism, "")
	}
	brokers := func(listener string) string { return strings.Join(k.Addrs(listener), ",") }
	const (
		authFailed    = "KAFKA_SASL_PASSWORD / KAFKA_SASL_USERNAME: authentication failed"
		tlsAlert      = "KAFKA_TLS: the broker answered with a TLS alert: this listener uses TLS (set KAFKA_TLS=true)"
		closedNoTLS   = "KAFKA_TLS / KAFKA_SASL_MECHANISM: the broker closed the connection: is this a TLS listener (set KAFKA_TLS=true) or a SASL listener (set KAFKA_SASL_MECHANISM)?"
		closedNeedTLS = "KAFKA_TLS: the broker closed the connection: is this a TLS listener (set KAFKA_TLS=true)?"
	)
	for _, tc := range []struct {
		name string
		env  map[string]string
		// role reads the settings of role RECLAIMER (LoadRole).
		role bool
		// want is what every library's error says; sarama, when set,
		// what sarama's says instead (it cannot tell a TLS alert from
		// a closed connection).
		want, sarama string
	}{
		{name: "wrong password", env: with(saslSSL("tester", "SCRAM-SHA-512"), "KAFKA_SASL_PASSWORD", "wrong-password"), want: authFailed},
		{name: "wrong password, SCRAM-SHA-256", env: with(saslSSL("tester", "SCRAM-SHA-256"), "KAFKA_SASL_PASSWORD", "wrong-password"), want: authFailed},
		{name: "wrong password, PLAIN", env: with(saslSSL("tester", "PLAIN"), "KAFKA_SASL_PASSWORD", "wrong-password"), want: authFailed},
		{name: "unknown user", env: with(saslSSL("tester", "SCRAM-SHA-512"), "KAFKA_SASL_USERNAME", "ghost"), want: authFailed},
		{name: "a role's wrong password names the role's variables", role: true,
			env:  with(saslSSL("tester", "SCRAM-SHA-512"), "KAFKA_RECLAIMER_SASL_USERNAME", "reclaimer", "KAFKA_RECLAIMER_SASL_PASSWORD", "wrong-password"),
			want: "KAFKA_RECLAIMER_SASL_PASSWORD / KAFKA_RECLAIMER_SASL_USERNAME: authentication failed"},
		{name: "CA that did not sign the broker", env: with(saslSSL("tester", "SCRAM-SHA-512"), "KAFKA_TLS_CA_FILE", other.File),
			want: "KAFKA_TLS_CA_FILE: the broker's certificate is signed by an unknown authority"},
		{name: "system roots", env: map[string]string{"KAFKA_BROKERS": brokers(testenv.ListenerMTLS), "KAFKA_TLS": "true"},
			want: "KAFKA_TLS_CA_FILE (unset: the system roots): the broker's certificate is signed by an unknown authority"},
		{name: "server name not the broker's", env: with(saslSSL("tester", "SCRAM-SHA-512"), "KAFKA_TLS_SERVER_NAME", "kafka.example.com"),
			want: "KAFKA_TLS_SERVER_NAME / KAFKA_BROKERS: the broker's certificate is not valid for the name dialled"},
		{name: "TLS on the plaintext listener", env: map[string]string{"KAFKA_BROKERS": brokers(kafkaPlain), "KAFKA_TLS": "true", "KAFKA_TLS_CA_FILE": k.CA.File},
			want: "KAFKA_TLS: the broker closed the connection during the TLS handshake: is this a plaintext listener"},
		{name: "TLS on the SASL_PLAINTEXT listener", env: with(k.Env(t, testenv.ListenerSASLPlaintext, "tester", "SCRAM-SHA-512", ""), "KAFKA_TLS", "true"),
			want: "KAFKA_TLS: the broker closed the connection during the TLS handshake: is this a plaintext listener"},
		{name: "plaintext on the mTLS listener", env: map[string]string{"KAFKA_BROKERS": brokers(testenv.ListenerMTLS)}, want: tlsAlert, sarama: closedNoTLS},
		{name: "plaintext on the SASL_SSL listener", env: map[string]string{"KAFKA_BROKERS": brokers(testenv.ListenerSASLSSL)}, want: tlsAlert, sarama: closedNoTLS},
		{name: "SASL without TLS on the SASL_SSL listener", env: with(saslSSL("tester", "SCRAM-SHA-512"), "KAFKA_TLS", "", "KAFKA_TLS_CA_FILE", ""),
			want: tlsAlert, sarama: closedNeedTLS},
		{name: "no SASL on the SASL_PLAINTEXT listener", env: map[string]string{"KAFKA_BROKERS": brokers(testenv.ListenerSASLPlaintext)}, want: closedNoTLS},
		{name: "no SASL on the SASL_SSL listener", env: map[string]string{"KAFKA_BROKERS": brokers(testenv.ListenerSASLSSL), "KAFKA_TLS": "true", "KAFKA_TLS_CA_FILE": k.CA.File},
			want: "KAFKA_SASL_MECHANISM: the broker closed the connection after the TLS handshake: is this a SASL listener"},
		{name: "SASL on the plaintext listener", env: map[string]string{"KAFKA_BROKERS": brokers(kafkaPlain),
			"KAFKA_SASL_MECHANISM": "SCRAM-SHA-512", "KAFKA_SASL_USERNAME": "tester", "KAFKA_SASL_PASSWORD": k.Passwords["tester"]},
			want: "KAFKA_SASL_MECHANISM: this listener does not use SASL"},
		{name: "client certificate of an unknown CA", env: with(k.Env(t, testenv.ListenerMTLS, "tester", "", ""), "KAFKA_TLS_CERT_FILE", stranger.Cert, "KAFKA_TLS_KEY_FILE", stranger.Key),
			want: "KAFKA_TLS_CERT_FILE / KAFKA_TLS_KEY_FILE: the broker refused the client certificate; is it signed by a CA the broker trusts?"},
		{name: "no client certificate", env: map[string]string{"KAFKA_BROKERS": brokers(testenv.ListenerMTLS), "KAFKA_TLS": "true", "KAFKA_TLS_CA_FILE": k.CA.File},
			want: "KAFKA_TLS_CERT_FILE / KAFKA_TLS_KEY_FILE: the broker refused the TLS handshake; it may require a client certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			load := func(l *config.Loader) kafka.Settings {
				s := kafka.Load(l)
				if tc.role {
					return kafka.LoadRole(l, s, "RECLAIMER")
				}
				return s
			}
			s, err := config.Parse(config.FromMap(tc.env), load)
			if err != nil {
				t.Fatal(err)
			}
			for _, client := range []string{"both", "franz-go", "sarama"} {
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				var err error
				if client == "both" {
					err = s.Check(ctx)
				} else {
					err = s.CheckWith(ctx, client)
				}
				cancel()
				want := tc.want
				if client == "sarama" && tc.sarama != "" {
					want = tc.sarama
				}
				if err == nil || !strings.HasPrefix(err.Error(), want) {
					t.Errorf("%s: Check = %v\nwant an error starting %q", client, err, want)
					continue
				}
				noSecret(t, err.Error(), "wrong-password", k.Passwords["tester"])
			}
		})
	}
}

// kafkaPlain is the plain listener's name.
const kafkaPlain = "PLAINTEXT"

// testCheckWaits: Check tries again while nothing listens, gives up when its
// time is up naming KAFKA_BROKERS, and passes once a broker answers.
func testCheckWaits(t *testing.T, k *testenv.SecureKafka) {
	addr := freeAddr(t)
	env := with(k.Env(t, testenv.ListenerSASLSSL, "tester", "SCRAM-SHA-512", ""), "KAFKA_BROKERS", addr)
	s := loadSettings(t, env)

	var refused atomic.Int32
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	err := s.CheckObserved(ctx, func(error) { refused.Add(1) })
	cancel()
	if err == nil || !strings.HasPrefix(err.Error(), "KAFKA_BROKERS: no broker answered in") || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("Check = %v, want KAFKA_BROKERS named and the refusal", err)
	}
	if refused.Load() < 2 {
		t.Errorf("refused %d times: Check did not try again", refused.Load())
	}

	// The broker "starts" (a proxy to it opens the port) once Check has
	// found it refusing.
	first := make(chan struct{})
	var once atomic.Bool
	done := make(chan error, 1)
	go func() {
		done <- s.CheckObserved(t.Context(), func(error) {
			if once.CompareAndSwap(false, true) {
				close(first)
			}
		})
	}()
	select {
	case <-first:
	case err := <-done:
		t.Fatalf("Check ended before it found the port closed: %v", err)
	}
	testenv.NewProxy(t, addr, k.Addrs(testenv.ListenerSASLSSL)[0])
	if err := <-done; err != nil {
		t.Errorf("Check after the broker started: %v", err)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// testLeastPrivilege grants each role's principal what kafka.ACLs lists and
// shows the real authorizer allowing each role's work and refusing the
// rest; a principal without ACLs can do nothing.
func testLeastPrivilege(t *testing.T, k *testenv.SecureKafka, admin kafka.Settings) {
	const prefix = "lp."
	users := map[string]string{kafka.RoleRelay: "relay", kafka.RoleConsumers: "consumers", kafka.RoleReclaimer: "reclaimer", kafka.RoleOperator: "pipelinectl"}
	for role, acls := range kafka.ACLs(prefix) {
		testenv.GrantACLs(t, admin, "User:"+users[role], acls)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var specs []kafka.TopicSpec
	for _, s := range (kafka.Settings{Prefix: prefix}).PipelineTopics(1, 1) {
		if strings.HasPrefix(s.Name, prefix+"like-events") {
			specs = append(specs, s)
		}
	}
	if err := admin.CreateTopics(ctx, specs); err != nil {
		t.Fatal(err)
	}
	as := func(user, listener string) kafka.Settings {
		s := loadSettings(t, k.Env(t, listener, user, "SCRAM-SHA-512", prefix))
		if err := s.Check(ctx); err != nil {
			t.Fatalf("%s: Check: %v", user, err)
		}
		return s
	}
	events, dlt, parked := prefix+"like-events", prefix+"like-events.DLT", prefix+"like-events.PARKED"

	// outbox-relay publishes with franz-go's idempotent producer: Write on
	// the topic is all it needs (no IdempotentWrite on the cluster).
	relay := as("relay", testenv.ListenerSASLSSL)
	if err := produceKgo(ctx, relay, events, "event"); err != nil {
		t.Fatalf("relay publishes an event: %v", err)
	}
	if err := produceKgo(ctx, relay, dlt, "forged dead letter"); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Errorf("relay writes a dead-letter topic: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}

	// product-consumers, authenticated by certificate here: they read the
	// event in their group and dead-letter it, but cannot publish an event.
	consumers := as("consumers", testenv.ListenerMTLS)
	got, err := consumeGroup(ctx, consumers, consumers.Group("product-like-consumer"), events)
	if err != nil || got != "event" {
		t.Fatalf("consumers read %q in their group: %v", got, err)
	}
	if err := produceSarama(consumers, dlt, got); err != nil {
		t.Errorf("consumers dead-letter a record: %v", err)
	}
	if err := produceSarama(consumers, events, "forged event"); !errors.Is(err, sarama.ErrTopicAuthorizationFailed) {
		t.Errorf("consumers publish an event: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	if _, err := readKgo(ctx, consumers, dlt, 1); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Errorf("consumers read the dead letters: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}

	// The reclaimer reads the dead letter, re-drives it to the event topic,
	// parks a copy, and commits in its group; it cannot read events.
	reclaimer := as("reclaimer", testenv.ListenerSASLSSL)
	dead, err := readSarama(reclaimer, dlt, 1)
	if err != nil || !slices.Equal(dead, []string{"event"}) {
		t.Fatalf("reclaimer reads the DLT: %q, %v", dead, err)
	}
	for _, topic := range []string{events, parked} {
		if err := produceSarama(reclaimer, topic, dead[0]); err != nil {
			t.Errorf("reclaimer writes %s: %v", topic, err)
		}
	}
	if err := commit(reclaimer, reclaimer.Group(kafka.ReclaimGroup), dlt, 1); err != nil {
		t.Errorf("reclaimer commits in its group: %v", err)
	}
	if _, err := readKgo(ctx, reclaimer, events, 1); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Errorf("reclaimer reads events: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}

	// pipelinectl re-drives the parked topic under its own group, and may
	// not commit in a consumers' group.
	operator := as("pipelinectl", testenv.ListenerSASLSSL)
	if got, err := readSarama(operator, parked, 1); err != nil || !slices.Equal(got, []string{"event"}) {
		t.Errorf("pipelinectl reads the parked topic: %q, %v", got, err)
	}
	if err := commit(operator, operator.Group(kafka.ParkedGroup), parked, 1); err != nil {
		t.Errorf("pipelinectl commits in its group: %v", err)
	}
	if err := commit(operator, operator.Group("product-like-consumer"), events, 1); !errors.Is(err, sarama.ErrGroupAuthorizationFailed) {
		t.Errorf("pipelinectl commits in a consumers' group: %v, want GROUP_AUTHORIZATION_FAILED", err)
	}

	// A principal without ACLs authenticates, and can do nothing.
	nobody := as("nobody", testenv.ListenerSASLSSL)
	if err := produceKgo(ctx, nobody, events, "x"); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Errorf("nobody publishes: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	if _, err := readKgo(ctx, nobody, events, 1); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Errorf("nobody reads: %v, want TOPIC_AUTHORIZATION_FAILED", err)
	}
	if err := commit(nobody, nobody.Group("product-like-consumer"), events, 1); !errors.Is(err, sarama.ErrGroupAuthorizationFailed) {
		t.Errorf("nobody commits: %v, want GROUP_AUTHORIZATION_FAILED", err)
	}
}

func produceSarama(s kafka.Settings, topic, value string) error {
	p, err := sarama.NewSyncProducer(s.Brokers, s.Config("test-producer"))
	if err != nil {
		return err
	}
	defer p.Close()
	_, _, err = p.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder(value)})
	return err
}

func produceKgo(ctx context.Context, s kafka.Settings, topic, value string) error {
	cl, err := kgo.NewClient(append(s.ClientOptions("test-producer"), kgo.RequiredAcks(kgo.AllISRAcks()))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	return cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(value)}).FirstErr()
}

// readSarama reads n records of a one-partition topic from its start.
func readSarama(s kafka.Settings, topic string, n int) ([]string, error) {
	c, err := sarama.NewConsumer(s.Brokers, s.Config("test-consumer"))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	pc, err := c.ConsumePartition(topic, 0, sarama.OffsetOldest)
	if err != nil {
		return nil, err
	}
	defer pc.Close()
	var out []string
	timeout := time.After(30 * time.Second)
	for len(out) < n {
		select {
		case m := <-pc.Messages():
			out = append(out, string(m.Value))
		case err := <-pc.Errors():
			return out, err
		case <-timeout:
			return out, errors.New("timed out")
		}
	}
	slices.Sort(out)
	return out, nil
}

// readKgo reads n records of topic from its start, without a group; an
// error of a fetch ends it.
func readKgo(ctx context.Context, s kafka.Settings, topic string, n int) ([]string, error) {
	cl, err := kgo.NewClient(append(s.ClientOptions("test-consumer"), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var out []string
	for len(out) < n {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return out, err
		}
		for _, e := range fetches.Errors() {
			return out, e.Err
		}
		fetches.EachRecord(func(r *kgo.Record) { out = append(out, string(r.Value)) })
	}
	slices.Sort(out)
	return out, nil
}

// consumeGroup joins group on topic as sarama's consumer group (pcon's way)
// and returns the first record's value, committed.
func consumeGroup(ctx context.Context, s kafka.Settings, group, topic string) (string, error) {
	cfg := s.Config("test-group")
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Group.Rebalance.Timeout = 5 * time.Second
	cfg.Consumer.Return.Errors = true
	g, err := sarama.NewConsumerGroup(s.Brokers, group, cfg)
	if err != nil {
		return "", err
	}
	defer g.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	h := &firstRecord{got: make(chan string, 1)}
	errs := make(chan error, 1)
	go func() {
		for ctx.Err() == nil {
			if err := g.Consume(ctx, []string{topic}, h); err != nil {
				errs <- err
				return
			}
		}
	}()
	select {
	case v := <-h.got:
		return v, nil
	case err := <-errs:
		return "", err
	case err := <-g.Errors():
		return "", err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

type firstRecord struct{ got chan string }

func (*firstRecord) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (*firstRecord) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h *firstRecord) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for m := range claim.Messages() {
		sess.MarkMessage(m, "")
		sess.Commit()
		select {
		case h.got <- string(m.Value):
		default:
		}
	}
	return nil
}

// commit commits offset of partition 0 of topic in group outside a group
// generation, as the reclaimer does.
func commit(s kafka.Settings, group, topic string, offset int64) error {
	client, err := sarama.NewClient(s.Brokers, s.Config("test-commit"))
	if err != nil {
		return err
	}
	defer client.Close()
	b, err := client.Coordinator(group)
	if err != nil {
		return err
	}
	req := &sarama.OffsetCommitRequest{Version: 2, ConsumerGroup: group, ConsumerGroupGeneration: sarama.GroupGenerationUndefined, RetentionTime: -1}
	req.AddBlock(topic, 0, offset, 0, "")
	resp, err := b.CommitOffset(req)
	if err != nil {
		return err
	}
	if kerr := resp.Errors[topic][0]; kerr != sarama.ErrNoError {
		return kerr
	}
	return nil
}
