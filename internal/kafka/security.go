package kafka

import (
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/loopers/commerce-pipeline/internal/config"
)

// The SASL mechanisms the clients speak (KAFKA_SASL_MECHANISM).
const (
	MechanismPlain       = "PLAIN"
	MechanismSCRAMSHA256 = "SCRAM-SHA-256"
	MechanismSCRAMSHA512 = "SCRAM-SHA-512"
)

// The variables of the connection's security, beside KAFKA_BROKERS and
// KAFKA_PREFIX. The credentials (client certificate and key, SASL user and
// password) are read again under a role's name by LoadRole.
const (
	varTLS        = "KAFKA_TLS"
	varCAFile     = "KAFKA_TLS_CA_FILE"
	varServerName = "KAFKA_TLS_SERVER_NAME"
	varMechanism  = "KAFKA_SASL_MECHANISM"

	credCertFile     = "TLS_CERT_FILE"
	credKeyFile      = "TLS_KEY_FILE"
	credUsername     = "SASL_USERNAME"
	credPassword     = "SASL_PASSWORD"
	credPasswordFile = "SASL_PASSWORD_FILE"
)

// TLS is how the clients encrypt the connection and, with a certificate,
// authenticate by it (mutual TLS). Load reads the files once; the clients
// are built from the PEM held here.
type TLS struct {
	// CAFile (KAFKA_TLS_CA_FILE) is where CA came from, for logs.
	CAFile string
	// CA holds the PEM certificates of the authorities a broker's
	// certificate must chain to; empty: the system's roots.
	CA []byte
	// CertFile and KeyFile (KAFKA_TLS_CERT_FILE, KAFKA_TLS_KEY_FILE) are
	// where Cert and Key came from, for logs.
	CertFile, KeyFile string
	// Cert and Key are the client's certificate chain and private key in
	// PEM, both or neither: presented when a broker asks (ssl.client.auth).
	Cert []byte
	Key  config.Secret
	// ServerName (KAFKA_TLS_SERVER_NAME) is the name a broker's certificate
	// must carry; empty: the host of the address dialled.
	ServerName string
}

// SASL is how the clients authenticate after connecting.
type SASL struct {
	// Mechanism is MechanismPlain, MechanismSCRAMSHA256 or
	// MechanismSCRAMSHA512 (KAFKA_SASL_MECHANISM).
	Mechanism string
	// Username and Password (KAFKA_SASL_USERNAME; KAFKA_SASL_PASSWORD or the
	// content of KAFKA_SASL_PASSWORD_FILE) are the principal's credentials.
	Username string
	Password config.Secret
	// PasswordFile is where Password came from, for logs; empty when it came
	// from KAFKA_SASL_PASSWORD.
	PasswordFile string
}

// credVar names a credential's variable: KAFKA_SASL_PASSWORD, or under role
// RECLAIMER, KAFKA_RECLAIMER_SASL_PASSWORD.
func credVar(role, cred string) string {
	if role == "" {
		return "KAFKA_" + cred
	}
	return "KAFKA_" + role + "_" + cred
}

// loadSecurity reads every security variable (always all of them, so that
// Loader.Vars lists each whatever is set) and checks that they make sense
// together; each problem names its variable.
func loadSecurity(l *config.Loader) (*TLS, *SASL) {
	tlsOn := l.Bool(varTLS, false)
	caFile := l.String(varCAFile, "")
	certFile := l.String(credVar("", credCertFile), "")
	keyFile := l.String(credVar("", credKeyFile), "")
	serverName := l.String(varServerName, "")
	mechanism := l.OneOf(varMechanism, "", MechanismPlain, MechanismSCRAMSHA256, MechanismSCRAMSHA512)
	username := l.String(credVar("", credUsername), "")
	password := l.Secret(credVar("", credPassword))
	passwordFile := l.String(credVar("", credPasswordFile), "")

	var t *TLS
	if tlsOn {
		t = &TLS{CAFile: caFile, ServerName: serverName}
		if caFile != "" {
			t.CA = readCA(l, varCAFile, caFile)
		}
		t.CertFile, t.KeyFile, t.Cert, t.Key = readKeyPair(l, "", certFile, keyFile)
	} else {
		requireOff(l, varTLS+" is not true: set "+varTLS+"=true to use TLS", map[string]string{
			varCAFile: caFile, credVar("", credCertFile): certFile, credVar("", credKeyFile): keyFile, varServerName: serverName})
	}
	var s *SASL
	switch {
	case l.Failed(varMechanism):
	case mechanism == "":
		requireOff(l, varMechanism+" is empty: set it to use SASL", map[string]string{
			credVar("", credUsername): username, credVar("", credPassword): string(password), credVar("", credPasswordFile): passwordFile})
	default:
		s = &SASL{Mechanism: mechanism}
		s.Username, s.Password, s.PasswordFile = readLogin(l, "", username, password, passwordFile)
	}
	return t, s
}

// requireOff records an error for each of vars that is set although the
// feature it configures is off (why): a setting that silently does nothing
// would leave a connection without the security its operator meant.
func requireOff(l *config.Loader, why string, vars map[string]string) {
	for _, name := range []string{varCAFile, varServerName, credVar("", credCertFile), credVar("", credKeyFile),
		credVar("", credUsername), credVar("", credPassword), credVar("", credPasswordFile)} {
		if v, ok := vars[name]; ok && v != "" {
			l.Fail(name, "is set but %s", why)
		}
	}
}

// readCA reads and checks a CA bundle: one or more PEM certificates.
func readCA(l *config.Loader, name, path string) []byte {
	b, err := os.ReadFile(path)
	if err != nil {
		l.Fail(name, "%v", err)
		return nil
	}
	if _, err := parseCertificates(b); err != nil {
		l.Fail(name, "%s: %v", path, err)
		return nil
	}
	return b
}

// otherKey reports whether keyPEM holds a private key that parses (PKCS #1,
// PKCS #8 or SEC 1, as tls.X509KeyPair reads them) but is not the one of
// leaf's public key. tls.X509KeyPair says so only in its error's text.
func otherKey(leaf *x509.Certificate, keyPEM []byte) bool {
	for {
		var block *pem.Block
		block, keyPEM = pem.Decode(keyPEM)
		if block == nil {
			return false
		}
		if block.Type != "PRIVATE KEY" && !strings.HasSuffix(block.Type, " PRIVATE KEY") {
			continue
		}
		var key any
		var err error
		if key, err = x509.ParsePKCS1PrivateKey(block.Bytes); err != nil {
			if key, err = x509.ParsePKCS8PrivateKey(block.Bytes); err != nil {
				if key, err = x509.ParseECPrivateKey(block.Bytes); err != nil {
					return false
				}
			}
		}
		signer, ok := key.(crypto.Signer)
		if !ok {
			return false
		}
		pub, ok := signer.Public().(interface{ Equal(crypto.PublicKey) bool })
		return ok && !pub.Equal(leaf.PublicKey)
	}
}

// parseCertificates parses every block of a PEM file, which must all be
// certificates. An error names a block's type, never its content (the block
// may be a private key put in the wrong file).
func parseCertificates(b []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("holds a %q PEM block, want certificates only", block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d does not parse: %w", len(out)+1, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("holds no PEM certificate")
	}
	return out, nil
}

// readKeyPair reads a client certificate and its key (role's variables),
// both or neither, and checks that they belong together and that the
// certificate is valid now.
func readKeyPair(l *config.Loader, role, certFile, keyFile string) (string, string, []byte, config.Secret) {
	certVar, keyVar := credVar(role, credCertFile), credVar(role, credKeyFile)
	switch {
	case certFile == "" && keyFile == "":
		return "", "", nil, ""
	case keyFile == "":
		l.Fail(keyVar, "is required with %s: mutual TLS needs the certificate's private key", certVar)
		return "", "", nil, ""
	case certFile == "":
		l.Fail(certVar, "is required with %s: mutual TLS needs the key's certificate", keyVar)
		return "", "", nil, ""
	}
	cert, certErr := os.ReadFile(certFile)
	if certErr != nil {
		l.Fail(certVar, "%v", certErr)
	}
	key, keyErr := os.ReadFile(keyFile)
	if keyErr != nil {
		l.Fail(keyVar, "%v", keyErr)
	}
	if certErr != nil || keyErr != nil {
		return "", "", nil, ""
	}
	chain, err := parseCertificates(cert)
	if err != nil {
		l.Fail(certVar, "%s: %v", certFile, err)
		return "", "", nil, ""
	}
	// tls's errors are fixed sentences: none quotes the key.
	if _, err := tls.X509KeyPair(cert, key); err != nil {
		if otherKey(chain[0], key) {
			l.Fail(keyVar, "%s: the private key does not match the certificate of %s (%s)", keyFile, certVar, certFile)
		} else {
			l.Fail(keyVar, "%s: %v", keyFile, err)
		}
		return "", "", nil, ""
	}
	now := time.Now()
	switch leaf := chain[0]; {
	case now.After(leaf.NotAfter):
		l.Fail(certVar, "%s: the certificate expired at %s", certFile, leaf.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(leaf.NotBefore):
		l.Fail(certVar, "%s: the certificate is not valid before %s", certFile, leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	return certFile, keyFile, cert, config.Secret(key)
}

// readLogin checks a SASL login (role's variables): a username and exactly
// one of the password and the password file.
func readLogin(l *config.Loader, role, username string, password config.Secret, passwordFile string) (string, config.Secret, string) {
	userVar, passVar, fileVar := credVar(role, credUsername), credVar(role, credPassword), credVar(role, credPasswordFile)
	if username == "" {
		l.Fail(userVar, "is required when %s is set", varMechanism)
	}
	switch {
	case password != "" && passwordFile != "":
		l.Fail(passVar+" / "+fileVar, "set one of them, not both")
		return username, "", ""
	case password == "" && passwordFile == "":
		l.Fail(passVar+" / "+fileVar, "one of them is required when %s is set", varMechanism)
		return username, "", ""
	case passwordFile != "":
		b, err := os.ReadFile(passwordFile)
		if err != nil {
			l.Fail(fileVar, "%v", err)
			return username, "", ""
		}
		password = config.Secret(config.TrimNewline(string(b)))
		if password == "" {
			l.Fail(fileVar, "%s is empty", passwordFile)
		}
	}
	return username, password, passwordFile
}

// LoadRole reads the credentials of a second principal the same process
// uses for one part of its work, so that each part holds only its own
// permissions: product-consumers' reclaimer re-publishes dead letters to
// the event topics, which its consumers' principal may not write (see
// ACLs). The variables are the credential variables with the role in their
// name — for role RECLAIMER: KAFKA_RECLAIMER_SASL_USERNAME,
// KAFKA_RECLAIMER_SASL_PASSWORD or KAFKA_RECLAIMER_SASL_PASSWORD_FILE,
// KAFKA_RECLAIMER_TLS_CERT_FILE and KAFKA_RECLAIMER_TLS_KEY_FILE. The
// brokers, prefix, TLS, CA and mechanism are base's.
//
// When none of them is set the role connects as base does. When any is,
// the role's credentials are complete: a username and a password when base
// uses SASL, a certificate and a key when base presents one, and nothing
// base does not use. role is upper case (A-Z, 0-9, _).
func LoadRole(l *config.Loader, base Settings, role string) Settings {
	cert := l.String(credVar(role, credCertFile), "")
	key := l.String(credVar(role, credKeyFile), "")
	username := l.String(credVar(role, credUsername), "")
	password := l.Secret(credVar(role, credPassword))
	passwordFile := l.String(credVar(role, credPasswordFile), "")
	if cert == "" && key == "" && username == "" && password == "" && passwordFile == "" {
		return base
	}
	s := base
	s.Role = role
	if base.SASL == nil {
		for _, v := range [][2]string{{credVar(role, credUsername), username}, {credVar(role, credPassword), password.Reveal()}, {credVar(role, credPasswordFile), passwordFile}} {
			if v[1] != "" {
				l.Fail(v[0], "is set but %s is empty: the role authenticates as the process does", varMechanism)
			}
		}
	} else {
		login := *base.SASL
		login.Username, login.Password, login.PasswordFile = readLogin(l, role, username, password, passwordFile)
		s.SASL = &login
	}
	if base.TLS == nil || len(base.TLS.Cert) == 0 {
		for _, v := range [][2]string{{credVar(role, credCertFile), cert}, {credVar(role, credKeyFile), key}} {
			if v[1] != "" {
				l.Fail(v[0], "is set but %s is not: the role's certificate replaces the process's", credVar("", credCertFile))
			}
		}
	} else {
		t := *base.TLS
		if cert == "" && key == "" {
			l.Fail(credVar(role, credCertFile), "is required: the process presents a certificate (%s), so the role needs its own", credVar("", credCertFile))
		}
		t.CertFile, t.KeyFile, t.Cert, t.Key = readKeyPair(l, role, cert, key)
		s.TLS = &t
	}
	return s
}

// Warnings lists what is allowed but unwise in the settings, for the
// service to log at start.
func (s Settings) Warnings() []string {
	var out []string
	if s.SASL != nil && s.SASL.Mechanism == MechanismPlain && s.TLS == nil {
		out = append(out, fmt.Sprintf("%s=%s without %s=true sends the password in clear text: use TLS, or SCRAM-SHA-512",
			varMechanism, MechanismPlain, varTLS))
	}
	return out
}

// String describes the settings for a log line; secrets show as
// [redacted].
func (s Settings) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "brokers %s, prefix %q", strings.Join(s.Brokers, ","), s.Prefix)
	if s.TLS == nil {
		b.WriteString(", TLS off")
	} else {
		ca := s.TLS.CAFile
		if len(s.TLS.CA) == 0 {
			ca = "the system roots"
		}
		fmt.Fprintf(&b, ", TLS (CA %s", ca)
		if len(s.TLS.Cert) > 0 {
			fmt.Fprintf(&b, ", client certificate %s, key %s", s.TLS.CertFile, s.TLS.KeyFile)
		}
		if s.TLS.ServerName != "" {
			fmt.Fprintf(&b, ", server name %s", s.TLS.ServerName)
		}
		b.WriteString(")")
	}
	if s.SASL == nil {
		b.WriteString(", SASL off")
	} else {
		fmt.Fprintf(&b, ", SASL %s as %q (password %s)", s.SASL.Mechanism, s.SASL.Username, s.SASL.Password)
	}
	if s.Role != "" {
		fmt.Fprintf(&b, ", role %s", s.Role)
	}
	return b.String()
}

// LogValue implements slog.LogValuer: what String says, as attributes,
// without the secrets.
func (s Settings) LogValue() slog.Value {
	attrs := []slog.Attr{slog.Any("brokers", s.Brokers), slog.String("prefix", s.Prefix), slog.Bool("tls", s.TLS != nil)}
	if s.TLS != nil {
		attrs = append(attrs, slog.String("tlsCaFile", s.TLS.CAFile), slog.String("tlsCertFile", s.TLS.CertFile),
			slog.String("tlsServerName", s.TLS.ServerName))
	}
	if s.SASL != nil {
		attrs = append(attrs, slog.String("saslMechanism", s.SASL.Mechanism), slog.String("saslUsername", s.SASL.Username))
	}
	if s.Role != "" {
		attrs = append(attrs, slog.String("role", s.Role))
	}
	return slog.GroupValue(attrs...)
}

// config returns the clients' TLS configuration: TLS 1.2 at least, the CA
// pool (nil: the system roots), the client certificate, the server name.
func (t *TLS) config() *tls.Config {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if len(t.CA) > 0 {
		c.RootCAs = x509.NewCertPool()
		c.RootCAs.AppendCertsFromPEM(t.CA)
	}
	if len(t.Cert) > 0 || t.Key != "" {
		pair, err := tls.X509KeyPair(t.Cert, []byte(t.Key.Reveal()))
		if err != nil {
			// Load checked the pair; a TLS built by hand that fails
			// here fails the handshake saying why, not in silence.
			c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
				return nil, fmt.Errorf("%s / %s: %w", credVar("", credCertFile), credVar("", credKeyFile), err)
			}
		} else {
			c.Certificates = []tls.Certificate{pair}
		}
	}
	return c
}

// applySarama sets TLS and SASL on a sarama configuration.
func (s Settings) applySarama(c *sarama.Config) {
	if s.TLS != nil {
		c.Net.TLS.Enable = true
		c.Net.TLS.Config = s.TLS.config()
	}
	if s.SASL != nil {
		c.Net.SASL.Enable = true
		c.Net.SASL.Handshake = true
		c.Net.SASL.Version = sarama.SASLHandshakeV1
		c.Net.SASL.Mechanism = sarama.SASLMechanism(s.SASL.Mechanism)
		c.Net.SASL.User = s.SASL.Username
		c.Net.SASL.Password = s.SASL.Password.Reveal()
		if s.SASL.Mechanism != MechanismPlain {
			mechanism := s.SASL.Mechanism
			c.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{mechanism: mechanism} }
		}
	}
}

// kgoOptions returns the franz-go options for TLS and SASL.
func (s Settings) kgoOptions() []kgo.Opt {
	var opts []kgo.Opt
	if s.TLS != nil {
		opts = append(opts, kgo.DialTLSConfig(s.TLS.config()))
	}
	if s.SASL != nil {
		opts = append(opts, kgo.SASL(s.SASL.mechanism()))
	}
	return opts
}

// mechanism is the franz-go SASL mechanism of the settings.
func (s *SASL) mechanism() sasl.Mechanism {
	switch s.Mechanism {
	case MechanismPlain:
		return plain.Auth{User: s.Username, Pass: s.Password.Reveal()}.AsMechanism()
	case MechanismSCRAMSHA256:
		return scram.Auth{User: s.Username, Pass: s.Password.Reveal()}.AsSha256Mechanism()
	default:
		return scram.Auth{User: s.Username, Pass: s.Password.Reveal()}.AsSha512Mechanism()
	}
}

// scramClient is sarama's SCRAM conversation run by franz-go's SCRAM
// implementation, so that both clients authenticate with the same code.
// It prepares neither name nor password (no SASLprep), exactly as Kafka's
// own ScramSaslServer does, so a password outside ASCII means the same to
// both ends.
type scramClient struct {
	mechanism string
	auth      scram.Auth
	session   sasl.Session
	done      bool
}

func (c *scramClient) Begin(user, password, authzID string) error {
	c.auth = scram.Auth{User: user, Pass: password, Zid: authzID}
	c.session, c.done = nil, false
	return nil
}

// Step answers the server's challenge: the first call (challenge "")
// returns the client-first message, the second the client-final message,
// the third checks the server's signature and ends the conversation.
func (c *scramClient) Step(challenge string) (string, error) {
	if c.session == nil {
		m := c.auth.AsSha512Mechanism()
		if c.mechanism == MechanismSCRAMSHA256 {
			m = c.auth.AsSha256Mechanism()
		}
		session, first, err := m.Authenticate(context.Background(), "")
		if err != nil {
			return "", err
		}
		c.session = session
		return string(first), nil
	}
	done, response, err := c.session.Challenge([]byte(challenge))
	if err != nil {
		return "", err
	}
	c.done = done
	return string(response), nil
}

func (c *scramClient) Done() bool { return c.done }
