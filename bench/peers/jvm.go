package main

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"

	"github.com/loopers/commerce-pipeline/internal/mavenjars"
)

// javaSources are the Java peers, each a directory of java/ with a pinned
// pom.xml and its Peer.java.
//
//go:embed java
var javaSources embed.FS

// javaPeer names a directory of java/.
type javaPeer string

const (
	parallelConsumerPeer javaPeer = "parallelconsumer"
	debeziumPeer         javaPeer = "debezium"
)

// errNoJDK says what to install when a Java peer cannot be built.
var errNoJDK = errors.New("bench/peers: the Java peers need a JDK 17 or newer (java, javac) and Maven (mvn), " +
	"which fetches their jars from Maven Central: apt-get install openjdk-17-jdk-headless maven, or run scripts/testenv.sh kafka")

// files returns the peer's pom.xml and Peer.java.
func (p javaPeer) files() (pom, src []byte, err error) {
	if pom, err = javaSources.ReadFile(path.Join("java", string(p), "pom.xml")); err != nil {
		return nil, nil, err
	}
	src, err = javaSources.ReadFile(path.Join("java", string(p), "Peer.java"))
	return pom, src, err
}

// cacheDir is where the peer's jars and classes are kept: under the user's
// cache directory (or PEERS_CACHE), in a folder named after the digest of
// its POM and source, so that an edited peer is built anew and never mixes
// with an older build.
func (p javaPeer) cacheDir() (string, error) {
	pom, src, err := p.files()
	if err != nil {
		return "", err
	}
	return mavenjars.CacheDir("PEERS_CACHE", "peers", string(p), pom, src)
}

// classpath returns the peer's Java classpath (its compiled Peer class and
// its jars), resolving the jars from Maven Central and compiling Peer.java
// first when the cache does not hold them. Processes building the same peer
// at once (test binaries run in parallel) wait for one build.
func (p javaPeer) classpath(ctx context.Context) (string, error) {
	for _, tool := range []string{"java", "javac", "mvn"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "", fmt.Errorf("%w (%s is missing)", errNoJDK, tool)
		}
	}
	dir, err := p.cacheDir()
	if err != nil {
		return "", err
	}
	pom, src, err := p.files()
	if err != nil {
		return "", err
	}
	classes := filepath.Join(dir, "classes")
	libs, err := mavenjars.Build(ctx, dir, pom, func(ctx context.Context, libs string) error {
		if err := os.WriteFile(filepath.Join(dir, "Peer.java"), src, 0o644); err != nil {
			return err
		}
		return mavenjars.Step(ctx, classes, "javac", "-nowarn", "-d", classes+".tmp",
			"-cp", filepath.Join(libs, "*"), filepath.Join(dir, "Peer.java"))
	})
	if err != nil {
		return "", fmt.Errorf("bench/peers: build the %s peer: %w\n%w", p, err, errNoJDK)
	}
	return classes + string(os.PathListSeparator) + filepath.Join(libs, "*"), nil
}

// command is the java command that runs the peer with args: the JVM's
// defaults but for the logging level, so that its CPU is what a team
// running it would see.
func (p javaPeer) command(ctx context.Context, args ...string) (*exec.Cmd, error) {
	cp, err := p.classpath(ctx)
	if err != nil {
		return nil, err
	}
	return exec.CommandContext(ctx, "java", append([]string{
		"-cp", cp,
		"-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
		"Peer",
	}, args...)...), nil
}
