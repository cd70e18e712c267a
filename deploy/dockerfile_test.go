package deploy_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/semver"
)

// dockerInstructions returns the Dockerfile's instructions, continuation
// lines joined, comments dropped.
func dockerInstructions(t *testing.T) []string {
	t.Helper()
	var out []string
	cur := ""
	for line := range strings.SplitSeq(string(readFile(t, "Dockerfile")), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if cont, ok := strings.CutSuffix(line, "\\"); ok {
			cur += cont + " "
			continue
		}
		out = append(out, cur+line)
		cur = ""
	}
	return out
}

// dockerStages returns the names of the Dockerfile's stages.
func dockerStages(t *testing.T) map[string]bool {
	stages := map[string]bool{}
	for _, in := range dockerInstructions(t) {
		f := strings.Fields(in)
		if strings.EqualFold(f[0], "FROM") && len(f) == 4 && strings.EqualFold(f[2], "AS") {
			stages[f[3]] = true
		}
	}
	return stages
}

// TestDockerfile: one stage per binary, each FROM distroless/static as
// nonroot with the healthcheck probe and its binary; the binaries are built
// static by a Go at least as new as go.mod asks for, from packages that exist.
func TestDockerfile(t *testing.T) {
	t.Parallel()
	ins := dockerInstructions(t)
	var goVersion, build string
	from := map[string]string{} // stage → base
	copies := map[string][]string{}
	entry := map[string]string{}
	stage := ""
	for _, in := range ins {
		f := strings.Fields(in)
		switch strings.ToUpper(f[0]) {
		case "ARG":
			if v, ok := strings.CutPrefix(f[1], "GO_VERSION="); ok {
				goVersion = v
			}
		case "FROM":
			stage = f[len(f)-1]
			from[stage] = f[1]
		case "RUN":
			if strings.Contains(in, "go build") {
				build = in
			}
		case "COPY":
			copies[stage] = append(copies[stage], f[len(f)-1])
		case "ENTRYPOINT":
			entry[stage] = strings.Join(f[1:], " ")
		}
	}
	modVersion := ""
	for line := range strings.SplitSeq(string(readFile(t, "go.mod")), "\n") {
		if v, ok := strings.CutPrefix(line, "go "); ok {
			modVersion = strings.TrimSpace(v)
		}
	}
	if goVersion == "" || semver.Compare("v"+goVersion, "v"+modVersion) < 0 {
		t.Errorf("Dockerfile GO_VERSION %q is older than go.mod's go %s", goVersion, modVersion)
	}
	if !strings.Contains(build, "CGO_ENABLED=0") {
		t.Errorf("the build must disable cgo for static binaries: %s", build)
	}
	if from["runtime"] != "gcr.io/distroless/static-debian12:nonroot" {
		t.Errorf("runtime stage is FROM %q, want distroless/static nonroot", from["runtime"])
	}
	if !strings.Contains(strings.Join(ins, "\n"), "USER nonroot:nonroot") {
		t.Error("images must run as nonroot")
	}
	if !contains(copies["runtime"], "/usr/local/bin/healthcheck") {
		t.Error("the runtime stage must carry the healthcheck probe")
	}
	for name, pkg := range binaryPkgs {
		if !strings.Contains(build, pkg) {
			t.Errorf("the build does not build %s", pkg)
		}
		if _, err := os.Stat(filepath.Join(root, pkg, "main.go")); err != nil {
			t.Errorf("%s: %v", pkg, err)
		}
		if name == "healthcheck" {
			continue
		}
		if from[name] != "runtime" {
			t.Errorf("stage %s must build FROM runtime, got %q", name, from[name])
		}
		bin := "/usr/local/bin/" + name
		if !contains(copies[name], bin) || entry[name] != `["`+bin+`"]` {
			t.Errorf("stage %s must copy and run %s; copies %v, entrypoint %s", name, bin, copies[name], entry[name])
		}
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestDockerfileCopiesReplacedModules: every module go.mod replaces with a
// directory of the clone has its go.mod and go.sum copied before the
// build's go mod download, which reads them (without them the download
// fails on the missing directory).
func TestDockerfileCopiesReplacedModules(t *testing.T) {
	t.Parallel()
	mf, err := modfile.Parse("go.mod", readFile(t, "go.mod"), nil)
	if err != nil {
		t.Fatal(err)
	}
	copied := map[string]bool{}
	for _, in := range dockerInstructions(t) {
		f := strings.Fields(in)
		if strings.EqualFold(f[0], "RUN") && strings.Contains(in, "go mod download") {
			break
		}
		if strings.EqualFold(f[0], "COPY") {
			for _, src := range f[1 : len(f)-1] {
				copied[filepath.Clean(src)] = true
			}
		}
	}
	var missing []string
	for _, r := range mf.Replace {
		if !modfile.IsDirectoryPath(r.New.Path) {
			continue
		}
		for _, name := range []string{"go.mod", "go.sum"} {
			if p := filepath.Join(r.New.Path, name); !copied[p] {
				missing = append(missing, p)
			}
		}
	}
	if len(missing) > 0 {
		t.Errorf("the Dockerfile copies %v only after go mod download (or never)", missing)
	}
}
