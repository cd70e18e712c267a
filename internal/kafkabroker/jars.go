package kafkabroker

import (
	"context"
	_ "embed" // the pinned POM
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"

	"github.com/loopers/commerce-pipeline/internal/mavenjars"
)

// Version is the Apache Kafka release this project runs everywhere: the
// broker of the tests, the benchmarks and `make kafka` (pom.xml's
// kafka.version), compose's apache/kafka image and the manifests' Strimzi
// Kafka. A test in deploy/ fails when they differ.
const Version = "4.3.1"

//go:embed pom.xml
var pom []byte

// ErrNoJava is returned when java or mvn is missing, with what to install.
var ErrNoJava = errors.New("kafkabroker: Apache Kafka's broker needs a JDK (17 or newer) and Maven: " +
	"run scripts/testenv.sh kafka, or apt-get install openjdk-17-jdk-headless maven")

// CacheDir is where the broker's jars are kept: under the user's cache
// directory ($XDG_CACHE_HOME or ~/.cache), or KAFKA_BROKER_CACHE, in a
// folder named after the pinned POM's digest, so that a changed POM
// resolves anew and never mixes with an older set.
func CacheDir() (string, error) {
	return mavenjars.CacheDir("KAFKA_BROKER_CACHE", "kafka", Version, pom)
}

// Classpath returns the broker's Java classpath, resolving the jars from
// Maven Central into CacheDir first if they are not there yet. Concurrent
// callers, in this process or others (test binaries run in parallel), wait
// for one resolution.
func Classpath(ctx context.Context) (string, error) {
	if _, err := exec.LookPath("java"); err != nil {
		return "", ErrNoJava
	}
	dir, err := CacheDir()
	if err != nil {
		return "", err
	}
	if !mavenjars.Built(dir) {
		if _, err := exec.LookPath("mvn"); err != nil {
			return "", ErrNoJava
		}
	}
	libs, err := mavenjars.Build(ctx, dir, pom, nil)
	if err != nil {
		return "", fmt.Errorf("kafkabroker: resolve Apache Kafka %s from Maven Central: %w", Version, err)
	}
	return filepath.Join(libs, "*"), nil
}
