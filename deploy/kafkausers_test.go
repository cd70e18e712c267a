package deploy_test

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/loopers/commerce-pipeline/internal/kafka"
)

// kafkaUser is the part of Strimzi's KafkaUser (kafka.strimzi.io/v1) the
// base uses, decoded strictly as kafkaTopic is.
type kafkaUser struct {
	APIVersion string      `json:"apiVersion"`
	Kind       string      `json:"kind"`
	Metadata   strimziMeta `json:"metadata"`
	Spec       struct {
		Authentication struct {
			Type string `json:"type"`
		} `json:"authentication"`
		Authorization struct {
			Type string    `json:"type"`
			ACLs []aclRule `json:"acls"`
		} `json:"authorization"`
	} `json:"spec"`
}

// aclRule is one entry of a KafkaUser's spec.authorization.acls.
type aclRule struct {
	Type     string `json:"type"` // allow (the default) or deny
	Resource struct {
		Type        string `json:"type"`
		Name        string `json:"name"`
		PatternType string `json:"patternType"` // literal (the default) or prefix
	} `json:"resource"`
	Host       string   `json:"host"`
	Operations []string `json:"operations"`
}

// flatACLs turns a KafkaUser's rules into internal/kafka's ACLs, one per
// operation, sorted; what cannot be one (a deny rule, a host other than any)
// is an error.
func flatACLs(t *testing.T, u kafkaUser) []kafka.ACL {
	t.Helper()
	var out []kafka.ACL
	for _, r := range u.Spec.Authorization.ACLs {
		if r.Type != "" && r.Type != "allow" {
			t.Errorf("KafkaUser %s: a %s rule on %s; internal/kafka.ACLs allows only", u.Metadata.Name, r.Type, r.Resource.Name)
		}
		if r.Host != "" && r.Host != "*" {
			t.Errorf("KafkaUser %s: a rule for host %s; internal/kafka.ACLs allows from any host", u.Metadata.Name, r.Host)
		}
		pattern := r.Resource.PatternType
		if pattern == "" {
			pattern = "literal" // Strimzi's default
		}
		for _, op := range r.Operations {
			out = append(out, kafka.ACL{Resource: r.Resource.Type, Pattern: pattern, Name: r.Resource.Name, Operation: op})
		}
	}
	sortACLs(out)
	return out
}

func sortACLs(acls []kafka.ACL) {
	slices.SortFunc(acls, func(a, b kafka.ACL) int { return strings.Compare(a.String(), b.String()) })
}

// kafkaPrefix is the KAFKA_PREFIX the rendering's services run with, from
// the ConfigMap that holds their Kafka connection.
func kafkaPrefix(t *testing.T, r rendered) string {
	t.Helper()
	for _, cm := range r.configMaps {
		if _, ok := cm.Data["KAFKA_BROKERS"]; ok {
			return cm.Data["KAFKA_PREFIX"]
		}
	}
	t.Fatal("no ConfigMap sets KAFKA_BROKERS")
	return ""
}

// TestKafkaUsers: one KafkaUser per role of internal/kafka.ACLs, named
// after it, logging in with SCRAM-SHA-512, allowed exactly what
// kafka.ACLs says for the pipeline's prefix, field by field: a permission
// the code grants and the manifest lacks fails the service on the broker,
// one the manifest adds is a reach the role was not meant to have.
func TestKafkaUsers(t *testing.T) {
	t.Parallel()
	for _, dir := range renderings {
		t.Run(dir, func(t *testing.T) {
			t.Parallel()
			r := render(t, dir)
			want := kafka.ACLs(kafkaPrefix(t, r))
			users := map[string]kafkaUser{}
			for _, u := range r.users {
				users[u.Metadata.Name] = u
				if _, ok := want[u.Metadata.Name]; !ok {
					t.Errorf("KafkaUser %s is none of internal/kafka's roles %v", u.Metadata.Name, slices.Sorted(maps.Keys(want)))
				}
			}
			for role, acls := range want {
				u, ok := users[role]
				if !ok {
					t.Errorf("no KafkaUser %s", role)
					continue
				}
				if u.APIVersion != "kafka.strimzi.io/v1" || u.Metadata.Labels["strimzi.io/cluster"] == "" {
					t.Errorf("KafkaUser %s: apiVersion %s, labels %v", role, u.APIVersion, u.Metadata.Labels)
				}
				if u.Spec.Authentication.Type != "scram-sha-512" || u.Spec.Authorization.Type != "simple" {
					t.Errorf("KafkaUser %s: authentication %q, authorization %q; want scram-sha-512 and simple",
						role, u.Spec.Authentication.Type, u.Spec.Authorization.Type)
				}
				acls = slices.Clone(acls)
				sortACLs(acls)
				if diff := cmpDiff(acls, flatACLs(t, u)); diff != "" {
					t.Errorf("KafkaUser %s's ACLs differ from internal/kafka.ACLs (-code +manifest):\n%s", role, diff)
				}
			}
		})
	}
}

// TestKafkaLogins: each service logs in as its own KafkaUser, the reclaimer
// inside product-consumers as another, each with the password from the
// Secret Strimzi's User Operator keeps for that user.
func TestKafkaLogins(t *testing.T) {
	t.Parallel()
	for _, dir := range renderings {
		t.Run(dir, func(t *testing.T) {
			t.Parallel()
			r := render(t, dir)
			users := map[string]kafkaUser{}
			for _, u := range r.users {
				users[u.Metadata.Name] = u
			}
			for _, tc := range []struct {
				name, workload, userVar, passwordVar, role string
			}{
				{"the relay", "outbox-relay", "KAFKA_SASL_USERNAME", "KAFKA_SASL_PASSWORD_FILE", kafka.RoleRelay},
				{"the consumers", "product-consumers", "KAFKA_SASL_USERNAME", "KAFKA_SASL_PASSWORD_FILE", kafka.RoleConsumers},
				{"the reclaimer", "product-consumers", "KAFKA_RECLAIMER_SASL_USERNAME", "KAFKA_RECLAIMER_SASL_PASSWORD_FILE", kafka.RoleReclaimer},
			} {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					pod, ok := r.pods()[tc.workload]
					if !ok {
						t.Fatalf("no workload %s", tc.workload)
					}
					c := pod.Spec.Containers[0]
					env := containerEnv(t, r, c)
					user := env[tc.userVar]
					if user != tc.role {
						t.Errorf("%s=%q, want %q (the KafkaUser of role %s)", tc.userVar, user, tc.role, tc.role)
					}
					if _, ok := users[user]; !ok {
						t.Errorf("%s=%q names no KafkaUser", tc.userVar, user)
					}
					f, why := resolveSecretFile(pod.Spec, c, env[tc.passwordVar])
					if why != "" {
						t.Fatalf("%s: %s", tc.passwordVar, why)
					}
					// The User Operator's Secret is named after the user;
					// its key password holds the password alone.
					if f.secret != user || f.key != "password" {
						t.Errorf("%s reads Secret %s key %s, want %s key password", tc.passwordVar, f.secret, f.key, user)
					}
				})
			}
			for name, pod := range r.pods() {
				for _, c := range append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...) {
					env := containerEnv(t, r, c)
					if env["KAFKA_SASL_MECHANISM"] == "" {
						continue
					}
					if env["KAFKA_SASL_MECHANISM"] != kafka.MechanismSCRAMSHA512 || env["KAFKA_TLS"] != "true" {
						t.Errorf("%s container %s: KAFKA_SASL_MECHANISM=%s, KAFKA_TLS=%s; the KafkaUsers log in with %s over TLS",
							name, c.Name, env["KAFKA_SASL_MECHANISM"], env["KAFKA_TLS"], kafka.MechanismSCRAMSHA512)
					}
				}
			}
		})
	}
}
