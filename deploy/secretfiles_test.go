package deploy_test

import (
	"fmt"
	"net/url"
	"os"
	"path"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/loopers/commerce-pipeline/internal/config"
)

// pipelineSecret is the Secret the operator creates (deploy/README.md): the
// database and Redis URLs, passwords included.
const pipelineSecret = "commerce-pipeline-secrets"

// secretKey is the key of pipelineSecret that holds variable name's value:
// DATABASE_URL is database-url.
func secretKey(name string) string {
	return strings.ToLower(strings.ReplaceAll(name, "_", "-"))
}

// secretFileMode is every Secret volume's mode: the files belong to root,
// so the containers (user 65532, group fsGroup) read them as the group;
// nobody else reads them at all.
const secretFileMode = 0o440

// renderings are the kustomizations whose pods the secret checks cover: the
// base and the overlay the README tells operators to copy.
var renderings = []string{"deploy/k8s/base", "deploy/k8s/overlays/example"}

// secretFile is where a *_FILE variable's path leads.
type secretFile struct {
	secret string // the Secret's name
	key    string // its key that the file holds
	mount  corev1.VolumeMount
	volume corev1.Volume
}

// resolveSecretFile finds the Secret key whose file the container sees at
// p, through a volume mount of the pod; "" and why when p is not such a file.
func resolveSecretFile(spec corev1.PodSpec, c corev1.Container, p string) (secretFile, string) {
	for _, m := range c.VolumeMounts {
		rel, ok := strings.CutPrefix(p, strings.TrimSuffix(m.MountPath, "/")+"/")
		if !ok {
			continue
		}
		if m.SubPath != "" || m.SubPathExpr != "" {
			// A subPath mount never sees the Secret's updates, and its
			// path is no longer the mount's path plus a key.
			return secretFile{}, fmt.Sprintf("%s is under mount %s, which uses a subPath", p, m.Name)
		}
		i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
		if i < 0 {
			return secretFile{}, fmt.Sprintf("%s is under mount %s, which names no volume of the pod", p, m.Name)
		}
		v := spec.Volumes[i]
		if v.Secret == nil {
			return secretFile{}, fmt.Sprintf("%s is under mount %s, which is not a Secret volume", p, m.Name)
		}
		key := rel
		if len(v.Secret.Items) > 0 {
			j := slices.IndexFunc(v.Secret.Items, func(it corev1.KeyToPath) bool { return it.Path == rel })
			if j < 0 {
				return secretFile{}, fmt.Sprintf("%s: volume %s projects no item to %s", p, v.Name, rel)
			}
			key = v.Secret.Items[j].Key
		} else if strings.Contains(rel, "/") {
			return secretFile{}, fmt.Sprintf("%s: volume %s holds the Secret's keys at its top, no %s", p, v.Name, rel)
		}
		return secretFile{secret: v.Secret.SecretName, key: key, mount: m, volume: v}, ""
	}
	return secretFile{}, fmt.Sprintf("%s is under none of the container's volume mounts", p)
}

// TestResolveSecretFile: the resolution the manifest checks rely on finds a
// projected item, and refuses what would not hold the Secret's key.
func TestResolveSecretFile(t *testing.T) {
	t.Parallel()
	secretVol := func(name string, items ...corev1.KeyToPath) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "s-" + name, Items: items}}}
	}
	spec := corev1.PodSpec{Volumes: []corev1.Volume{
		secretVol("db", corev1.KeyToPath{Key: "database-url", Path: "url"}),
		secretVol("whole"),
		{Name: "cm", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}},
		secretVol("sub"),
	}}
	c := corev1.Container{VolumeMounts: []corev1.VolumeMount{
		{Name: "db", MountPath: "/etc/p/db"},
		{Name: "whole", MountPath: "/etc/p/whole/"},
		{Name: "cm", MountPath: "/etc/p/cm"},
		{Name: "sub", MountPath: "/etc/p/sub", SubPath: "password"},
		{Name: "gone", MountPath: "/etc/p/gone"},
	}}
	for _, tc := range []struct {
		name, path, secret, key string
		fails                   bool
	}{
		{name: "a projected item", path: "/etc/p/db/url", secret: "s-db", key: "database-url"},
		{name: "a key of a whole Secret", path: "/etc/p/whole/password", secret: "s-whole", key: "password"},
		{name: "a key the items do not project", path: "/etc/p/db/database-url", fails: true},
		{name: "the mount itself", path: "/etc/p/db", fails: true},
		{name: "below a key", path: "/etc/p/whole/a/b", fails: true},
		{name: "a ConfigMap volume", path: "/etc/p/cm/x", fails: true},
		{name: "a subPath mount", path: "/etc/p/sub/password", fails: true},
		{name: "a mount without its volume", path: "/etc/p/gone/x", fails: true},
		{name: "no mount", path: "/run/secrets/x", fails: true},
		{name: "a sibling directory's prefix", path: "/etc/p/dbx/url", fails: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, why := resolveSecretFile(spec, c, tc.path)
			if tc.fails {
				if why == "" {
					t.Errorf("resolved to %s key %s; want a refusal", f.secret, f.key)
				}
				return
			}
			if diff := cmpDiff([2]string{tc.secret, tc.key}, [2]string{f.secret, f.key}); why != "" || diff != "" {
				t.Errorf("%s; (-want +got):\n%s", why, diff)
			}
		})
	}
}

// TestSecretFiles: every credential reaches the containers as a file of a
// mounted Secret. Each *_FILE variable names a file that a read-only mount
// of a Secret volume projects, readable by the containers' group only; the
// URLs come from the keys of commerce-pipeline-secrets; a container mounts
// no Secret it does not read; and no variable comes from a Secret by
// reference where the program could read it from a file.
func TestSecretFiles(t *testing.T) {
	t.Parallel()
	for _, dir := range renderings {
		t.Run(dir, func(t *testing.T) {
			t.Parallel()
			r := render(t, dir)
			if len(r.pods()) == 0 {
				t.Fatal("no workload")
			}
			for name, pod := range r.pods() {
				spec := pod.Spec
				if sc := spec.SecurityContext; sc == nil || sc.FSGroup == nil {
					t.Errorf("%s: the pod sets no fsGroup: its non-root containers cannot read the Secret files (root's, mode %#o)", name, secretFileMode)
				}
				for _, v := range spec.Volumes {
					if v.Secret == nil {
						continue
					}
					if m := v.Secret.DefaultMode; m == nil || *m != secretFileMode {
						t.Errorf("%s: Secret volume %s: defaultMode %v, want %#o", name, v.Name, ptrMode(m), secretFileMode)
					}
					for _, it := range v.Secret.Items {
						if it.Mode != nil {
							t.Errorf("%s: Secret volume %s item %s sets its own mode %#o", name, v.Name, it.Key, *it.Mode)
						}
					}
				}
				for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
					checkSecretFiles(t, r, name, spec, c)
				}
			}
		})
	}
}

func ptrMode(m *int32) string {
	if m == nil {
		return "unset"
	}
	return fmt.Sprintf("%#o", *m)
}

// optionalCAs are the Secret volumes a container may mount without a *_FILE
// variable naming them: the database URL names its CA itself
// (sslrootcert), so they go with DATABASE_URL_FILE.
var optionalCAs = map[string]string{"postgres-ca": "DATABASE_URL_FILE"}

// checkSecretFiles checks one container of workload (its name is its
// program's: migrate or the service).
func checkSecretFiles(t *testing.T, r rendered, workload string, spec corev1.PodSpec, c corev1.Container) {
	t.Helper()
	where := workload + " container " + c.Name
	env := containerEnv(t, r, c)
	vars := map[string]config.Var{}
	for _, v := range programVars(t, c.Name) {
		vars[v.Name] = v
	}
	read := map[string]bool{} // the volumes the *_FILE variables read
	for name, value := range env {
		if !strings.HasSuffix(name, config.FileSuffix) {
			continue
		}
		if value == fromCluster {
			t.Errorf("%s: %s comes from the cluster; a file's path is no secret, give it as a value", where, name)
			continue
		}
		f, why := resolveSecretFile(spec, c, value)
		if why != "" {
			t.Errorf("%s: %s=%s: %s", where, name, value, why)
			continue
		}
		read[f.volume.Name] = true
		if !f.mount.ReadOnly {
			t.Errorf("%s: %s is on mount %s, which is not readOnly", where, name, f.mount.Name)
		}
		if f.volume.Secret.Optional != nil && *f.volume.Secret.Optional {
			t.Errorf("%s: %s reads volume %s, which is optional: a missing Secret must stop the pod, not start it without its credential", where, name, f.volume.Name)
		}
		// The URLs a program reads with a _FILE alternative: the operator's
		// Secret, under the key README names.
		base := strings.TrimSuffix(name, config.FileSuffix)
		if v, ok := vars[base]; ok && v.Kind == "URL" {
			if f.secret != pipelineSecret || f.key != secretKey(base) {
				t.Errorf("%s: %s reads Secret %s key %s, want %s key %s", where, name, f.secret, f.key, pipelineSecret, secretKey(base))
			}
		}
	}
	for _, m := range c.VolumeMounts {
		i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
		if i < 0 || spec.Volumes[i].Secret == nil || read[m.Name] {
			continue
		}
		if with, ok := optionalCAs[m.Name]; ok && env[with] != "" {
			continue
		}
		t.Errorf("%s mounts Secret volume %s but reads it through no *_FILE variable", where, m.Name)
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			continue
		}
		if _, ok := vars[e.Name+config.FileSuffix]; ok {
			t.Errorf("%s: %s comes from Secret %s by reference, but %s reads %s: mount the Secret and read the file",
				where, e.Name, e.ValueFrom.SecretKeyRef.Name, c.Name, e.Name+config.FileSuffix)
		}
	}
}

// plainSecret says why a variable given in plain sight (a ConfigMap, a
// value in the manifest) holds a secret, or "" when it does not.
func plainSecret(name, value string) string {
	if strings.HasSuffix(name, "_PASSWORD") {
		return "a password variable"
	}
	if strings.Contains(value, "PRIVATE KEY-----") {
		return "a private key"
	}
	u, err := url.Parse(value)
	if err != nil || u.Host == "" {
		return ""
	}
	if _, ok := u.User.Password(); ok {
		return "a URL with a password"
	}
	for k := range u.Query() {
		if strings.Contains(strings.ToLower(k), "password") {
			return "a URL with a password parameter (" + k + ")"
		}
	}
	return ""
}

// TestPlainSecret: what plainSecret finds, and what it lets through.
func TestPlainSecret(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, variable, value string
		secret                bool
	}{
		{name: "a database URL with a password", variable: "DATABASE_URL", value: "postgres://app:s3cret@db:5432/app", secret: true},
		{name: "a Redis URL with a password alone", variable: "REDIS_URL", value: "rediss://:s3cret@redis:6380/0", secret: true},
		{name: "a password as a URL parameter", variable: "DATABASE_URL", value: "postgres://app@db/app?sslmode=verify-full&password=s3cret", secret: true},
		{name: "a password variable", variable: "KAFKA_SASL_PASSWORD", value: "s3cret", secret: true},
		{name: "a role's password variable", variable: "KAFKA_RECLAIMER_SASL_PASSWORD", value: "s3cret", secret: true},
		{name: "a private key", variable: "KEY", value: "-----BEGIN EC PRIVATE KEY-----\nMHc...", secret: true},
		{name: "a URL with a user and no password", variable: "DATABASE_URL", value: "postgres://app@db/app?sslmode=verify-full&sslrootcert=/etc/ca.crt"},
		{name: "brokers", variable: "KAFKA_BROKERS", value: "kafka-kafka-bootstrap:9093"},
		{name: "a password file's path", variable: "KAFKA_SASL_PASSWORD_FILE", value: "/etc/commerce-pipeline/kafka-user/password"},
		{name: "an identity provider's URL", variable: "COMMERCE_API_AUTH_JWKS_URL", value: "https://sso.example.com/realms/commerce/protocol/openid-connect/certs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := plainSecret(tc.variable, tc.value); (got != "") != tc.secret {
				t.Errorf("plainSecret(%s, %q) = %q; want a secret: %v", tc.variable, tc.value, got, tc.secret)
			}
		})
	}
}

// TestNoSecretInPlainSight: no ConfigMap and no value written in a
// manifest holds a password, a URL with one, or a private key; and no
// rendering holds a Secret (the operator creates them, README).
func TestNoSecretInPlainSight(t *testing.T) {
	t.Parallel()
	for _, dir := range renderings {
		t.Run(dir, func(t *testing.T) {
			t.Parallel()
			r := render(t, dir)
			for _, cm := range r.configMaps {
				for k, v := range cm.Data {
					if why := plainSecret(k, v); why != "" {
						t.Errorf("ConfigMap %s holds %s: %s", cm.Name, why, k)
					}
				}
			}
			for name, pod := range r.pods() {
				for _, c := range append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...) {
					for _, e := range c.Env {
						if e.ValueFrom != nil {
							continue
						}
						if why := plainSecret(e.Name, e.Value); why != "" {
							t.Errorf("%s container %s: %s is %s written in the manifest", name, c.Name, e.Name, why)
						}
					}
				}
			}
		})
	}
	// The check reads the manifests' files too, so that a Secret or a
	// secretGenerator, which render refuses as an unexpected kind, is
	// reported as what it is.
	for _, dir := range append(slices.Clone(renderings), "deploy/k8s/kafka") {
		entries, err := os.ReadDir(path.Join(root, dir))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			text := string(readFile(t, path.Join(dir, e.Name())))
			if strings.Contains(text, "kind: Secret\n") || strings.Contains(text, "secretGenerator:") {
				t.Errorf("%s/%s defines a Secret; the operator creates them (deploy/README.md)", dir, e.Name())
			}
		}
	}
}
