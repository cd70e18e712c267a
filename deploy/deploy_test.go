package deploy_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// root is the module root, where the files under test live.
const root = ".."

// The binaries the tests run, keyed by name.
var binaryPkgs = map[string]string{
	"commerce-api":      "./services/commerce-api",
	"outbox-relay":      "./services/outbox-relay",
	"product-consumers": "./services/product-consumers",
	"migrate":           "./cmd/migrate",
	"healthcheck":       "./cmd/healthcheck",
}

var (
	binDir    string
	buildOnce sync.Once
	buildErr  error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "deploy-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// binary returns the path of a built binary. All of them are built by one
// go build the first time any is needed, so tests that do not run binaries
// do not pay for it.
func binary(t *testing.T, name string) string {
	t.Helper()
	buildOnce.Do(func() {
		args := []string{"build", "-o", binDir + "/"}
		for _, pkg := range binaryPkgs {
			args = append(args, pkg)
		}
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	if _, ok := binaryPkgs[name]; !ok {
		t.Fatalf("no binary %q", name)
	}
	return filepath.Join(binDir, name)
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
