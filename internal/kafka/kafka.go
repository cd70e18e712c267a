// Package kafka holds the Kafka client settings every service shares, so
// that the relay's publisher, product-consumers, the DLT reclaimer and
// pipelinectl reach the brokers the same way: one set of variables
// (KAFKA_BROKERS, KAFKA_PREFIX, and the connection's security: KAFKA_TLS*,
// KAFKA_SASL_*), read once by Load, one base client configuration for each
// client library (Settings.Config for sarama, Settings.ClientOptions for
// franz-go) carrying the same TLS and SASL, and one start-up check
// (Settings.Check) that fails fast, naming the variable to look at.
//
// ACLs lists what each service's principal may do on the cluster: the
// permissions the deployment grants, and the tests apply.
package kafka

import (
	"strings"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/loopers/commerce-pipeline/internal/config"
	"github.com/loopers/commerce-pipeline/pkg/events"
)

// Version is the Kafka protocol version the clients speak: Apache Kafka
// 4.3.1, the release compose, the manifests and the tests run
// (kafkabroker.Version; deploy's tests check that they agree).
var Version = sarama.V4_3_1_0

// Settings is how a process reaches Kafka and names what it uses there.
type Settings struct {
	// Brokers are the bootstrap brokers (KAFKA_BROKERS).
	Brokers []string
	// Prefix (KAFKA_PREFIX) is put before every topic and consumer group
	// name the pipeline uses, so that several pipelines (environments,
	// tenants, test runs) share one cluster, each under its own prefix, and
	// an authorizer can grant each its names with prefixed ACLs. Empty by
	// default: like-events, product-like-consumer.
	Prefix string
	// TLS encrypts the connection (KAFKA_TLS and KAFKA_TLS_*); nil:
	// plaintext.
	TLS *TLS
	// SASL authenticates the connection (KAFKA_SASL_*); nil: no SASL.
	SASL *SASL
	// Role is the role whose credentials these are (LoadRole); empty for
	// the process's own. Errors name the role's variables.
	Role string
}

// maxPrefix leaves room for the longest name the pipeline derives
// (product-events.PARKED, product-order-consumer) within Kafka's 249.
const maxPrefix = 200

// Load reads the settings through l: KAFKA_BROKERS (required),
// KAFKA_PREFIX, and the security variables:
//
//   - KAFKA_TLS (default false) turns TLS on: TLS 1.2 at least;
//     KAFKA_TLS_CA_FILE (PEM certificates; default: the system roots) is
//     what the brokers' certificates must chain to, KAFKA_TLS_SERVER_NAME
//     (default: each broker's host) the name they must carry, and
//     KAFKA_TLS_CERT_FILE with KAFKA_TLS_KEY_FILE (PEM, both or neither)
//     the client certificate a broker may require (mutual TLS).
//   - KAFKA_SASL_MECHANISM (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512; empty: no
//     SASL) with KAFKA_SASL_USERNAME and one of KAFKA_SASL_PASSWORD or
//     KAFKA_SASL_PASSWORD_FILE (the file's content, but for one trailing
//     newline).
//
// The files are read and checked here, once: a file that cannot be read, a
// PEM that does not parse, a certificate without its key or with a key not
// its own, an expired certificate, an unknown mechanism, SASL without its
// login, and a setting that would do nothing (a CA file without
// KAFKA_TLS=true, a username without a mechanism) are errors naming the
// variable. A password never appears in an error, in Loader.Vars or in the
// settings' String or LogValue. What is allowed but unwise is in Warnings.
func Load(l *config.Loader) Settings {
	s := Settings{
		Brokers: l.List("KAFKA_BROKERS", nil),
		Prefix:  l.String("KAFKA_PREFIX", ""),
	}
	if len(s.Prefix) > maxPrefix || strings.IndexFunc(s.Prefix, func(r rune) bool { return !nameRune(r) }) >= 0 {
		l.Fail("KAFKA_PREFIX", "must be at most %d of the characters a-z A-Z 0-9 . _ -, got %q", maxPrefix, s.Prefix)
	}
	s.TLS, s.SASL = loadSecurity(l)
	return s
}

// nameRune reports whether Kafka accepts r in a topic name.
func nameRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-'
}

// Config returns the base client configuration under clientID: Version,
// TLS and SASL as the settings say, and producers that wait for every
// in-sync replica and report each record's outcome (every producer here
// confirms what it sent before it moves on). Callers add what their role
// needs; each call returns a new value.
func (s Settings) Config(clientID string) *sarama.Config {
	c := sarama.NewConfig()
	c.Version = Version
	c.ClientID = clientID
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Producer.Return.Successes = true
	c.Producer.Return.Errors = true
	s.applySarama(c)
	return c
}

// Topic names the pipeline's topic name (like-events, like-events.DLT) on
// the cluster.
func (s Settings) Topic(name string) string { return s.Prefix + name }

// Topics maps Topic over names.
func (s Settings) Topics(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = s.Topic(n)
	}
	return out
}

// Group names the pipeline's consumer group on the cluster.
func (s Settings) Group(name string) string { return s.Prefix + name }

// Domain names the domain of a topic on the cluster, for logs and metric
// labels: "staging.like-events" (or its .DLT or .PARKED topic) under prefix
// "staging." is "like".
func (s Settings) Domain(topic string) string {
	t := strings.TrimPrefix(topic, s.Prefix)
	t = strings.TrimSuffix(strings.TrimSuffix(t, events.DLTSuffix), events.ParkedSuffix)
	return events.DomainOf(t)
}

// ClientOptions returns the options of a franz-go client (the relay's
// producer) equivalent to Config: the brokers, the client id, TLS and SASL.
func (s Settings) ClientOptions(clientID string) []kgo.Opt {
	return append([]kgo.Opt{kgo.SeedBrokers(s.Brokers...), kgo.ClientID(clientID)}, s.kgoOptions()...)
}
