package deploy_test

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/loopers/commerce-pipeline/internal/testenv"
)

// alertRules is deploy/prometheus/alerts.yml as Prometheus reads it.
type alertRules struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func readAlertRules(t *testing.T) alertRules {
	t.Helper()
	var r alertRules
	if err := yaml.Unmarshal(readFile(t, "deploy/prometheus/alerts.yml"), &r); err != nil {
		t.Fatalf("alerts.yml: %v", err)
	}
	return r
}

// alertExprs returns every alert rule's expression.
func alertExprs(t *testing.T) []string {
	t.Helper()
	var exprs []string
	for _, g := range readAlertRules(t).Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
		}
	}
	return exprs
}

// TestAlertRules checks the rules with promtool and runs their unit tests
// (deploy/prometheus/alerts_test.yml): every rule must fire on the failure
// it names. promtool comes with Debian's prometheus package, which
// scripts/testenv.sh installs for `make test`; without it the test fails.
func TestAlertRules(t *testing.T) {
	t.Parallel()
	testenv.Needs(t, "promtool")
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool is not installed (eval \"$(scripts/testenv.sh promtool)\" installs it): %v", err)
	}
	dir := filepath.Join(root, "deploy", "prometheus")
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
	// Every rule has a test case.
	tests := readFile(t, "deploy/prometheus/alerts_test.yml")
	for _, e := range readAlertRules(t).Groups[0].Rules {
		if !bytes.Contains(tests, []byte("alertname: "+e.Alert)) {
			t.Errorf("alert %s has no promtool test case", e.Alert)
		}
	}
}

// TestPrometheusRuleMatchesAlerts: the Kubernetes PrometheusRule carries the
// very groups compose's Prometheus loads.
func TestPrometheusRuleMatchesAlerts(t *testing.T) {
	t.Parallel()
	var cr struct {
		Kind string     `yaml:"kind"`
		Spec alertRules `yaml:"spec"`
	}
	if err := yaml.Unmarshal(readFile(t, "deploy/k8s/monitoring/prometheus-rule.yaml"), &cr); err != nil {
		t.Fatal(err)
	}
	if cr.Kind != "PrometheusRule" {
		t.Errorf("kind %q, want PrometheusRule", cr.Kind)
	}
	if diff := cmpDiff(readAlertRules(t), cr.Spec); diff != "" {
		t.Errorf("the PrometheusRule differs from deploy/prometheus/alerts.yml (-alerts.yml +PrometheusRule):\n%s", diff)
	}
	var prom struct {
		RuleFiles []string `yaml:"rule_files"`
	}
	if err := yaml.Unmarshal(readFile(t, "deploy/prometheus/prometheus.yml"), &prom); err != nil {
		t.Fatal(err)
	}
	if len(prom.RuleFiles) != 1 || prom.RuleFiles[0] != "alerts.yml" {
		t.Errorf("compose's Prometheus loads rule files %v, want [alerts.yml]", prom.RuleFiles)
	}
	if !bytes.Contains(readFile(t, "docker-compose.yml"), []byte("./deploy/prometheus/alerts.yml:/etc/prometheus/alerts.yml:ro")) {
		t.Error("docker-compose.yml does not mount deploy/prometheus/alerts.yml beside prometheus.yml")
	}
}
