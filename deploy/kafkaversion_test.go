package deploy_test

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loopers/commerce-pipeline/internal/kafka"
	"github.com/loopers/commerce-pipeline/internal/kafkabroker"
	"github.com/loopers/commerce-pipeline/internal/testenv"
)

// kafkaVersions reads the Apache Kafka release from every place that pins
// one, keyed by where it was read.
func kafkaVersions(t *testing.T) map[string]string {
	t.Helper()
	got := map[string]string{
		"internal/kafkabroker.Version":      kafkabroker.Version,
		"internal/kafka.Version (protocol)": kafka.Version.String(),
	}

	var pom struct {
		Properties struct {
			KafkaVersion string `xml:"kafka.version"`
		} `xml:"properties"`
	}
	if err := xml.Unmarshal(readFile(t, "internal/kafkabroker/pom.xml"), &pom); err != nil {
		t.Fatalf("internal/kafkabroker/pom.xml: %v", err)
	}
	got["internal/kafkabroker/pom.xml kafka.version"] = pom.Properties.KafkaVersion

	images := 0
	for name, s := range loadCompose(t).Services {
		repo, tag, _ := strings.Cut(s.Image, ":")
		if repo == "apache/kafka" || strings.HasSuffix(repo, "/apache/kafka") {
			got["docker-compose.yml "+name+" image"] = tag
			images++
		}
	}
	if _, ok := got["docker-compose.yml kafka image"]; !ok || images < 2 {
		t.Errorf("docker-compose.yml: %d apache/kafka images; want the broker (service kafka) and the kafka-topics job", images)
	}

	r := render(t, "deploy/k8s/kafka")
	for _, k := range r.kafkas {
		got["deploy/k8s/kafka Kafka "+k.Metadata.Name+" spec.kafka.version"] = k.Spec.Kafka.Version
	}
	if len(r.kafkas) == 0 {
		t.Error("deploy/k8s/kafka holds no Kafka")
	}
	return got
}

// TestKafkaVersion: compose's images, the manifests' Strimzi Kafka, the
// broker the tests and `make kafka` run (its POM and kafkabroker.Version)
// and the protocol version the clients speak are one release. A client
// speaking a newer protocol than the broker, or tests passing on a release
// production does not run, would go unnoticed otherwise.
func TestKafkaVersion(t *testing.T) {
	t.Parallel()
	got := kafkaVersions(t)
	// Every source against the POM, the release the tests resolve and run.
	ref := got["internal/kafkabroker/pom.xml kafka.version"]
	if !regexp.MustCompile(`^\d+\.\d+\.\d+$`).MatchString(ref) {
		t.Fatalf("internal/kafkabroker/pom.xml kafka.version %q is not a release", ref)
	}
	want := map[string]string{}
	for k := range got {
		want[k] = ref
	}
	if diff := cmpDiff(want, got); diff != "" {
		t.Errorf("the Kafka versions differ (-the POM's +each source's):\n%s", diff)
	}
}

// TestKafkaMetadataVersion: the Strimzi Kafka's metadataVersion is its
// release's, as the pinned broker itself maps them (kafka-storage
// version-mapping): an older one would leave the cluster on an older
// metadata format, a newer or misspelt one is refused by the operator.
func TestKafkaMetadataVersion(t *testing.T) {
	t.Parallel()
	r := render(t, "deploy/k8s/kafka")
	if len(r.kafkas) != 1 {
		t.Fatalf("deploy/k8s/kafka holds %d Kafka objects, want 1", len(r.kafkas))
	}
	k := r.kafkas[0].Spec.Kafka
	major, minor, _ := strings.Cut(k.Version, ".")
	minor, _, _ = strings.Cut(minor, ".")
	release := major + "." + minor
	testenv.Needs(t, "Apache Kafka's jars (Maven Central) and a JVM")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	classpath, err := kafkabroker.Classpath(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Each lookup starts a JVM, seconds on a loaded machine: both at once.
	var levels [2]string
	var errs [2]error
	var wg sync.WaitGroup
	for i, v := range []string{k.MetadataVersion, release} {
		wg.Go(func() { levels[i], errs[i] = metadataLevel(ctx, classpath, v) })
	}
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		t.Fatal(err)
	}
	if levels[0] != levels[1] {
		t.Errorf("metadataVersion %s is metadata.version %s; Kafka %s's is %s", k.MetadataVersion, levels[0], release, levels[1])
	}
}

var metadataLine = regexp.MustCompile(`(?m)^metadata\.version=(\d+) `)

// metadataLevel returns the metadata.version feature level that the
// broker's storage tool maps version (a release such as 4.3, or a metadata
// version such as 4.3-IV0) to.
func metadataLevel(ctx context.Context, classpath, version string) (string, error) {
	out, err := exec.CommandContext(ctx, "java", "-cp", classpath, "kafka.tools.StorageTool",
		"version-mapping", "--release-version", version).CombinedOutput()
	m := metadataLine.FindSubmatch(out)
	if err != nil || m == nil {
		return "", fmt.Errorf("kafka-storage version-mapping --release-version %s: %w\n%s", version, err, out)
	}
	return string(m[1]), nil
}
