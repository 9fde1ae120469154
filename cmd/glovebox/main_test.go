package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "glovebox-cli")
	if err != nil {
		panic(err)
	}
	bin = filepath.Join(dir, "glovebox")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		os.Stderr.Write(out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func run(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

func TestEvalHuman(t *testing.T) {
	out, _, code := run(t, "", "eval", "-e", `puts "hi"; [1, 2**70]`)
	if code != 0 || out != "hi\n=> [1,1180591620717411303424]\n" {
		t.Fatalf("code %d out %q", code, out)
	}
	_, errOut, code := run(t, "", "eval", "-e", `def f = raise(KeyError, "nope"); f`)
	if code != 1 || !strings.Contains(errOut, "error: KeyError: nope") || !strings.Contains(errOut, "from sandbox:1:in 'Object#f'") {
		t.Fatalf("code %d stderr %q", code, errOut)
	}
}

func TestEvalSources(t *testing.T) {
	f := filepath.Join(t.TempDir(), "s.rb")
	os.WriteFile(f, []byte("6 * 7\n"), 0o644)
	if out, _, code := run(t, "", "eval", f); code != 0 || out != "=> 42\n" {
		t.Fatalf("file: %d %q", code, out)
	}
	if out, _, code := run(t, "3 * 3", "eval", "-"); code != 0 || out != "=> 9\n" {
		t.Fatalf("stdin: %d %q", code, out)
	}
}

func TestEvalJSON(t *testing.T) {
	out, _, code := run(t, "", "eval", "--json", "--stdout-limit", "8", "-e", `print "x" * 20; Float::NAN`)
	if code != 0 {
		t.Fatalf("code %d", code)
	}
	var res map[string]any
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, k := range []string{"status", "value", "stdout", "stderr", "stdout_truncated", "stderr_truncated", "error", "fuel_used", "duration_ms", "tool_calls"} {
		if _, ok := res[k]; !ok {
			t.Errorf("no %q in %s", k, out)
		}
	}
	if res["status"] != "ok" || res["value"] != "NaN" || res["stdout_truncated"] != true || !strings.HasPrefix(res["stdout"].(string), "xxxxxxxx\n[glovebox:") {
		t.Fatalf("%s", out)
	}
}

func TestEvalLimitsAndExitCodes(t *testing.T) {
	cases := []struct {
		args   []string
		code   int
		status string
	}{
		{[]string{"--timeout", "300ms", "-e", "loop {}"}, 1, "timeout"},
		{[]string{"--fuel", "1000000", "-e", "loop {}"}, 1, "fuel_exhausted"},
		{[]string{"--memory", "400MiB", "-e", `"x" * 200_000_000`}, 1, "memory_limit"},
		{[]string{"--memory", "1GiB", "-e", "1"}, 0, "ok"},
	}
	for _, c := range cases {
		out, errOut, code := run(t, "", append([]string{"eval", "--json"}, c.args...)...)
		if code != c.code || !strings.Contains(out, `"status":"`+c.status+`"`) {
			t.Errorf("%v: code %d out %s err %s", c.args, code, out, errOut)
		}
	}
	for _, args := range [][]string{
		{"eval"},
		{"eval", "-e", "1", "file.rb"},
		{"eval", "--memory", "lots", "-e", "1"},
		{"eval", "--memory", "64MiB", "-e", "1"},
		{"eval", "--timeout", "soon", "-e", "1"},
		{"eval", "/no/such/file.rb"},
		{"frobnicate"},
	} {
		if _, errOut, code := run(t, "", args...); code != 2 || !strings.HasPrefix(errOut, "glovebox: ") {
			t.Errorf("%v: code %d stderr %q", args, code, errOut)
		}
	}
}

// TestEvalHTTPTool: --http-allow exposes the HTTP tool with its rules.
// The URLs are refused before any name is resolved: no network is used.
func TestEvalHTTPTool(t *testing.T) {
	out, errOut, code := run(t, "", "eval", "--http-allow", "api.example.com", "--http-allow", "*.example.org", "-e", `
		def kind = yield rescue $!.class.name
		[kind { http_get("http://evil.com/") }, kind { http_get("http://169.254.169.254/") },
		 kind { http_post("http://api.example.com:8080/", {}) }]`)
	if code != 0 || out != `=> ["Glovebox::HTTPHostError","Glovebox::HTTPURLError","Glovebox::HTTPURLError"]`+"\n" {
		t.Fatalf("code %d out %q err %q", code, out, errOut)
	}
	out, _, code = run(t, "", "eval", "--http-any-host", "-e", `begin; http_get("http://[::ffff:127.0.0.1]/"); rescue Glovebox::HTTPURLError => e; e.message; end`)
	if code != 0 || !strings.Contains(out, "IP-literal hosts") {
		t.Fatalf("code %d out %q", code, out)
	}
	_, errOut, code = run(t, "", "eval", "-e", `http_get("http://api.example.com/")`)
	if code != 1 || !strings.Contains(errOut, "NoMethodError") {
		t.Fatalf("without --http-allow: code %d stderr %q", code, errOut)
	}
	for _, args := range [][]string{
		{"eval", "--http-allow", "a.*.com", "-e", "1"},
		{"eval", "--http-allow", "a.com", "--http-any-host", "-e", "1"},
	} {
		if _, errOut, code := run(t, "", args...); code != 2 || !strings.HasPrefix(errOut, "glovebox: httptool: invalid config") {
			t.Errorf("%v: code %d stderr %q", args, code, errOut)
		}
	}
}

// glovebox version names the image and the engine, not only "(devel)".
func TestVersionNamesImageAndEngine(t *testing.T) {
	out, _, code := run(t, "", "version")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"glovebox ", "@ruby/4.0-wasm-wasi@", "wasmtime-go v", "go1."} {
		if !strings.Contains(out, want) {
			t.Errorf("version output lacks %q:\n%s", want, out)
		}
	}
}

// glovebox setup prepares both compiled images (plain and fuel-metered)
// and says so, one line each, so that no eval compiles one later.
func TestSetupPreparesEveryImage(t *testing.T) {
	out, errOut, code := run(t, "", "setup")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"image 1 of 2, the Ruby image for evals without a fuel budget: ready",
		"image 2 of 2, the fuel-metered Ruby image for evals with a fuel budget: ready"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if !strings.Contains(out, "glovebox is ready (ruby 4.0") {
		t.Errorf("stdout %q", out)
	}
}

func TestMaxProcsLeavesASpareP(t *testing.T) {
	if got := maxProcs("", 2); got != 3 {
		t.Errorf("maxProcs(\"\", 2) = %d, want 3: a spare P beside two evals", got)
	}
	if got := maxProcs("2", 2); got != 2 {
		t.Errorf("maxProcs(\"2\", 2) = %d, want 2: GOMAXPROCS in the environment wins", got)
	}
}
