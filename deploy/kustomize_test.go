package deploy_test

import (
	"bytes"
	"encoding/json"
	"net"
	"path/filepath"
	"slices"
	"strconv"
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

	"github.com/loopers/commerce-pipeline/pkg/events"
)

// kafkaTopic is the part of Strimzi's KafkaTopic (kafka.strimzi.io/v1beta2)
// the base uses. The CRD is not in the client-go scheme, so it is decoded
// strictly into this: an unknown or misspelt field fails.
type kafkaTopic struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		TopicName  string `json:"topicName"`
		Partitions int    `json:"partitions"`
		Replicas   int    `json:"replicas"`
		Config     struct {
			MinInsyncReplicas int   `json:"min.insync.replicas"`
			RetentionMs       int64 `json:"retention.ms"`
		} `json:"config"`
	} `json:"spec"`
}

// rendered is the kustomize base, every object decoded.
type rendered struct {
	deployments map[string]*appsv1.Deployment
	services    map[string]*corev1.Service
	pdbs        []*policyv1.PodDisruptionBudget
	hpas        []*autoscalingv2.HorizontalPodAutoscaler
	jobs        map[string]*batchv1.Job
	configMaps  map[string]*corev1.ConfigMap
	topics      []kafkaTopic
}

// renderBase builds deploy/k8s/base as kubectl apply -k would and decodes
// every object strictly: the Kubernetes kinds with the client-go scheme,
// KafkaTopic into its struct.
func renderBase(t *testing.T) rendered {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	abs, err := filepath.Abs(filepath.Join(root, "deploy/k8s/base"))
	if err != nil {
		t.Fatal(err)
	}
	resMap, err := k.Run(filesys.MakeFsOnDisk(), abs)
	if err != nil {
		t.Fatalf("kustomize build: %v", err)
	}
	strict := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
	r := rendered{
		deployments: map[string]*appsv1.Deployment{}, services: map[string]*corev1.Service{},
		jobs: map[string]*batchv1.Job{}, configMaps: map[string]*corev1.ConfigMap{},
	}
	for _, res := range resMap.Resources() {
		y, err := res.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		if res.GetKind() == "KafkaTopic" {
			j, err := res.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			var kt kafkaTopic
			dec := json.NewDecoder(bytes.NewReader(j))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&kt); err != nil {
				t.Errorf("KafkaTopic %s: %v", res.GetName(), err)
			}
			r.topics = append(r.topics, kt)
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

// k8sProbes returns the HTTP paths each Deployment's probes GET.
func k8sProbes(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for name, d := range renderBase(t).deployments {
		c := d.Spec.Template.Spec.Containers[0]
		for _, p := range []*corev1.Probe{c.StartupProbe, c.LivenessProbe, c.ReadinessProbe} {
			if p != nil && p.HTTPGet != nil {
				out[name] = append(out[name], p.HTTPGet.Path)
			}
		}
	}
	return out
}

func TestKustomizeServices(t *testing.T) {
	r := renderBase(t)
	for svc := range listenVar {
		t.Run(svc, func(t *testing.T) {
			d, ok := r.deployments[svc]
			if !ok {
				t.Fatalf("no Deployment %s", svc)
			}
			pod := d.Spec.Template
			checkPodSecurity(t, pod.Spec)
			if len(pod.Spec.Containers) != 1 {
				t.Fatalf("want one container, got %d", len(pod.Spec.Containers))
			}
			c := pod.Spec.Containers[0]
			if c.Image != "commerce-pipeline/"+svc+":dev" {
				t.Errorf("image %q", c.Image)
			}
			set := containerEnv(t, r, c)
			checkEnv(t, svc, set)
			_, port, err := net.SplitHostPort(set[listenVar[svc]])
			if err != nil {
				t.Fatalf("%s=%q: %v", listenVar[svc], set[listenVar[svc]], err)
			}

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
					t.Errorf("%s probe port %s is container port %d; the service listens on %s", kind, p.HTTPGet.Port.String(), got, port)
				}
			}
			if d.Spec.Template.Annotations["prometheus.io/port"] != port {
				t.Errorf("prometheus.io/port annotation %q, service listens on %s", d.Spec.Template.Annotations["prometheus.io/port"], port)
			}

			s, ok := r.services[svc]
			if !ok || !labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(pod.Labels)) {
				t.Errorf("no Service selects the %s pods", svc)
			} else if got := containerPort(c, s.Spec.Ports[0].TargetPort.String()); strconv.Itoa(int(got)) != port {
				t.Errorf("Service targets container port %d, service listens on %s", got, port)
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
	if d := r.deployments["product-consumers"]; d != nil && d.Spec.Replicas != nil {
		t.Error("product-consumers sets replicas, fighting its HorizontalPodAutoscaler")
	}
	if len(r.hpas) != 1 || r.hpas[0].Spec.ScaleTargetRef.Kind != "Deployment" || r.hpas[0].Spec.ScaleTargetRef.Name != "product-consumers" {
		t.Errorf("want one HorizontalPodAutoscaler on Deployment product-consumers, got %d", len(r.hpas))
	} else if max := r.hpas[0].Spec.MaxReplicas; max > 3 {
		t.Errorf("HPA maxReplicas %d exceeds the 3 partitions per topic", max)
	}

	job, ok := r.jobs["migrate"]
	if !ok {
		t.Fatal("no migration Job")
	}
	checkPodSecurity(t, job.Spec.Template.Spec)
	checkEnv(t, "migrate", containerEnv(t, r, job.Spec.Template.Spec.Containers[0]))
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
		case e.ValueFrom == nil:
			set[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			if ref := e.ValueFrom.SecretKeyRef; ref.Name != "commerce-pipeline-secrets" || ref.Key != e.Name {
				t.Errorf("%s comes from secret %s key %s, want commerce-pipeline-secrets key %s", e.Name, ref.Name, ref.Key, e.Name)
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
	for _, c := range spec.Containers {
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

// TestKustomizeTopics: one KafkaTopic per topic and DLT of pkg/events, with
// the broker settings of seed 002 §5.3.
func TestKustomizeTopics(t *testing.T) {
	r := renderBase(t)
	var got []string
	for _, kt := range r.topics {
		got = append(got, kt.Spec.TopicName)
		if kt.APIVersion != "kafka.strimzi.io/v1beta2" || kt.Metadata.Labels["strimzi.io/cluster"] == "" {
			t.Errorf("%s: apiVersion %s, labels %v", kt.Metadata.Name, kt.APIVersion, kt.Metadata.Labels)
		}
		c := kt.Spec.Config
		if kt.Spec.Partitions != 3 || kt.Spec.Replicas != 3 || c.MinInsyncReplicas != 2 || time.Duration(c.RetentionMs)*time.Millisecond != 7*24*time.Hour {
			t.Errorf("%s: partitions %d, replicas %d, min.insync.replicas %d, retention %s; want 3, 3, 2, 168h",
				kt.Spec.TopicName, kt.Spec.Partitions, kt.Spec.Replicas, c.MinInsyncReplicas, time.Duration(c.RetentionMs)*time.Millisecond)
		}
	}
	want := events.NewRegistry().AllTopics()
	slices.Sort(got)
	slices.Sort(want)
	if diff := cmpDiff(want, got); diff != "" {
		t.Errorf("KafkaTopics differ from pkg/events (-want +got):\n%s", diff)
	}
}
