package deploy_test

import (
	"context"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"go.yaml.in/yaml/v3"

	"github.com/loopers/commerce-pipeline/internal/config"
	"github.com/loopers/commerce-pipeline/internal/telemetry"
	"github.com/loopers/commerce-pipeline/pkg/events"
)

// appServices are the compose services that run this module's binaries, by
// the program whose configuration they carry.
var appServices = map[string]string{
	"commerce-api":      "commerce-api",
	"outbox-relay":      "outbox-relay",
	"product-consumers": "product-consumers",
	"migrate":           "migrate",
}

// adminVar names the variable holding each long-running service's admin
// address: /healthz, the detailed /readyz, /metrics (and commerce-api's
// cluster view). Probes and Prometheus go there.
var adminVar = map[string]string{
	"commerce-api":      "ADMIN_ADDR",
	"outbox-relay":      "ADMIN_ADDR",
	"product-consumers": "ADMIN_ADDR",
}

// publicVar names the variable of the address a service serves the public
// on: the API, the live page, the stream.
var publicVar = map[string]string{"commerce-api": "HTTP_ADDR"}

// addrPort is the port of the address in a service's variable.
func addrPort(t *testing.T, set map[string]string, name string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(set[name])
	if err != nil || p == "" {
		t.Fatalf("%s=%q: want host:port", name, set[name])
	}
	return p
}

// loadCompose parses docker-compose.yml with the loader Docker Compose uses,
// which validates it against the Compose schema, with every profile on.
func loadCompose(t *testing.T) *types.Project {
	t.Helper()
	return loadComposeEnv(t, nil)
}

// loadComposeEnv is loadCompose with the given variables in the
// environment ("NAME=value").
func loadComposeEnv(t *testing.T, environ []string) *types.Project {
	t.Helper()
	opts, err := cli.NewProjectOptions([]string{filepath.Join(root, "docker-compose.yml")},
		cli.WithWorkingDirectory(root), cli.WithEnv(environ), cli.WithProfiles([]string{"observability"}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := opts.LoadProject(ctx)
	if err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return p
}

func env(s types.ServiceConfig) map[string]string {
	m := map[string]string{}
	for k, v := range s.Environment {
		if v != nil {
			m[k] = *v
		}
	}
	return m
}

// oneShots are the services others wait on to complete.
func oneShots(p *types.Project) map[string]bool {
	m := map[string]bool{}
	for _, s := range p.Services {
		for name, dep := range s.DependsOn {
			if dep.Condition == types.ServiceConditionCompletedSuccessfully {
				m[name] = true
			}
		}
	}
	return m
}

func TestComposeHealthAndOrder(t *testing.T) {
	t.Parallel()
	p := loadCompose(t)
	once := oneShots(p)
	for _, want := range []string{"postgres", "redis", "kafka", "kafka-topics", "migrate", "commerce-api", "outbox-relay", "product-consumers", "prometheus", "grafana"} {
		if _, ok := p.Services[want]; !ok {
			t.Errorf("service %s missing", want)
		}
	}
	for name, s := range p.Services {
		if once[name] {
			if s.Restart != "no" {
				t.Errorf("%s is a one-shot job; restart must be \"no\", got %q", name, s.Restart)
			}
			continue
		}
		if s.HealthCheck == nil || s.HealthCheck.Disable || len(s.HealthCheck.Test) < 2 {
			t.Errorf("long-running service %s has no health check", name)
		}
		for dep, d := range s.DependsOn {
			target := p.Services[dep]
			switch d.Condition {
			case types.ServiceConditionHealthy:
				if target.HealthCheck == nil {
					t.Errorf("%s waits for %s to be healthy, which has no health check", name, dep)
				}
			case types.ServiceConditionCompletedSuccessfully:
			default:
				t.Errorf("%s depends on %s with condition %q; want service_healthy or service_completed_successfully", name, dep, d.Condition)
			}
		}
	}
	for _, want := range []string{"kafka-topics", "migrate"} {
		if !once[want] {
			t.Errorf("nothing waits for %s to complete", want)
		}
	}
	relay := p.Services["outbox-relay"]
	if relay.Deploy == nil || relay.Deploy.Replicas == nil || *relay.Deploy.Replicas != 2 {
		t.Error("outbox-relay must run 2 replicas (deploy.replicas)")
	}
	if len(relay.Ports) != 0 {
		t.Errorf("outbox-relay publishes %v; two replicas cannot bind one host port", relay.Ports)
	}
}

// TestComposeStaticMembership: product-consumers has a static member id
// that survives re-creating its container (the default, the host name, is
// the container's id, new each time).
func TestComposeStaticMembership(t *testing.T) {
	t.Parallel()
	e := env(loadCompose(t).Services["product-consumers"])
	if e["CLUSTER_NODE_ID"] == "" && e["PRODUCT_CONSUMERS_STATIC_MEMBERSHIP"] != "false" {
		t.Error("product-consumers must set CLUSTER_NODE_ID (or PRODUCT_CONSUMERS_STATIC_MEMBERSHIP=false)")
	}
}

// TestComposeConfiguration: every service running a binary of this module
// sets every variable its configuration requires, sets no variable it does
// not read, and the values parse the way the configuration code parses them.
func TestComposeConfiguration(t *testing.T) {
	t.Parallel()
	p := loadCompose(t)
	stages := dockerStages(t)
	for svc, prog := range appServices {
		t.Run(svc, func(t *testing.T) {
			t.Parallel()
			s, ok := p.Services[svc]
			if !ok {
				t.Fatalf("no service %s", svc)
			}
			if s.Build == nil || s.Build.Target != prog || !stages[prog] {
				t.Errorf("%s must build Dockerfile target %q (stages %v), build = %+v", svc, prog, stages, s.Build)
			}
			checkEnv(t, prog, env(s))
		})
	}
}

// fromCluster stands for a value the cluster supplies at run time (a Secret,
// the pod name): set, but not known here.
const fromCluster = "\x00from the cluster"

// checkEnv checks a program's environment against its configuration code.
func checkEnv(t *testing.T, prog string, set map[string]string) {
	t.Helper()
	vars := map[string]config.Var{}
	for _, v := range programVars(t, prog) {
		vars[v.Name] = v
	}
	for name, value := range set {
		v, ok := vars[name]
		if !ok {
			// The standard OpenTelemetry variables are read by every
			// binary's tracing set-up, not by its configuration.
			if !slices.Contains(telemetry.Vars, name) {
				t.Errorf("%s is set but %s never reads it", name, prog)
			}
			continue
		}
		if value == fromCluster {
			continue
		}
		if err := checkValue(v, value); err != "" {
			t.Errorf("%s=%q: %s", name, value, err)
		}
	}
	for name, v := range vars {
		_, ok := set[name]
		_, fromFile := set[name+config.FileSuffix]
		if v.Required && !ok && !fromFile {
			t.Errorf("%s requires %s (or %s), which is not set", prog, name, name+config.FileSuffix)
		}
	}
}

// checkValue applies the checks of internal/config to value.
func checkValue(v config.Var, value string) string {
	switch v.Kind {
	case "URL":
		u, err := url.Parse(value)
		if err != nil || u.Host == "" || !slices.Contains(v.Allowed, u.Scheme) {
			return "want a URL with scheme " + strings.Join(v.Allowed, " or ")
		}
	case "Duration":
		if d, err := time.ParseDuration(value); err != nil || d <= 0 {
			return "want a positive duration"
		}
	case "PositiveInt":
		if n, err := strconv.Atoi(value); err != nil || n <= 0 {
			return "want a positive integer"
		}
	case "List":
		for item := range strings.SplitSeq(value, ",") {
			if len(v.Allowed) > 0 && !slices.Contains(v.Allowed, strings.TrimSpace(item)) {
				return "unknown item " + item
			}
		}
	case "Bool":
		if _, err := strconv.ParseBool(value); err != nil {
			return "want true or false"
		}
	case "OneOf":
		if !slices.Contains(v.Allowed, value) {
			return "want one of " + strings.Join(v.Allowed, ", ")
		}
	case "Secret":
		return "a secret in the file itself: give it through a file (the _FILE variable) or an environment outside the repository"
	}
	return ""
}

// composeProbes returns the URL each service's health check probes, by
// service, checking the probe is the healthcheck binary on the service's
// admin port.
func composeProbes(t *testing.T) map[string]*url.URL {
	t.Helper()
	p := loadCompose(t)
	probes := map[string]*url.URL{}
	for svc, v := range adminVar {
		s := p.Services[svc]
		test := s.HealthCheck.Test
		if len(test) != 3 || test[0] != "CMD" || test[1] != "/usr/local/bin/healthcheck" {
			t.Errorf("%s health check must run the healthcheck binary on one URL, got %q", svc, test)
			continue
		}
		u, err := url.Parse(test[2])
		if err != nil {
			t.Errorf("%s health check URL: %v", svc, err)
			continue
		}
		_, port, err := net.SplitHostPort(env(s)[v])
		if err != nil || u.Port() != port {
			t.Errorf("%s probes port %s but listens on %s=%q", svc, u.Port(), v, env(s)[v])
		}
		probes[svc] = u
	}
	return probes
}

func TestComposeTopics(t *testing.T) {
	t.Parallel()
	p := loadCompose(t)
	job := p.Services["kafka-topics"]
	got := strings.Fields(env(job)["TOPICS"])
	slices.Sort(got)
	want := events.NewRegistry().AllTopics()
	slices.Sort(want)
	if diff := cmpDiff(want, got); diff != "" {
		t.Errorf("kafka-topics creates other topics than pkg/events lists (-want +got):\n%s", diff)
	}
	script := strings.Join(append(slices.Clone(job.Entrypoint), job.Command...), " ")
	for _, want := range []string{"for topic in $TOPICS", "kafka-topics.sh --bootstrap-server kafka:9092 --create --if-not-exists --topic \"$topic\" --partitions 3",
		"*.PARKED) retention=" + strconv.FormatInt(events.ParkedRetention.Milliseconds(), 10)} {
		if !strings.Contains(script, want) {
			t.Errorf("kafka-topics script lacks %q:\n%s", want, script)
		}
	}

	kafka := env(p.Services["kafka"])
	if kafka["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] != "false" {
		t.Error("the broker must not create topics on demand: topics are infrastructure")
	}
	advertised := strings.Split(kafka["KAFKA_ADVERTISED_LISTENERS"], ",")
	for _, want := range []string{"INTERNAL://kafka:9092", "EXTERNAL://localhost:9094"} {
		if !slices.Contains(advertised, want) {
			t.Errorf("Kafka does not advertise %s: %v", want, advertised)
		}
	}
	published := false
	for _, port := range p.Services["kafka"].Ports {
		published = published || port.Target == 9094 && port.Published == "9094" && port.HostIP == "127.0.0.1"
	}
	if !published {
		t.Error("Kafka's host listener 9094 is not published")
	}
	for _, svc := range []string{"outbox-relay", "product-consumers"} {
		if got := env(p.Services[svc])["KAFKA_BROKERS"]; got != "kafka:9092" {
			t.Errorf("%s KAFKA_BROKERS = %q, want the internal listener kafka:9092", svc, got)
		}
	}
}

// promConfig is the part of a Prometheus configuration this suite uses;
// decoding is strict so a misspelt key fails.
type promConfig struct {
	Global struct {
		ScrapeInterval     string `yaml:"scrape_interval"`
		EvaluationInterval string `yaml:"evaluation_interval"`
	} `yaml:"global"`
	RuleFiles     []string `yaml:"rule_files"`
	ScrapeConfigs []struct {
		JobName       string `yaml:"job_name"`
		MetricsPath   string `yaml:"metrics_path"`
		StaticConfigs []struct {
			Targets []string `yaml:"targets"`
		} `yaml:"static_configs"`
		DNSSDConfigs []struct {
			Names           []string `yaml:"names"`
			Type            string   `yaml:"type"`
			Port            int      `yaml:"port"`
			RefreshInterval string   `yaml:"refresh_interval"`
		} `yaml:"dns_sd_configs"`
	} `yaml:"scrape_configs"`
}

// TestComposeObservability: Prometheus scrapes each service on its admin
// port (never commerce-api's public one), and the files the observability
// profile mounts exist.
func TestComposeObservability(t *testing.T) {
	t.Parallel()
	p := loadCompose(t)
	var cfg promConfig
	dec := yaml.NewDecoder(strings.NewReader(string(readFile(t, "deploy/prometheus/prometheus.yml"))))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil {
		t.Fatalf("prometheus.yml: %v", err)
	}
	scraped := map[string]bool{}
	for _, sc := range cfg.ScrapeConfigs {
		if sc.MetricsPath != "" && sc.MetricsPath != "/metrics" {
			t.Errorf("job %s scrapes %s; the services serve /metrics", sc.JobName, sc.MetricsPath)
		}
		for _, st := range sc.StaticConfigs {
			for _, target := range st.Targets {
				scraped[target] = true
			}
		}
		for _, dns := range sc.DNSSDConfigs {
			for _, n := range dns.Names {
				scraped[net.JoinHostPort(n, strconv.Itoa(dns.Port))] = true
			}
		}
	}
	want := map[string]bool{}
	for svc, v := range adminVar {
		want[net.JoinHostPort(svc, addrPort(t, env(p.Services[svc]), v))] = true
	}
	if diff := cmpDiff(want, scraped); diff != "" {
		t.Errorf("Prometheus scrape targets (-services +prometheus.yml):\n%s", diff)
	}
	for _, svc := range []string{"prometheus", "grafana"} {
		s := p.Services[svc]
		if !slices.Contains(s.Profiles, "observability") {
			t.Errorf("%s must be in the observability profile, has %v", svc, s.Profiles)
		}
		for _, v := range s.Volumes {
			if _, err := os.Stat(v.Source); err != nil {
				t.Errorf("%s mounts %s: %v", svc, v.Source, err)
			}
		}
	}
}

// hostPort is a port a compose service publishes, the variable that moves
// it and its default.
type hostPort struct {
	env  string
	def  string
	port uint32
}

// moved is the port the test moves hp to: "1" before the default, or for
// a five-digit default (which that would push past 65535) its first digit
// raised by one.
func (hp hostPort) moved() string {
	if len(hp.def) == 5 {
		return string(hp.def[0]+1) + hp.def[1:]
	}
	return "1" + hp.def
}

// hostPorts are the compose services that publish ports, in their order.
var hostPorts = map[string][]hostPort{
	"postgres":          {{"POSTGRES_HOST_PORT", "5432", 5432}},
	"redis":             {{"REDIS_HOST_PORT", "6379", 6379}},
	"kafka":             {{"KAFKA_HOST_PORT", "9094", 9094}},
	"commerce-api":      {{"API_HOST_PORT", "8080", 8080}, {"API_ADMIN_HOST_PORT", "8090", 8090}},
	"product-consumers": {{"CONSUMERS_HOST_PORT", "8082", 8082}},
	"prometheus":        {{"PROMETHEUS_HOST_PORT", "9090", 9090}},
	"grafana":           {{"GRAFANA_HOST_PORT", "3000", 3000}},
	"jaeger":            {{"JAEGER_HOST_PORT", "16686", 16686}},
}

// TestComposeFirstRun checks what a first `docker compose up` on a machine
// that may already run PostgreSQL and Redis depends on: the PostgreSQL
// health check uses TCP (the image's init-time server listens on the socket
// only), migrate waits for the database, every port is published on
// 127.0.0.1 only and can be moved by a variable (Kafka advertising the moved
// port), and Kafka keeps its log in a volume.
func TestComposeFirstRun(t *testing.T) {
	t.Parallel()
	p := loadCompose(t)
	hc := strings.Join(p.Services["postgres"].HealthCheck.Test, " ")
	if !strings.Contains(hc, "pg_isready") || !strings.Contains(hc, "-h 127.0.0.1") {
		t.Errorf("the PostgreSQL health check must connect over TCP (pg_isready -h 127.0.0.1), got %q", hc)
	}
	if d, err := time.ParseDuration(env(p.Services["migrate"])["MIGRATE_CONNECT_TIMEOUT"]); err != nil || d < 30*time.Second {
		t.Errorf("migrate must retry its connection for a while (MIGRATE_CONNECT_TIMEOUT ≥ 30s), got %q", env(p.Services["migrate"])["MIGRATE_CONNECT_TIMEOUT"])
	}

	moved := []string{}
	for _, hps := range hostPorts {
		for _, hp := range hps {
			moved = append(moved, hp.env+"="+hp.moved())
		}
	}
	pm := loadComposeEnv(t, moved)
	for name, s := range p.Services {
		for _, port := range s.Ports {
			if port.HostIP != "127.0.0.1" {
				t.Errorf("%s publishes %d on %q; bind it to 127.0.0.1", name, port.Target, port.HostIP)
			}
		}
		hps, ok := hostPorts[name]
		if !ok {
			if len(s.Ports) != 0 {
				t.Errorf("%s publishes %v; add it to hostPorts with a variable to move it", name, s.Ports)
			}
			continue
		}
		check := func(proj *types.Project, moved bool) {
			ports := proj.Services[name].Ports
			if len(ports) != len(hps) {
				t.Errorf("%s publishes %+v, want %d ports", name, ports, len(hps))
				return
			}
			for i, hp := range hps {
				want := hp.def
				if moved {
					want = hp.moved()
				}
				if ports[i].Target != hp.port || ports[i].Published != want {
					t.Errorf("%s with %s: port %+v, want %s → %d", name, hp.env, ports[i], want, hp.port)
				}
			}
		}
		check(p, false)
		check(pm, true)
	}
	if got := env(pm.Services["kafka"])["KAFKA_ADVERTISED_LISTENERS"]; !strings.Contains(got, "EXTERNAL://localhost:19094") {
		t.Errorf("Kafka on a moved port must advertise it: %s", got)
	}

	kafka := p.Services["kafka"]
	logDir := env(kafka)["KAFKA_LOG_DIRS"]
	inVolume := false
	for _, v := range kafka.Volumes {
		inVolume = inVolume || v.Type == types.VolumeTypeVolume && v.Target == logDir && p.Volumes[v.Source].Name != ""
	}
	if logDir == "" || !inVolume {
		t.Errorf("Kafka's log (KAFKA_LOG_DIRS=%q) must be in a named volume; volumes %+v", logDir, kafka.Volumes)
	}
}

// TestComposeSmokeScript: the first-run script a user with Docker runs
// exists, parses, starts from fresh volumes with --wait and cleans up, and
// is not part of `make test` (which runs without a Docker engine).
func TestComposeSmokeScript(t *testing.T) {
	t.Parallel()
	const path = "scripts/compose-smoke.sh"
	info, err := os.Stat(filepath.Join(root, path))
	if err != nil || info.Mode()&0o111 == 0 {
		t.Fatalf("%s must exist and be executable: %v", path, err)
	}
	if out, err := exec.Command("bash", "-n", filepath.Join(root, path)).CombinedOutput(); err != nil {
		t.Fatalf("bash -n %s: %v\n%s", path, err, out)
	}
	script := string(readFile(t, path))
	for _, want := range []string{"up --build --detach --wait", "down -v", "docker stop", "relay_lease"} {
		if !strings.Contains(script, want) {
			t.Errorf("%s lacks %q", path, want)
		}
	}
	if strings.Contains(string(readFile(t, "Makefile")), "compose-smoke") {
		t.Error("the Makefile runs compose-smoke.sh; it needs Docker and must stay out of make test")
	}
	if !strings.Contains(string(readFile(t, "README.md")), "not part of `make test`") {
		t.Error("README.md must say compose-smoke.sh is not part of make test")
	}
}
