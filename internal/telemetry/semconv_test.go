package telemetry

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel/attribute"
)

func keys(kvs []attribute.KeyValue) map[string]string {
	out := map[string]string{}
	for _, kv := range kvs {
		out[string(kv.Key)] = kv.Value.String()
	}
	return out
}

// TestStabilityOptIn: the current names always; the pre-v1.26 names beside
// them only for the domains OTEL_SEMCONV_STABILITY_OPT_IN asks "/dup" of.
// The opt-in is process-wide, so the cases run in turn.
//
//nolint:paralleltest // setOptIn sets the process's opt-in, which TestSetup sets too.
func TestStabilityOptIn(t *testing.T) {
	current := map[string]string{"messaging.system": "kafka", "messaging.operation.name": "send", "messaging.operation.type": "send",
		"messaging.destination.name": "like-events"}
	db := map[string]string{"db.system.name": "postgresql", "db.query.text": "SELECT 1", "db.operation.name": "SELECT"}
	with := func(m map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range m {
			out[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	for _, tc := range []struct {
		optIn          string
		messaging, dbs map[string]string
	}{
		{"", current, db},
		{"messaging", current, db},
		{"messaging/dup", with(current, "messaging.operation", "publish"), db},
		{"http/dup, database/dup", current, with(db, "db.system", "postgresql", "db.statement", "SELECT 1", "db.operation", "SELECT")},
	} {
		setOptIn(tc.optIn)
		if diff := cmp.Diff(tc.messaging, keys(Messaging("send", "like-events"))); diff != "" {
			t.Errorf("%q: messaging attributes (-want +got):\n%s", tc.optIn, diff)
		}
		if diff := cmp.Diff(tc.dbs, keys(Database("SELECT 1", "SELECT"))); diff != "" {
			t.Errorf("%q: database attributes (-want +got):\n%s", tc.optIn, diff)
		}
	}
	setOptIn("")
}
