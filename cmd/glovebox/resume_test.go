package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSuspendResumeCLI: eval --suspend-to writes a paused eval's state
// (exit 3, status suspended, the pending call); resume continues it in a
// new process with each kind of answer, refuses the same file twice, a
// damaged state and another sandbox (exit 2, nothing run).
func TestSuspendResumeCLI(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(envStateKey, strings.Repeat("ab", 32))
	tool := []string{"--http-allow", "example.com"}
	code := `puts "before"
r = begin
  http_get("https://example.com/x")
rescue Glovebox::ToolDenied => e
  "denied: #{e.message}"
end
puts "after"
r`
	suspend := func(name string) string {
		p := filepath.Join(dir, name)
		out, errOut, rc := run(t, "", append([]string{"eval", "--json", "--approve", "http_get", "--suspend-to", p, "-e", code}, tool...)...)
		var j struct {
			Status  string
			Stdout  string
			Pending struct{ ID, Name string }
		}
		if rc != exitSuspended || json.Unmarshal([]byte(out), &j) != nil || j.Status != "suspended" || j.Pending.Name != "http_get" || len(j.Pending.ID) != 32 || j.Stdout != "before\n" {
			t.Fatalf("rc %d out %s err %s", rc, out, errOut)
		}
		return p
	}
	p := suspend("a.state")
	out, errOut, rc := run(t, "", append([]string{"resume", p, "--deny", "not today"}, tool...)...)
	if rc != 0 || out != "after\n=> \"denied: not today\"\n" {
		t.Fatalf("deny: rc %d out %q err %s", rc, out, errOut)
	}
	if _, errOut, rc = run(t, "", append([]string{"resume", p, "--deny", "again"}, tool...)...); rc != exitUsage || !strings.Contains(errOut, "continued before") {
		t.Fatalf("a second resume: rc %d err %s", rc, errOut)
	}
	p = suspend("b.state")
	out, _, rc = run(t, "", append([]string{"resume", p, "--json", "--answer", `{"status": 200, "n": [1, 2.5]}`}, tool...)...)
	if rc != 0 || !strings.Contains(out, `"value":{"n":[1,2.5],"status":200}`) || !strings.Contains(out, `"stdout":"before\nafter\n"`) {
		t.Fatalf("answer: rc %d out %s", rc, out)
	}
	p = suspend("c.state")
	if _, errOut, rc = run(t, "", append([]string{"resume", p, "--approve", "--timeout", "3s"}, tool...)...); rc != exitUsage || !strings.Contains(errOut, "its limits is") {
		t.Fatalf("other limits: rc %d err %s", rc, errOut)
	}
	if _, errOut, rc = run(t, "", "resume", p, "--deny", "no"); rc != exitUsage || !strings.Contains(errOut, "lacks http_delete, http_get") || !strings.Contains(errOut, "--http-allow") {
		t.Fatalf("no tool flags: rc %d err %s", rc, errOut)
	}
	if _, errOut, rc = run(t, "", append([]string{"resume", p, "--approve", "--mcp-server", "x=false"}, tool...)...); rc != exitUsage {
		t.Fatalf("other tools: rc %d err %s", rc, errOut)
	}
	b, _ := os.ReadFile(p)
	b[len(b)-40] ^= 1
	os.WriteFile(p, b, 0o600)
	if out, errOut, rc = run(t, "", append([]string{"resume", p, "--approve"}, tool...)...); rc != exitUsage || !strings.Contains(errOut, "invalid state") || out != "" {
		t.Fatalf("damaged: rc %d out %q err %s", rc, out, errOut)
	}
	t.Setenv(envStateKey, strings.Repeat("cd", 32))
	p = filepath.Join(dir, "d.state")
	os.WriteFile(p, b, 0o600)
	b[len(b)-40] ^= 1
	os.WriteFile(p, b, 0o600)
	if _, errOut, rc = run(t, "", append([]string{"resume", p, "--approve"}, tool...)...); rc != exitUsage || !strings.Contains(errOut, "another state key") {
		t.Fatalf("another key: rc %d err %s", rc, errOut)
	}
}

// TestResumeRetryAfterDivergence: an eval paused inside Timeout.timeout,
// after loops and a mounted file read, resumes; a resume that cannot
// replay it (the file changed meanwhile) says so and leaves the file to
// resume again, which works once the file is back, and only once.
func TestResumeRetryAfterDivergence(t *testing.T) {
	dir, data := t.TempDir(), t.TempDir()
	t.Setenv(envStateKey, strings.Repeat("ab", 32))
	file := filepath.Join(data, "n.txt")
	os.WriteFile(file, []byte("41"), 0o644)
	flags := []string{"--http-allow", "example.com", "--mount", data + ":/data"}
	p := filepath.Join(dir, "t.state")
	code := `require "timeout"
Timeout.timeout(5) do
  s = 0
  1000.times { |i| s += i }
  n = File.read("/data/n.txt").to_i
  r = begin
    http_get("https://example.com/#{n}")
  rescue Glovebox::ToolDenied => e
    e.message
  end
  [n, s, r]
end`
	if out, errOut, rc := run(t, "", append([]string{"eval", "--approve", "http_get", "--suspend-to", p, "-e", code}, flags...)...); rc != exitSuspended {
		t.Fatalf("rc %d out %s err %s", rc, out, errOut)
	}
	os.WriteFile(file, []byte("7"), 0o644)
	for range 2 {
		out, errOut, rc := run(t, "", append([]string{"resume", p, "--deny", "no"}, flags...)...)
		if rc == 0 || !strings.Contains(errOut, "did not replay") || !strings.Contains(errOut, "resume it again") || out != "" {
			t.Fatalf("changed file: rc %d out %q err %s", rc, out, errOut)
		}
	}
	os.WriteFile(file, []byte("41"), 0o644)
	if out, errOut, rc := run(t, "", append([]string{"resume", p, "--deny", "no"}, flags...)...); rc != 0 || out != "=> [41,499500,\"no\"]\n" {
		t.Fatalf("file back: rc %d out %q err %s", rc, out, errOut)
	}
	if _, errOut, rc := run(t, "", append([]string{"resume", p, "--deny", "again"}, flags...)...); rc != exitUsage || !strings.Contains(errOut, "continued before") {
		t.Fatalf("a second resume: rc %d err %s", rc, errOut)
	}
}

// TestResumeManyPausesSmallTimeout: pauses are not running time. An eval
// that asks for approval 12 times, each pause continued by glovebox
// resume in a new process, ends ok under --timeout 500ms: each process
// used to charge the eval 45-700 ms (wasmtime formatting the backtrace
// of the trap that stopped the guest, the first time in a process).
func TestResumeManyPausesSmallTimeout(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(envStateKey, strings.Repeat("ab", 32))
	flags := []string{"--http-allow", "example.com", "--timeout", "500ms"}
	p := filepath.Join(dir, "t.state")
	code := `12.times.sum { |i| http_get("https://example.com/#{i}") }`
	if out, errOut, rc := run(t, "", append([]string{"eval", "--approve", "http_get", "--suspend-to", p, "-e", code}, flags...)...); rc != exitSuspended {
		t.Fatalf("rc %d out %s err %s", rc, out, errOut)
	}
	for i := 1; ; i++ {
		out, errOut, rc := run(t, "", append([]string{"resume", p, "--json", "--answer", "1"}, flags...)...)
		var res struct {
			Status     string
			Value      any
			DurationMS float64 `json:"duration_ms"`
		}
		if json.Unmarshal([]byte(out), &res) != nil {
			t.Fatalf("resume %d: rc %d out %s err %s", i, rc, out, errOut)
		}
		if res.Status == "suspended" && i < 12 {
			continue
		}
		if rc != 0 || res.Status != "ok" || res.Value != 12.0 || i != 12 {
			t.Fatalf("resume %d: rc %d %+v err %s", i, rc, res, errOut)
		}
		t.Logf("12 pauses: %.1f ms of running time", res.DurationMS)
		return
	}
}

// TestDefaultStateKey: the CLI's key is made once, readable by its user
// alone, and the same key on every later use; one others may read is
// refused.
func TestDefaultStateKey(t *testing.T) {
	p := filepath.Join(t.TempDir(), "sub", "state.key")
	k1, err := defaultKey(p)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(p)
	if fi.Mode().Perm() != 0o600 || len(k1) != 32 {
		t.Fatalf("mode %v, %d bytes", fi.Mode(), len(k1))
	}
	k2, err := defaultKey(p)
	if err != nil || string(k1) != string(k2) {
		t.Fatalf("a second use: %v", err)
	}
	os.Chmod(p, 0o644)
	if _, err := defaultKey(p); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("a key others may read: %v", err)
	}
}

// TestReplSaveLoad: :save writes a REPL session and the session goes on;
// repl --load in a new process starts from the saved state.
func TestReplSaveLoad(t *testing.T) {
	t.Setenv(envStateKey, strings.Repeat("ef", 32))
	p := filepath.Join(t.TempDir(), "s.state")
	out, _, rc := run(t, "x = 41\ndef m(y) = y * 2\n:save "+p+"\nx += 1\n", "repl")
	if rc != 0 || !strings.Contains(out, "saved the session to") || !strings.Contains(out, "=> 42") {
		t.Fatalf("rc %d out %s", rc, out)
	}
	out, _, rc = run(t, "[x, m(3)]\n", "repl", "--load", p)
	if rc != 0 || !strings.Contains(out, "=> [41,6]") {
		t.Fatalf("rc %d out %s", rc, out)
	}
	if _, errOut, rc := run(t, "", "resume", p, "--approve"); rc != exitUsage || !strings.Contains(errOut, "repl --load") {
		t.Fatalf("resume of a session: rc %d err %s", rc, errOut)
	}
}
