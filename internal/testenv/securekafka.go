package testenv

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/loopers/commerce-pipeline/internal/kafka"
	"github.com/loopers/commerce-pipeline/internal/kafkabroker"
)

// The listeners of SecureKafkaCluster beside the plain one.
const (
	// ListenerSASLSSL is TLS with SASL: PLAIN, SCRAM-SHA-256 and
	// SCRAM-SHA-512.
	ListenerSASLSSL = "SASL_SSL"
	// ListenerSASLPlaintext is SASL without TLS, the same mechanisms.
	ListenerSASLPlaintext = "SASL_PLAINTEXT"
	// ListenerMTLS is TLS that requires a client certificate (the
	// principal is its common name).
	ListenerMTLS = "MTLS"
)

// SecureAdmin is SecureKafkaCluster's super user besides ANONYMOUS.
const SecureAdmin = "admin"

// SecureKafka is a broker secured as a deployment secures one, for tests of
// TLS, SASL and ACLs:
//   - the plain listener (Brokers) and the controller's, whose anonymous
//     principal is a super user: the broker's own traffic and the test's
//     set-up;
//   - ListenerSASLSSL and ListenerSASLPlaintext with every user of Passwords
//     under PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512;
//   - ListenerMTLS, where a client certificate signed by CA with common
//     name n authenticates principal User:n;
//   - the authorizer on (StandardAuthorizer): a principal may do what its
//     ACLs allow and nothing else, but SecureAdmin and ANONYMOUS, the super
//     users.
type SecureKafka struct {
	*kafkabroker.Cluster
	// CA signed the broker's certificate (for 127.0.0.1 and localhost) and
	// signs the clients' (Client).
	CA *CA
	// Passwords are the SASL users' passwords, by user.
	Passwords map[string]string
}

// SecureKafkaCluster starts a SecureKafka of the test's own with users (and
// SecureAdmin) as SASL users, each with a password of its own; it ends with
// the test.
func SecureKafkaCluster(t testing.TB, users ...string) *SecureKafka {
	t.Helper()
	Needs(t, needsKafka)
	ca := NewCA(t, "kafka-test")
	broker := ca.Issue(t, "broker", "127.0.0.1", "localhost")
	k := &SecureKafka{CA: ca, Passwords: map[string]string{}}
	var scram []kafkabroker.SCRAMUser
	var plain strings.Builder
	for _, u := range append([]string{SecureAdmin}, users...) {
		pw := "pw-" + randomHex(12)
		k.Passwords[u] = pw
		for _, m := range []string{"SCRAM-SHA-256", "SCRAM-SHA-512"} {
			scram = append(scram, kafkabroker.SCRAMUser{Mechanism: m, Name: u, Password: pw})
		}
		fmt.Fprintf(&plain, " user_%s=%q", u, pw)
	}
	props := map[string]string{
		"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
		"super.users":           "User:ANONYMOUS;User:" + SecureAdmin,
		// The principal of a certificate is its common name, as a SASL
		// user's is its name: the same ACLs serve either.
		"ssl.principal.mapping.rules":        "RULE:^CN=([^,]+)$/$1/,DEFAULT",
		"ssl.keystore.type":                  "PEM",
		"ssl.keystore.location":              broker.Bundle,
		"ssl.truststore.type":                "PEM",
		"ssl.truststore.location":            ca.File,
		"listener.name.mtls.ssl.client.auth": "required",
		// The first group join creates the offsets topic; 50 partitions
		// cost this one-off broker seconds for nothing.
		"offsets.topic.num.partitions": "3",
	}
	for _, l := range []string{"sasl_ssl", "sasl_plaintext"} {
		props["listener.name."+l+".sasl.enabled.mechanisms"] = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
		props["listener.name."+l+".plain.sasl.jaas.config"] = "org.apache.kafka.common.security.plain.PlainLoginModule required" + plain.String() + ";"
		for _, m := range []string{"scram-sha-256", "scram-sha-512"} {
			props["listener.name."+l+"."+m+".sasl.jaas.config"] = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
		}
	}
	k.Cluster = KafkaCluster(t, kafkabroker.Options{
		Listeners: []kafkabroker.Listener{
			{Name: ListenerSASLSSL, Protocol: "SASL_SSL"},
			{Name: ListenerSASLPlaintext, Protocol: "SASL_PLAINTEXT"},
			{Name: ListenerMTLS, Protocol: "SSL"},
		},
		Props:      props,
		SCRAMUsers: scram,
	})
	return k
}

// Users lists the SASL users, sorted.
func (k *SecureKafka) Users() []string { return slices.Sorted(maps.Keys(k.Passwords)) }

// Env returns the variables (internal/kafka's) that connect as user over
// listener, under prefix: over ListenerSASLSSL and ListenerSASLPlaintext
// with mechanism and the user's password, over ListenerMTLS with a
// certificate issued to user by CA (mechanism is ignored there).
func (k *SecureKafka) Env(t testing.TB, listener, user, mechanism, prefix string) map[string]string {
	t.Helper()
	env := map[string]string{"KAFKA_BROKERS": strings.Join(k.Addrs(listener), ","), "KAFKA_PREFIX": prefix}
	switch listener {
	case ListenerSASLSSL, ListenerSASLPlaintext:
		pw, ok := k.Passwords[user]
		if !ok {
			t.Fatalf("testenv: %s is no user of the broker", user)
		}
		env["KAFKA_SASL_MECHANISM"] = mechanism
		env["KAFKA_SASL_USERNAME"] = user
		env["KAFKA_SASL_PASSWORD"] = pw
		if listener == ListenerSASLSSL {
			env["KAFKA_TLS"] = "true"
			env["KAFKA_TLS_CA_FILE"] = k.CA.File
		}
	case ListenerMTLS:
		c := k.CA.Issue(t, user)
		env["KAFKA_TLS"] = "true"
		env["KAFKA_TLS_CA_FILE"] = k.CA.File
		env["KAFKA_TLS_CERT_FILE"] = c.Cert
		env["KAFKA_TLS_KEY_FILE"] = c.Key
	default:
		t.Fatalf("testenv: no listener %q", listener)
	}
	return env
}

// GrantACLs creates acls for principal (User:name) through admin, a super
// user's settings, and waits until the broker lists every one of them: it
// answers DescribeAcls from the state its authorizer decides with, so what
// connects afterwards meets them.
func GrantACLs(t testing.TB, admin kafka.Settings, principal string, acls []kafka.ACL) {
	t.Helper()
	bindings, err := kafka.SaramaACLs(principal, acls)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := sarama.NewClusterAdmin(admin.Brokers, admin.Config("test-acl-admin"))
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close()
	if err := ca.CreateACLs(bindings); err != nil {
		t.Fatalf("testenv: create the ACLs of %s: %v", principal, err)
	}
	key := func(r sarama.Resource, a *sarama.Acl) string {
		return fmt.Sprint(r.ResourceType, r.ResourcePatternType, r.ResourceName, a.Operation, a.PermissionType)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		listed, err := ca.ListAcls(sarama.AclFilter{Principal: &principal, ResourceType: sarama.AclResourceAny,
			ResourcePatternTypeFilter: sarama.AclPatternAny, Operation: sarama.AclOperationAny, PermissionType: sarama.AclPermissionAny})
		if err != nil {
			t.Fatal(err)
		}
		have := map[string]bool{}
		for _, r := range listed {
			for _, a := range r.Acls {
				have[key(r.Resource, a)] = true
			}
		}
		missing := 0
		for _, b := range bindings {
			if !have[key(b.Resource, b.Acls[0])] {
				missing++
			}
		}
		if missing == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: %s: %d of %d ACLs not listed after 30 s", principal, missing, len(bindings))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
