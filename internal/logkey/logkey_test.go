package logkey_test

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/loopers/commerce-pipeline/internal/logkey"
)

// TestOneErrorKey: log calls in this module put errors under Err only.
func TestOneErrorKey(t *testing.T) {
	t.Parallel()
	other := regexp.MustCompile(`(Debug|Info|Warn|Error)(Context)?\(.*"err", `)
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for n := 1; sc.Scan(); n++ {
			if other.MatchString(sc.Text()) {
				t.Errorf("%s:%d logs an error under \"err\"; use logkey.Err (%q)", path, n, logkey.Err)
			}
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
}
