package doccheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const root = "../.."

// TestGoBlocksAreCompiled holds every Go block of the guides to compiled
// code: each names its source with `<!-- code: PATH -->` (an Example
// function's test file, or a program under examples/ or cmd/, all built
// by CI's go vet and go test), and each of its lines is found there in
// order. A guide's code therefore cannot drift from code that builds.
func TestGoBlocksAreCompiled(t *testing.T) {
	guides, err := Guides(root)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range guides {
		blocks, err := Read(g)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range blocks {
			if b.Lang != "go" {
				continue
			}
			n++
			if b.Source == "" {
				t.Errorf("%v: a Go block needs <!-- code: PATH --> on the line before it, naming the compiled file it is taken from", b)
				continue
			}
			if !strings.HasSuffix(b.Source, ".go") {
				t.Errorf("%v: source %s is not a Go file", b, b.Source)
				continue
			}
			src, err := os.ReadFile(filepath.Join(root, b.Source))
			if err != nil {
				t.Errorf("%v: %v", b, err)
				continue
			}
			if line, ok := Excerpt(b.Lines, string(src)); !ok {
				t.Errorf("%v: line %q is not in %s (in this order)", b, line, b.Source)
			}
		}
	}
	if n == 0 {
		t.Fatal("no Go blocks found: is the repository root right?")
	}
}

// TestGuideLinks checks that relative links between the guides point at
// files that exist.
func TestGuideLinks(t *testing.T) {
	guides, err := Guides(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range guides {
		data, err := os.ReadFile(g)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range linkRe.FindAllStringSubmatch(string(data), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			target, _, _ = strings.Cut(target, "#")
			if _, err := os.Stat(filepath.Join(filepath.Dir(g), target)); err != nil {
				t.Errorf("%s: link to %s: %v", g, m[1], err)
			}
		}
	}
}

func TestExcerpt(t *testing.T) {
	src := "a\n\tb := 1\n\tif err != nil {\n\t}\n\tc()\n"
	if _, ok := Excerpt([]string{"a", "", "b := 1", "  c()"}, src); !ok {
		t.Error("an excerpt in order was refused")
	}
	if l, ok := Excerpt([]string{"c()", "a"}, src); ok || l != "a" {
		t.Errorf("out of order: got %q, %v", l, ok)
	}
	if _, ok := Excerpt([]string{"d()"}, src); ok {
		t.Error("a missing line was accepted")
	}
}
