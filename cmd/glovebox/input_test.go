package main

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestEvalArgvAndStdin: arguments after -- are ARGV; piped standard input
// (or --stdin FILE) is the guest's $stdin, within --stdin-limit; code read
// from standard input leaves the guest's empty.
func TestEvalArgvAndStdin(t *testing.T) {
	out, errOut, code := run(t, "", "eval", "--json", "-e", "ARGV", "--", "a", "b c", "--x")
	if code != 0 || !strings.Contains(out, `"value":["a","b c","--x"]`) {
		t.Fatalf("ARGV: code %d out %s err %q", code, out, errOut)
	}
	f := filepath.Join(t.TempDir(), "s.rb")
	os.WriteFile(f, []byte("[ARGV, $stdin.read]"), 0o644)
	if out, errOut, code := run(t, "piped", "eval", f, "--", "1"); code != 0 || out != `=> [["1"],"piped"]`+"\n" {
		t.Fatalf("file with args: code %d out %q err %q", code, out, errOut)
	}
	out, _, code = run(t, "line1\nline2\n", "eval", "--json", "-e", "[gets, $stdin.read, STDIN.eof?]")
	if code != 0 || !strings.Contains(out, `"value":["line1\n","line2\n",true]`) {
		t.Fatalf("stdin: code %d out %s", code, out)
	}
	in := filepath.Join(t.TempDir(), "in.txt")
	os.WriteFile(in, []byte("from file"), 0o644)
	if out, _, code := run(t, "ignored", "eval", "--stdin", in, "-e", "$stdin.read"); code != 0 || out != "=> \"from file\"\n" {
		t.Fatalf("--stdin: code %d out %q", code, out)
	}
	// Code from standard input: the guest's is empty, or --stdin's.
	if out, _, code := run(t, "$stdin.read", "eval", "-"); code != 0 || out != "=> \"\"\n" {
		t.Fatalf("eval -: code %d out %q", code, out)
	}
	if out, _, code := run(t, "$stdin.read", "eval", "--stdin", in, "-"); code != 0 || out != "=> \"from file\"\n" {
		t.Fatalf("eval - --stdin: code %d out %q", code, out)
	}
	_, errOut, code = run(t, strings.Repeat("x", 2000), "eval", "--stdin-limit", "1KiB", "-e", "$stdin.read.size")
	if code != 2 || !strings.Contains(errOut, "--stdin-limit") {
		t.Fatalf("over --stdin-limit: code %d err %q", code, errOut)
	}
	if out, _, code := run(t, strings.Repeat("x", 2000), "eval", "--stdin-limit", "4KiB", "-e", "$stdin.read.size"); code != 0 || out != "=> 2000\n" {
		t.Fatalf("within --stdin-limit: code %d out %q", code, out)
	}
	// Code over 64 MiB on standard input is refused, never cut.
	if _, errOut, code := run(t, strings.Repeat("1", 64<<20+1), "eval", "-"); code != 2 || !strings.Contains(errOut, "over 64 MiB") {
		t.Fatalf("long code: code %d err %q", code, errOut)
	}
	for _, args := range [][]string{
		{"eval", "-e", "1", "extra"},
		{"eval", "a.rb", "b.rb"},
		{"eval", "--stdin", "/no/such/file", "-e", "1"},
	} {
		if _, errOut, code := run(t, "", args...); code != 2 || !strings.HasPrefix(errOut, "glovebox: ") {
			t.Errorf("%v: code %d stderr %q", args, code, errOut)
		}
	}
}

// TestEvalStreamsOutput: in human mode the guest's output arrives while
// the eval runs. The guest prints, then waits for a file the test makes
// only after it has read that line; --json stays one object at the end.
func TestEvalStreamsOutput(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(bin, "eval", "--timeout", "30s", "--mount", dir+":/data", "-e",
		`puts "ready"; $stderr.puts "err-ready"; sleep 0.01 until File.exist?("/data/go"); puts "done"; 7`)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb strings.Builder
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(stdout)
	line, err := r.ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	os.WriteFile(filepath.Join(dir, "go"), nil, 0o644)
	rest, _ := r.ReadString(0)
	if err := cmd.Wait(); err != nil || rest != "done\n=> 7\n" || !strings.HasSuffix(errb.String(), "\nerr-ready\n") && errb.String() != "err-ready\n" {
		t.Fatalf("rest %q, stderr %q, %v", rest, errb.String(), err)
	}
	// Output past --stdout-limit is cut, and glovebox says so on stderr.
	out, errOut, code := run(t, "", "eval", "--stdout-limit", "8", "-e", `print "x" * 20; 1`)
	if code != 0 || out != "xxxxxxxx\n=> 1\n" || !strings.Contains(errOut, "cut at 8 bytes") {
		t.Fatalf("cut: code %d out %q err %q", code, out, errOut)
	}
	out, _, _ = run(t, "", "eval", "--json", "-e", `puts 1; 2`)
	var res map[string]any
	if err := json.Unmarshal([]byte(out), &res); err != nil || res["stdout"] != "1\n" {
		t.Fatalf("--json: %v %s", err, out)
	}
}

// TestValuesNotHTMLEscaped: human mode shows values as --json does.
func TestValuesNotHTMLEscaped(t *testing.T) {
	out, _, code := run(t, "", "eval", "-e", `["<a>&", {"k" => "<b>"}]`)
	if code != 0 || out != `=> ["<a>&",{"k":"<b>"}]`+"\n" {
		t.Fatalf("code %d out %q", code, out)
	}
	out, _, _ = run(t, "\"<a>&\"\n", "repl")
	if !strings.Contains(out, `=> "<a>&"`) {
		t.Fatalf("repl: %q", out)
	}
}

// Repeated -e pieces run as one program, one per line, as with ruby -e;
// none is dropped.
func TestEvalRepeatedE(t *testing.T) {
	out, errOut, code := run(t, "", "eval", "--json", "-e", `puts "a"`, "-e", "b = 41", "-e", "b + 1")
	if code != 0 || !strings.Contains(out, `"value":42`) || !strings.Contains(out, `"stdout":"a\n"`) {
		t.Fatalf("code %d out %s err %q", code, out, errOut)
	}
}

// --approve with a name that is no tool lists the tools there are.
func TestApproveUnknownToolMessage(t *testing.T) {
	_, errOut, code := run(t, "", "repl", "--approve", "nosuch")
	if code != exitUsage || !strings.Contains(errOut, "the tools here are: none") || strings.Contains(errOut, "glovebox: --approve: glovebox:") {
		t.Fatalf("code %d err %q", code, errOut)
	}
}
