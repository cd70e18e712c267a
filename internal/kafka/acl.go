package kafka

import (
	"fmt"
	"slices"
	"strings"

	"github.com/IBM/sarama"

	"github.com/loopers/commerce-pipeline/pkg/events"
)

// The roles that reach Kafka, each as a principal of its own: the keys of
// ACLs.
const (
	// RoleRelay is outbox-relay: it publishes the events.
	RoleRelay = "outbox-relay"
	// RoleConsumers is product-consumers' consumers: they read the events
	// and dead-letter what fails for good.
	RoleConsumers = "product-consumers"
	// RoleReclaimer is product-consumers' scheduled reclaimer: it re-drives
	// dead letters to the event topics and parks the rest (LoadRole with
	// role RECLAIMER reads its credentials).
	RoleReclaimer = "reclaimer"
	// RoleOperator is pipelinectl's dlt and parked commands: the
	// reclaimer's work by hand, and re-drives of the parked topics.
	RoleOperator = "pipelinectl"
)

// The consumer groups as the roles name them before the prefix (the
// reclaimer's and pipelinectl's are internal/reclaim's Group and
// ParkedGroup; product-consumers' groups all start with ConsumerGroups).
const (
	ConsumerGroups = "product-"
	ReclaimGroup   = "pcon-reclaimer"
	ParkedGroup    = "pcon-parked-redriver"
)

// ACL is one permission, in the words of Strimzi's KafkaUser
// (spec.authorization.acls): Operation allowed, from any host, on the
// resources of type Resource that Name names — exactly (Pattern "literal")
// or as the start of their names (Pattern "prefix"). Kafka implies Describe
// by Read and Write, so no ACL grants Describe alone.
type ACL struct {
	// Resource is "topic", "group" or "cluster".
	Resource string
	// Pattern is "literal" or "prefix".
	Pattern string
	// Name is the topic or group name, or the start of names; "kafka-cluster"
	// for the cluster.
	Name string
	// Operation is "Read", "Write", "Describe", "IdempotentWrite", ...
	Operation string
}

func (a ACL) String() string {
	return fmt.Sprintf("%s %s %s:%s", a.Operation, a.Resource, a.Pattern, a.Name)
}

// ACLs returns what each role's principal may do on a cluster where the
// pipeline's names carry prefix (KAFKA_PREFIX), by role (RoleRelay,
// RoleConsumers, RoleReclaimer, RoleOperator): everything its work needs
// and nothing more, so that a stolen credential reaches no further than its
// service.
//
// The topic permissions are literal: an event topic and its dead-letter and
// parked topics share the start of their names (like-events,
// like-events.DLT), so a prefix permission could not let the consumers write
// the dead-letter topic but not the event topic. Group permissions are a
// prefix where a role owns a family of groups. No role needs a cluster
// permission: since Kafka 3.0 (KIP-679) Write on a topic lets a producer
// take an idempotent producer id, without IdempotentWrite on the cluster.
//
//   - outbox-relay writes the event topics.
//   - product-consumers read the event topics in their groups
//     (product-…) and write the dead-letter topics; they cannot write an
//     event topic, so they cannot forge an event.
//   - the reclaimer reads the dead-letter topics in its group
//     (pcon-reclaimer), writes the event topics (re-drive) and the parked
//     topics (park).
//   - pipelinectl does what the reclaimer does, and reads the parked topics
//     in its group (pcon-parked-redriver) to re-drive them.
func ACLs(prefix string) map[string][]ACL {
	reg := events.NewRegistry()
	topics := func(op string, suffix string) []ACL {
		var out []ACL
		for _, t := range reg.Topics() {
			out = append(out, ACL{Resource: "topic", Pattern: "literal", Name: prefix + t + suffix, Operation: op})
		}
		return out
	}
	group := func(pattern, name string) ACL {
		return ACL{Resource: "group", Pattern: pattern, Name: prefix + name, Operation: "Read"}
	}
	reclaimer := slices.Concat(
		topics("Read", events.DLTSuffix),
		topics("Write", ""),
		topics("Write", events.ParkedSuffix),
		[]ACL{group("literal", ReclaimGroup)},
	)
	return map[string][]ACL{
		RoleRelay: topics("Write", ""),
		RoleConsumers: slices.Concat(
			topics("Read", ""),
			topics("Write", events.DLTSuffix),
			[]ACL{group("prefix", ConsumerGroups)},
		),
		RoleReclaimer: reclaimer,
		RoleOperator: slices.Concat(reclaimer,
			topics("Read", events.ParkedSuffix),
			[]ACL{group("literal", ParkedGroup)},
		),
	}
}

// Allows reports whether acls allow operation on the resource of type
// resource named name, as Kafka's authorizer decides for ALLOW rules alone:
// a literal or prefix match, with Read or Write implying Describe.
func Allows(acls []ACL, resource, name, operation string) bool {
	for _, a := range acls {
		if a.Resource != resource {
			continue
		}
		if a.Pattern == "literal" && a.Name != name || a.Pattern == "prefix" && !strings.HasPrefix(name, a.Name) {
			continue
		}
		if a.Operation == operation || a.Operation == "All" ||
			operation == "Describe" && (a.Operation == "Read" || a.Operation == "Write") {
			return true
		}
	}
	return false
}

// SaramaACLs returns acls for principal (such as "User:outbox-relay") as
// sarama's CreateACLs takes them.
func SaramaACLs(principal string, acls []ACL) ([]*sarama.ResourceAcls, error) {
	var out []*sarama.ResourceAcls
	for _, a := range acls {
		r := sarama.Resource{ResourceName: a.Name}
		switch a.Resource {
		case "topic":
			r.ResourceType = sarama.AclResourceTopic
		case "group":
			r.ResourceType = sarama.AclResourceGroup
		case "cluster":
			r.ResourceType = sarama.AclResourceCluster
		default:
			return nil, fmt.Errorf("kafka: ACL %s: unknown resource type %q", a, a.Resource)
		}
		switch a.Pattern {
		case "literal":
			r.ResourcePatternType = sarama.AclPatternLiteral
		case "prefix":
			r.ResourcePatternType = sarama.AclPatternPrefixed
		default:
			return nil, fmt.Errorf("kafka: ACL %s: unknown pattern %q", a, a.Pattern)
		}
		var op sarama.AclOperation
		if err := op.UnmarshalText([]byte(a.Operation)); err != nil || op == sarama.AclOperationUnknown {
			return nil, fmt.Errorf("kafka: ACL %s: unknown operation %q", a, a.Operation)
		}
		out = append(out, &sarama.ResourceAcls{Resource: r, Acls: []*sarama.Acl{{
			Principal: principal, Host: "*", Operation: op, PermissionType: sarama.AclPermissionAllow,
		}}})
	}
	return out, nil
}
