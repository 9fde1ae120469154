package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// The fixture module: a passing package, a failing one, one that does not
// build, one without tests, and skips with and without reasons.
var fixture = map[string]string{
	"go.mod": "module example.com/fx\n\ngo 1.22\n",
	"ok/ok_test.go": `package ok
import "testing"
func TestPass(t *testing.T) { t.Log("quiet when passing") }
func TestNeedsTool(t *testing.T) { t.Skip("bwrap (bubblewrap) is not installed") }
func TestNeedsToolToo(t *testing.T) { t.Skipf("bwrap (bubblewrap) is not installed") }
func TestSub(t *testing.T) {
	t.Run("a", func(t *testing.T) { t.Skip("runsc is not installed") })
	t.Run("b", func(t *testing.T) {})
}
func TestBare(t *testing.T) { t.SkipNow() }
`,
	"bad/bad_test.go": `package bad
import ("fmt"; "strings"; "testing")
func TestPass(t *testing.T) { t.Log("hidden"); fmt.Println("printed by a passing test", strings.Repeat("p", 70000)) }
func TestFail(t *testing.T) { t.Log("shown\nsecond line", strings.Repeat("y", 70000)); t.Fatal("broken") }
func TestParent(t *testing.T) {
	t.Log("parent log")
	t.Run("kid", func(t *testing.T) {
		t.Error("kid broke")
		t.Run("grand", func(t *testing.T) { t.Error("grandchild broke") })
	})
	t.Run("fine", func(t *testing.T) { t.Log("not shown") })
}
`,
	"nobuild/x_test.go": "package nobuild\nimport \"testing\"\nfunc TestX(t *testing.T) { undefined() }\n",
	"notests/x.go":      "package notests\n",
}

var durations = regexp.MustCompile(`\d+\.\d+s`)

// testsum's standard output is plain go test's, line for line (timings
// aside), and its exit code the same; the skips are listed by reason on
// standard error.
func TestMatchesGoTest(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds and runs a fixture module's tests twice")
	}
	dir := t.TempDir()
	for name, text := range fixture {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(t.TempDir(), "testsum")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("building testsum: %v\n%s", err, out)
	}
	run := func(name string, args ...string) (stdout, stderr string, code int) {
		var o, e bytes.Buffer
		cmd := exec.Command(name, args...)
		cmd.Dir, cmd.Stdout, cmd.Stderr = dir, &o, &e
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return durations.ReplaceAllString(o.String(), "T"), e.String(), code
	}
	wantOut, wantErr, wantCode := run("go", "test", "-count=1", "./...")
	gotOut, gotErr, gotCode := run(bin, "-count=1", "./...")
	if gotCode != wantCode || wantCode == 0 {
		t.Errorf("exit code %d, go test's %d (want non-zero)", gotCode, wantCode)
	}
	if sorted(gotOut) != sorted(wantOut) {
		t.Errorf("stdout differs from go test's:\n--- testsum\n%s--- go test\n%s", gotOut, wantOut)
	}
	for _, l := range strings.Split(strings.TrimSpace(wantOut), "\n") {
		if !strings.Contains(gotOut, l) {
			t.Errorf("testsum's stdout lacks go test's line %q", l)
		}
	}
	okOut, _, okCode := run("go", "test", "-count=1", "./ok", "./notests")
	gotOK, _, gotOKCode := run(bin, "-count=1", "./ok", "./notests")
	if sorted(gotOK) != sorted(okOut) || gotOKCode != 0 || okCode != 0 {
		t.Errorf("passing packages: testsum %q (exit %d), go test %q (exit %d)", gotOK, gotOKCode, okOut, okCode)
	}
	if !strings.Contains(wantErr, "undefined: undefined") || !strings.Contains(gotErr, "undefined: undefined") {
		t.Errorf("build errors: go test's stderr %q, testsum's %q", wantErr, gotErr)
	}
	for _, want := range []string{
		"4 tests skipped, for 3 reasons:",
		"  bwrap (bubblewrap) is not installed (2)\n    to run them: install bubblewrap",
		"    example.com/fx/ok TestNeedsTool\n    example.com/fx/ok TestNeedsToolToo\n",
		"  runsc is not installed (1)\n    to run them: install gVisor's runsc",
		"    example.com/fx/ok TestSub/a\n",
		"  no reason given (1)\n    example.com/fx/ok TestBare\n",
	} {
		if !strings.Contains(gotErr, want) {
			t.Errorf("skip summary lacks %q:\n%s", want, gotErr)
		}
	}
}

// sorted is text's lines in order of their packages' closing lines: go
// test and testsum print packages as they finish, which varies.
func sorted(text string) string {
	var blocks []string
	cur := ""
	for _, l := range strings.SplitAfter(text, "\n") {
		cur += l
		if strings.HasPrefix(l, "ok  \t") || strings.HasPrefix(l, "FAIL\t") || strings.HasPrefix(l, "?   \t") {
			blocks = append(blocks, cur)
			cur = ""
		}
	}
	blocks = append(blocks, cur)
	sort.Strings(blocks)
	return strings.Join(blocks, "")
}
