package layering_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// root is the root module's path.
const root = "github.com/loopers/commerce-pipeline"

// goList runs `go list -e -json` with args in the module at dir, with
// GOWORK=off (each module with its own go.mod, as make lint checks them, not
// with a developer's go.work), and returns the packages it lists. A package
// the go command could not load fails the test: its imports are unknown.
func goList(t *testing.T, dir string, args ...string) []pkg {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "go", append([]string{"list", "-e", "-json=ImportPath,Name,Imports,TestImports,XTestImports,Error"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s in %s: %v\n%s", strings.Join(args, " "), dir, err, stderr.String())
	}
	var pkgs []pkg
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list %s in %s: %v", strings.Join(args, " "), dir, err)
		}
		if p.Error != nil {
			t.Fatalf("go list: %s: %s", p.ImportPath, p.Error.Err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// pkg is what the rules read of a package in go list's answer.
type pkg struct {
	ImportPath, Name                   string
	Imports, TestImports, XTestImports []string
	Error                              *struct{ Err string }
}

// moduleRoot is the directory of the root module's go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), "go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		t.Fatalf("go env GOMOD = %q: not inside the module", gomod)
	}
	return filepath.Dir(gomod)
}

// TestNoKafkaClientInCommerceAPI: commerce-api never talks to Kafka, so its
// build links neither sarama nor pcon. It reads the cluster registry, which
// therefore takes its own types rather than pcon's.
func TestNoKafkaClientInCommerceAPI(t *testing.T) {
	t.Parallel()
	kafka := func(path string) bool {
		return under(path, "github.com/IBM/sarama") || under(path, root+"/pkg/pcon")
	}
	// The way in: the packages of the build that import a Kafka client
	// themselves.
	var through []string
	for _, p := range goList(t, moduleRoot(t), "-deps", "./services/commerce-api/...") {
		if kafka(p.ImportPath) {
			continue
		}
		for _, imp := range p.Imports {
			if kafka(imp) {
				through = append(through, p.ImportPath+" imports "+imp)
			}
		}
	}
	if len(through) > 0 {
		t.Errorf("commerce-api links a Kafka client:\n%s", strings.Join(through, "\n"))
	}
}

// under reports whether path is the package dir or one below it.
func under(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, dir+"/")
}
