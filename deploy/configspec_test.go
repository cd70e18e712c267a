package deploy_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// module is the import path of the module root.
const module = "github.com/loopers/commerce-pipeline"

// envVar is one variable a program reads, as its configuration code says.
type envVar struct {
	Name     string
	Kind     string // the internal/config Loader method, or Getenv for os.Getenv
	Default  string // formatted as the program formats it; "" when there is none
	Opaque   bool   // Default is Go source: the value is computed at run time
	Required bool
	Schemes  []string // URL: the schemes allowed
	Allowed  []string // List: the items allowed
}

// program is one binary and the file holding its configuration.
type program struct {
	Name string
	File string
}

var programs = []program{
	{"commerce-api", "services/commerce-api/internal/app/config.go"},
	{"outbox-relay", "services/outbox-relay/internal/relay/config.go"},
	{"product-consumers", "services/product-consumers/internal/app/config.go"},
	{"migrate", "cmd/migrate/main.go"},
}

// loaderKinds are the internal/config Loader methods that read a variable
// (Fail and Err do not).
var loaderKinds = map[string]bool{"URL": true, "String": true, "Required": true, "Duration": true, "PositiveInt": true, "List": true}

// readVars parses file and returns every variable it reads, in source order:
// the first argument of each Loader read, and of os.Getenv/os.LookupEnv.
func readVars(t *testing.T, file string) []envVar {
	t.Helper()
	path := filepath.Join(root, file)
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	ev := &evaluator{fset: fset, dir: filepath.Dir(path), imports: importsOf(f)}
	var vars []envVar
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) == 0 {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		recv, _ := sel.X.(*ast.Ident)
		lit, ok := call.Args[0].(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING || recv == nil {
			return true
		}
		name, _ := strconv.Unquote(lit.Value)
		kind := sel.Sel.Name
		switch {
		case ev.imports[recv.Name] == "os" && (kind == "Getenv" || kind == "LookupEnv"):
			vars = append(vars, envVar{Name: name, Kind: "Getenv"})
		case loaderKinds[kind]:
			v, err := ev.loaderVar(name, kind, call.Args[1:])
			if err != nil {
				t.Fatalf("%s: %s: %v", fset.Position(call.Pos()), name, err)
			}
			vars = append(vars, v)
		}
		return true
	})
	return vars
}

// loaderVar describes a Loader read from its method and remaining arguments,
// formatting the default as internal/config does.
func (ev *evaluator) loaderVar(name, kind string, args []ast.Expr) (envVar, error) {
	v := envVar{Name: name, Kind: kind}
	strs := func(es []ast.Expr) ([]string, error) {
		var out []string
		for _, e := range es {
			x, err := ev.eval(e)
			if err != nil {
				return nil, err
			}
			s, ok := x.(string)
			if !ok {
				return nil, fmt.Errorf("%s is not a string", ev.source(e))
			}
			out = append(out, s)
		}
		return out, nil
	}
	var err error
	switch kind {
	case "URL":
		v.Required = true
		v.Schemes, err = strs(args)
		return v, err
	case "Required":
		v.Required = true
		return v, nil
	case "List":
		if len(args) == 0 {
			return v, fmt.Errorf("List without a default")
		}
		if v.Allowed, err = ev.stringsOf(args[1:]); err != nil {
			return v, err
		}
		def, err := ev.eval(args[0])
		if err != nil {
			return v, err
		}
		switch def := def.(type) {
		case nil:
			v.Required = true
		case []string:
			v.Default = strings.Join(def, ",")
		default:
			return v, fmt.Errorf("default %s is not a []string", ev.source(args[0]))
		}
		return v, nil
	}
	if len(args) != 1 {
		return v, fmt.Errorf("%s takes one default, got %d arguments", kind, len(args))
	}
	def, err := ev.eval(args[0])
	if err != nil {
		// Computed at run time (defaultNodeID() for example): the source
		// text is what the document must show.
		v.Default, v.Opaque = ev.source(args[0]), true
		return v, nil
	}
	switch d := def.(type) {
	case string:
		if kind == "String" {
			v.Default = d
			return v, nil
		}
	case int64:
		switch kind {
		case "Duration":
			v.Default = time.Duration(d).String()
			return v, nil
		case "PositiveInt":
			v.Default = strconv.FormatInt(d, 10)
			return v, nil
		}
	}
	return v, fmt.Errorf("%s default %s has the wrong type", kind, ev.source(args[0]))
}

// evaluator computes constant expressions of configuration defaults:
// literals, time units, arithmetic, []string literals and constants or
// variables of this module's packages.
type evaluator struct {
	fset    *token.FileSet
	dir     string            // the package directory of the file
	imports map[string]string // local name → import path
	files   []*ast.File       // the package's files, parsed on first need
}

var timeUnits = map[string]int64{
	"Nanosecond": int64(time.Nanosecond), "Microsecond": int64(time.Microsecond), "Millisecond": int64(time.Millisecond),
	"Second": int64(time.Second), "Minute": int64(time.Minute), "Hour": int64(time.Hour),
}

func importsOf(f *ast.File) map[string]string {
	m := map[string]string{}
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		name := path[strings.LastIndex(path, "/")+1:]
		if imp.Name != nil {
			name = imp.Name.Name
		}
		m[name] = path
	}
	return m
}

func (ev *evaluator) source(e ast.Expr) string {
	pos, end := ev.fset.Position(e.Pos()), ev.fset.Position(e.End())
	b, err := os.ReadFile(pos.Filename)
	if err != nil || end.Offset > len(b) {
		return fmt.Sprintf("%T", e)
	}
	return string(b[pos.Offset:end.Offset])
}

func (ev *evaluator) stringsOf(es []ast.Expr) ([]string, error) {
	var out []string
	for _, e := range es {
		if ell, ok := e.(*ast.Ellipsis); ok {
			e = ell.Elt
		}
		x, err := ev.eval(e)
		if err != nil {
			return nil, err
		}
		switch x := x.(type) {
		case string:
			out = append(out, x)
		case []string:
			out = append(out, x...)
		default:
			return nil, fmt.Errorf("%s is not a string", ev.source(e))
		}
	}
	return out, nil
}

func (ev *evaluator) eval(e ast.Expr) (any, error) {
	switch e := e.(type) {
	case *ast.BasicLit:
		switch e.Kind {
		case token.INT:
			return strconv.ParseInt(e.Value, 0, 64)
		case token.STRING:
			return strconv.Unquote(e.Value)
		}
	case *ast.ParenExpr:
		return ev.eval(e.X)
	case *ast.Ident:
		if e.Name == "nil" {
			return nil, nil
		}
		return ev.lookup(e.Name)
	case *ast.SelectorExpr:
		pkg, ok := e.X.(*ast.Ident)
		if !ok {
			break
		}
		path := ev.imports[pkg.Name]
		if path == "time" {
			if d, ok := timeUnits[e.Sel.Name]; ok {
				return d, nil
			}
			break
		}
		if rel, ok := strings.CutPrefix(path, module+"/"); ok {
			other := &evaluator{fset: ev.fset, dir: filepath.Join(root, rel)}
			return other.lookup(e.Sel.Name)
		}
	case *ast.BinaryExpr:
		x, err := ev.eval(e.X)
		if err != nil {
			return nil, err
		}
		y, err := ev.eval(e.Y)
		if err != nil {
			return nil, err
		}
		a, aok := x.(int64)
		b, bok := y.(int64)
		if aok && bok {
			switch e.Op {
			case token.MUL:
				return a * b, nil
			case token.ADD:
				return a + b, nil
			case token.SUB:
				return a - b, nil
			}
		}
	case *ast.CompositeLit:
		if arr, ok := e.Type.(*ast.ArrayType); ok && arr.Len == nil {
			if elt, ok := arr.Elt.(*ast.Ident); ok && elt.Name == "string" {
				out := []string{}
				for _, el := range e.Elts {
					x, err := ev.eval(el)
					if err != nil {
						return nil, err
					}
					s, ok := x.(string)
					if !ok {
						return nil, fmt.Errorf("%s is not a string", ev.source(el))
					}
					out = append(out, s)
				}
				return out, nil
			}
		}
	}
	return nil, fmt.Errorf("cannot evaluate %s", ev.source(e))
}

// lookup evaluates a package-level constant or variable of ev's package.
func (ev *evaluator) lookup(name string) (any, error) {
	if ev.files == nil {
		entries, err := os.ReadDir(ev.dir)
		if err != nil {
			return nil, err
		}
		for _, de := range entries {
			n := de.Name()
			if !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(ev.fset, filepath.Join(ev.dir, n), nil, parser.SkipObjectResolution)
			if err != nil {
				return nil, err
			}
			ev.files = append(ev.files, f)
		}
	}
	for _, f := range ev.files {
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || (gd.Tok != token.CONST && gd.Tok != token.VAR) {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, id := range vs.Names {
					if id.Name == name && i < len(vs.Values) {
						in := &evaluator{fset: ev.fset, dir: ev.dir, imports: importsOf(f), files: ev.files}
						return in.eval(vs.Values[i])
					}
				}
			}
		}
	}
	return nil, fmt.Errorf("no constant or variable %s in %s", name, ev.dir)
}

// TestReadVars pins the parser on the configuration of one service, so a
// parser that silently finds nothing cannot pass the document check.
func TestReadVars(t *testing.T) {
	got := map[string]envVar{}
	for _, v := range readVars(t, "services/product-consumers/internal/app/config.go") {
		got[v.Name] = v
	}
	for _, tc := range []struct {
		name string
		want envVar
	}{
		{"url", envVar{Name: "DATABASE_URL", Kind: "URL", Required: true, Schemes: []string{"postgres", "postgresql"}}},
		{"duration product", envVar{Name: "EVENT_HANDLED_RETENTION", Kind: "Duration", Default: "168h0m0s"}},
		{"list from another package", envVar{Name: "CONSUMERS", Kind: "List", Default: "like,order,view,stock", Allowed: []string{"like", "order", "view", "stock"}}},
		{"required list", envVar{Name: "KAFKA_BROKERS", Kind: "List", Required: true}},
		{"int", envVar{Name: "CONSUMER_MAX_IN_FLIGHT", Kind: "PositiveInt", Default: "1000"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmpDiff(tc.want, got[tc.want.Name]); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	relay := map[string]envVar{}
	for _, v := range readVars(t, "services/outbox-relay/internal/relay/config.go") {
		relay[v.Name] = v
	}
	want := envVar{Name: "OUTBOX_RELAY_NODE_ID", Kind: "String", Default: "defaultNodeID()", Opaque: true}
	if diff := cmpDiff(want, relay[want.Name]); diff != "" {
		t.Errorf("computed default (-want +got):\n%s", diff)
	}
}
