package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/loopers/commerce-pipeline/internal/config"
	"github.com/loopers/commerce-pipeline/internal/kafka"
	"github.com/loopers/commerce-pipeline/internal/reclaim"
	"github.com/loopers/commerce-pipeline/internal/stack"
	"github.com/loopers/commerce-pipeline/internal/testenv"
)

// TestSecureKafka runs the pipeline against a broker secured as a
// deployment secures one (testenv.SecureKafkaCluster: TLS, SASL, mutual
// TLS, the authorizer on): each service connects as a principal of its own
// that holds exactly what kafka.ACLs grants its role, and the events reach
// the aggregates exactly, over SASL_SSL with SCRAM-SHA-512 and over mutual
// TLS. Then it starts the relay and product-consumers with credentials that
// cannot work and sees each stop at start naming the variable to fix.
//
// One broker JVM serves the three parts: each pipeline lives under a prefix
// of its own, with principals of its own.
//
//nolint:paralleltest // starts a broker JVM and the real service processes, which on 2 shared cores would break the timing bounds of the other end-to-end tests (the live page's 2 s)
func TestSecureKafka(t *testing.T) {
	k := testenv.SecureKafkaCluster(t, "relay", "consumers", "reclaimer")
	t.Run("SASL_SSL SCRAM-SHA-512", func(t *testing.T) {
		testSecurePipeline(t, k, testenv.ListenerSASLSSL, "scram.", "")
	})
	t.Run("mutual TLS", func(t *testing.T) {
		// Certificates' common names: principals apart from the SASL
		// users', each with the ACLs of this prefix only.
		testSecurePipeline(t, k, testenv.ListenerMTLS, "mtls.", "cert-")
	})
	t.Run("bad credentials stop a service at start", func(t *testing.T) {
		testBadCredentials(t, k)
	})
}

// testSecurePipeline runs the pipeline under prefix with each service
// connecting over listener as principal <principals><user>, where each
// principal holds exactly kafka.ACLs(prefix) for its role: likes, an
// unlike, views, an order and its payment reach the aggregates exactly; an
// event no consumer knows is dead-lettered by the consumers' principal and
// parked by the reclaimer's; no service is refused anything on the way.
func testSecurePipeline(t *testing.T, k *testenv.SecureKafka, listener, prefix, principals string) {
	admin := secureAdmin(t, k, prefix)
	users := map[string]string{kafka.RoleRelay: "relay", kafka.RoleConsumers: "consumers", kafka.RoleReclaimer: "reclaimer"}
	acls := kafka.ACLs(prefix)
	for role, user := range users {
		users[role] = principals + user
		testenv.GrantACLs(t, admin, "User:"+users[role], acls[role])
	}
	relayEnv := secureEnv(t, k, listener, users[kafka.RoleRelay], prefix)
	consumerEnv := secureEnv(t, k, listener, users[kafka.RoleConsumers], prefix)
	maps.Copy(consumerEnv, roleEnv(secureEnv(t, k, listener, users[kafka.RoleReclaimer], prefix), "RECLAIMER"))
	// A pass a second, so that the poison event is parked while the test
	// waits rather than a minute later.
	consumerEnv["PRODUCT_CONSUMERS_RECLAIM_INTERVAL"] = "1s"
	s := newSystemOn(t, kafkaSetup{Admin: &admin, ServiceEnv: map[string]map[string]string{
		"outbox-relay": relayEnv, "product-consumers": consumerEnv,
	}})
	relay, _ := s.startRelay("relay-a")
	consumers := s.startConsumers()
	// Deferred, so that a refusal is reported even when a wait below
	// gives up first (a refused dead letter never arrives).
	defer checkSecureLogs(t, k, map[string]*stack.Proc{"outbox-relay": relay, "product-consumers": consumers})

	// Each process connected over the secured listener as the principal
	// given to it, the reclaimer as its own: a service that fell back to
	// another listener or identity would make the ACLs prove nothing.
	addrs := k.Addrs(listener)
	as := func(env map[string]string, role string) identity {
		return identity{Brokers: addrs, Prefix: prefix, TLS: true,
			User: env["KAFKA_"+role+"SASL_USERNAME"], Cert: env["KAFKA_"+role+"TLS_CERT_FILE"]}
	}
	for _, p := range []struct {
		proc *stack.Proc
		want map[string]identity
	}{
		{relay, map[string]identity{"": as(relayEnv, "")}},
		{consumers, map[string]identity{"": as(consumerEnv, ""), "reclaimer": as(consumerEnv, "RECLAIMER_")}},
	} {
		if diff := cmp.Diff(p.want, connectedAs(t, p.proc.Log(1<<20))); diff != "" {
			t.Errorf("%s connected to Kafka as (-want +got):\n%s", p.proc.Name, diff)
		}
	}

	prices := []int64{1200, 3500}
	ids := make([]int64, len(prices))
	pid := make([]string, len(prices))
	for i, price := range prices {
		var p struct{ ID int64 }
		if st := s.call("POST", "/products", "", map[string]any{"name": "secure " + strconv.Itoa(i), "price": price, "stock": 10}, &p); st != http.StatusCreated {
			t.Fatalf("create product: status %d", st)
		}
		ids[i], pid[i] = p.ID, strconv.FormatInt(p.ID, 10)
	}
	for _, u := range []string{"u1", "u2", "u3"} {
		s.expect(s.call("POST", "/products/"+pid[0]+"/likes", u, nil, nil), http.StatusOK)
	}
	s.expect(s.call("DELETE", "/products/"+pid[0]+"/likes", "u2", nil, nil), http.StatusOK)
	s.expect(s.call("POST", "/products/"+pid[1]+"/likes", "u1", nil, nil), http.StatusOK)
	for _, id := range []string{pid[0], pid[0], pid[1]} {
		s.expect(s.call("GET", "/products/"+id, "viewer", nil, nil), http.StatusOK)
	}
	var order struct{ ID int64 }
	items := []map[string]any{{"productId": ids[0], "quantity": 2}, {"productId": ids[1], "quantity": 1}}
	if st := s.call("POST", "/orders", "buyer", map[string]any{"items": items}, &order); st != http.StatusCreated {
		t.Fatalf("create order: status %d", st)
	}
	s.expect(s.call("POST", "/orders/"+strconv.FormatInt(order.ID, 10)+"/payments", "buyer", nil, nil), http.StatusOK)

	// An event of a type no consumer knows, straight into the outbox: the
	// relay publishes it to product-events, the view consumer
	// dead-letters it, the reclaimer parks it (a permanent reason).
	ctx := t.Context()
	conn, err := pgx.Connect(ctx, s.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	poisonID := insertPoison(t, conn, pid[1])

	want := map[int64]aggregate{
		ids[0]: {Likes: 2, Sales: 2, Amount: 2 * prices[0], Views: 2},
		ids[1]: {Likes: 1, Sales: 1, Amount: prices[1], Views: 1},
	}
	if diff := cmp.Diff(want, waitMetrics(t, conn, want, 90*time.Second)); diff != "" {
		t.Fatalf("product_metrics (-want +got):\n%s", diff)
	}
	// Read through the broker's own listener, whose anonymous principal
	// is a super user: the test's view, not a service's.
	for _, topic := range []string{s.topic("product-events.DLT"), s.topic("product-events.PARKED")} {
		got := testenv.ReadTopic(t, k.Brokers(), topic, 1, 60*time.Second)
		if h := testenv.Headers(got[0]); h["ce_id"] != poisonID {
			t.Errorf("%s holds %v, want the poison event %s", topic, h, poisonID)
		} else if strings.HasSuffix(topic, ".PARKED") && h[reclaim.HeaderParkedReason] == "" {
			t.Errorf("%s: the parked record gives no reason: %v", topic, h)
		}
		if n := testenv.EndOffsets(t, k.Brokers(), topic); n != 1 {
			t.Errorf("%s holds %d records, want the poison event once", topic, n)
		}
	}
}

// checkSecureLogs fails the test if a service was refused anything by the
// authorizer (a permission missing from kafka.ACLs shows as an
// authorization error in its log, even where the service carried on) or
// printed a password.
func checkSecureLogs(t *testing.T, k *testenv.SecureKafka, procs map[string]*stack.Proc) {
	t.Helper()
	secrets := slices.Collect(maps.Values(k.Passwords))
	for name, p := range procs {
		log := p.Log(1 << 20)
		lower := strings.ToLower(log)
		for _, refused := range []string{"not authorized", "authorization_failed", "authorization failed"} {
			if i := strings.Index(lower, refused); i >= 0 {
				t.Errorf("%s was refused something (%q): %s", name, refused, lineAt(log, i))
			}
		}
		noSecrets(t, name, log, secrets...)
	}
}

// identity is how a process says it connects to Kafka at start (the
// "connecting to Kafka" record: kafka.Settings.LogValue).
type identity struct {
	Brokers []string
	Prefix  string
	TLS     bool
	User    string `json:"saslUsername"`
	Cert    string `json:"tlsCertFile"`
}

// connectedAs returns the identities a service's log says it connected
// with, by component ("" for the process's own settings).
func connectedAs(t *testing.T, log string) map[string]identity {
	t.Helper()
	out := map[string]identity{}
	for line := range strings.Lines(log) {
		var rec struct {
			Msg, Component string
			Kafka          identity
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "connecting to Kafka" {
			out[rec.Component] = rec.Kafka
		}
	}
	return out
}

// lineAt returns the line of s holding byte i.
func lineAt(s string, i int) string {
	start := strings.LastIndexByte(s[:i], '\n') + 1
	end := strings.IndexByte(s[i:], '\n')
	if end < 0 {
		return s[start:]
	}
	return s[start : i+end]
}

// noSecrets fails the test if out holds any of secrets.
func noSecrets(t *testing.T, name, out string, secrets ...string) {
	t.Helper()
	for _, sec := range secrets {
		if sec != "" && strings.Contains(out, sec) {
			t.Errorf("%s printed a password", name)
		}
	}
}

// secureAdmin is the settings of the cluster's administrator over SASL_SSL
// under prefix: how infrastructure creates the topics and the ACLs.
func secureAdmin(t *testing.T, k *testenv.SecureKafka, prefix string) kafka.Settings {
	t.Helper()
	s, err := config.Parse(config.FromMap(k.Env(t, testenv.ListenerSASLSSL, testenv.SecureAdmin, kafka.MechanismSCRAMSHA512, prefix)), kafka.Load)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// secureEnv returns the variables that connect a service as user over
// listener under prefix, as a deployment hands them over: the password in
// a file (KAFKA_SASL_PASSWORD_FILE), the CA in KAFKA_TLS_CA_FILE, over
// mutual TLS a certificate issued to user.
func secureEnv(t *testing.T, k *testenv.SecureKafka, listener, user, prefix string) map[string]string {
	t.Helper()
	env := k.Env(t, listener, user, kafka.MechanismSCRAMSHA512, prefix)
	if pw, ok := env["KAFKA_SASL_PASSWORD"]; ok {
		delete(env, "KAFKA_SASL_PASSWORD")
		env["KAFKA_SASL_PASSWORD_FILE"] = testenv.SecretFile(t, user+"-password", pw+"\n")
	}
	return env
}

// roleEnv returns the credentials of env under role's variables
// (KAFKA_<role>_SASL_USERNAME, ...; kafka.LoadRole).
func roleEnv(env map[string]string, role string) map[string]string {
	out := map[string]string{}
	for _, cred := range []string{"SASL_USERNAME", "SASL_PASSWORD", "SASL_PASSWORD_FILE", "TLS_CERT_FILE", "TLS_KEY_FILE"} {
		if v, ok := env["KAFKA_"+cred]; ok {
			out["KAFKA_"+role+"_"+cred] = v
		}
	}
	return out
}

// testBadCredentials starts the relay and product-consumers against the
// secure broker with one credential each that cannot work: each must exit
// non-zero at start, its last record naming the variable to fix, without
// ever printing a password, and without its admin endpoint ever answering
// 200 (a process retrying in a loop that looks healthy is what this rules
// out).
func testBadCredentials(t *testing.T, k *testenv.SecureKafka) {
	const prefix = "bad."
	const wrong = "not-the-password-3f9a"
	other := testenv.NewCA(t, "not-the-brokers")
	wrongFile := testenv.SecretFile(t, "wrong-password", wrong+"\n")
	missing := filepath.Join(t.TempDir(), "no-such-key.pem")
	dbURL, redisURL := testenv.DatabaseURL(t), testenv.RedisURL(t)
	saslSSL := func(user string) map[string]string { return secureEnv(t, k, testenv.ListenerSASLSSL, user, prefix) }
	mtls := func(user string) map[string]string { return secureEnv(t, k, testenv.ListenerMTLS, user, prefix) }
	with := func(env map[string]string, kv ...string) map[string]string {
		out := maps.Clone(env)
		for i := 0; i < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	consumers := func(env map[string]string) map[string]string { return with(env, "REDIS_URL", redisURL) }
	withReclaimer := saslSSL("consumers")
	maps.Copy(withReclaimer, roleEnv(saslSSL("reclaimer"), "RECLAIMER"))
	for _, tc := range []struct {
		name, program string
		env           map[string]string
		// want is what the error the process ends with says: the
		// variable to fix, and what is wrong.
		want string
	}{
		{name: "relay, a wrong password", program: "outbox-relay",
			env:  with(saslSSL("relay"), "KAFKA_SASL_PASSWORD_FILE", wrongFile),
			want: "KAFKA_SASL_PASSWORD_FILE / KAFKA_SASL_USERNAME: authentication failed"},
		{name: "relay, a CA that did not sign the broker", program: "outbox-relay",
			env:  with(saslSSL("relay"), "KAFKA_TLS_CA_FILE", other.File),
			want: "KAFKA_TLS_CA_FILE: the broker's certificate is signed by an unknown authority"},
		{name: "relay, the key file missing", program: "outbox-relay",
			env:  with(mtls("relay"), "KAFKA_TLS_KEY_FILE", missing),
			want: "KAFKA_TLS_KEY_FILE: open " + missing + ": no such file or directory"},
		{name: "product-consumers, a wrong password", program: "product-consumers",
			env:  consumers(with(saslSSL("consumers"), "KAFKA_SASL_PASSWORD_FILE", "", "KAFKA_SASL_PASSWORD", wrong)),
			want: "KAFKA_SASL_PASSWORD / KAFKA_SASL_USERNAME: authentication failed"},
		{name: "product-consumers, the reclaimer's wrong password", program: "product-consumers",
			env:  consumers(with(withReclaimer, "KAFKA_RECLAIMER_SASL_PASSWORD_FILE", wrongFile)),
			want: "KAFKA_RECLAIMER_SASL_PASSWORD_FILE / KAFKA_RECLAIMER_SASL_USERNAME: authentication failed"},
		{name: "product-consumers, a CA that did not sign the broker", program: "product-consumers",
			env:  consumers(with(mtls("consumers"), "KAFKA_TLS_CA_FILE", other.File)),
			want: "KAFKA_TLS_CA_FILE: the broker's certificate is signed by an unknown authority"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := with(tc.env, "DATABASE_URL", dbURL, "ADMIN_ADDR", freeAddr(t))
			for name, v := range env {
				if v == "" {
					delete(env, name) // unset, not empty
				}
			}
			r := runToExit(t, tc.program, env, 40*time.Second)
			t.Logf("%s exited with status %d after %v", tc.program, r.code, r.took.Round(time.Millisecond))
			if r.code == 0 {
				t.Errorf("exit status 0, want a failure")
			}
			if len(r.answered) > 0 {
				t.Errorf("its admin endpoint answered 200 on %v before it exited", r.answered)
			}
			failed := lastFailure(t, tc.program, r.out)
			if !strings.Contains(failed, tc.want) {
				t.Errorf("it failed with %q\nwant it to say %q", failed, tc.want)
			}
			noSecrets(t, tc.program, string(r.out), append(slices.Collect(maps.Values(k.Passwords)), wrong)...)
			if t.Failed() {
				t.Logf("%s output:\n%s", tc.program, r.out)
			}
		})
	}
}

// exit is how a process that was expected to stop ended.
type exit struct {
	code     int
	took     time.Duration
	out      []byte
	answered []string // admin paths that answered 200 while it ran
}

// runToExit runs a service binary with env until it exits, failing the
// test if it runs longer than limit, and meanwhile asks its admin address
// (env's ADMIN_ADDR) for /healthz and /readyz.
func runToExit(t *testing.T, program string, env map[string]string, limit time.Duration) exit {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binaries(t).Dir, program))
	cmd.Env = os.Environ()
	for name, v := range env {
		cmd.Env = append(cmd.Env, name+"="+v)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	began := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var (
		mu       sync.Mutex
		answered []string
		polls    sync.WaitGroup
	)
	client := &http.Client{Timeout: time.Second}
	polls.Go(func() {
		for {
			for _, path := range []string{"/healthz", "/readyz"} {
				req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+env["ADMIN_ADDR"]+path, nil)
				if err != nil {
					t.Error(err)
					return
				}
				if resp, err := client.Do(req); err == nil {
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						mu.Lock()
						answered = append(answered, path)
						mu.Unlock()
					}
				}
			}
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
	err := cmd.Wait()
	took := time.Since(began)
	close(done)
	polls.Wait()
	if ctx.Err() != nil {
		t.Fatalf("%s still ran after %v: a service with bad credentials must stop at start\n%s", program, limit, out.Bytes())
	}
	code := 0
	var exitErr *exec.ExitError
	switch {
	case errors.As(err, &exitErr):
		code = exitErr.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return exit{code: code, took: took, out: out.Bytes(), answered: answered}
}

// lastFailure returns the error of the "<program> failed" record in a
// service's JSON log, failing the test if there is none.
func lastFailure(t *testing.T, program string, out []byte) string {
	t.Helper()
	var failed string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var rec struct{ Level, Msg, Error string }
		if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Level == "ERROR" && rec.Msg == program+" failed" {
			failed = rec.Error
		}
	}
	if failed == "" {
		t.Errorf("%s logged no %q record", program, program+" failed")
	}
	return failed
}
