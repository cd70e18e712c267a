// Package docs is the project's manual, in Markdown. Its test keeps the
// Markdown of the whole repository navigable: every relative link points at
// a file that exists and, when it names a heading, at a heading that exists,
// and the README stays short enough to read in a few minutes.
package docs

import (
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode"

	"github.com/google/go-cmp/cmp"
)

// root is the repository's root, where the Markdown under test lives.
const root = ".."

// readmeMaxLines keeps the README a front door: what the pipeline is, how
// to run it and test it, and where to read further. The rest is in docs/.
const readmeMaxLines = 300

// skipDirs are never walked, and links into them are broken: they are not
// in a clone (build output, dev state, installed tools) or not ours.
var skipDirs = map[string]bool{
	".git": true, ".dev": true, ".bin": true, "bin": true, "node_modules": true, "vendor": true,
	// Go's fixtures may hold broken Markdown on purpose.
	"testdata": true,
}

func TestLinks(t *testing.T) {
	t.Parallel()
	problems, err := check(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

func TestReadmeLength(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > readmeMaxLines {
		t.Errorf("README.md has %d lines, want at most %d: move the detail into docs/ and link to it", n, readmeMaxLines)
	}
}

// TestCheckFindsBrokenLinks runs the checker on a small tree with one link
// of each kind that must fail and of each kind that must pass, so that
// TestLinks passing means something.
func TestCheckFindsBrokenLinks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	files := map[string]string{
		"README.md": strings.Join([]string{
			"# Title",
			"[ok file](docs/a.md) [ok heading](docs/a.md#the-api-limits) [ok dir](pkg)",
			"[ok self](#title) [ok duplicate](docs/a.md#same-1) [ok root-relative](/docs/a.md)",
			"[ok external](https://example.com/x.md#nothing) [ok mail](mailto:a@example.com)",
			"[ok line](pkg/x.go#L3) ![ok image](img/a.png) [ok html anchor](docs/a.md#kept)",
			"[missing file](docs/b.md) [missing heading](docs/a.md#nothing-here)",
			"[missing self](#no-such) [missing duplicate](docs/a.md#same-2)",
			"[outside](../elsewhere.md) [ignored dir](.dev/logs) [anchor on code](pkg/x.go#main)",
			"`[in code](nowhere.md)`",
			"```",
			"[in a fence](nowhere.md)",
			"```",
			"[ref]: docs/missing.md",
			`<img src="img/missing.png">`,
		}, "\n"),
		"docs/a.md": "# The API: limits\n\n## Same\n\n## Same\n\n<a id=\"kept\"></a>\n",
		"pkg/x.go":  "package x\n",
		"img/a.png": "png",
		".dev/logs": "x",
	}
	for name, text := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := check(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`README.md:6: "docs/a.md#nothing-here": docs/a.md has no heading "nothing-here"`,
		`README.md:6: "docs/b.md": no such file`,
		`README.md:7: "#no-such": README.md has no heading "no-such"`,
		`README.md:7: "docs/a.md#same-2": docs/a.md has no heading "same-2"`,
		`README.md:8: "../elsewhere.md": points outside the repository`,
		`README.md:8: ".dev/logs": points into .dev, which a clone does not have`,
		`README.md:8: "pkg/x.go#main": an anchor on a file that is not Markdown (only #L<line> is)`,
		`README.md:13: "docs/missing.md": no such file`,
		`README.md:14: "img/missing.png": no such file`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}

func TestSlug(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, heading, want string
	}{
		{"words", "Quick start", "quick-start"},
		{"punctuation dropped", "Where an event's time goes", "where-an-events-time-goes"},
		{"code span kept, its punctuation dropped", "The parallel consumer, `pkg/pcon`", "the-parallel-consumer-pkgpcon"},
		{"underscore and hyphen kept", "`outbox_failed` re-drive", "outbox_failed-re-drive"},
		{"dots dropped", "A compose `kafka-data` volume from Kafka 3.9", "a-compose-kafka-data-volume-from-kafka-39"},
		{"link text only", "See [the API](api.md) first", "see-the-api-first"},
		{"emphasis markers dropped", "**Bold** and _lean_ and snake_case", "bold-and-lean-and-snake_case"},
		{"each space a hyphen", "a  b", "a--b"},
		{"non-ASCII letters kept", "Café über", "café-über"},
		{"arrows dropped", "outbox → Kafka", "outbox--kafka"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tt.want, slug(tt.heading)); diff != "" {
				t.Errorf("slug(%q) (-want +got):\n%s", tt.heading, diff)
			}
		})
	}
}

func TestParseAnchors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, text string
		want       []string
	}{
		{"duplicates numbered", "# A\n## A\n### A\n", []string{"a", "a-1", "a-2"}},
		{"closing hashes", "## Title ##\n", []string{"title"}},
		{"setext", "Title\n=====\n\nSub\n---\n", []string{"sub", "title"}},
		{"not in a fence", "```\n# comment\n```\n~~~~\n# too\n~~~~\n# Real\n", []string{"real"}},
		{"html anchors", "<a id=\"x\"></a>\n<a name=\"y\"></a>\n", []string{"x", "y"}},
		{"no space is no heading", "#hashtag\n", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := parse(tt.text).anchorList()
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("anchors (-want +got):\n%s", diff)
			}
		})
	}
}

// doc is what the checker needs of one Markdown file.
type doc struct {
	anchors map[string]bool
	links   []link
}

type link struct {
	line   int
	target string
}

func (d doc) anchorList() []string {
	var out []string
	for a := range d.anchors {
		out = append(out, a)
	}
	sort.Strings(out)
	return out
}

// check walks the Markdown files under dir and returns every broken
// relative link as "file:line: "target": why", sorted.
func check(dir string) ([]string, error) {
	docs := map[string]doc{} // by slash path from dir
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			if p != dir && skipDirs[e.Name()] {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.EqualFold(filepath.Ext(p), ".md") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		docs[filepath.ToSlash(rel)] = parse(string(b))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("walk %s: %w", dir, err)
	}
	var problems []string
	for name, d := range docs {
		for _, l := range d.links {
			if why := checkLink(dir, docs, name, l.target); why != "" {
				problems = append(problems, fmt.Sprintf("%s:%d: %q: %s", name, l.line, l.target, why))
			}
		}
	}
	sort.Slice(problems, func(i, j int) bool { return lessProblem(problems[i], problems[j]) })
	return problems, nil
}

// lessProblem orders problems by file, then line number, then text.
func lessProblem(a, b string) bool {
	fa, la, ra := splitProblem(a)
	fb, lb, rb := splitProblem(b)
	if fa != fb {
		return fa < fb
	}
	if la != lb {
		return la < lb
	}
	return ra < rb
}

func splitProblem(p string) (file string, line int, rest string) {
	parts := strings.SplitN(p, ":", 3)
	if len(parts) < 3 {
		return p, 0, ""
	}
	_, _ = fmt.Sscan(parts[1], &line)
	return parts[0], line, parts[2]
}

var scheme = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)

// lineAnchor is GitHub's anchor of a line, or a range, of a file it shows
// as code.
var lineAnchor = regexp.MustCompile(`^L\d+(-L\d+)?$`)

// checkLink says what is wrong with target, a link found in the file from
// (slash path from dir), or "" when nothing is.
func checkLink(dir string, docs map[string]doc, from, target string) string {
	if scheme.MatchString(target) || strings.HasPrefix(target, "//") {
		return "" // another site's, or mail
	}
	p, anchor, _ := strings.Cut(target, "#")
	p, err := url.PathUnescape(p)
	if err != nil {
		return fmt.Sprintf("bad escape: %v", err)
	}
	var rel string
	switch {
	case p == "":
		rel = from
	case strings.HasPrefix(p, "/"):
		rel = path.Clean(strings.TrimPrefix(p, "/"))
	default:
		rel = path.Clean(path.Join(path.Dir(from), p))
	}
	if rel == ".." || strings.HasPrefix(rel, "../") {
		return "points outside the repository"
	}
	for _, part := range strings.Split(rel, "/") {
		if skipDirs[part] {
			return fmt.Sprintf("points into %s, which a clone does not have", part)
		}
	}
	info, err := os.Stat(filepath.Join(dir, filepath.FromSlash(rel)))
	if err != nil {
		return "no such file"
	}
	if anchor == "" {
		return ""
	}
	if info.IsDir() {
		rel = path.Join(rel, "README.md") // what GitHub shows for a directory
	}
	d, ok := docs[rel]
	if !ok {
		if lineAnchor.MatchString(anchor) {
			return ""
		}
		return "an anchor on a file that is not Markdown (only #L<line> is)"
	}
	if !d.anchors[anchor] {
		return fmt.Sprintf("%s has no heading %q", rel, anchor)
	}
	return ""
}

var (
	fence      = regexp.MustCompile("^ {0,3}(`{3,}|~{3,})")
	atx        = regexp.MustCompile(`^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	setextLine = regexp.MustCompile(`^ {0,3}(=+|-+)[ \t]*$`)
	// inline matches [text](target) and ![alt](target), with an optional
	// title; target may be in angle brackets.
	inline    = regexp.MustCompile(`\]\(\s*(?:<([^>]*)>|([^)\s]+))(?:\s+(?:"[^"]*"|'[^']*'))?\s*\)`)
	reference = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*<?([^\s>]+)>?`)
	htmlLink  = regexp.MustCompile(`(?i)\b(?:href|src)\s*=\s*"([^"]*)"`)
	htmlID    = regexp.MustCompile(`(?i)<a\s[^>]*\b(?:id|name)\s*=\s*"([^"]+)"`)
	// notParagraph starts a line that cannot be a setext heading's text.
	notParagraph = regexp.MustCompile(`^\s*([-*+>|#]|\d+[.)]\s|$)`)
)

// parse finds the anchors (headings and <a id>) and the links of a
// Markdown text, outside code.
func parse(text string) doc {
	d := doc{anchors: map[string]bool{}}
	// GitHub numbers a repeated slug -1, -2, …, skipping any taken
	// (github-slugger's occurrences).
	occurrences := map[string]int{}
	add := func(s string) {
		a := s
		for _, taken := occurrences[a]; taken; _, taken = occurrences[a] {
			occurrences[s]++
			a = fmt.Sprintf("%s-%d", s, occurrences[s])
		}
		occurrences[a] = 0
		d.anchors[a] = true
	}
	var open string // the fence being inside, or ""
	prev := ""      // the previous line, if it could be a setext heading's text
	for i, line := range strings.Split(text, "\n") {
		if m := fence.FindStringSubmatch(line); m != nil {
			switch {
			case open == "":
				open = m[1]
			case m[1][0] == open[0] && len(m[1]) >= len(open) && strings.TrimSpace(line) == m[1]:
				open = ""
			}
			prev = ""
			continue
		}
		if open != "" {
			continue
		}
		if m := atx.FindStringSubmatch(line); m != nil {
			add(slug(m[2]))
			prev = ""
		} else if setextLine.MatchString(line) && prev != "" {
			add(slug(prev))
			prev = ""
			continue
		}
		for _, m := range htmlID.FindAllStringSubmatch(line, -1) {
			d.anchors[m[1]] = true
		}
		plain := stripCode(line)
		for _, m := range inline.FindAllStringSubmatch(plain, -1) {
			d.links = append(d.links, link{i + 1, m[1] + m[2]})
		}
		if m := reference.FindStringSubmatch(plain); m != nil {
			d.links = append(d.links, link{i + 1, m[1]})
		}
		for _, m := range htmlLink.FindAllStringSubmatch(plain, -1) {
			d.links = append(d.links, link{i + 1, m[1]})
		}
		if notParagraph.MatchString(line) || atx.MatchString(line) {
			prev = ""
		} else {
			prev = strings.TrimSpace(line)
		}
	}
	return d
}

// codeSpan is a code span: a run of backticks, anything, the same run.
var codeSpan = regexp.MustCompile("(`+)")

// stripCode blanks the code spans of a line, so that a link shown as code
// is not taken for a link.
func stripCode(line string) string {
	var b strings.Builder
	for {
		loc := codeSpan.FindStringIndex(line)
		if loc == nil {
			b.WriteString(line)
			return b.String()
		}
		ticks := line[loc[0]:loc[1]]
		end := strings.Index(line[loc[1]:], ticks)
		if end < 0 {
			b.WriteString(line)
			return b.String()
		}
		b.WriteString(line[:loc[0]])
		b.WriteString(strings.Repeat(" ", loc[1]+end+len(ticks)-loc[0]))
		line = line[loc[1]+end+len(ticks):]
	}
}

var (
	linkText  = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	htmlTag   = regexp.MustCompile(`<[^>]+>`)
	emphasis  = regexp.MustCompile(`(^|[^\p{L}\p{N}])[_*]+|[_*]+($|[^\p{L}\p{N}])`)
	codeSplit = regexp.MustCompile("`+[^`]*`+")
)

// slug is GitHub's anchor of a heading: the rendered text lower-cased,
// every character but letters, digits, marks, '-' and '_' dropped, and each
// space made a '-'. Rendering keeps a code span's text as it is, a link's
// text without its target, and drops emphasis markers.
func slug(heading string) string {
	var text strings.Builder
	rest := heading
	for {
		loc := codeSplit.FindStringIndex(rest)
		if loc == nil {
			text.WriteString(renderPlain(rest))
			break
		}
		text.WriteString(renderPlain(rest[:loc[0]]))
		text.WriteString(strings.Trim(rest[loc[0]:loc[1]], "`"))
		rest = rest[loc[1]:]
	}
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(text.String())) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsNumber(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// renderPlain renders Markdown text outside code spans as GitHub shows it,
// as far as anchors care.
func renderPlain(s string) string {
	s = linkText.ReplaceAllString(s, "$1")
	s = htmlTag.ReplaceAllString(s, "")
	for {
		t := emphasis.ReplaceAllString(s, "$1$2")
		if t == s {
			return s
		}
		s = t
	}
}
