package kafkabroker

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed" // the pinned POM
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
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
	root := os.Getenv("KAFKA_BROKER_CACHE")
	if root == "" {
		dir, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("kafkabroker: no cache directory (set KAFKA_BROKER_CACHE): %w", err)
		}
		root = filepath.Join(dir, "commerce-pipeline", "kafka")
	}
	sum := sha256.Sum256(pom)
	return filepath.Join(root, Version+"-"+hex.EncodeToString(sum[:])[:12]), nil
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
	libs := filepath.Join(dir, "libs")
	classpath := filepath.Join(libs, "*")
	if done(dir) {
		return classpath, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("kafkabroker: %w", err)
	}
	unlock, err := lockFile(filepath.Join(dir, ".lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if done(dir) { // another process resolved them while this one waited
		return classpath, nil
	}
	if _, err := exec.LookPath("mvn"); err != nil {
		return "", ErrNoJava
	}
	if err := os.WriteFile(filepath.Join(dir, "pom.xml"), pom, 0o644); err != nil {
		return "", fmt.Errorf("kafkabroker: %w", err)
	}
	tmp := libs + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return "", fmt.Errorf("kafkabroker: %w", err)
	}
	// -C: a jar whose checksum does not match Maven Central's is an error,
	// not a warning.
	cmd := exec.CommandContext(ctx, "mvn", "-B", "-q", "-C", "-f", filepath.Join(dir, "pom.xml"),
		"dependency:copy-dependencies", "-DincludeScope=runtime", "-DoutputDirectory="+tmp)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("kafkabroker: resolve Apache Kafka %s from Maven Central: %w\n%s", Version, err, out.Bytes())
	}
	if err := os.Rename(tmp, libs); err != nil {
		return "", fmt.Errorf("kafkabroker: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "resolved"), nil, 0o644); err != nil {
		return "", fmt.Errorf("kafkabroker: %w", err)
	}
	return classpath, nil
}

func done(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "resolved"))
	return err == nil
}

// lockFile takes an exclusive lock on path, shared with other processes, and
// returns its release.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("kafkabroker: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("kafkabroker: lock %s: %w", path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}, nil
}
