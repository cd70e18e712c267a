package deploy_test

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/loopers/commerce-pipeline/internal/config"
	"github.com/loopers/commerce-pipeline/internal/service"
)

// docRow is one variable of docs/configuration.md.
type docRow struct {
	Required bool
	Default  string // the first `code` span of the Default cell; "" for —
}

// readDoc returns docs/configuration.md's tables by program (the "## name"
// heading above each) and variable.
func readDoc(t *testing.T) map[string]map[string]docRow {
	t.Helper()
	doc := map[string]map[string]docRow{}
	section := ""
	for i, line := range strings.Split(string(readFile(t, "docs/configuration.md")), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			section = strings.TrimSpace(h)
			continue
		}
		if !strings.HasPrefix(line, "| `") || section == deprecatedSection {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		if len(cells) != 4 {
			t.Fatalf("configuration.md:%d: want 4 cells, got %d: %s", i+1, len(cells), line)
		}
		name := strings.Trim(strings.TrimSpace(cells[0]), "`")
		row := docRow{Default: firstCode(cells[2])}
		switch strings.TrimSpace(cells[1]) {
		case "yes":
			row.Required = true
		case "no":
		default:
			t.Fatalf("configuration.md:%d: Required must be yes or no: %s", i+1, line)
		}
		if doc[section] == nil {
			doc[section] = map[string]docRow{}
		}
		if _, dup := doc[section][name]; dup {
			t.Fatalf("configuration.md:%d: %s listed twice under %s", i+1, name, section)
		}
		doc[section][name] = row
	}
	return doc
}

// deprecatedSection is the heading of docs/configuration.md's table of
// renamed variables: old name, new name, program.
const deprecatedSection = "Deprecated names"

// rename is one row of the deprecated names' table.
type rename struct{ Program, Old, New string }

// readDeprecated returns the rows of the deprecated names' table.
func readDeprecated(t *testing.T) []rename {
	t.Helper()
	var rows []rename
	section := ""
	for i, line := range strings.Split(string(readFile(t, "docs/configuration.md")), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			section = strings.TrimSpace(h)
			continue
		}
		if section != deprecatedSection || !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		if len(cells) != 3 {
			t.Fatalf("configuration.md:%d: want 3 cells (old, new, program), got %d: %s", i+1, len(cells), line)
		}
		rows = append(rows, rename{Program: strings.TrimSpace(cells[2]), Old: firstCode(cells[0]), New: firstCode(cells[1])})
	}
	return rows
}

// TestDeprecatedNamesDocument: the document's table of old names is what
// the binaries read under each new name, no more and no less.
func TestDeprecatedNamesDocument(t *testing.T) {
	t.Parallel()
	var want []rename
	for _, p := range programs {
		for _, v := range programVars(t, p) {
			for _, old := range v.Deprecated {
				want = append(want, rename{Program: p, Old: old, New: v.Name})
			}
		}
	}
	if len(want) == 0 {
		t.Fatal("no binary reports a deprecated name: the check would pass on an empty table")
	}
	less := func(a, b rename) bool { return a.Program+a.Old < b.Program+b.Old }
	if diff := cmp.Diff(want, readDeprecated(t), cmpopts.SortSlices(less)); diff != "" {
		t.Errorf("docs/configuration.md's %q table differs from what the binaries report with %s (-binaries +document):\n%s", deprecatedSection, service.ConfigVarsFlag, diff)
	}
}

func firstCode(cell string) string {
	_, rest, ok := strings.Cut(cell, "`")
	if !ok {
		return ""
	}
	code, _, _ := strings.Cut(rest, "`")
	return code
}

// TestConfigurationDocument: every variable each program reads is in its
// table with the code's required flag and default, and the table lists
// nothing else.
func TestConfigurationDocument(t *testing.T) {
	t.Parallel()
	doc := readDoc(t)
	for _, p := range programs {
		t.Run(p, func(t *testing.T) {
			t.Parallel()
			want := map[string]docRow{}
			for _, v := range programVars(t, p) {
				row := docRow{Required: v.Required, Default: v.Default}
				if v.Kind == "Duration" {
					// The document writes 168h for 168h0m0s: compare values.
					if d, err := time.ParseDuration(doc[p][v.Name].Default); err == nil && d.String() == v.Default {
						row.Default = doc[p][v.Name].Default
					}
				}
				want[v.Name] = row
			}
			if diff := cmpDiff(want, doc[p]); diff != "" {
				t.Errorf("docs/configuration.md section %q differs from what %s %s reports (-code +document):\n%s", p, p, service.ConfigVarsFlag, diff)
			}
		})
	}
}

// TestRequiredAtStartup runs each binary with no configuration at all: it
// must refuse to start, naming every variable the document calls required
// and no optional one.
func TestRequiredAtStartup(t *testing.T) {
	t.Parallel()
	doc := readDoc(t)
	for _, p := range programs {
		t.Run(p, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, binary(t, p))
			cmd.Env = []string{"PATH=/usr/bin:/bin"}
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			var exitErr *exec.ExitError
			if !errors.As(err, &exitErr) {
				t.Fatalf("want a start-up failure, got err=%v; output:\n%s", err, out.String())
			}
			for name, row := range doc[p] {
				said := strings.Contains(out.String(), name)
				if row.Required && !said {
					t.Errorf("%s is documented as required but the start-up error does not name it:\n%s", name, out.String())
				}
				// A required value's file alternative (DATABASE_URL_FILE
				// for DATABASE_URL) is named as the other way to give it.
				alternative := strings.HasSuffix(name, config.FileSuffix) && doc[p][strings.TrimSuffix(name, config.FileSuffix)].Required
				if !row.Required && said && !alternative {
					t.Errorf("%s is documented as optional but the start-up error names it:\n%s", name, out.String())
				}
			}
		})
	}
}
