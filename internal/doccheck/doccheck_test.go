package doccheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const root = "../.."

// TestGoBlocksAreCompiled holds every Go block of the guides that names
// its source with `<!-- code: PATH -->` (an Example function's test file,
// or a program under examples/ or cmd/, all built by CI's go vet and go
// test) to a verbatim excerpt of that file: consecutive lines, nothing
// left out. A guide's code therefore cannot drift from code that builds.
// Blocks without a source are compiled as pasted by TestGuidesRun.
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
			if line, ok := Verbatim(b.Lines, string(src)); !ok {
				t.Errorf("%v: not a verbatim excerpt of %s: %q does not follow on from the lines before it there", b, b.Source, line)
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

func TestVerbatim(t *testing.T) {
	src := "a\n\tb := 1\n\tif err != nil {\n\t}\n\n\tc()\n"
	if _, ok := Verbatim([]string{"", "b := 1", "  if err != nil {", "}", "", "c()", ""}, src); !ok {
		t.Error("a verbatim excerpt was refused")
	}
	if l, ok := Verbatim([]string{"a", "b := 1", "c()"}, src); ok || l != "c()" {
		t.Errorf("an excerpt leaving lines out: got %q, %v", l, ok)
	}
	if l, ok := Verbatim([]string{"c()", "a"}, src); ok || l != "a" {
		t.Errorf("out of order: got %q, %v", l, ok)
	}
	if _, ok := Verbatim([]string{"d()"}, src); ok {
		t.Error("a missing line was accepted")
	}
	if _, ok := Verbatim([]string{"", ""}, src); ok {
		t.Error("an empty block was accepted")
	}
}
