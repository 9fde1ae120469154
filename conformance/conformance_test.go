package main

import (
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func rec(kind string, fields ...string) string {
	s := "\n\x1eGB " + kind
	for _, f := range fields {
		s += " " + base64.StdEncoding.EncodeToString([]byte(f))
	}
	return s + "\n"
}

func TestParseOutputIgnoresSpecOutputAndDecodesFields(t *testing.T) {
	out := "ruby 4.0.0 (wasm32-wasi)\nnoise" + rec("L", "/spec/core/a_spec.rb") +
		"spec printed this\n" + rec("P", "A#b works") +
		rec("F", "A#b fails\nwith a newline", "SpecExpectationNotMetError: x") +
		rec("E", "A#b raises", "RuntimeError: boom") +
		rec("X", "An exception occurred during: loading /spec/core/a_spec.rb", "LoadError: no") +
		rec("U", "/spec/core/a_spec.rb") + rec("D")
	p := parseOutput([]byte(out), "/spec/")
	if !p.Done || len(p.Ended) != 1 || p.Ended[0] != "core/a_spec.rb" || p.Current != "" {
		t.Fatalf("parsed %+v", p)
	}
	want := []Record{
		{"core/a_spec.rb", "A#b works", Pass, ""},
		{"core/a_spec.rb", "A#b fails\nwith a newline", Fail, "SpecExpectationNotMetError: x"},
		{"core/a_spec.rb", "A#b raises", Error, "RuntimeError: boom"},
		{"core/a_spec.rb", "An exception occurred during: loading /spec/core/a_spec.rb", Outside, "LoadError: no"},
	}
	if len(p.Records) != len(want) {
		t.Fatalf("records %+v", p.Records)
	}
	for i := range want {
		if p.Records[i] != want[i] {
			t.Errorf("record %d = %+v, want %+v", i, p.Records[i], want[i])
		}
	}
}

func TestParseOutputKeepsWhatARunReportedBeforeItStopped(t *testing.T) {
	out := rec("L", "/spec/a_spec.rb") + rec("P", "x") + rec("U", "/spec/a_spec.rb") +
		rec("L", "/spec/b_spec.rb") + rec("P", "y") + "\n\x1eGB P trunc"
	p := parseOutput([]byte(out), "/spec/")
	if p.Done || len(p.Ended) != 1 || p.Current != "b_spec.rb" || len(p.Records) != 2 {
		t.Fatalf("parsed %+v", p)
	}
}

// fakeSide plays a suite in which some files hang (the run times out
// there) or crash.
type fakeSide struct {
	hang  map[string]bool
	calls [][]string
}

func (f *fakeSide) name() string { return "fake" }
func (f *fakeSide) close()       {}

var filesRE = regexp.MustCompile(`'/spec/([^']+)'`)

func (f *fakeSide) run(_ context.Context, code string, _ time.Duration) ([]byte, string, error) {
	var files []string
	for _, m := range filesRE.FindAllStringSubmatch(code, -1) {
		files = append(files, m[1])
	}
	f.calls = append(f.calls, files)
	var b strings.Builder
	for _, file := range files {
		b.WriteString(rec("L", "/spec/"+file) + rec("P", "first of "+file))
		if f.hang[file] {
			return []byte(b.String()), "timeout", nil
		}
		b.WriteString(rec("U", "/spec/"+file))
	}
	b.WriteString(rec("D"))
	return []byte(b.String()), "", nil
}

func TestRunShardRecordsAHungFileAndRunsTheRestAgain(t *testing.T) {
	s := &fakeSide{hang: map[string]bool{"b_spec.rb": true, "d_spec.rb": true}}
	recs, err := runShard(context.Background(), s, []string{"a_spec.rb", "b_spec.rb", "c_spec.rb", "d_spec.rb"}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.calls) != 2 || len(s.calls[1]) != 2 || s.calls[1][0] != "c_spec.rb" {
		t.Fatalf("calls %q", s.calls)
	}
	var got []string
	for _, r := range recs {
		got = append(got, string(r.Outcome)+" "+r.File+" "+r.Message)
	}
	want := []string{"P a_spec.rb ", "P b_spec.rb ", "A b_spec.rb timeout", "P c_spec.rb ", "P d_spec.rb ", "A d_spec.rb timeout"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("records\n%q\nwant\n%q", got, want)
	}
}

func TestBootstrapCodeQuotesPathsExactly(t *testing.T) {
	code := bootstrapCode([]string{`core/it's_spec.rb`, `core/back\slash_spec.rb`})
	if !strings.Contains(code, `['/spec/core/it\'s_spec.rb', '/spec/core/back\\slash_spec.rb']`) {
		t.Fatalf("file list not quoted as expected:\n%s", code)
	}
	if strings.Contains(code, "GB_FILES") {
		t.Fatal("placeholder left in the program")
	}
}

func TestCompareCountsMissingAndAcceptsListedSpecs(t *testing.T) {
	dir := t.TempDir()
	accPath := filepath.Join(dir, "acc.txt")
	os.WriteFile(accPath, []byte("# comment\n\ncore/process/ -- no processes\ncore/io/x_spec.rb: IO#x works -- deliberate\nlibrary/socket/a_spec.rb -- no sockets\n"), 0o644)
	acc, err := loadAccepted(accPath)
	if err != nil {
		t.Fatal(err)
	}
	base := &SideResult{Records: []Record{
		{"core/array/a_spec.rb", "A ok", Pass, ""},
		{"core/array/a_spec.rb", "A differs", Pass, ""},
		{"core/array/a_spec.rb", "A both fail", Fail, ""},
		{"core/file/b_spec.rb", "B missing", Pass, ""},
		{"core/process/p_spec.rb", "P forks", Pass, ""},
		{"core/io/x_spec.rb", "IO#x works", Pass, ""},
		{"core/io/x_spec.rb", "IO#x works", Pass, ""},
	}}
	numberDuplicates(base.Records)
	gb := &SideResult{Records: []Record{
		{"core/array/a_spec.rb", "A ok", Pass, ""},
		{"core/array/a_spec.rb", "A differs", Fail, "Expected 1 == 2"},
		{"core/array/a_spec.rb", "A both fail", Fail, ""},
		{"core/file/b_spec.rb", "(the file did not finish)", Aborted, "timeout"},
		{"core/process/p_spec.rb", "P forks", Error, "NotImplementedError"},
		{"core/io/x_spec.rb", "IO#x works", Error, "e"},
		{"core/io/x_spec.rb", "IO#x works", Error, "e"},
	}}
	numberDuplicates(gb.Records)
	diffs := compare(gb, base, acc)
	var got []string
	for _, d := range diffs {
		got = append(got, d.Key()+" => "+d.what()+" ["+d.Reason+"]")
	}
	want := []string{
		"core/array/a_spec.rb: A differs => failed: Expected 1 == 2 []",
		"core/file/b_spec.rb: B missing => not run in glovebox: timeout []",
		"core/io/x_spec.rb: IO#x works => error: e [deliberate]",
		"core/io/x_spec.rb: IO#x works #2 => error: e [deliberate]",
		"core/process/p_spec.rb: P forks => error: NotImplementedError [no processes]",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("diffs\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if u := acc.unused(); len(u) != 1 || !strings.Contains(u[0], "library/socket/a_spec.rb") {
		t.Fatalf("unused %q", u)
	}
}

func TestLoadAcceptedWantsAReason(t *testing.T) {
	p := filepath.Join(t.TempDir(), "acc.txt")
	os.WriteFile(p, []byte("core/process/\n"), 0o644)
	if _, err := loadAccepted(p); err == nil || !strings.Contains(err.Error(), ":1:") {
		t.Fatalf("err = %v, want a line-numbered error", err)
	}
}

func TestGroup(t *testing.T) {
	for in, want := range map[string]string{
		"core/array/a_spec.rb":            "core/array",
		"language/if_spec.rb":             "language",
		"library/socket/tcp/a_spec.rb":    "library/socket",
		"library/English/English_spec.rb": "library/English",
	} {
		if got := group(in); got != want {
			t.Errorf("group(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestNoSuiteSkipsWithInstructions(t *testing.T) {
	t.Setenv(EnvSuite, "")
	t.Chdir(t.TempDir()) // no ../shared/rubyspec from here
	var out, errb strings.Builder
	if code := run(nil, &out, &errb); code != 0 {
		t.Fatalf("exit %d, stderr %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "skipped") || !strings.Contains(out.String(), "github.com/ruby/mspec") {
		t.Fatalf("output %q", out.String())
	}
}

func TestANamedSuiteThatIsNotOneIsAnError(t *testing.T) {
	t.Chdir(t.TempDir())
	for _, c := range []struct {
		args []string
		env  string
	}{{[]string{"-suite", t.TempDir()}, ""}, {nil, t.TempDir()}} {
		t.Setenv(EnvSuite, c.env)
		var out, errb strings.Builder
		if code := run(c.args, &out, &errb); code != 2 || !strings.Contains(errb.String(), "want ruby/spec in spec/") {
			t.Errorf("args %q env %q: exit %d, stderr %q", c.args, c.env, code, errb.String())
		}
	}
}
