// Command testsum runs `go test -json` with its arguments and prints what
// plain `go test` would have printed (the same "ok", "FAIL" and "?" lines
// on standard output, a failing test's output above its package's FAIL
// line, build errors on standard error), then, on standard error, the
// tests that skipped, grouped by the reason they gave, each group with
// what to install or set to run them. It exits with go test's exit code.
//
// make test runs it (see the Makefile); build it first (`go build -o
// testsum ./internal/testsum`) rather than `go run` it, which turns every
// non-zero exit code into 1.
//
// Usage:
//
//	testsum [go test flags] [packages]
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
)

func main() {
	gotool := os.Getenv("GO")
	if gotool == "" {
		gotool = "go"
	}
	cmd := exec.Command(gotool, append([]string{"test", "-json"}, os.Args[1:]...)...)
	cmd.Stdin, cmd.Stderr = os.Stdin, os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsum:", err)
		os.Exit(2)
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "testsum:", err)
		os.Exit(2)
	}
	s := newSummary(os.Stdout, os.Stderr)
	s.read(out)
	err = cmd.Wait()
	s.printSkips()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		os.Exit(ee.ExitCode())
	case err != nil:
		fmt.Fprintln(os.Stderr, "testsum:", err)
		os.Exit(2)
	}
}

// event is one line of `go test -json` (see `go doc test2json`).
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string // build-output and build-fail events
}

// testState is one test's output so far, for the report plain go test
// prints when it fails.
type testState struct {
	name   string
	logs   []string // its log lines, as the verbose stream indents them
	result string   // its "--- FAIL: name (time)" line
	failed bool
	kids   []*testState // subtests, in the order they ended
	open   int          // where an unfinished line's rest goes (openNone...)
	openAt int          // for openOut, its index in the package's output
}

type pkgState struct {
	tests map[string]*testState
	out   []string // output of the package itself, in order
}

// skip is one skipped test and the reason it printed.
type skip struct{ pkg, test, reason string }

type summary struct {
	stdout, stderr io.Writer
	pkgs           map[string]*pkgState
	skips          []skip
	anyFailed      bool
}

func newSummary(stdout, stderr io.Writer) *summary {
	return &summary{stdout: stdout, stderr: stderr, pkgs: map[string]*pkgState{}}
}

// read consumes go test's JSON stream until it ends. A line that is not
// JSON is passed through as it is. It ends with the "FAIL" line go test
// prints last when a package failed.
func (s *summary) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			fmt.Fprintln(s.stdout, sc.Text())
			continue
		}
		s.event(e)
	}
	if err := sc.Err(); err != nil {
		// A line too long to parse: pass the rest through unparsed, so
		// go test is never blocked writing to a reader that stopped.
		fmt.Fprintln(s.stderr, "testsum:", err)
		io.Copy(s.stdout, r)
	}
	if s.anyFailed {
		fmt.Fprintln(s.stdout, "FAIL")
	}
}

func (s *summary) pkg(name string) *pkgState {
	p := s.pkgs[name]
	if p == nil {
		p = &pkgState{tests: map[string]*testState{}}
		s.pkgs[name] = p
	}
	return p
}

func (p *pkgState) test(name string) *testState {
	t := p.tests[name]
	if t == nil {
		t = &testState{name: name}
		p.tests[name] = t
	}
	return t
}

func (s *summary) event(e event) {
	switch e.Action {
	case "build-output":
		fmt.Fprint(s.stderr, e.Output) // go test prints build errors on stderr
		return
	case "build-fail", "start", "run", "pause", "cont", "bench":
		return
	}
	p := s.pkg(e.Package)
	if e.Test == "" {
		switch e.Action {
		case "output":
			p.out = append(p.out, e.Output)
		case "fail", "pass", "skip": // skip: a package without test files
			s.flush(p, e.Action == "fail")
			delete(s.pkgs, e.Package)
		}
		return
	}
	t := p.test(e.Test)
	switch e.Action {
	case "output":
		t.output(p, e.Output)
	case "fail", "pass", "skip":
		t.failed = e.Action == "fail"
		if e.Action == "skip" {
			s.skips = append(s.skips, skip{e.Package, e.Test, skipReason(t.logs)})
		}
		if i := strings.LastIndexByte(e.Test, '/'); i >= 0 {
			parent := p.test(e.Test[:i])
			parent.kids = append(parent.kids, t)
		} else if t.failed {
			p.out = append(p.out, t.report(0)...)
		}
	}
}

// output files one output event of t: test2json splits a long line
// into several events, only the last ending in a newline, and the rest
// of a line goes where its start went.
func (t *testState) output(p *pkgState, text string) {
	switch {
	case t.open == openLog:
		t.logs[len(t.logs)-1] += text
	case t.open == openOut:
		p.out[t.openAt] += text
	case t.open == openDropped:
	case framing(text):
		t.open = openDropped
	case strings.HasPrefix(text, "--- FAIL: "):
		t.result, t.open = text, openDropped // complete: the time ends it
	case strings.HasPrefix(text, "    "):
		t.logs, t.open = append(t.logs, text), openLog
	default:
		// Printed by the test itself, not logged: plain go test shows
		// it where it came, when the package fails.
		p.out, t.open, t.openAt = append(p.out, text), openOut, len(p.out)
	}
	if strings.HasSuffix(text, "\n") {
		t.open = openNone
	}
}

// Where the rest of a test's unfinished output line goes.
const (
	openNone    = iota
	openLog     // t.logs' last line
	openOut     // p.out[t.openAt]
	openDropped // nowhere: a framing line
)

// report is the text plain go test prints for failed test t at depth
// (0 for a top-level test): its result line, its log, then its failed
// subtests', each level indented four spaces more.
func (t *testState) report(depth int) []string {
	ind := strings.Repeat("    ", depth)
	out := []string{ind + t.result}
	for _, l := range t.logs {
		out = append(out, ind+l)
	}
	for _, k := range t.kids {
		if k.failed {
			out = append(out, k.report(depth+1)...)
		}
	}
	return out
}

// flush prints a finished package as plain go test does: for a passing
// package its closing line alone; for a failing one, everything.
func (s *summary) flush(p *pkgState, failed bool) {
	s.anyFailed = s.anyFailed || failed
	for _, l := range p.out {
		if failed || closingLine(l) {
			fmt.Fprint(s.stdout, l)
		}
	}
}

// framing reports whether text is one of the lines the verbose stream
// adds, which plain go test does not print.
func framing(text string) bool {
	for _, p := range []string{"=== RUN", "=== PAUSE", "=== CONT", "=== NAME", "--- PASS: ", "--- SKIP: "} {
		if strings.HasPrefix(text, p) {
			return true
		}
	}
	return text == "PASS\n"
}

// closingLine reports whether text is the closing line of a passing
// package or one without tests.
func closingLine(text string) bool {
	return strings.HasPrefix(text, "ok  \t") || strings.HasPrefix(text, "?   \t")
}

// location matches the "file_test.go:12: " a test log line starts with.
var location = regexp.MustCompile(`^\s*[\w.-]+\.go:\d+: `)

// skipReason is what a test logged before it skipped, without source
// locations, joined; "no reason given" when it logged nothing.
func skipReason(logs []string) string {
	var parts []string
	for _, l := range logs {
		t := strings.TrimSpace(location.ReplaceAllString(l, ""))
		if t != "" {
			parts = append(parts, t)
		}
	}
	if len(parts) == 0 {
		return "no reason given"
	}
	return strings.Join(parts, " / ")
}

// hints say how to run the tests a reason names: the first whose pattern
// occurs in the reason (case-insensitive) applies.
var hints = []struct{ pattern, how string }{
	{"bubblewrap", "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; the README's Prerequisites)"},
	{"bwrap", "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; the README's Prerequisites)"},
	{"runsc", "install gVisor's runsc on PATH (gvisor.dev, Install; the README's Prerequisites)"},
	{"node is not installed", "install Node.js 20 or newer with npm and npx (the README's Prerequisites)"},
	{"npm is not installed", "install Node.js 20 or newer with npm and npx (the README's Prerequisites)"},
	{"npm is missing", "install Node.js 20 or newer with npm and npx, or run `go run ./cmd/glovebox setup` once"},
	{"-short", "run without -short"},
	{"pseudo-terminal", "run where /dev/ptmx works (not inside a container without a pty)"},
	{"needs root", "run as root (or skip: the behaviour under test needs privileges)"},
	{"flock(1)", "install util-linux (it provides flock)"},
	{"cgroup", "run on a host with a cgroup v2 tree this user may manage"},
}

func hintFor(reason string) string {
	r := strings.ToLower(reason)
	for _, h := range hints {
		if strings.Contains(r, strings.ToLower(h.pattern)) {
			return h.how
		}
	}
	return ""
}

// printSkips lists the skipped tests on stderr, grouped by reason, the
// largest group first.
func (s *summary) printSkips() {
	if len(s.skips) == 0 {
		return
	}
	groups := map[string][]skip{}
	for _, k := range s.skips {
		groups[k.reason] = append(groups[k.reason], k)
	}
	reasons := make([]string, 0, len(groups))
	for r := range groups {
		reasons = append(reasons, r)
	}
	sort.Slice(reasons, func(i, j int) bool {
		if a, b := len(groups[reasons[i]]), len(groups[reasons[j]]); a != b {
			return a > b
		}
		return reasons[i] < reasons[j]
	})
	w := s.stderr
	fmt.Fprintf(w, "\n%d tests skipped, for %d reasons:\n", len(s.skips), len(reasons))
	for _, r := range reasons {
		ks := groups[r]
		fmt.Fprintf(w, "\n  %s (%d)\n", r, len(ks))
		if how := hintFor(r); how != "" {
			fmt.Fprintf(w, "    to run them: %s\n", how)
		}
		for _, k := range ks {
			fmt.Fprintf(w, "    %s %s\n", k.pkg, k.test)
		}
	}
}
