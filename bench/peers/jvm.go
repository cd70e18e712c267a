package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"syscall"
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
	root := os.Getenv("PEERS_CACHE")
	if root == "" {
		dir, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("bench/peers: no cache directory (set PEERS_CACHE): %w", err)
		}
		root = filepath.Join(dir, "commerce-pipeline", "peers")
	}
	h := sha256.New()
	h.Write(pom)
	h.Write([]byte{0})
	h.Write(src)
	return filepath.Join(root, string(p)+"-"+hex.EncodeToString(h.Sum(nil))[:12]), nil
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
	cp := filepath.Join(dir, "classes") + string(os.PathListSeparator) + filepath.Join(dir, "libs", "*")
	built := filepath.Join(dir, "built")
	if _, err := os.Stat(built); err == nil {
		return cp, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("bench/peers: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", fmt.Errorf("bench/peers: %w", err)
	}
	defer lock.Close() // closing the file releases the lock
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("bench/peers: lock %s: %w", dir, err)
	}
	if _, err := os.Stat(built); err == nil {
		return cp, nil // built by another process while this one waited
	}
	pom, src, err := p.files()
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "pom.xml"), pom, 0o644); err != nil {
		return "", fmt.Errorf("bench/peers: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "Peer.java"), src, 0o644); err != nil {
		return "", fmt.Errorf("bench/peers: %w", err)
	}
	// -C: a jar whose checksum does not match Maven Central's is an error.
	libs := filepath.Join(dir, "libs")
	if err := p.step(ctx, libs, "mvn", "-B", "-q", "-C", "-f", filepath.Join(dir, "pom.xml"),
		"dependency:copy-dependencies", "-DincludeScope=runtime", "-DoutputDirectory="+libs+".tmp"); err != nil {
		return "", err
	}
	classes := filepath.Join(dir, "classes")
	if err := p.step(ctx, classes, "javac", "-nowarn", "-d", classes+".tmp",
		"-cp", filepath.Join(libs, "*"), filepath.Join(dir, "Peer.java")); err != nil {
		return "", err
	}
	if err := os.WriteFile(built, nil, 0o644); err != nil {
		return "", fmt.Errorf("bench/peers: %w", err)
	}
	return cp, nil
}

// step runs a build command that writes into out+".tmp" and renames that to
// out once it succeeded, so that a broken build never leaves a half
// directory behind for the next run to trust.
func (p javaPeer) step(ctx context.Context, out, name string, args ...string) error {
	if err := os.RemoveAll(out + ".tmp"); err != nil {
		return fmt.Errorf("bench/peers: %w", err)
	}
	if err := os.RemoveAll(out); err != nil {
		return fmt.Errorf("bench/peers: %w", err)
	}
	cmd := exec.CommandContext(ctx, name, args...)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("bench/peers: build the %s peer: %s %s: %w\n%s\n%w", p, name, strings.Join(args, " "), err, log.Bytes(), errNoJDK)
	}
	if err := os.Rename(out+".tmp", out); err != nil {
		return fmt.Errorf("bench/peers: %w", err)
	}
	return nil
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
