package deploy_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// TestManifestConfigurationLoads starts every container of the example
// overlay's pods (the migrate init containers too) with the environment
// and Secret files the manifests give it, the Secrets' contents made up
// here, and checks that the program accepts its configuration: its own
// checks of how the variables fit together (TLS, SASL and the reclaimer's
// login; jwt mode's issuer, audience and key set; exactly one of each URL
// and its file), which checkEnv's per-variable checks cannot see. Nothing
// answers at the database's address, so each program then stops; what it
// must not say is that its configuration is wrong.
func TestManifestConfigurationLoads(t *testing.T) {
	t.Parallel()
	r := render(t, "deploy/k8s/overlays/example")
	contents := secretContents(t)
	contents[[2]string{"", "KAFKA_BROKERS"}] = hangUp(t)
	for name, pod := range r.pods() {
		for _, c := range append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...) {
			t.Run(name+"/"+c.Name, func(t *testing.T) {
				t.Parallel()
				env := podEnv(t, r, pod.Spec, c, t.TempDir(), contents)
				ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
				defer cancel()
				cmd := exec.CommandContext(ctx, binary(t, c.Name))
				cmd.Env = env
				var out bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &out
				err := cmd.Run()
				var exitErr *exec.ExitError
				if !errors.As(err, &exitErr) || ctx.Err() != nil {
					t.Fatalf("want a start-up failure (nothing answers at the database's address), got %v:\n%s", err, out.String())
				}
				if strings.Contains(out.String(), c.Name+" configuration:") {
					t.Errorf("%s refuses the configuration the manifests give it:\n%s", c.Name, out.String())
				}
			})
		}
	}
}

// hangUp returns the address of a loopback listener that closes every
// connection it accepts.
func hangUp(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	return l.Addr().String()
}

// secretContents makes up the content of every Secret key the manifests
// read, by Secret and key: URLs of addresses where nothing answers, a CA
// certificate that parses, passwords.
func secretContents(t *testing.T) map[[2]string]string {
	t.Helper()
	closed := closedPort(t)
	return map[[2]string]string{
		{pipelineSecret, "database-url"}: "postgres://app:made-up@" + closed + "/app?sslmode=disable&connect_timeout=2",
		{pipelineSecret, "redis-url"}:    "redis://:made-up@" + closed + "/0",
		{"*", "ca.crt"}:                  caPEM(t),
		{"*", "password"}:                "made-up",
	}
}

// caPEM returns a self-signed CA certificate in PEM.
func caPEM(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "made-up CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}

// podEnv returns the environment container c of a pod would get: its
// ConfigMaps' data, its values, a pod name for field references, Secret
// values by reference from contents; every Secret volume it mounts is
// written under dir, and every value naming a file in a mount points there.
// The listeners move to free loopback ports and the migrations wait for
// the database briefly: the addresses and timeouts are not under test here
// (TestKustomizeServices and TestKustomizeKafka check them).
func podEnv(t *testing.T, r rendered, spec corev1.PodSpec, c corev1.Container, dir string, contents map[[2]string]string) []string {
	t.Helper()
	content := func(secret, key string) string {
		for _, k := range [][2]string{{secret, key}, {"*", key}} {
			if v, ok := contents[k]; ok {
				return v
			}
		}
		t.Fatalf("no made-up content for Secret %s key %s", secret, key)
		return ""
	}
	for _, m := range c.VolumeMounts {
		i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
		if i < 0 || spec.Volumes[i].Secret == nil {
			continue
		}
		s := spec.Volumes[i].Secret
		for _, it := range s.Items {
			p := filepath.Join(dir, m.MountPath, it.Path)
			if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(content(s.SecretName, it.Key)), 0o400); err != nil {
				t.Fatal(err)
			}
		}
	}
	set := map[string]string{}
	for _, from := range c.EnvFrom {
		for _, cm := range r.configMaps {
			if from.ConfigMapRef != nil && cm.Name == from.ConfigMapRef.Name {
				for k, v := range cm.Data {
					set[k] = v
				}
			}
		}
	}
	for _, e := range c.Env {
		switch {
		case goRuntimeVars[e.Name]:
			// The kubelet expands $(MEMORY_LIMIT_MIB); left out here.
		case e.ValueFrom == nil:
			set[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil:
			set[e.Name] = "pod-0"
		case e.ValueFrom.SecretKeyRef != nil:
			set[e.Name] = content(e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key)
		default:
			t.Fatalf("%s: unexpected valueFrom %+v", e.Name, e.ValueFrom)
		}
	}
	for k, v := range set {
		for _, m := range c.VolumeMounts {
			if strings.HasPrefix(v, strings.TrimSuffix(m.MountPath, "/")+"/") {
				set[k] = filepath.Join(dir, v)
			}
		}
	}
	for _, k := range []string{"HTTP_ADDR", "ADMIN_ADDR"} {
		if _, ok := set[k]; ok {
			set[k] = "127.0.0.1:0"
		}
	}
	if _, ok := set["MIGRATE_CONNECT_TIMEOUT"]; ok {
		set["MIGRATE_CONNECT_TIMEOUT"] = "2s"
	}
	if _, ok := set["KAFKA_BROKERS"]; ok {
		// A broker that hangs up fails the services' start-up check of
		// Kafka at once, after the configuration was read (one that
		// cannot be reached is waited for).
		set["KAFKA_BROKERS"] = contents[[2]string{"", "KAFKA_BROKERS"}]
	}
	out := []string{"PATH=/usr/bin:/bin"}
	for k, v := range set {
		out = append(out, k+"="+v)
	}
	return out
}
