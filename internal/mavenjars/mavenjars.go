// Package mavenjars resolves a pinned POM's runtime jars from Maven Central
// into a cache directory of this project's, once per POM: the Apache Kafka
// broker of the tests and benchmarks (internal/kafkabroker) and the Java
// peers of bench/peers both run from jars resolved this way.
package mavenjars

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// CacheDir returns where a build named name is kept: under $env if it is
// set, else under the user's cache directory in commerce-pipeline/sub; in a
// folder named name-<digest of parts>, so that a changed POM (or source)
// builds anew and never mixes with an older build.
func CacheDir(env, sub, name string, parts ...[]byte) (string, error) {
	root := os.Getenv(env)
	if root == "" {
		dir, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("mavenjars: no cache directory (set %s): %w", env, err)
		}
		root = filepath.Join(dir, "commerce-pipeline", sub)
	}
	h := sha256.New()
	for i, p := range parts {
		if i > 0 {
			h.Write([]byte{0})
		}
		h.Write(p)
	}
	return filepath.Join(root, name+"-"+hex.EncodeToString(h.Sum(nil))[:12]), nil
}

// Built reports whether Build completed in dir.
func Built(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "resolved"))
	return err == nil
}

// Build resolves pom's runtime dependencies into dir/libs (mvn
// dependency:copy-dependencies, checksums enforced) and then runs then, if
// not nil, with that libs directory; once per dir: concurrent callers, in
// this process or others (test binaries run in parallel), wait on a lock
// for one build, and a build that failed leaves nothing the next one
// trusts. It returns dir/libs.
func Build(ctx context.Context, dir string, pom []byte, then func(ctx context.Context, libs string) error) (string, error) {
	libs := filepath.Join(dir, "libs")
	if Built(dir) {
		return libs, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("mavenjars: %w", err)
	}
	unlock, err := lock(filepath.Join(dir, ".lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if Built(dir) { // another process built it while this one waited
		return libs, nil
	}
	if err := os.WriteFile(filepath.Join(dir, "pom.xml"), pom, 0o644); err != nil {
		return "", fmt.Errorf("mavenjars: %w", err)
	}
	// -C: a jar whose checksum does not match Maven Central's is an error,
	// not a warning.
	if err := Step(ctx, libs, "mvn", "-B", "-q", "-C", "-f", filepath.Join(dir, "pom.xml"),
		"dependency:copy-dependencies", "-DincludeScope=runtime", "-DoutputDirectory="+libs+".tmp"); err != nil {
		return "", err
	}
	if then != nil {
		if err := then(ctx, libs); err != nil {
			return "", err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "resolved"), nil, 0o644); err != nil {
		return "", fmt.Errorf("mavenjars: %w", err)
	}
	return libs, nil
}

// Step runs a build command that writes into out+".tmp" and renames that to
// out once it succeeded, so that a broken build never leaves a half
// directory behind for the next run to trust. A failure carries the
// command's output.
func Step(ctx context.Context, out, name string, args ...string) error {
	if err := os.RemoveAll(out + ".tmp"); err != nil {
		return fmt.Errorf("mavenjars: %w", err)
	}
	if err := os.RemoveAll(out); err != nil {
		return fmt.Errorf("mavenjars: %w", err)
	}
	cmd := exec.CommandContext(ctx, name, args...)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("mavenjars: %s %v: %w\n%s", name, args, err, log.Bytes())
	}
	if err := os.Rename(out+".tmp", out); err != nil {
		return fmt.Errorf("mavenjars: %w", err)
	}
	return nil
}

// lock takes an exclusive lock on path, shared with other processes, and
// returns its release.
func lock(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("mavenjars: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("mavenjars: lock %s: %w", path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}, nil
}
