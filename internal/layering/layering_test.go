package layering_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// root is the root module's path.
const root = "github.com/loopers/commerce-pipeline"

// goList runs `go list -e -json` with args in the module at dir, with
// GOWORK=off (each module with its own go.mod, as make lint checks them, not
// with a developer's go.work), and returns the packages it lists. A package
// the go command could not load fails the test: its imports are unknown.
func goList(t *testing.T, dir string, args ...string) []pkg {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "go", append([]string{"list", "-e", "-json=ImportPath,Imports,TestImports,XTestImports,Error"}, args...)...)
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

// A rule forbids the packages it applies to some imports. Test files count:
// a test that reaches across a layer ties the layers together as much as
// the code does.
type rule struct {
	name    string
	applies func(pkg string) bool // the importing package
	forbids func(imp string) bool
}

// bootstrap is the process bootstrap: the signal context, the logger and the
// configuration of every binary. Only what starts a process (package main)
// and a service's wiring (services/<name>/internal/app) use it; the
// infrastructure packages under internal/ and pkg/ take what they need
// (a logger, a context) as arguments, and log keys from internal/logkey.
const bootstrap = root + "/internal/service"

var rules = []rule{
	{
		name:    "internal/ never imports services/: the services are built on it, not the other way",
		applies: func(p string) bool { return under(p, root+"/internal") },
		forbids: func(imp string) bool { return under(imp, root+"/services") },
	},
	{
		name: "pkg/ never imports the root module's internal/: what is published stands alone",
		applies: func(p string) bool {
			return under(p, root+"/pkg") && !under(p, repotest)
		},
		forbids: func(imp string) bool { return under(imp, root+"/internal") },
	},
	{
		name: "internal/service, the process bootstrap, is imported only by package main and a service's internal/app",
		applies: func(p string) bool {
			if under(p, bootstrap) {
				return false
			}
			if under(p, root+"/internal") || under(p, root+"/pkg") {
				return true
			}
			// services/<name>/internal/<package>...: all but app.
			rest, ok := strings.CutPrefix(p, root+"/services/")
			parts := strings.Split(rest, "/")
			return ok && len(parts) >= 3 && parts[1] == "internal" && parts[2] != "app"
		},
		forbids: func(imp string) bool { return under(imp, bootstrap) },
	},
}

// repotest is the module of pcon's tests against this repository's Apache
// Kafka broker (internal/kafkabroker, internal/testenv): it is not
// published, and importing the root module's test environment is what it
// is for.
const repotest = root + "/pkg/pcon/internal/repotest"

// An exception lets one package's tests (never its code) import what a
// rule forbids, for the reason given.
type exception struct {
	pkg, imports, why string
}

var exceptions = []exception{
	{root + "/pkg/events", root + "/internal/eventcontract",
		"the wire tests of the events (package events_test) check them against the AsyncAPI document through the contract checker; nothing that imports events links them"},
}

// violations lists, for each package, the imports a rule forbids it, and
// the exceptions that were used.
func violations(pkgs []pkg) (out []string, used map[exception]bool) {
	used = map[exception]bool{}
	for _, p := range pkgs {
		imports := slices.Concat(p.Imports, p.TestImports, p.XTestImports)
		slices.Sort(imports)
		for _, imp := range slices.Compact(imports) {
			for _, r := range rules {
				if !r.applies(p.ImportPath) || !r.forbids(imp) {
					continue
				}
				i := slices.IndexFunc(exceptions, func(e exception) bool { return e.pkg == p.ImportPath && e.imports == imp })
				if i >= 0 && !slices.Contains(p.Imports, imp) {
					used[exceptions[i]] = true
					continue
				}
				out = append(out, p.ImportPath+" imports "+imp+" ("+r.name+")")
			}
		}
	}
	return out, used
}

// TestLayers: no package of any module in the repository breaks a rule.
func TestLayers(t *testing.T) {
	t.Parallel()
	top := moduleRoot(t)
	var pkgs []pkg
	for _, dir := range modules(t, top) {
		pkgs = append(pkgs, goList(t, dir, "./...")...)
	}
	// The test would pass on nothing: make sure it saw each layer.
	for _, layer := range []string{"/internal/cluster", "/pkg/events", "/pkg/pcon", "/pkg/pcon/pconprom", "/services/commerce-api/internal/app"} {
		if !slices.ContainsFunc(pkgs, func(p pkg) bool { return p.ImportPath == root+layer }) {
			t.Fatalf("go list did not list %s%s", root, layer)
		}
	}
	bad, used := violations(pkgs)
	for _, v := range bad {
		t.Error(v)
	}
	// An exception nothing needs any more goes, so that it cannot let a
	// new import through later.
	for _, e := range exceptions {
		if !used[e] {
			t.Errorf("the exception for %s importing %s is not needed any more: remove it", e.pkg, e.imports)
		}
	}
}

// modules returns the directory of every Go module in the repository: the
// root and those nested in it (pcon and its plugins), which ./... from the
// root does not reach.
func modules(t *testing.T, top string) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != top && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.Name() == "go.mod" {
			dirs = append(dirs, filepath.Dir(p))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

// TestRulesCatchViolations: each rule refuses the import it is about, in
// the code or in the tests, and lets the allowed ones through, so that
// TestLayers passing means something.
func TestRulesCatchViolations(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, pkg, imports string
		refused            bool
	}{
		{"infrastructure uses a service", "/internal/cluster", "/services/commerce-api/internal/api", true},
		{"infrastructure test uses a service", "/internal/stack", "/services/outbox-relay/internal/relay", true},
		{"a service uses infrastructure", "/services/outbox-relay/internal/relay", "/internal/outbox", false},
		{"published code uses internal/", "/pkg/events", "/internal/config", true},
		{"pcon uses internal/", "/pkg/pcon/pconprom", "/internal/telemetry", true},
		{"pcon uses its own internal/", "/pkg/pcon", "/pkg/pcon/internal/core", false},
		{"pcon's repository tests use the test environment", "/pkg/pcon/internal/repotest", "/internal/testenv", false},
		{"infrastructure uses the bootstrap", "/internal/pg", "/internal/service", true},
		{"published code uses the bootstrap", "/pkg/events", "/internal/service", true},
		{"a service's domain package uses the bootstrap", "/services/outbox-relay/internal/lease", "/internal/service", true},
		{"a service's wiring uses the bootstrap", "/services/outbox-relay/internal/app", "/internal/service", false},
		{"a binary uses the bootstrap", "/services/outbox-relay", "/internal/service", false},
		{"a command uses the bootstrap", "/cmd/migrate", "/internal/service", false},
		{"the bootstrap's own tree", "/internal/service", "/internal/config", false},
		{"a log key", "/internal/pg", "/internal/logkey", false},
		{"pcon's repository tests use the bootstrap", "/pkg/pcon/internal/repotest", "/internal/service", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			imp := []string{root + tc.imports}
			for field, p := range map[string]pkg{
				"code":          {ImportPath: root + tc.pkg, Imports: imp},
				"internal test": {ImportPath: root + tc.pkg, TestImports: imp},
				"external test": {ImportPath: root + tc.pkg, XTestImports: imp},
			} {
				got, _ := violations([]pkg{p})
				if refused := len(got) > 0; refused != tc.refused {
					t.Errorf("%s imported by the %s: refused %v, want %v %v", path.Base(tc.imports), field, refused, tc.refused, got)
				}
			}
		})
	}
}

// TestExceptionsOnlyForTests: an exception lets the tests it names import
// what a rule forbids, but not the package's code, nor another package.
func TestExceptionsOnlyForTests(t *testing.T) {
	t.Parallel()
	e := exceptions[0]
	tests := []struct {
		name    string
		p       pkg
		refused []string
	}{
		{"its external test", pkg{ImportPath: e.pkg, XTestImports: []string{e.imports}}, nil},
		{"its internal test", pkg{ImportPath: e.pkg, TestImports: []string{e.imports}}, nil},
		{"its code", pkg{ImportPath: e.pkg, Imports: []string{e.imports}, XTestImports: []string{e.imports}}, []string{e.pkg + " imports " + e.imports}},
		{"another package", pkg{ImportPath: e.pkg + "/other", XTestImports: []string{e.imports}}, []string{e.pkg + "/other imports " + e.imports}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, used := violations([]pkg{tc.p})
			for i, v := range got {
				got[i], _, _ = strings.Cut(v, " (") // the rule's name
			}
			if diff := cmp.Diff(tc.refused, got); diff != "" {
				t.Errorf("refused (-want +got):\n%s", diff)
			}
			if want := tc.refused == nil; used[e] != want {
				t.Errorf("exception used: %v, want %v", used[e], want)
			}
		})
	}
}
