package deploy_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/loopers/commerce-pipeline/internal/service"
)

// secret is the password every case hides somewhere in the configuration.
const secret = "hunter2-never-shown"

// TestSecretsNeverShow starts every binary with passwords in its
// configuration, given as variables and as files (the *_FILE variables), in
// ways that make it fail at start (nothing answers on the addresses, or the
// Kafka "broker" hangs up at once), and reads everything it printed, and its
// -config-vars output: the password appears in neither.
func TestSecretsNeverShow(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	closed := closedPort(t)
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	dbURL := "postgres://app:" + secret + "@" + closed + "/app?sslmode=disable&connect_timeout=2"
	redisURL := "redis://:" + secret + "@" + closed + "/0"
	// A broker that hangs up fails the start-up check at once; one that
	// refuses connections (the closed port) is waited for, CheckTimeout
	// (30 s), as a broker still starting: that path's case is the slow one.
	kafka := map[string]string{"KAFKA_BROKERS": hangUp(t), "KAFKA_SASL_MECHANISM": "SCRAM-SHA-512", "KAFKA_SASL_USERNAME": "relay"}
	starting := with(kafka, map[string]string{"KAFKA_BROKERS": closed})
	cases := []struct {
		name, program string
		env           map[string]string
	}{
		{"commerce-api, the URLs as variables", "commerce-api", map[string]string{"DATABASE_URL": dbURL, "REDIS_URL": redisURL}},
		{"commerce-api, the URLs from files", "commerce-api", map[string]string{"DATABASE_URL_FILE": write("api-db", dbURL), "REDIS_URL_FILE": write("api-redis", redisURL)}},
		{"outbox-relay, the password as a variable", "outbox-relay", with(kafka, map[string]string{"DATABASE_URL": dbURL, "KAFKA_SASL_PASSWORD": secret})},
		{"outbox-relay, everything from files", "outbox-relay", with(kafka, map[string]string{"DATABASE_URL_FILE": write("relay-db", dbURL), "KAFKA_SASL_PASSWORD_FILE": write("relay-pw", secret)})},
		{"product-consumers, as variables", "product-consumers", with(kafka, map[string]string{"DATABASE_URL": dbURL, "REDIS_URL": redisURL, "KAFKA_SASL_PASSWORD": secret,
			"KAFKA_RECLAIMER_SASL_USERNAME": "reclaimer", "KAFKA_RECLAIMER_SASL_PASSWORD": secret})},
		{"product-consumers, from files", "product-consumers", with(kafka, map[string]string{"DATABASE_URL_FILE": write("pc-db", dbURL), "REDIS_URL_FILE": write("pc-redis", redisURL),
			"KAFKA_SASL_PASSWORD_FILE": write("pc-pw", secret), "KAFKA_RECLAIMER_SASL_USERNAME": "reclaimer", "KAFKA_RECLAIMER_SASL_PASSWORD_FILE": write("pc-rpw", secret)})},
		{"outbox-relay, a broker still starting", "outbox-relay", with(starting, map[string]string{"DATABASE_URL": dbURL, "KAFKA_SASL_PASSWORD": secret})},
		{"product-consumers, a broker still starting", "product-consumers", with(starting, map[string]string{"DATABASE_URL": dbURL, "REDIS_URL": redisURL, "KAFKA_SASL_PASSWORD": secret,
			"KAFKA_RECLAIMER_SASL_USERNAME": "reclaimer", "KAFKA_RECLAIMER_SASL_PASSWORD": secret})},
		{"migrate, from a file", "migrate", map[string]string{"DATABASE_URL_FILE": write("migrate-db", dbURL), "MIGRATE_CONNECT_TIMEOUT": "2s"}},
		{"migrate, as a variable", "migrate", map[string]string{"DATABASE_URL": dbURL, "MIGRATE_CONNECT_TIMEOUT": "2s"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.env["KAFKA_BROKERS"] == closed && testing.Short() {
				t.Skip("waits out the 30 s Kafka start-up check: skipped under -short (make test runs it)")
			}
			for _, args := range [][]string{nil, {service.ConfigVarsFlag}} {
				ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
				defer cancel()
				cmd := exec.CommandContext(ctx, binary(t, tc.program), args...)
				cmd.Env = []string{"PATH=/usr/bin:/bin", "HTTP_ADDR=127.0.0.1:0", "ADMIN_ADDR=127.0.0.1:0"}
				for k, v := range tc.env {
					cmd.Env = append(cmd.Env, k+"="+v)
				}
				var out bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &out
				err := cmd.Run()
				if args == nil {
					var exitErr *exec.ExitError
					if !errors.As(err, &exitErr) {
						t.Fatalf("want a start-up failure (nothing answers), got %v:\n%s", err, out.String())
					}
				} else if err != nil {
					t.Fatalf("%s: %v\n%s", service.ConfigVarsFlag, err, out.String())
				}
				if strings.Contains(out.String(), secret) {
					t.Errorf("%s %v printed the password:\n%s", tc.program, args, out.String())
				}
			}
		})
	}
}

func with(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}
