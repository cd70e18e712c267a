package deploy_test

import (
	"encoding/json"
	"os/exec"
	"sync"
	"testing"

	"github.com/loopers/commerce-pipeline/internal/config"
	"github.com/loopers/commerce-pipeline/internal/service"
)

// programs are the binaries whose configuration docs/configuration.md and
// the manifests describe; each is a section of the document.
var programs = []string{"commerce-api", "outbox-relay", "product-consumers", "migrate"}

var varsCache sync.Map // program name → []config.Var

// programVars returns the variables a program reads, as the binary itself
// reports them: internal/config's Loader records each variable's name, kind,
// default and whether it is required while the configuration is read.
func programVars(t *testing.T, name string) []config.Var {
	t.Helper()
	if v, ok := varsCache.Load(name); ok {
		return v.([]config.Var)
	}
	out, err := exec.Command(binary(t, name), service.ConfigVarsFlag).Output()
	if err != nil {
		t.Fatalf("%s %s: %v", name, service.ConfigVarsFlag, err)
	}
	var vars []config.Var
	if err := json.Unmarshal(out, &vars); err != nil {
		t.Fatalf("%s %s: %v in %q", name, service.ConfigVarsFlag, err, out)
	}
	if len(vars) == 0 {
		t.Fatalf("%s reports no variable", name)
	}
	varsCache.Store(name, vars)
	return vars
}

// TestProgramVars pins what one binary reports, so that a report that
// silently lost its content cannot pass the document check.
func TestProgramVars(t *testing.T) {
	t.Parallel()
	got := map[string]config.Var{}
	for _, v := range programVars(t, "product-consumers") {
		got[v.Name] = v
	}
	relay := map[string]config.Var{}
	for _, v := range programVars(t, "outbox-relay") {
		relay[v.Name] = v
	}
	for _, tc := range []struct {
		name string
		got  map[string]config.Var
		want config.Var
	}{
		{"url", got, config.Var{Name: "DATABASE_URL", Kind: "URL", Required: true, Allowed: []string{"postgres", "postgresql"}}},
		{"duration", got, config.Var{Name: "PRODUCT_CONSUMERS_HANDLED_RETENTION", Kind: "Duration", Default: "168h0m0s", Deprecated: []string{"EVENT_HANDLED_RETENTION"}}},
		{"list with allowed items", got, config.Var{Name: "PRODUCT_CONSUMERS_GROUPS", Kind: "List", Default: "like,order,view,stock", Allowed: []string{"like", "order", "view", "stock"},
			Deprecated: []string{"CONSUMERS"}}},
		{"bool", got, config.Var{Name: "PRODUCT_CONSUMERS_RECLAIM_ENABLED", Kind: "Bool", Default: "true", Deprecated: []string{"RECLAIM_ENABLED"}}},
		{"required list", got, config.Var{Name: "KAFKA_BROKERS", Kind: "List", Required: true}},
		{"int", got, config.Var{Name: "PRODUCT_CONSUMERS_MAX_IN_FLIGHT", Kind: "PositiveInt", Default: "1000", Deprecated: []string{"CONSUMER_MAX_IN_FLIGHT"}}},
		{"shared database setting", got, config.Var{Name: "DB_MAX_CONNS", Kind: "PositiveInt", Default: "16"}},
		{"computed default, the one identity", relay, config.Var{Name: "CLUSTER_NODE_ID", Kind: "String", Default: "defaultNodeID()", Deprecated: []string{"OUTBOX_RELAY_NODE_ID"}}},
		{"identity of the consumers", got, config.Var{Name: "CLUSTER_NODE_ID", Kind: "String", Default: "defaultNodeID()", Deprecated: []string{"CONSUMER_INSTANCE_ID"}}},
		{"the runtime's variable, the relay's default", relay, config.Var{Name: "GOGC", Kind: "String", Default: "400", Deprecated: []string{"OUTBOX_RELAY_GC_PERCENT"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if diff := cmpDiff(tc.want, tc.got[tc.want.Name]); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
