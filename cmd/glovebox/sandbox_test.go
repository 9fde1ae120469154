package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestMountFlag(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "in.txt"), []byte("from host"), 0o644)
	out, errOut, code := run(t, "", "eval", "--mount", dir+":/data", "-e", `File.read("/data/in.txt")`)
	if code != 0 || out != "=> \"from host\"\n" {
		t.Fatalf("code %d out %q err %q", code, out, errOut)
	}
	// Read-only unless :rw.
	_, errOut, code = run(t, "", "eval", "--mount", dir+":/data", "-e", `File.write("/data/x", "1")`)
	if code != 1 || !strings.Contains(errOut, "Errno::") {
		t.Fatalf("write to a read-only mount: code %d err %q", code, errOut)
	}
	_, _, code = run(t, "", "eval", "--mount", dir+":/data:rw", "-e", `File.write("/data/x", "1")`)
	if b, _ := os.ReadFile(filepath.Join(dir, "x")); code != 0 || string(b) != "1" {
		t.Fatalf("write to a writable mount: code %d file %q", code, b)
	}
	for _, bad := range []string{dir + ":data", dir + ":/tmp", dir, dir + ":/d:rx"} {
		_, errOut, code := run(t, "", "eval", "--mount", bad, "-e", "1")
		if code != 2 || errOut == "" {
			t.Errorf("--mount %s: code %d err %q", bad, code, errOut)
		}
	}
}

func TestProfileFile(t *testing.T) {
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "data"), 0o755)
	os.WriteFile(filepath.Join(dir, "data", "n.txt"), []byte("42"), 0o644)
	prof := filepath.Join(dir, "p.yaml")
	os.WriteFile(prof, []byte(`
limits:
  timeout: 300ms
  memory: 600MiB
  file_creates: 3
mounts:
  - host: data
    guest: /data
    description: numbers
`), 0o644)
	out, errOut, code := run(t, "", "eval", "--profile", prof, "-e", `File.read("/data/n.txt").to_i`)
	if code != 0 || out != "=> 42\n" {
		t.Fatalf("code %d out %q err %q", code, out, errOut)
	}
	_, errOut, code = run(t, "", "eval", "--profile", prof, "-e", `sleep 2`)
	if code != 1 || !strings.Contains(errOut, "300ms") {
		t.Fatalf("the profile's timeout: code %d err %q", code, errOut)
	}
	// A flag overrides the profile.
	_, _, code = run(t, "", "eval", "--profile", prof, "--timeout", "5s", "-e", `sleep 0.5; 1`)
	if code != 0 {
		t.Fatalf("--timeout did not override the profile: code %d", code)
	}
	// The profile's http section exposes the HTTP tool.
	os.WriteFile(prof, []byte("http:\n  allow: [api.example.com]\n"), 0o644)
	out, errOut, code = run(t, "", "eval", "--profile", prof, "-e", `[respond_to?(:http_get, true), (http_get("https://10.0.0.1/") rescue $!.class.name)]`)
	if code != 0 || out != "=> [true,\"Glovebox::HTTPURLError\"]\n" {
		t.Fatalf("http section: code %d out %q err %q", code, out, errOut)
	}
	os.WriteFile(prof, []byte("limits:\n  timeuot: 1s\n"), 0o644)
	_, errOut, code = run(t, "", "eval", "--profile", prof, "-e", "1")
	if code != 2 || !strings.Contains(errOut, "timeuot") {
		t.Fatalf("a typo in the profile: code %d err %q", code, errOut)
	}
}

func TestRepl(t *testing.T) {
	in := "x = 6\ndef sq(n)\n  n * n\nend\nsq(x)\nraise 'boom'\nx + 1\nloop {}\nx\nexit\n"
	out, errOut, code := run(t, in, "repl", "--timeout", "500ms")
	if code != 0 {
		t.Fatalf("code %d err %q", code, errOut)
	}
	for _, want := range []string{
		"=> 6\n", "=> 36\n", "[error] RuntimeError: boom", "=> 7\n",
		"[timeout] Glovebox::Timeout", "[session reset]", "NameError",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
