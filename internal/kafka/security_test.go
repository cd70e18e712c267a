package kafka_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"

	"github.com/loopers/commerce-pipeline/internal/config"
	"github.com/loopers/commerce-pipeline/internal/kafka"
	"github.com/loopers/commerce-pipeline/internal/testenv"
)

// files are the certificates, keys and password files of the Load tests.
type files struct {
	ca, otherCA              *testenv.CA
	client, other, expired   testenv.Issued
	notPEM, pwNewline, empty string
}

func newFiles(t *testing.T) files {
	t.Helper()
	f := files{ca: testenv.NewCA(t, "load"), otherCA: testenv.NewCA(t, "other")}
	f.client = f.ca.Issue(t, "relay")
	f.other = f.otherCA.Issue(t, "relay")
	f.expired = f.ca.IssueWith(t, "old", nil, func(c *x509.Certificate) {
		c.NotBefore, c.NotAfter = time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour)
	})
	write := func(name, content string) string { return testenv.SecretFile(t, name, content) }
	f.notPEM = write("not.pem", "this is no certificate\n")
	f.pwNewline = write("password", "s3cret pass\n")
	f.empty = write("empty", "\n")
	return f
}

// with returns base with more variables.
func with(base map[string]string, kv ...string) map[string]string {
	out := maps.Clone(base)
	for i := 0; i < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// TestLoadSecurity: the TLS and SASL variables become the settings, and
// every misconfiguration is refused at start naming its variable, without
// quoting a secret.
func TestLoadSecurity(t *testing.T) {
	t.Parallel()
	f := newFiles(t)
	brokers := map[string]string{"KAFKA_BROKERS": "k:9093"}
	tlsOn := with(brokers, "KAFKA_TLS", "true", "KAFKA_TLS_CA_FILE", f.ca.File)
	scram := with(brokers, "KAFKA_SASL_MECHANISM", "SCRAM-SHA-512", "KAFKA_SASL_USERNAME", "relay")
	for _, tc := range []struct {
		name     string
		env      map[string]string
		wantTLS  *kafka.TLS
		wantSASL *kafka.SASL
		wantErr  []string // each a variable and what is wrong with it
	}{
		{name: "plaintext", env: brokers},
		{name: "TLS on the system roots", env: with(brokers, "KAFKA_TLS", "true"), wantTLS: &kafka.TLS{}},
		{name: "TLS with a CA, a client certificate and a server name",
			env: with(tlsOn, "KAFKA_TLS_CERT_FILE", f.client.Cert, "KAFKA_TLS_KEY_FILE", f.client.Key, "KAFKA_TLS_SERVER_NAME", "kafka.internal"),
			wantTLS: &kafka.TLS{CAFile: f.ca.File, CA: f.ca.PEM, CertFile: f.client.Cert, KeyFile: f.client.Key,
				Cert: f.client.CertPEM, Key: config.Secret(f.client.KeyPEM), ServerName: "kafka.internal"}},
		{name: "SCRAM with a password", env: with(scram, "KAFKA_SASL_PASSWORD", " with spaces "),
			wantSASL: &kafka.SASL{Mechanism: "SCRAM-SHA-512", Username: "relay", Password: " with spaces "}},
		{name: "a password file loses its trailing newline", env: with(scram, "KAFKA_SASL_PASSWORD_FILE", f.pwNewline),
			wantSASL: &kafka.SASL{Mechanism: "SCRAM-SHA-512", Username: "relay", Password: "s3cret pass", PasswordFile: f.pwNewline}},
		{name: "PLAIN over TLS", env: with(tlsOn, "KAFKA_SASL_MECHANISM", "PLAIN", "KAFKA_SASL_USERNAME", "u", "KAFKA_SASL_PASSWORD", "p"),
			wantTLS: &kafka.TLS{CAFile: f.ca.File, CA: f.ca.PEM}, wantSASL: &kafka.SASL{Mechanism: "PLAIN", Username: "u", Password: "p"}},

		{name: "KAFKA_TLS not a boolean", env: with(brokers, "KAFKA_TLS", "yes please"), wantErr: []string{"KAFKA_TLS: must be true or false"}},
		{name: "CA file missing", env: with(tlsOn, "KAFKA_TLS_CA_FILE", "/nonexistent/ca.pem"),
			wantErr: []string{"KAFKA_TLS_CA_FILE: open /nonexistent/ca.pem: no such file"}},
		{name: "CA file not PEM", env: with(tlsOn, "KAFKA_TLS_CA_FILE", f.notPEM), wantErr: []string{"KAFKA_TLS_CA_FILE: " + f.notPEM + ": holds no PEM certificate"}},
		{name: "CA file holds a key", env: with(tlsOn, "KAFKA_TLS_CA_FILE", f.client.Key),
			wantErr: []string{`KAFKA_TLS_CA_FILE: ` + f.client.Key + `: holds a "PRIVATE KEY" PEM block, want certificates only`}},
		{name: "certificate without its key", env: with(tlsOn, "KAFKA_TLS_CERT_FILE", f.client.Cert),
			wantErr: []string{"KAFKA_TLS_KEY_FILE: is required with KAFKA_TLS_CERT_FILE"}},
		{name: "key without its certificate", env: with(tlsOn, "KAFKA_TLS_KEY_FILE", f.client.Key),
			wantErr: []string{"KAFKA_TLS_CERT_FILE: is required with KAFKA_TLS_KEY_FILE"}},
		{name: "key file missing", env: with(tlsOn, "KAFKA_TLS_CERT_FILE", f.client.Cert, "KAFKA_TLS_KEY_FILE", "/nonexistent/key.pem"),
			wantErr: []string{"KAFKA_TLS_KEY_FILE: open /nonexistent/key.pem: no such file"}},
		{name: "certificate file not PEM", env: with(tlsOn, "KAFKA_TLS_CERT_FILE", f.notPEM, "KAFKA_TLS_KEY_FILE", f.client.Key),
			wantErr: []string{"KAFKA_TLS_CERT_FILE: " + f.notPEM + ": holds no PEM certificate"}},
		{name: "key not the certificate's", env: with(tlsOn, "KAFKA_TLS_CERT_FILE", f.client.Cert, "KAFKA_TLS_KEY_FILE", f.other.Key),
			wantErr: []string{"KAFKA_TLS_KEY_FILE: " + f.other.Key + ": the private key does not match the certificate of KAFKA_TLS_CERT_FILE"}},
		{name: "key file holds a certificate", env: with(tlsOn, "KAFKA_TLS_CERT_FILE", f.client.Cert, "KAFKA_TLS_KEY_FILE", f.client.Cert),
			wantErr: []string{"KAFKA_TLS_KEY_FILE: " + f.client.Cert + ": tls: found a certificate rather than a key"}},
		{name: "expired certificate", env: with(tlsOn, "KAFKA_TLS_CERT_FILE", f.expired.Cert, "KAFKA_TLS_KEY_FILE", f.expired.Key),
			wantErr: []string{"KAFKA_TLS_CERT_FILE: " + f.expired.Cert + ": the certificate expired at"}},
		{name: "TLS settings without KAFKA_TLS",
			env:     with(brokers, "KAFKA_TLS_CA_FILE", f.ca.File, "KAFKA_TLS_CERT_FILE", f.client.Cert, "KAFKA_TLS_KEY_FILE", f.client.Key, "KAFKA_TLS_SERVER_NAME", "k"),
			wantErr: []string{"KAFKA_TLS_CA_FILE: is set but KAFKA_TLS is not true", "KAFKA_TLS_CERT_FILE: is set but", "KAFKA_TLS_KEY_FILE: is set but", "KAFKA_TLS_SERVER_NAME: is set but"}},
		{name: "unknown mechanism", env: with(scram, "KAFKA_SASL_MECHANISM", "GSSAPI", "KAFKA_SASL_PASSWORD", "p"),
			wantErr: []string{`KAFKA_SASL_MECHANISM: must be one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, got "GSSAPI"`}},
		{name: "SASL without a username", env: with(brokers, "KAFKA_SASL_MECHANISM", "SCRAM-SHA-256", "KAFKA_SASL_PASSWORD", "p"),
			wantErr: []string{"KAFKA_SASL_USERNAME: is required when KAFKA_SASL_MECHANISM is set"}},
		{name: "SASL without a password", env: scram,
			wantErr: []string{"KAFKA_SASL_PASSWORD / KAFKA_SASL_PASSWORD_FILE: one of them is required"}},
		{name: "both a password and a password file", env: with(scram, "KAFKA_SASL_PASSWORD", "p", "KAFKA_SASL_PASSWORD_FILE", f.pwNewline),
			wantErr: []string{"KAFKA_SASL_PASSWORD / KAFKA_SASL_PASSWORD_FILE: set one of them, not both"}},
		{name: "password file missing", env: with(scram, "KAFKA_SASL_PASSWORD_FILE", "/nonexistent/pw"),
			wantErr: []string{"KAFKA_SASL_PASSWORD_FILE: open /nonexistent/pw: no such file"}},
		{name: "password file empty", env: with(scram, "KAFKA_SASL_PASSWORD_FILE", f.empty),
			wantErr: []string{"KAFKA_SASL_PASSWORD_FILE: " + f.empty + " is empty"}},
		{name: "a login without a mechanism", env: with(brokers, "KAFKA_SASL_USERNAME", "relay", "KAFKA_SASL_PASSWORD", "hunter2"),
			wantErr: []string{"KAFKA_SASL_USERNAME: is set but KAFKA_SASL_MECHANISM is empty", "KAFKA_SASL_PASSWORD: is set but KAFKA_SASL_MECHANISM is empty"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := config.Parse(config.FromMap(tc.env), kafka.Load)
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatalf("Load accepted %v", tc.env)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not say %q", err, w)
					}
				}
				if n := strings.Count(err.Error(), "\n") + 1; n != len(tc.wantErr) {
					t.Errorf("%d errors, want %d: %v", n, len(tc.wantErr), err)
				}
				noSecret(t, err.Error(), "hunter2", " with spaces ", string(f.client.KeyPEM[40:80]))
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantTLS, got.TLS); diff != "" {
				t.Errorf("TLS (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantSASL, got.SASL); diff != "" {
				t.Errorf("SASL (-want +got):\n%s", diff)
			}
		})
	}
}

func noSecret(t *testing.T, s string, secrets ...string) {
	t.Helper()
	for _, secret := range secrets {
		if strings.Contains(s, secret) {
			t.Errorf("%q shows the secret %q", s, secret)
		}
	}
}

// TestSecurityVars: -config-vars lists every security variable with its
// kind and default, and never a value.
func TestSecurityVars(t *testing.T) {
	t.Parallel()
	l := config.New(config.FromMap(map[string]string{"KAFKA_BROKERS": "k:9093", "KAFKA_SASL_MECHANISM": "PLAIN",
		"KAFKA_SASL_USERNAME": "u", "KAFKA_SASL_PASSWORD": "hunter2"}))
	kafka.Load(l)
	got, err := json.Marshal(l.Vars())
	if err != nil {
		t.Fatal(err)
	}
	noSecret(t, string(got), "hunter2")
	want := []config.Var{
		{Name: "KAFKA_BROKERS", Kind: "List", Required: true},
		{Name: "KAFKA_PREFIX", Kind: "String"},
		{Name: "KAFKA_TLS", Kind: "Bool", Default: "false"},
		{Name: "KAFKA_TLS_CA_FILE", Kind: "String"},
		{Name: "KAFKA_TLS_CERT_FILE", Kind: "String"},
		{Name: "KAFKA_TLS_KEY_FILE", Kind: "String"},
		{Name: "KAFKA_TLS_SERVER_NAME", Kind: "String"},
		{Name: "KAFKA_SASL_MECHANISM", Kind: "OneOf", Allowed: []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}},
		{Name: "KAFKA_SASL_USERNAME", Kind: "String"},
		{Name: "KAFKA_SASL_PASSWORD", Kind: "Secret"},
		{Name: "KAFKA_SASL_PASSWORD_FILE", Kind: "String"},
	}
	if diff := cmp.Diff(want, l.Vars()); diff != "" {
		t.Errorf("Vars (-want +got):\n%s", diff)
	}
}

// TestSettingsNeverShowSecrets: the password and the private key stay out
// of every way the settings are printed or logged.
func TestSettingsNeverShowSecrets(t *testing.T) {
	t.Parallel()
	f := newFiles(t)
	s, err := config.Parse(config.FromMap(map[string]string{"KAFKA_BROKERS": "k:9093", "KAFKA_TLS": "true",
		"KAFKA_TLS_CA_FILE": f.ca.File, "KAFKA_TLS_CERT_FILE": f.client.Cert, "KAFKA_TLS_KEY_FILE": f.client.Key,
		"KAFKA_SASL_MECHANISM": "SCRAM-SHA-512", "KAFKA_SASL_USERNAME": "relay", "KAFKA_SASL_PASSWORD": "hunter2"}), kafka.Load)
	if err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("start", "kafka", s, "tls", s.TLS, "sasl", s.SASL)
	asJSON, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	key := string(f.client.KeyPEM[40:80]) // a piece of the key's base64
	for name, out := range map[string]string{
		"%v": fmt.Sprintf("%v", s), "%+v": fmt.Sprintf("%+v", s), "%#v": fmt.Sprintf("%#v", s), "Sprint": fmt.Sprint(s),
		"%+v of SASL": fmt.Sprintf("%+v", *s.SASL), "%#v of SASL": fmt.Sprintf("%#v", s.SASL), "%x of the password": fmt.Sprintf("%x", s.SASL.Password),
		"%q of the password": fmt.Sprintf("%q", s.SASL.Password), "%+v of TLS": fmt.Sprintf("%+v", *s.TLS), "%10s of the key": fmt.Sprintf("%10s", s.TLS.Key),
		"slog": logged.String(), "json": string(asJSON),
	} {
		noSecret(t, out, "hunter2", fmt.Sprintf("%x", "hunter2"), key)
		if name == "%v" && !strings.Contains(out, `SASL SCRAM-SHA-512 as "relay" (password [redacted])`) {
			t.Errorf("%s: %s, want the mechanism and the user", name, out)
		}
	}
	if s.SASL.Password.Reveal() != "hunter2" {
		t.Error("Reveal does not return the password")
	}
}

// TestWarnings: PLAIN without TLS is allowed but sends the password in
// clear text; nothing else warns.
func TestWarnings(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		s    kafka.Settings
		want []string
	}{
		{name: "PLAIN without TLS", s: kafka.Settings{SASL: &kafka.SASL{Mechanism: kafka.MechanismPlain}},
			want: []string{"KAFKA_SASL_MECHANISM=PLAIN without KAFKA_TLS=true sends the password in clear text: use TLS, or SCRAM-SHA-512"}},
		{name: "PLAIN over TLS", s: kafka.Settings{TLS: &kafka.TLS{}, SASL: &kafka.SASL{Mechanism: kafka.MechanismPlain}}},
		{name: "SCRAM without TLS", s: kafka.Settings{SASL: &kafka.SASL{Mechanism: kafka.MechanismSCRAMSHA512}}},
		{name: "nothing", s: kafka.Settings{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tc.want, tc.s.Warnings()); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
}

// TestClientConfigs: sarama's configuration and franz-go's options carry the
// same TLS and SASL, and sarama's stays valid.
func TestClientConfigs(t *testing.T) {
	t.Parallel()
	f := newFiles(t)
	tlsEnv := map[string]string{"KAFKA_BROKERS": "k:9093", "KAFKA_TLS": "true", "KAFKA_TLS_CA_FILE": f.ca.File,
		"KAFKA_TLS_CERT_FILE": f.client.Cert, "KAFKA_TLS_KEY_FILE": f.client.Key, "KAFKA_TLS_SERVER_NAME": "kafka.internal"}
	for _, mechanism := range []string{"", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"} {
		t.Run("mechanism "+mechanism, func(t *testing.T) {
			t.Parallel()
			env := tlsEnv
			if mechanism != "" {
				env = with(tlsEnv, "KAFKA_SASL_MECHANISM", mechanism, "KAFKA_SASL_USERNAME", "relay", "KAFKA_SASL_PASSWORD", "pw")
			}
			s, err := config.Parse(config.FromMap(env), kafka.Load)
			if err != nil {
				t.Fatal(err)
			}
			c := s.Config("svc")
			if err := c.Validate(); err != nil {
				t.Fatalf("sarama: %v", err)
			}
			checkTLS(t, "sarama", c.Net.TLS.Enable, c.Net.TLS.Config)
			type login struct {
				Enable          bool
				Mechanism, User string
				Password        string
				SCRAM           bool
			}
			want := login{}
			if mechanism != "" {
				want = login{Enable: true, Mechanism: mechanism, User: "relay", Password: "pw", SCRAM: mechanism != "PLAIN"}
			}
			got := login{c.Net.SASL.Enable, string(c.Net.SASL.Mechanism), c.Net.SASL.User, c.Net.SASL.Password, c.Net.SASL.SCRAMClientGeneratorFunc != nil}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("sarama SASL (-want +got):\n%s", diff)
			}

			cl, err := kgo.NewClient(s.ClientOptions("svc")...)
			if err != nil {
				t.Fatalf("franz-go: %v", err)
			}
			defer cl.Close()
			tc, _ := cl.OptValue(kgo.DialTLSConfig).(*tls.Config)
			checkTLS(t, "franz-go", tc != nil, tc)
			var names []string
			for _, v := range cl.OptValues(kgo.SASL) {
				for _, m := range v.([]sasl.Mechanism) {
					names = append(names, m.Name())
				}
			}
			var wantNames []string
			if mechanism != "" {
				wantNames = []string{mechanism}
			}
			if diff := cmp.Diff(wantNames, names); diff != "" {
				t.Errorf("franz-go SASL (-want +got):\n%s", diff)
			}
		})
	}
}

func checkTLS(t *testing.T, client string, on bool, c *tls.Config) {
	t.Helper()
	if !on || c == nil {
		t.Fatalf("%s: TLS off", client)
	}
	if c.MinVersion != tls.VersionTLS12 || c.RootCAs == nil || len(c.Certificates) != 1 || c.ServerName != "kafka.internal" || c.InsecureSkipVerify {
		t.Errorf("%s TLS: min version %x, CA pool %v, %d certificates, server name %q, skip verify %v",
			client, c.MinVersion, c.RootCAs != nil, len(c.Certificates), c.ServerName, c.InsecureSkipVerify)
	}
}

// TestPlaintextConfigUnchanged: without the security variables the clients
// connect as before, in plaintext without SASL.
func TestPlaintextConfigUnchanged(t *testing.T) {
	t.Parallel()
	c := kafka.Settings{Brokers: []string{"k:9092"}}.Config("svc")
	if c.Net.TLS.Enable || c.Net.TLS.Config != nil || c.Net.SASL.Enable {
		t.Errorf("TLS %v (%v), SASL %v", c.Net.TLS.Enable, c.Net.TLS.Config, c.Net.SASL.Enable)
	}
	if n := len(kafka.Settings{Brokers: []string{"k:9092"}}.ClientOptions("svc")); n != 2 {
		t.Errorf("%d franz-go options, want the brokers and the client id", n)
	}
}

// TestLoadRole: a role's credentials replace the process's whole, fall
// back to them when unset, and are checked as strictly.
func TestLoadRole(t *testing.T) {
	t.Parallel()
	f := newFiles(t)
	scram := map[string]string{"KAFKA_BROKERS": "k:9093", "KAFKA_TLS": "true", "KAFKA_TLS_CA_FILE": f.ca.File,
		"KAFKA_SASL_MECHANISM": "SCRAM-SHA-512", "KAFKA_SASL_USERNAME": "consumers", "KAFKA_SASL_PASSWORD": "pw-c"}
	mtls := map[string]string{"KAFKA_BROKERS": "k:9093", "KAFKA_TLS": "true", "KAFKA_TLS_CA_FILE": f.ca.File,
		"KAFKA_TLS_CERT_FILE": f.client.Cert, "KAFKA_TLS_KEY_FILE": f.client.Key}
	plain := map[string]string{"KAFKA_BROKERS": "k:9092"}
	reclaimer := f.ca.Issue(t, "reclaimer")
	type both struct{ Base, Role kafka.Settings }
	load := func(l *config.Loader) both {
		base := kafka.Load(l)
		return both{base, kafka.LoadRole(l, base, "RECLAIMER")}
	}
	for _, tc := range []struct {
		name     string
		env      map[string]string
		wantRole func(base kafka.Settings) kafka.Settings
		wantErr  []string
	}{
		{name: "unset: the process's credentials", env: scram, wantRole: func(b kafka.Settings) kafka.Settings { return b }},
		{name: "a login of its own", env: with(scram, "KAFKA_RECLAIMER_SASL_USERNAME", "reclaimer", "KAFKA_RECLAIMER_SASL_PASSWORD_FILE", f.pwNewline),
			wantRole: func(b kafka.Settings) kafka.Settings {
				b.Role = "RECLAIMER"
				b.SASL = &kafka.SASL{Mechanism: "SCRAM-SHA-512", Username: "reclaimer", Password: "s3cret pass", PasswordFile: f.pwNewline}
				return b
			}},
		{name: "a certificate of its own", env: with(mtls, "KAFKA_RECLAIMER_TLS_CERT_FILE", reclaimer.Cert, "KAFKA_RECLAIMER_TLS_KEY_FILE", reclaimer.Key),
			wantRole: func(b kafka.Settings) kafka.Settings {
				b.Role = "RECLAIMER"
				t := *b.TLS
				t.CertFile, t.KeyFile, t.Cert, t.Key = reclaimer.Cert, reclaimer.Key, reclaimer.CertPEM, config.Secret(reclaimer.KeyPEM)
				b.TLS = &t
				return b
			}},
		{name: "a username without a password", env: with(scram, "KAFKA_RECLAIMER_SASL_USERNAME", "reclaimer"),
			wantErr: []string{"KAFKA_RECLAIMER_SASL_PASSWORD / KAFKA_RECLAIMER_SASL_PASSWORD_FILE: one of them is required"}},
		{name: "a login where the process uses no SASL", env: with(plain, "KAFKA_RECLAIMER_SASL_USERNAME", "r", "KAFKA_RECLAIMER_SASL_PASSWORD", "hunter2"),
			wantErr: []string{"KAFKA_RECLAIMER_SASL_USERNAME: is set but KAFKA_SASL_MECHANISM is empty", "KAFKA_RECLAIMER_SASL_PASSWORD: is set but"}},
		{name: "a certificate where the process presents none", env: with(scram, "KAFKA_RECLAIMER_TLS_CERT_FILE", reclaimer.Cert, "KAFKA_RECLAIMER_TLS_KEY_FILE", reclaimer.Key,
			"KAFKA_RECLAIMER_SASL_USERNAME", "r", "KAFKA_RECLAIMER_SASL_PASSWORD", "p"),
			wantErr: []string{"KAFKA_RECLAIMER_TLS_CERT_FILE: is set but KAFKA_TLS_CERT_FILE is not", "KAFKA_RECLAIMER_TLS_KEY_FILE: is set but"}},
		{name: "a key without its certificate", env: with(mtls, "KAFKA_RECLAIMER_TLS_KEY_FILE", reclaimer.Key),
			wantErr: []string{"KAFKA_RECLAIMER_TLS_CERT_FILE: is required with KAFKA_RECLAIMER_TLS_KEY_FILE"}},
		{name: "a login alone where the process authenticates by certificate", env: with(mtls, "KAFKA_RECLAIMER_SASL_USERNAME", "r", "KAFKA_RECLAIMER_SASL_PASSWORD", "hunter2"),
			wantErr: []string{"KAFKA_RECLAIMER_SASL_USERNAME: is set but KAFKA_SASL_MECHANISM is empty",
				"KAFKA_RECLAIMER_TLS_CERT_FILE: is required: the process presents a certificate (KAFKA_TLS_CERT_FILE), so the role needs its own"}},
		{name: "a key not its certificate's", env: with(mtls, "KAFKA_RECLAIMER_TLS_CERT_FILE", reclaimer.Cert, "KAFKA_RECLAIMER_TLS_KEY_FILE", f.client.Key),
			wantErr: []string{"KAFKA_RECLAIMER_TLS_KEY_FILE: " + f.client.Key + ": the private key does not match the certificate of KAFKA_RECLAIMER_TLS_CERT_FILE"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := config.Parse(config.FromMap(tc.env), load)
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatalf("accepted %v", tc.env)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not say %q", err, w)
					}
				}
				noSecret(t, err.Error(), "hunter2")
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantRole(got.Base), got.Role); diff != "" {
				t.Errorf("role settings (-want +got):\n%s", diff)
			}
		})
	}
}

// TestHandBuiltBadKeyPair: a TLS built without Load whose key does not
// parse fails the handshake saying which variables to look at, rather than
// connecting without the certificate.
func TestHandBuiltBadKeyPair(t *testing.T) {
	t.Parallel()
	s := kafka.Settings{Brokers: []string{"k:9093"}, TLS: &kafka.TLS{Cert: []byte("not a certificate"), Key: "not a key"}}
	c := s.Config("svc").Net.TLS.Config
	if c.GetClientCertificate == nil || len(c.Certificates) != 0 {
		t.Fatalf("GetClientCertificate set %v, %d certificates", c.GetClientCertificate != nil, len(c.Certificates))
	}
	_, err := c.GetClientCertificate(&tls.CertificateRequestInfo{})
	if err == nil || !strings.HasPrefix(err.Error(), "KAFKA_TLS_CERT_FILE / KAFKA_TLS_KEY_FILE: ") {
		t.Errorf("error %v, want one naming the variables", err)
	}
}

// TestString: the settings in a log line.
func TestString(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		s    kafka.Settings
		want string
	}{
		{kafka.Settings{Brokers: []string{"a:9092", "b:9092"}, Prefix: "staging."}, `brokers a:9092,b:9092, prefix "staging.", TLS off, SASL off`},
		{kafka.Settings{Brokers: []string{"a:9093"}, TLS: &kafka.TLS{ServerName: "kafka"}, SASL: &kafka.SASL{Mechanism: "PLAIN", Username: "u", Password: "p"}, Role: "RECLAIMER"},
			`brokers a:9093, prefix "", TLS (CA the system roots, server name kafka), SASL PLAIN as "u" (password [redacted]), role RECLAIMER`},
	} {
		if got := tc.s.String(); got != tc.want {
			t.Errorf("String() = %s\nwant %s", got, tc.want)
		}
	}
}
