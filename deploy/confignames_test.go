package deploy_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/loopers/commerce-pipeline/internal/config"
)

// The naming scheme of docs/configuration.md ("Naming scheme"): a shared
// component's prefix, the process's identity and listeners, a standard's
// own names, or the program's name as a prefix.
var (
	// sharedPrefixes are the shared components', each read by its own
	// package (internal/pg, internal/kafka, internal/cluster) alone.
	sharedPrefixes = []string{"DB_", "KAFKA_", "CLUSTER_"}
	// sharedNames are read by every program that needs them: the URLs of
	// the database and Redis (Loader.URL, with their _FILE), the listeners,
	// and the Go runtime's garbage collector target.
	sharedNames = []string{"DATABASE_URL", "DATABASE_URL_FILE", "REDIS_URL", "REDIS_URL_FILE", "HTTP_ADDR", "ADMIN_ADDR", "GOGC"}
)

// ownPrefix is the prefix of a program's own settings: its name in upper
// snake case (outbox-relay: OUTBOX_RELAY_).
func ownPrefix(program string) string {
	return strings.ToUpper(strings.ReplaceAll(program, "-", "_")) + "_"
}

// schemeProblem says why name breaks the scheme in program, or "".
func schemeProblem(program, name string) string {
	if strings.HasPrefix(name, ownPrefix(program)) || slices.Contains(sharedNames, name) {
		return ""
	}
	for _, p := range sharedPrefixes {
		if strings.HasPrefix(name, p) {
			return ""
		}
	}
	return "neither " + ownPrefix(program) + "* (the program's own) nor a shared component's or a standard's name"
}

// TestConfigNamesFollowTheScheme: every variable a binary reports follows
// the naming scheme, a boolean is read as one (so that -config-vars says
// Bool), and a shared component's variable is read the same way by every
// program that reads it. Deprecated names are exempt: they are the names
// the scheme replaced.
func TestConfigNamesFollowTheScheme(t *testing.T) {
	t.Parallel()
	seen := map[string]config.Var{} // shared variable → as the first program read it
	seenIn := map[string]string{}
	for _, p := range programs {
		for _, v := range programVars(t, p) {
			if why := schemeProblem(p, v.Name); why != "" {
				t.Errorf("%s reads %s: %s", p, v.Name, why)
			}
			if (v.Default == "true" || v.Default == "false") && v.Kind != "Bool" {
				t.Errorf("%s reads %s, a boolean, as %s: read it with Loader.Bool", p, v.Name, v.Kind)
			}
			if strings.HasPrefix(v.Name, ownPrefix(p)) {
				continue
			}
			// The default may differ (a pool size), and whether a program
			// needs it (Redis: the API's optional cache, the consumers'
			// invalidations); what the value means may not.
			shape := config.Var{Name: v.Name, Kind: v.Kind, Allowed: v.Allowed}
			if first, ok := seen[v.Name]; ok && cmpDiff(first, shape) != "" {
				t.Errorf("%s and %s read the shared %s differently: %s", seenIn[v.Name], p, v.Name, cmpDiff(first, shape))
			}
			seen[v.Name], seenIn[v.Name] = shape, p
		}
	}
}

// TestSchemeRule: the rule the test above applies.
func TestSchemeRule(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		program, name string
		ok            bool
	}{
		{"outbox-relay", "OUTBOX_RELAY_BATCH_SIZE", true},
		{"outbox-relay", "OUTBOX_RETENTION", false},
		{"product-consumers", "PRODUCT_CONSUMERS_GROUPS", true},
		{"product-consumers", "CONSUMER_MAX_IN_FLIGHT", false},
		{"product-consumers", "OUTBOX_RELAY_WINDOW", false},
		{"commerce-api", "AUTH_MODE", false},
		{"commerce-api", "KAFKA_BROKERS", true},
		{"migrate", "DATABASE_URL_FILE", true},
		{"outbox-relay", "GOMAXPROCS", false},
	} {
		if got := schemeProblem(tc.program, tc.name) == ""; got != tc.ok {
			t.Errorf("%s reading %s: follows the scheme %v, want %v", tc.program, tc.name, got, tc.ok)
		}
	}
}

// loaderMethods are the config.Loader methods that read a variable.
var loaderMethods = []string{"String", "Computed", "Required", "URL", "OptionalURL", "Duration", "PositiveInt", "List", "Bool", "OneOf", "Secret"}

// TestServicesReadNoSharedPrefix: a service reads its own variables and the
// shared names, never a shared component's prefix (KAFKA_SESSION_TIMEOUT
// read by one service looked like every Kafka client's setting): those are
// read by the component's package, so they mean the same everywhere.
func TestServicesReadNoSharedPrefix(t *testing.T) {
	t.Parallel()
	calls := 0
	err := filepath.WalkDir(filepath.Join(root, "services"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		rel, _ := filepath.Rel(filepath.Join(root, "services"), path)
		program, _, _ := strings.Cut(filepath.ToSlash(rel), "/")
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			lit, isLit := call.Args[0].(*ast.BasicLit)
			if !ok || !isLit || lit.Kind != token.STRING || !slices.Contains(loaderMethods, sel.Sel.Name) {
				return true
			}
			name, err := strconv.Unquote(lit.Value)
			if err != nil || name == "" || strings.ToUpper(name) != name {
				return true
			}
			calls++
			if !strings.HasPrefix(name, ownPrefix(program)) && !slices.Contains(sharedNames, name) {
				t.Errorf("%s reads %s: a service reads its own %s* variables and the shared names %v; a shared component's are read by its package",
					rel, name, ownPrefix(program), sharedNames)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls < 20 {
		t.Fatalf("found %d variable reads in services/: the scan no longer sees them", calls)
	}
}

// notExported are deprecated names a file may hold for another reason:
// dev.sh counts its consumer instances in a shell variable CONSUMERS, which
// it passes to no service (each is started with its variables spelled out).
var notExported = map[string][]string{"scripts/dev.sh": {"CONSUMERS"}}

// TestNoDeprecatedNameInUse: compose, the manifests, make dev's script and
// the documents use the new names only; docs/configuration.md names the old
// ones in its table of deprecated names alone.
func TestNoDeprecatedNameInUse(t *testing.T) {
	t.Parallel()
	var old []string
	for _, p := range programs {
		for _, v := range programVars(t, p) {
			old = append(old, v.Deprecated...)
		}
	}
	if len(old) == 0 {
		t.Fatal("no binary reports a deprecated name")
	}
	word := regexp.MustCompile(`(^|[^A-Za-z0-9_])(` + strings.Join(old, "|") + `)($|[^A-Za-z0-9_])`)
	var files []string
	for _, pattern := range []string{"docker-compose*.yml", "Makefile", "*.md", "scripts/*.sh", "docs/*.md", "deploy/*.md", "services/*/README.md",
		"deploy/k8s/*/*.yaml", "deploy/k8s/*/*/*.yaml", "services/*/internal/api/*.yaml"} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 20 {
		t.Fatalf("found %d files to check: the patterns no longer match the repository", len(files))
	}
	for _, path := range files {
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		text := string(readFile(t, rel))
		if rel == "docs/configuration.md" {
			text, _, _ = strings.Cut(text, "\n## "+deprecatedSection+"\n")
		}
		for i, line := range strings.Split(text, "\n") {
			for _, m := range word.FindAllStringSubmatch(line, -1) {
				if !slices.Contains(notExported[rel], m[2]) {
					t.Errorf("%s:%d uses the deprecated name %s: %s", rel, i+1, m[2], strings.TrimSpace(line))
				}
			}
		}
	}
}
