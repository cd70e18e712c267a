package kafka_test

import (
	"strings"
	"testing"

	"github.com/loopers/commerce-pipeline/internal/kafka"
	"github.com/loopers/commerce-pipeline/internal/reclaim"
	"github.com/loopers/commerce-pipeline/pkg/events"
)

// TestACLs: what each role may and may not do under a prefix, as Kafka's
// authorizer would decide from ACLs alone. TestSecureBroker shows the real
// authorizer deciding the same.
func TestACLs(t *testing.T) {
	t.Parallel()
	const p = "staging."
	acls := kafka.ACLs(p)
	for _, tc := range []struct {
		role, resource, name, op string
		want                     bool
	}{
		{kafka.RoleRelay, "topic", p + "like-events", "Write", true},
		{kafka.RoleRelay, "topic", p + "order-events", "Describe", true},
		{kafka.RoleRelay, "topic", p + "like-events.DLT", "Write", false},
		{kafka.RoleRelay, "topic", p + "like-events", "Read", false},
		{kafka.RoleRelay, "topic", "like-events", "Write", false}, // another pipeline's (no prefix)
		{kafka.RoleRelay, "cluster", "kafka-cluster", "IdempotentWrite", false},

		{kafka.RoleConsumers, "topic", p + "like-events", "Read", true},
		{kafka.RoleConsumers, "topic", p + "like-events", "Write", false}, // cannot forge an event
		{kafka.RoleConsumers, "topic", p + "like-events.DLT", "Write", true},
		{kafka.RoleConsumers, "topic", p + "like-events.DLT", "Read", false},
		{kafka.RoleConsumers, "topic", p + "like-events.PARKED", "Write", false},
		{kafka.RoleConsumers, "group", p + "product-like-consumer", "Read", true},
		{kafka.RoleConsumers, "group", p + "product-stock-consumer", "Describe", true},
		{kafka.RoleConsumers, "group", p + reclaim.Group, "Read", false},
		{kafka.RoleConsumers, "group", "product-like-consumer", "Read", false},

		{kafka.RoleReclaimer, "topic", p + "like-events.DLT", "Read", true},
		{kafka.RoleReclaimer, "topic", p + "like-events", "Write", true},
		{kafka.RoleReclaimer, "topic", p + "like-events.PARKED", "Write", true},
		{kafka.RoleReclaimer, "topic", p + "like-events", "Read", false},
		{kafka.RoleReclaimer, "topic", p + "like-events.DLT", "Write", false},
		{kafka.RoleReclaimer, "topic", p + "like-events.PARKED", "Read", false},
		{kafka.RoleReclaimer, "group", p + reclaim.Group, "Read", true},
		{kafka.RoleReclaimer, "group", p + reclaim.ParkedGroup, "Read", false},
		{kafka.RoleReclaimer, "group", p + "product-like-consumer", "Read", false},

		{kafka.RoleOperator, "topic", p + "stock-events.PARKED", "Read", true},
		{kafka.RoleOperator, "topic", p + "stock-events.DLT", "Read", true},
		{kafka.RoleOperator, "topic", p + "stock-events", "Write", true},
		{kafka.RoleOperator, "topic", p + "stock-events", "Read", false},
		{kafka.RoleOperator, "group", p + reclaim.ParkedGroup, "Read", true},
		{kafka.RoleOperator, "group", p + reclaim.Group, "Read", true},
		{kafka.RoleOperator, "group", p + "product-like-consumer", "Read", false},
	} {
		t.Run(strings.Join([]string{tc.role, tc.op, tc.resource, tc.name}, " "), func(t *testing.T) {
			t.Parallel()
			if got := kafka.Allows(acls[tc.role], tc.resource, tc.name, tc.op); got != tc.want {
				t.Errorf("allowed %v, want %v; ACLs %v", got, tc.want, acls[tc.role])
			}
		})
	}
}

// TestACLsShape: every event topic is covered for every role, every name
// carries the prefix, no role holds a cluster permission, the group names
// are internal/reclaim's, and each ACL converts for sarama.
func TestACLsShape(t *testing.T) {
	t.Parallel()
	if kafka.ReclaimGroup != reclaim.Group || kafka.ParkedGroup != reclaim.ParkedGroup {
		t.Errorf("groups %q, %q; internal/reclaim names %q, %q", kafka.ReclaimGroup, kafka.ParkedGroup, reclaim.Group, reclaim.ParkedGroup)
	}
	const p = "p."
	all := kafka.ACLs(p)
	if len(all) != 4 {
		t.Errorf("%d roles, want 4: %v", len(all), all)
	}
	for role, acls := range all {
		for _, a := range acls {
			if a.Resource == "cluster" || !strings.HasPrefix(a.Name, p) {
				t.Errorf("%s: %v", role, a)
			}
		}
		if _, err := kafka.SaramaACLs("User:"+role, acls); err != nil {
			t.Errorf("%s: %v", role, err)
		}
	}
	for _, topic := range events.NewRegistry().Topics() {
		for role, op := range map[string]string{kafka.RoleRelay: "Write", kafka.RoleConsumers: "Read", kafka.RoleReclaimer: "Write", kafka.RoleOperator: "Write"} {
			if !kafka.Allows(all[role], "topic", p+topic, op) {
				t.Errorf("%s may not %s %s", role, op, topic)
			}
		}
	}
}
