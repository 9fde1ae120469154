package doccheck

import (
	"context"
	"fmt"
	"github.com/gloveboxhq/glovebox/internal/spawn"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// modulePath is the module the guides' Go code belongs to.
const modulePath = "github.com/gloveboxhq/glovebox"

// HasPackageClause reports whether a Go block is a whole file: its first
// line that is neither blank nor a comment is a package clause.
func HasPackageClause(lines []string) bool {
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "//") {
			continue
		}
		return strings.HasPrefix(t, "package ")
	}
	return false
}

// Wrap makes a Go block into a file of package main, the way a reader
// pastes it: a whole file as it is; declarations (imports, types,
// functions) after a package clause, with an empty main when they have
// none; statements inside func main, after the block's own leading
// import declarations. It adds no imports: a block that uses a package
// imports it, as the reader's file must. offset is the number of lines
// put before the block's first line: the block's line n is the file's
// line n+offset.
func Wrap(lines []string) (src string, offset int) {
	body := strings.Join(lines, "\n")
	if HasPackageClause(lines) {
		return body + "\n", 0
	}
	fset := token.NewFileSet()
	if f, err := parser.ParseFile(fset, "x.go", "package main\n"+body, 0); err == nil {
		src = "package main\n" + body + "\n"
		if f.Scope.Lookup("main") == nil {
			src += "\nfunc main() {}\n"
		}
		return src, 1
	}
	// Statements: the block's leading imports go before func main, which
	// opens on a line of its own only where the block has a blank one,
	// so the block's lines keep their numbers (offset 1).
	out := append([]string(nil), lines...)
	n := importLines(out)
	switch {
	case n == 0:
		return "package main; func main() {\n" + strings.Join(out, "\n") + "\n}\n", 1
	case n < len(out) && strings.TrimSpace(out[n]) == "":
		out[n] = "func main() {"
	case !strings.Contains(out[n-1], "//"):
		out[n-1] += "; func main() {"
	default:
		out = append(out[:n], append([]string{"func main() {"}, out[n:]...)...)
	}
	return "package main\n" + strings.Join(out, "\n") + "\n}\n", 1
}

// importLines returns how many of a block's first lines are import
// declarations (with blank and comment lines among them).
func importLines(lines []string) int {
	n, inGroup := 0, false
	for i, l := range lines {
		t := strings.TrimSpace(l)
		switch {
		case inGroup:
			if t == ")" {
				inGroup = false
				n = i + 1
			}
		case t == "" || strings.HasPrefix(t, "//"):
		case strings.HasPrefix(t, "import ("):
			inGroup = true
		case strings.HasPrefix(t, "import "):
			n = i + 1
		default:
			return n
		}
	}
	return n
}

var vetLineRe = regexp.MustCompile(`(b\d+)/main\.go:(\d+)(?::\d+)?: (.*)`)

// CheckGo holds the guides' Go blocks to compiled code. A block with a
// `<!-- code: PATH -->` source must be a verbatim excerpt of that file
// (see [Verbatim]; the file is built and its Examples run by the test
// suite). A block without a source, and any block that is a whole file,
// is compiled as pasted (see [Wrap]), with go vet, each in a package of
// one module made in dir whose go.mod points at root with a replace
// directive, as a reader's module beside a checkout does (README, "Use it
// from a checkout"); go mod tidy fills in its requirements. dir is
// removed first.
func CheckGo(ctx context.Context, root, dir string, blocks []Block) []Report {
	var reports []Report
	if err := os.RemoveAll(dir); err != nil {
		return []Report{{Kind: KindCompiled, Err: err}}
	}
	type compiled struct {
		report int // index into reports
		offset int
	}
	pkgs := map[string]compiled{}
	for _, b := range blocks {
		if b.Lang != "go" {
			continue
		}
		if b.Source != "" {
			rep := Report{Block: b, Kind: KindExcerpt}
			where := fmt.Sprintf("%s:%d", rel(root, b.File), b.Line)
			src, err := os.ReadFile(filepath.Join(root, b.Source))
			switch {
			case !strings.HasSuffix(b.Source, ".go"):
				rep.Err = fmt.Errorf("%s: source %s is not a Go file", where, b.Source)
			case err != nil:
				rep.Err = fmt.Errorf("%s: %v", where, err)
			default:
				if line, ok := Verbatim(b.Lines, string(src)); !ok {
					rep.Err = fmt.Errorf("%s: not a verbatim excerpt of %s: the block's lines must be consecutive lines of the file (leading white space aside), and %q does not follow on there", where, b.Source, line)
				}
			}
			reports = append(reports, rep)
			if !HasPackageClause(b.Lines) {
				continue
			}
		}
		name := fmt.Sprintf("b%02d", len(pkgs)+1)
		src, offset := Wrap(b.Lines)
		reports = append(reports, Report{Block: b, Kind: KindCompiled})
		pkgs[name] = compiled{len(reports) - 1, offset}
		if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
			reports[len(reports)-1].Err = err
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, name, "main.go"), []byte(src), 0o644); err != nil {
			reports[len(reports)-1].Err = err
		}
	}
	if len(pkgs) == 0 {
		return reports
	}
	start := time.Now()
	fail := func(err error) []Report {
		for _, c := range pkgs {
			if reports[c.report].Err == nil {
				reports[c.report].Err = fmt.Errorf("%s:%d: %v", rel(root, reports[c.report].Block.File), reports[c.report].Block.Line, err)
			}
		}
		return reports
	}
	goVersion := "1.26.0"
	if gomod, err := os.ReadFile(filepath.Join(root, "go.mod")); err == nil {
		if m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(gomod); m != nil {
			goVersion = string(m[1])
		}
	}
	mod := fmt.Sprintf("module example.com/guides\n\ngo %s\n\nrequire %s v0.0.0-00010101000000-000000000000\n\nreplace %s => %s\n", goVersion, modulePath, modulePath, root)
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644); err != nil {
		return fail(err)
	}
	if sum, err := os.ReadFile(filepath.Join(root, "go.sum")); err == nil {
		if err := os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644); err != nil {
			return fail(err)
		}
	}
	gocmd := func(args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, goBin(), args...)
		cmd.Dir = dir
		return spawn.CombinedOutput(cmd)
	}
	if out, err := gocmd("mod", "tidy"); err != nil {
		return fail(fmt.Errorf("go mod tidy in a module beside the checkout: %v\n%s", err, out))
	}
	out, err := gocmd("vet", "./...")
	took := time.Since(start) / time.Duration(len(pkgs))
	for _, c := range pkgs {
		reports[c.report].Took = took
	}
	if err == nil {
		return reports
	}
	matched := false
	for _, l := range strings.Split(string(out), "\n") {
		m := vetLineRe.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		c, ok := pkgs[m[1]]
		if !ok {
			continue
		}
		matched = true
		n, _ := strconv.Atoi(m[2])
		b := reports[c.report].Block
		msg := fmt.Errorf("%s:%d: does not compile as pasted: %s", rel(root, b.File), b.Line+n-c.offset, m[3])
		if reports[c.report].Err == nil {
			reports[c.report].Err = msg
		} else {
			reports[c.report].Err = fmt.Errorf("%v\n%v", reports[c.report].Err, msg)
		}
	}
	if !matched {
		return fail(fmt.Errorf("go vet: %v\n%s", err, out))
	}
	return reports
}

func rel(root, f string) string {
	if r, err := filepath.Rel(root, f); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return f
}

// goBin is the go command: $GO when set (the Makefile's), else go.
func goBin() string {
	if g := os.Getenv("GO"); g != "" {
		return g
	}
	return "go"
}
