package deploy_test

import (
	"bytes"
	"encoding/json"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/loopers/commerce-pipeline/internal/kafka"
	"github.com/loopers/commerce-pipeline/pkg/events"
)

// strimziMeta is the metadata of a Strimzi resource as the manifests write
// it, decoded strictly with the resource.
type strimziMeta struct {
	Name      string            `json:"name"`
	Namespace string            `json:"namespace"`
	Labels    map[string]string `json:"labels"`
}

// kafkaTopic is the part of Strimzi's KafkaTopic (kafka.strimzi.io/v1)
// the base uses. The CRD is not in the client-go scheme, so it is decoded
// strictly into this: an unknown or misspelt field fails.
type kafkaTopic struct {
	APIVersion string      `json:"apiVersion"`
	Kind       string      `json:"kind"`
	Metadata   strimziMeta `json:"metadata"`
	Spec       struct {
		TopicName  string `json:"topicName"`
		Partitions int    `json:"partitions"`
		Replicas   int    `json:"replicas"`
		Config     struct {
			MinInsyncReplicas int   `json:"min.insync.replicas"`
			RetentionMs       int64 `json:"retention.ms"`
		} `json:"config"`
	} `json:"spec"`
}

// strimziKafka is the part of Strimzi's Kafka (kafka.strimzi.io/v1) that
// deploy/k8s/kafka uses, decoded strictly as kafkaTopic is.
type strimziKafka struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Spec struct {
		Kafka struct {
			Version         string `json:"version"`
			MetadataVersion string `json:"metadataVersion"`
			Listeners       []struct {
				Name           string `json:"name"`
				Port           int    `json:"port"`
				Type           string `json:"type"`
				TLS            bool   `json:"tls"`
				Authentication *struct {
					Type string `json:"type"`
				} `json:"authentication"`
			} `json:"listeners"`
			Authorization *struct {
				Type string `json:"type"`
			} `json:"authorization"`
			Config map[string]any `json:"config"`
		} `json:"kafka"`
		EntityOperator struct {
			TopicOperator *struct{} `json:"topicOperator"`
			UserOperator  *struct{} `json:"userOperator"`
		} `json:"entityOperator"`
	} `json:"spec"`
}

// kafkaNodePool is the part of Strimzi's KafkaNodePool (kafka.strimzi.io/v1)
// that deploy/k8s/kafka uses, decoded strictly.
type kafkaNodePool struct {
	APIVersion string      `json:"apiVersion"`
	Kind       string      `json:"kind"`
	Metadata   strimziMeta `json:"metadata"`
	Spec       struct {
		Replicas int      `json:"replicas"`
		Roles    []string `json:"roles"`
		Storage  struct {
			Type    string `json:"type"`
			Volumes []struct {
				ID            int    `json:"id"`
				Type          string `json:"type"`
				Size          string `json:"size"`
				DeleteClaim   bool   `json:"deleteClaim"`
				KraftMetadata string `json:"kraftMetadata"`
			} `json:"volumes"`
		} `json:"storage"`
		Resources corev1.ResourceRequirements `json:"resources"`
	} `json:"spec"`
}

// rendered is the kustomize base, every object decoded.
type rendered struct {
	deployments  map[string]*appsv1.Deployment
	statefulSets map[string]*appsv1.StatefulSet
	services     map[string]*corev1.Service
	pdbs         []*policyv1.PodDisruptionBudget
	hpas         []*autoscalingv2.HorizontalPodAutoscaler
	jobs         map[string]*batchv1.Job
	configMaps   map[string]*corev1.ConfigMap
	topics       []kafkaTopic
	users        []kafkaUser
	kafkas       []strimziKafka
	nodePools    []kafkaNodePool
	namespaces   []string // of every object
}

// renderBase builds deploy/k8s/base as kubectl apply -k would and decodes
// every object strictly: the Kubernetes kinds with the client-go scheme,
// Strimzi's kinds into their structs.
func renderBase(t *testing.T) rendered {
	t.Helper()
	return render(t, "deploy/k8s/base")
}

// render builds the kustomization in dir and decodes it as renderBase does.
func render(t *testing.T, dir string) rendered {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	abs, err := filepath.Abs(filepath.Join(root, dir))
	if err != nil {
		t.Fatal(err)
	}
	resMap, err := k.Run(filesys.MakeFsOnDisk(), abs)
	if err != nil {
		t.Fatalf("kustomize build: %v", err)
	}
	strict := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
	r := rendered{
		deployments: map[string]*appsv1.Deployment{}, statefulSets: map[string]*appsv1.StatefulSet{}, services: map[string]*corev1.Service{},
		jobs: map[string]*batchv1.Job{}, configMaps: map[string]*corev1.ConfigMap{},
	}
	for _, res := range resMap.Resources() {
		y, err := res.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		r.namespaces = append(r.namespaces, res.GetNamespace())
		// Strimzi's kinds are not in the client-go scheme: each is decoded
		// strictly into its struct.
		var custom any
		switch res.GetKind() {
		case "KafkaTopic":
			r.topics = append(r.topics, kafkaTopic{})
			custom = &r.topics[len(r.topics)-1]
		case "KafkaUser":
			r.users = append(r.users, kafkaUser{})
			custom = &r.users[len(r.users)-1]
		case "Kafka":
			r.kafkas = append(r.kafkas, strimziKafka{})
			custom = &r.kafkas[len(r.kafkas)-1]
		case "KafkaNodePool":
			r.nodePools = append(r.nodePools, kafkaNodePool{})
			custom = &r.nodePools[len(r.nodePools)-1]
		}
		if custom != nil {
			j, err := res.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			dec := json.NewDecoder(bytes.NewReader(j))
			dec.DisallowUnknownFields()
			if err := dec.Decode(custom); err != nil {
				t.Errorf("%s %s: %v", res.GetKind(), res.GetName(), err)
			}
			continue
		}
		var obj runtime.Object
		if obj, _, err = strict.Decode(y, nil, nil); err != nil {
			t.Errorf("%s %s does not decode strictly: %v", res.GetKind(), res.GetName(), err)
			continue
		}
		switch o := obj.(type) {
		case *appsv1.Deployment:
			r.deployments[o.Name] = o
		case *appsv1.StatefulSet:
			r.statefulSets[o.Name] = o
		case *corev1.Service:
			r.services[o.Name] = o
		case *policyv1.PodDisruptionBudget:
			r.pdbs = append(r.pdbs, o)
		case *autoscalingv2.HorizontalPodAutoscaler:
			r.hpas = append(r.hpas, o)
		case *batchv1.Job:
			r.jobs[o.Name] = o
		case *corev1.ConfigMap:
			r.configMaps[o.Name] = o
		default:
			t.Errorf("unexpected %T %s in the base", obj, res.GetName())
		}
	}
	return r
}

// pods returns the pod template of each workload (Deployment or
// StatefulSet), by name.
func (r rendered) pods() map[string]*corev1.PodTemplateSpec {
	out := map[string]*corev1.PodTemplateSpec{}
	for name, d := range r.deployments {
		out[name] = &d.Spec.Template
	}
	for name, s := range r.statefulSets {
		out[name] = &s.Spec.Template
	}
	return out
}

// k8sProbes returns the HTTP paths each workload's probes GET.
func k8sProbes(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for name, pod := range renderBase(t).pods() {
		c := pod.Spec.Containers[0]
		for _, p := range []*corev1.Probe{c.StartupProbe, c.LivenessProbe, c.ReadinessProbe} {
			if p != nil && p.HTTPGet != nil {
				out[name] = append(out[name], p.HTTPGet.Path)
			}
		}
	}
	return out
}

func TestKustomizeServices(t *testing.T) {
	t.Parallel()
	r := renderBase(t)
	for svc := range adminVar {
		t.Run(svc, func(t *testing.T) {
			t.Parallel()
			pod, ok := r.pods()[svc]
			if !ok {
				t.Fatalf("no Deployment or StatefulSet %s", svc)
			}
			checkPodSecurity(t, pod.Spec)
			if len(pod.Spec.Containers) != 1 {
				t.Fatalf("want one container, got %d", len(pod.Spec.Containers))
			}
			c := pod.Spec.Containers[0]
			if c.Image != "commerce-pipeline/"+svc+":dev" {
				t.Errorf("image %q", c.Image)
			}
			checkMigrateInit(t, r, pod.Spec)
			checkMemoryLimit(t, c)
			set := containerEnv(t, r, c)
			checkEnv(t, svc, set)
			port := addrPort(t, set, adminVar[svc])

			// Probes and Prometheus go to the admin port.
			probes := map[string]*corev1.Probe{"startup": c.StartupProbe, "liveness": c.LivenessProbe, "readiness": c.ReadinessProbe}
			wantPath := map[string]string{"startup": "/healthz", "liveness": "/healthz", "readiness": "/readyz"}
			for kind, p := range probes {
				if p == nil || p.HTTPGet == nil {
					t.Errorf("no HTTP %s probe", kind)
					continue
				}
				if p.HTTPGet.Path != wantPath[kind] {
					t.Errorf("%s probe GETs %s, want %s", kind, p.HTTPGet.Path, wantPath[kind])
				}
				if got := containerPort(c, p.HTTPGet.Port.String()); strconv.Itoa(int(got)) != port {
					t.Errorf("%s probe port %s is container port %d; the admin listener is on %s", kind, p.HTTPGet.Port.String(), got, port)
				}
			}
			if pod.Annotations["prometheus.io/port"] != port {
				t.Errorf("prometheus.io/port annotation %q, the admin listener (/metrics) is on %s", pod.Annotations["prometheus.io/port"], port)
			}

			// The Service carries the public port where there is one, and
			// then never the admin port; otherwise the admin port, inside
			// the cluster only.
			want := port
			if v, ok := publicVar[svc]; ok {
				want = addrPort(t, set, v)
			}
			s, ok := r.services[svc]
			if !ok || !labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(pod.Labels)) {
				t.Errorf("no Service selects the %s pods", svc)
			} else {
				for _, sp := range s.Spec.Ports {
					if got := containerPort(c, sp.TargetPort.String()); strconv.Itoa(int(got)) != want {
						t.Errorf("Service port %s targets container port %d, want %s", sp.Name, got, want)
					}
				}
			}
			for _, other := range r.services {
				if !labels.SelectorFromSet(other.Spec.Selector).Matches(labels.Set(pod.Labels)) {
					continue
				}
				if typ := other.Spec.Type; typ != "" && typ != corev1.ServiceTypeClusterIP {
					t.Errorf("Service %s is %s; the pods' ports stay inside the cluster (an Ingress publishes the API)", other.Name, typ)
				}
				for _, sp := range other.Spec.Ports {
					if _, public := publicVar[svc]; public && strconv.Itoa(int(containerPort(c, sp.TargetPort.String()))) == port {
						t.Errorf("Service %s exposes the admin port %s", other.Name, port)
					}
				}
			}
			pdbs := 0
			for _, pdb := range r.pdbs {
				if labels.SelectorFromSet(pdb.Spec.Selector.MatchLabels).Matches(labels.Set(pod.Labels)) {
					pdbs++
				}
			}
			if pdbs != 1 {
				t.Errorf("%d PodDisruptionBudgets select the pods, want 1", pdbs)
			}
		})
	}

	if d := r.deployments["outbox-relay"]; d == nil || d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Error("outbox-relay must run 2 replicas")
	}
	if s := r.statefulSets["product-consumers"]; s != nil && s.Spec.Replicas != nil {
		t.Error("product-consumers sets replicas, fighting its HorizontalPodAutoscaler")
	}
	if len(r.hpas) != 1 || r.hpas[0].Spec.ScaleTargetRef.Kind != "StatefulSet" || r.hpas[0].Spec.ScaleTargetRef.Name != "product-consumers" {
		t.Errorf("want one HorizontalPodAutoscaler on StatefulSet product-consumers, got %+v", r.hpas)
	} else if max := r.hpas[0].Spec.MaxReplicas; max > 3 {
		t.Errorf("HPA maxReplicas %d exceeds the 3 partitions per topic", max)
	}

	// A Job's pod template is immutable: re-applying the base with a new
	// migrate tag would fail. Migrations run as init containers instead.
	if len(r.jobs) != 0 {
		t.Errorf("the base has Jobs %v; run migrations as init containers", slices.Collect(maps.Keys(r.jobs)))
	}
}

// checkMigrateInit: the pod runs the migrations before its service starts,
// waiting for the database a bounded time.
func checkMigrateInit(t *testing.T, r rendered, spec corev1.PodSpec) {
	t.Helper()
	if len(spec.InitContainers) != 1 || spec.InitContainers[0].Image != "commerce-pipeline/migrate:dev" {
		t.Errorf("want one init container running commerce-pipeline/migrate:dev, got %+v", spec.InitContainers)
		return
	}
	set := containerEnv(t, r, spec.InitContainers[0])
	checkEnv(t, "migrate", set)
	if set["MIGRATE_CONNECT_TIMEOUT"] == "" {
		t.Error("the migrate init container must set MIGRATE_CONNECT_TIMEOUT (the database may start with the pods)")
	}
}

// goRuntimeVars are read by the Go runtime, not by a configuration struct.
var goRuntimeVars = map[string]bool{"GOMEMLIMIT": true, "MEMORY_LIMIT_MIB": true}

// checkMemoryLimit: GOMEMLIMIT is derived from the container's own memory
// limit (the relay raises GOGC, so without it the heap could grow to the
// OOM killer), in a form the runtime parses, below the limit.
func checkMemoryLimit(t *testing.T, c corev1.Container) {
	t.Helper()
	var mib, limit *corev1.EnvVar
	for i, e := range c.Env {
		switch e.Name {
		case "MEMORY_LIMIT_MIB":
			mib = &c.Env[i]
		case "GOMEMLIMIT":
			limit = &c.Env[i]
			if mib == nil {
				t.Error("GOMEMLIMIT comes before MEMORY_LIMIT_MIB, so $(MEMORY_LIMIT_MIB) does not expand")
			}
		}
	}
	if mib == nil || limit == nil {
		t.Fatalf("container %s must set MEMORY_LIMIT_MIB and GOMEMLIMIT", c.Name)
	}
	ref := mib.ValueFrom
	if ref == nil || ref.ResourceFieldRef == nil || ref.ResourceFieldRef.Resource != "limits.memory" ||
		ref.ResourceFieldRef.ContainerName != c.Name || ref.ResourceFieldRef.Divisor.String() != "1Mi" {
		t.Errorf("MEMORY_LIMIT_MIB must be the container's limits.memory in 1Mi: %+v", ref)
	}
	// Expand as the kubelet does, with the container's limit, and parse as
	// the runtime does (a number and a unit suffix).
	n := c.Resources.Limits.Memory().Value() >> 20
	v := strings.ReplaceAll(limit.Value, "$(MEMORY_LIMIT_MIB)", strconv.FormatInt(n, 10))
	num, ok := strings.CutSuffix(v, "B")
	bytes, err := strconv.ParseInt(num, 10, 64)
	if !ok || err != nil || bytes <= 0 || bytes >= c.Resources.Limits.Memory().Value() || bytes < c.Resources.Limits.Memory().Value()*9/10 {
		t.Errorf("GOMEMLIMIT %q expands to %q: want bytes between 90 %% and 100 %% of the %s limit", limit.Value, v, c.Resources.Limits.Memory())
	}
}

func containerPort(c corev1.Container, nameOrNumber string) int32 {
	for _, p := range c.Ports {
		if p.Name == nameOrNumber || strconv.Itoa(int(p.ContainerPort)) == nameOrNumber {
			return p.ContainerPort
		}
	}
	return 0
}

// containerEnv returns the variables a container gets, from env and from the
// ConfigMaps of envFrom (which must exist in the base). Secret and field
// values are not in the base: they appear as fromCluster.
func containerEnv(t *testing.T, r rendered, c corev1.Container) map[string]string {
	t.Helper()
	set := map[string]string{}
	for _, from := range c.EnvFrom {
		if from.ConfigMapRef == nil {
			t.Errorf("envFrom %+v: only ConfigMaps", from)
			continue
		}
		cm, ok := r.configMaps[from.ConfigMapRef.Name]
		if !ok {
			t.Errorf("envFrom names ConfigMap %s, which the base does not have", from.ConfigMapRef.Name)
			continue
		}
		for k, v := range cm.Data {
			set[k] = v
		}
	}
	for _, e := range c.Env {
		switch {
		case goRuntimeVars[e.Name]:
			// Checked by checkMemoryLimit.
		case e.ValueFrom == nil:
			set[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			// Only where the program cannot read the value from a file
			// (TestSecretFiles).
			if ref := e.ValueFrom.SecretKeyRef; ref.Name != pipelineSecret || ref.Key != secretKey(e.Name) {
				t.Errorf("%s comes from secret %s key %s, want %s key %s", e.Name, ref.Name, ref.Key, pipelineSecret, secretKey(e.Name))
			}
			set[e.Name] = fromCluster
		case e.ValueFrom.FieldRef != nil:
			set[e.Name] = fromCluster
		default:
			t.Errorf("%s: unexpected valueFrom", e.Name)
		}
	}
	return set
}

// checkPodSecurity: non-root, read-only root filesystem, no privilege
// escalation, no capabilities, resources requested and memory bounded.
func checkPodSecurity(t *testing.T, spec corev1.PodSpec) {
	t.Helper()
	if sc := spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Error("pod must set runAsNonRoot")
	}
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		sc := c.SecurityContext
		switch {
		case sc == nil:
			t.Errorf("container %s has no securityContext", c.Name)
			continue
		case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
			t.Errorf("container %s: root filesystem must be read-only", c.Name)
		case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
			t.Errorf("container %s: privilege escalation must be off", c.Name)
		case sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL"):
			t.Errorf("container %s must drop all capabilities", c.Name)
		}
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
			t.Errorf("container %s must request CPU and memory and limit memory", c.Name)
		}
	}
}

// TestStaticMembership: product-consumers keeps its static group
// membership through a rollout. It runs as a StatefulSet (pod names survive
// restarts and rollouts) whose pod name is each consumer's member id, behind
// the headless Service that governs it, with a session timeout a replaced
// pod comes back within; no Deployment runs it with static membership on
// (a Deployment's pods get new names at every rollout).
func TestStaticMembership(t *testing.T) {
	t.Parallel()
	r := renderBase(t)
	s, ok := r.statefulSets["product-consumers"]
	if !ok {
		t.Fatal("product-consumers must be a StatefulSet: its pod names are its static member ids")
	}
	c := s.Spec.Template.Spec.Containers[0]
	fieldOf := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			fieldOf[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	for _, v := range []string{"CLUSTER_NODE_ID", "CLUSTER_NODE_ID"} {
		if fieldOf[v] != "metadata.name" {
			t.Errorf("%s must be the pod name (fieldRef metadata.name), got %q", v, fieldOf[v])
		}
	}
	set := containerEnv(t, r, c)
	if v := set["PRODUCT_CONSUMERS_STATIC_MEMBERSHIP"]; v != "" && v != "true" {
		t.Errorf("PRODUCT_CONSUMERS_STATIC_MEMBERSHIP=%q in the StatefulSet", v)
	}
	// A pod replaced by a rollout restarts (migrations included) before
	// the session times out, or the broker rebalances anyway.
	if d, err := time.ParseDuration(set["PRODUCT_CONSUMERS_SESSION_TIMEOUT"]); err != nil || d < 30*time.Second {
		t.Errorf("PRODUCT_CONSUMERS_SESSION_TIMEOUT=%q; want at least 30s, the time a replaced pod needs to rejoin", set["PRODUCT_CONSUMERS_SESSION_TIMEOUT"])
	}
	gov, ok := r.services[s.Spec.ServiceName]
	if !ok || gov.Spec.ClusterIP != corev1.ClusterIPNone || !labels.SelectorFromSet(gov.Spec.Selector).Matches(labels.Set(s.Spec.Template.Labels)) {
		t.Errorf("serviceName %q must name a headless Service selecting the pods", s.Spec.ServiceName)
	}
	if s.Spec.UpdateStrategy.Type != "" && s.Spec.UpdateStrategy.Type != appsv1.RollingUpdateStatefulSetStrategyType {
		t.Errorf("update strategy %s; a rollout must replace pods one by one", s.Spec.UpdateStrategy.Type)
	}
	for name, d := range r.deployments {
		for _, c := range d.Spec.Template.Spec.Containers {
			if strings.Contains(c.Image, "product-consumers") && containerEnv(t, r, c)["PRODUCT_CONSUMERS_STATIC_MEMBERSHIP"] != "false" {
				t.Errorf("Deployment %s runs product-consumers with static membership: its pods are renamed at every rollout", name)
			}
		}
	}
}

// TestKustomizeTopics: one KafkaTopic per topic, DLT and parked topic of
// pkg/events: 3 partitions and replicas, min.insync.replicas 2, retention 7
// days (parked: events.ParkedRetention).
func TestKustomizeTopics(t *testing.T) {
	t.Parallel()
	r := renderBase(t)
	var got []string
	for _, kt := range r.topics {
		got = append(got, kt.Spec.TopicName)
		// Strimzi 1.0 serves only v1.
		if kt.APIVersion != "kafka.strimzi.io/v1" || kt.Metadata.Labels["strimzi.io/cluster"] == "" {
			t.Errorf("%s: apiVersion %s, labels %v", kt.Metadata.Name, kt.APIVersion, kt.Metadata.Labels)
		}
		c := kt.Spec.Config
		retention := 7 * 24 * time.Hour
		if strings.HasSuffix(kt.Spec.TopicName, events.ParkedSuffix) {
			retention = events.ParkedRetention
		}
		if kt.Spec.Partitions != 3 || kt.Spec.Replicas != 3 || c.MinInsyncReplicas != 2 || time.Duration(c.RetentionMs)*time.Millisecond != retention {
			t.Errorf("%s: partitions %d, replicas %d, min.insync.replicas %d, retention %s; want 3, 3, 2, %s",
				kt.Spec.TopicName, kt.Spec.Partitions, kt.Spec.Replicas, c.MinInsyncReplicas, time.Duration(c.RetentionMs)*time.Millisecond, retention)
		}
	}
	want := events.NewRegistry().AllTopics()
	slices.Sort(got)
	slices.Sort(want)
	if diff := cmpDiff(want, got); diff != "" {
		t.Errorf("KafkaTopics differ from pkg/events (-want +got):\n%s", diff)
	}
}

// TestKustomizeKafka: deploy/k8s/kafka is the cluster the base expects. Its
// name is the KafkaTopics' and KafkaUsers' strimzi.io/cluster label, its
// TLS listener with SCRAM-SHA-512 logins is the ConfigMap's KAFKA_BROKERS,
// its authorizer enforces the KafkaUsers' ACLs, it has enough brokers for
// the topics' replicas with one down (min.insync.replicas), a controller
// quorum, and the Topic and User Operators that create the topics and
// users. The base itself holds no Kafka, so
// it applies to a namespace whose cluster exists already.
func TestKustomizeKafka(t *testing.T) {
	t.Parallel()
	base := renderBase(t)
	if len(base.kafkas) != 0 || len(base.nodePools) != 0 {
		t.Errorf("the base holds %d Kafka and %d KafkaNodePool objects; the cluster belongs in deploy/k8s/kafka", len(base.kafkas), len(base.nodePools))
	}
	r := render(t, "deploy/k8s/kafka")
	if len(r.kafkas) != 1 {
		t.Fatalf("deploy/k8s/kafka holds %d Kafka objects, want 1", len(r.kafkas))
	}
	k := r.kafkas[0]
	if k.APIVersion != "kafka.strimzi.io/v1" {
		t.Errorf("Kafka apiVersion %s, want kafka.strimzi.io/v1", k.APIVersion)
	}
	for _, kt := range base.topics {
		if got := kt.Metadata.Labels["strimzi.io/cluster"]; got != k.Metadata.Name {
			t.Errorf("KafkaTopic %s belongs to cluster %q, but deploy/k8s/kafka's Kafka is %q", kt.Metadata.Name, got, k.Metadata.Name)
		}
	}

	for _, u := range base.users {
		if got := u.Metadata.Labels["strimzi.io/cluster"]; got != k.Metadata.Name {
			t.Errorf("KafkaUser %s belongs to cluster %q, but deploy/k8s/kafka's Kafka is %q", u.Metadata.Name, got, k.Metadata.Name)
		}
	}
	checkKafkaSecurity(t, base, k)

	brokers, controllers := 0, 0
	for _, p := range r.nodePools {
		if p.APIVersion != "kafka.strimzi.io/v1" || p.Metadata.Labels["strimzi.io/cluster"] != k.Metadata.Name {
			t.Errorf("KafkaNodePool %s: apiVersion %s, labels %v; want kafka.strimzi.io/v1 and strimzi.io/cluster %s",
				p.Metadata.Name, p.APIVersion, p.Metadata.Labels, k.Metadata.Name)
		}
		if slices.Contains(p.Spec.Roles, "broker") {
			brokers += p.Spec.Replicas
		}
		if slices.Contains(p.Spec.Roles, "controller") {
			controllers += p.Spec.Replicas
		}
		for _, v := range p.Spec.Storage.Volumes {
			if v.Type != "persistent-claim" || v.DeleteClaim {
				t.Errorf("KafkaNodePool %s volume %d: type %s, deleteClaim %v; want a persistent claim kept when the pool goes", p.Metadata.Name, v.ID, v.Type, v.DeleteClaim)
			}
		}
	}
	// An odd quorum of at least three survives one controller down.
	if controllers < 3 || controllers%2 == 0 {
		t.Errorf("%d controllers; want an odd number, at least 3", controllers)
	}
	for _, kt := range base.topics {
		if kt.Spec.Replicas > brokers || kt.Spec.Config.MinInsyncReplicas >= kt.Spec.Replicas {
			t.Errorf("KafkaTopic %s: %d replicas, min.insync.replicas %d on %d brokers: acks=all writes stop when one broker is down",
				kt.Metadata.Name, kt.Spec.Replicas, kt.Spec.Config.MinInsyncReplicas, brokers)
		}
	}

	cfg := k.Spec.Kafka.Config
	if cfg["auto.create.topics.enable"] != false {
		t.Errorf("auto.create.topics.enable is %v; topics are infrastructure (the KafkaTopics), never created on demand", cfg["auto.create.topics.enable"])
	}
	for _, key := range []string{"offsets.topic.replication.factor", "transaction.state.log.replication.factor", "share.coordinator.state.topic.replication.factor", "default.replication.factor"} {
		if rf, ok := cfg[key].(float64); !ok || int(rf) > brokers || int(rf) < 3 {
			t.Errorf("%s is %v; want 3 to %d (the brokers)", key, cfg[key], brokers)
		}
	}
	if k.Spec.EntityOperator.TopicOperator == nil {
		t.Error("the Kafka runs no Topic Operator: nothing would create the base's KafkaTopics")
	}
	if k.Spec.EntityOperator.UserOperator == nil {
		t.Error("the Kafka runs no User Operator: nothing would create the base's KafkaUsers, their ACLs and their Secrets")
	}
}

// checkKafkaSecurity: the cluster k lets nobody in without TLS and a login,
// and authorizes every request (the KafkaUsers' ACLs); the base's services
// reach it through a listener that takes their SCRAM-SHA-512 logins, over
// TLS, trusting the cluster CA that Strimzi keeps in <cluster>-cluster-ca-cert.
func checkKafkaSecurity(t *testing.T, base rendered, k strimziKafka) {
	t.Helper()
	if a := k.Spec.Kafka.Authorization; a == nil || a.Type != "simple" {
		t.Errorf("the Kafka's authorization is %+v; want simple: without an authorizer the KafkaUsers' ACLs mean nothing", a)
	}
	// Strimzi's bootstrap Service is <cluster>-kafka-bootstrap, one port per
	// listener.
	var bootstrap []string
	for _, l := range k.Spec.Kafka.Listeners {
		if !l.TLS || l.Authentication == nil {
			t.Errorf("listener %s (port %d): tls %v, authentication %+v; every listener must encrypt and authenticate", l.Name, l.Port, l.TLS, l.Authentication)
			continue
		}
		if l.Type == "internal" && l.Authentication.Type == "scram-sha-512" {
			bootstrap = append(bootstrap, k.Metadata.Name+"-kafka-bootstrap:"+strconv.Itoa(l.Port))
		}
	}
	var cm map[string]string
	for _, c := range base.configMaps {
		if _, ok := c.Data["KAFKA_BROKERS"]; ok {
			cm = c.Data
		}
	}
	if !slices.Contains(bootstrap, cm["KAFKA_BROKERS"]) {
		t.Errorf("the base's KAFKA_BROKERS is %q; the cluster's TLS bootstrap addresses with SCRAM-SHA-512 logins are %v", cm["KAFKA_BROKERS"], bootstrap)
	}
	if cm["KAFKA_TLS"] != "true" || cm["KAFKA_SASL_MECHANISM"] != kafka.MechanismSCRAMSHA512 {
		t.Errorf("the base's KAFKA_TLS=%q, KAFKA_SASL_MECHANISM=%q; want true and %s", cm["KAFKA_TLS"], cm["KAFKA_SASL_MECHANISM"], kafka.MechanismSCRAMSHA512)
	}
	clusterCA := k.Metadata.Name + "-cluster-ca-cert"
	for name, pod := range base.pods() {
		for _, c := range pod.Spec.Containers {
			env := containerEnv(t, base, c)
			if env["KAFKA_BROKERS"] == "" {
				continue
			}
			f, why := resolveSecretFile(pod.Spec, c, env["KAFKA_TLS_CA_FILE"])
			switch {
			case why != "":
				t.Errorf("%s: KAFKA_TLS_CA_FILE=%q: %s", name, env["KAFKA_TLS_CA_FILE"], why)
			case f.secret != clusterCA || f.key != "ca.crt":
				t.Errorf("%s: KAFKA_TLS_CA_FILE reads Secret %s key %s; the brokers' certificates chain to Strimzi's cluster CA, %s key ca.crt", name, f.secret, f.key, clusterCA)
			}
		}
	}
}

// TestKustomizeOverlay: the example overlay the README documents puts every
// object in its namespace (the Secret the pods read is namespaced too) and
// every image, init containers included, in a registry.
func TestKustomizeOverlay(t *testing.T) {
	t.Parallel()
	r := render(t, "deploy/k8s/overlays/example")
	for _, ns := range r.namespaces {
		if ns != "commerce" {
			t.Errorf("an object in namespace %q, want commerce", ns)
		}
	}
	if len(r.pods()) != 3 {
		t.Fatalf("%d Deployments and StatefulSets, want 3", len(r.pods()))
	}
	for name, pod := range r.pods() {
		spec := pod.Spec
		for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
			host, _, _ := strings.Cut(c.Image, "/")
			if !strings.Contains(host, ".") || !strings.Contains(c.Image, ":") || strings.HasSuffix(c.Image, ":dev") {
				t.Errorf("%s container %s image %q: want registry/name:tag", name, c.Name, c.Image)
			}
		}
	}
}

// TestKustomizeAPIAuth: commerce-api verifies bearer tokens everywhere the
// manifests run it (header mode would take whatever X-User-ID a caller
// sends). The base names no identity provider, so that no placeholder can
// be deployed by mistake; the example overlay names one, over https.
func TestKustomizeAPIAuth(t *testing.T) {
	t.Parallel()
	provider := []string{"COMMERCE_API_AUTH_ISSUER", "COMMERCE_API_AUTH_AUDIENCE", "COMMERCE_API_AUTH_JWKS_URL"}
	for _, tc := range []struct {
		dir      string
		provider bool
	}{
		{"deploy/k8s/base", false},
		{"deploy/k8s/overlays/example", true},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			t.Parallel()
			r := render(t, tc.dir)
			pod, ok := r.pods()["commerce-api"]
			if !ok {
				t.Fatal("no commerce-api")
			}
			env := containerEnv(t, r, pod.Spec.Containers[0])
			if env["COMMERCE_API_AUTH_MODE"] != "jwt" {
				t.Errorf("COMMERCE_API_AUTH_MODE=%q, want jwt", env["COMMERCE_API_AUTH_MODE"])
			}
			for _, v := range provider {
				if got := env[v] != ""; got != tc.provider {
					t.Errorf("%s=%q; want it set: %v", v, env[v], tc.provider)
				}
			}
			for _, v := range []string{"COMMERCE_API_AUTH_ISSUER", "COMMERCE_API_AUTH_JWKS_URL"} {
				if tc.provider && !strings.HasPrefix(env[v], "https://") {
					t.Errorf("%s=%q, want an https URL", v, env[v])
				}
			}
		})
	}
}

// TestDeployReadme: the commands deploy/README.md gives put the Secret in
// the overlay's namespace and never wait without a bound.
func TestDeployReadme(t *testing.T) {
	t.Parallel()
	text := string(readFile(t, "deploy/README.md"))
	waits, secrets := 0, 0
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "kubectl") && strings.Contains(line, " wait ") {
			waits++
			if !strings.Contains(line, "--timeout=") {
				t.Errorf("%q waits without --timeout", line)
			}
		}
		if strings.HasPrefix(line, "kubectl") && strings.Contains(line, "create secret") {
			secrets++
			if !strings.Contains(line, "-n commerce") {
				t.Errorf("%q does not create the Secret in the overlay's namespace", line)
			}
		}
	}
	if waits == 0 || secrets == 0 {
		t.Errorf("deploy/README.md gives %d kubectl wait and %d create secret commands; want both", waits, secrets)
	}
	if !strings.Contains(text, "overlays/example") {
		t.Error("deploy/README.md does not point at the example overlay")
	}
}

// TestKustomizeTelemetry: every service takes its tracing set-up from the
// ConfigMap commerce-pipeline-telemetry: 1 % of new requests sampled,
// parent-based. The base names no OTLP endpoint (tracing off); the example
// overlay names a collector's, the same for every service.
func TestKustomizeTelemetry(t *testing.T) {
	t.Parallel()
	const endpoint = "http://otel-collector.observability.svc:4318"
	for _, tc := range []struct {
		dir, endpoint string
	}{
		{"deploy/k8s/base", ""},
		{"deploy/k8s/overlays/example", endpoint},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			t.Parallel()
			r := render(t, tc.dir)
			got := map[string][3]string{}
			want := map[string][3]string{}
			for svc := range adminVar {
				pod, ok := r.pods()[svc]
				if !ok {
					t.Fatalf("no %s", svc)
				}
				env := containerEnv(t, r, pod.Spec.Containers[0])
				got[svc] = [3]string{env["OTEL_EXPORTER_OTLP_ENDPOINT"], env["OTEL_TRACES_SAMPLER"], env["OTEL_TRACES_SAMPLER_ARG"]}
				want[svc] = [3]string{tc.endpoint, "parentbased_traceidratio", "0.01"}
			}
			if diff := cmpDiff(want, got); diff != "" {
				t.Errorf("endpoint, sampler and its argument by service (-want +got):\n%s", diff)
			}
		})
	}
}
