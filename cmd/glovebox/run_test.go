package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/gloveboxhq/glovebox/internal/npmtest"
)

func requiresBwrapCLI(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bubblewrap is not installed")
	}
}

// runResult decodes glovebox run --json's output.
func runResult(t *testing.T, out string) map[string]any {
	t.Helper()
	var j map[string]any
	if err := json.Unmarshal([]byte(out), &j); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	return j
}

// TestRunProfileBox: a profile's box section sets the backend, the
// environment, files (relative to the profile) and limits; flags override
// it; the section's mistakes name the key.
func TestRunProfileBox(t *testing.T) {
	requiresBwrapCLI(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "in.txt"), []byte("from the profile\n"), 0o644)
	prof := filepath.Join(dir, "p.yaml")
	os.WriteFile(prof, []byte("box:\n  backend: bwrap\n  env: {MODE: batch, KEEP: k}\n  files: {data/in.txt: ./in.txt}\n  mounts: [{host: ., guest: /ref}]\n  timeout: 1s\n  pids: 16\n"), 0o644)
	out, errOut, code := run(t, "", "run", "--profile", prof, "--json", "--", "sh", "-c", `cat data/in.txt /ref/in.txt; echo "$MODE $KEEP"; sleep 5`)
	j := runResult(t, out)
	if code != 124 || j["stdout"] != "from the profile\nfrom the profile\nbatch k\n" || j["timed_out"] != true || j["backend"] != "bwrap" {
		t.Fatalf("code %d stderr %q result %v", code, errOut, j)
	}
	out, _, code = run(t, "", "run", "--profile", prof, "--timeout", "20s", "--env", "MODE=flag", "--json", "--", "sh", "-c", `echo "$MODE $KEEP"`)
	if j := runResult(t, out); code != 0 || j["stdout"] != "flag k\n" {
		t.Fatalf("flags over the profile: code %d %v", code, j)
	}
	eval, _, code := run(t, "", "eval", "--profile", prof, "-e", "1+1")
	if code != 0 || eval != "=> 2\n" {
		t.Fatalf("eval rejects a profile with a box section: %d %q", code, eval)
	}
	for body, want := range map[string]string{
		"box:\n  memory: 512\n":      "box.memory \"512\" is 512 bytes, under the minimum",
		"box:\n  timeout: 0s\n":      "box.timeout \"0s\": the limit must be more than zero",
		"box:\n  files: {a: nope}\n": "box.files a=",
		"box:\n  backnd: bwrap\n":    "unknown key backnd",
		"box:\n  network: [a.test]\n  credentials: [{host: b.test, env: HOME}]\n": "b.test is not a --network allow: host",
	} {
		os.WriteFile(prof, []byte(body), 0o644)
		_, errOut, code := run(t, "", "run", "--profile", prof, "--", "true")
		if code != 2 || !strings.Contains(errOut, want) {
			t.Errorf("%q: code %d stderr %q, want %q", body, code, errOut, want)
		}
	}
}

// TestRunMessages: the trial's findings. Each mistake names its flag; the
// human report says what the exit status alone does not.
func TestRunMessages(t *testing.T) {
	requiresBwrapCLI(t)
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--memory", "512", "--", "true"}, `--memory "512" is 512 bytes, under the minimum of 1.0 MiB: write a unit, such as 256MiB`},
		{[]string{"--timeout", "0s", "--", "true"}, `--timeout "0s": the limit must be more than zero`},
		{[]string{"--pids", "0", "--", "true"}, `--pids "0": at least 1`},
		{[]string{"--mount", "./d:d", "--", "true"}, `--mount "./d:d": host directory`},
		{[]string{"--mount", dir + ":d", "--", "true"}, `--mount "` + dir + `:d": mount guest path "d": want an absolute, clean path such as /data`},
		{[]string{"--mount", dir + ":/etc", "--", "true"}, `--mount "` + dir + `:/etc": mount guest path "/etc" is on the box's own /etc`},
		{[]string{"--file", "data.csv", "--", "true"}, `--file "data.csv": want NAME=PATH`},
		{[]string{"--file", "d=" + filepath.Join(dir, "none"), "--", "true"}, "--file d=" + filepath.Join(dir, "none") + ": no such file"},
		{[]string{"--file", "../x=/etc/hostname", "--", "true"}, `--file "../x": NAME must be a relative path`},
		{[]string{"--network", "allow:127.0.0.1", "--", "true"}, `--network "127.0.0.1" is an IP address: add --http-allow-ip-literals`},
		{[]string{"--network", "allow:api.test:8080", "--", "true"}, "without a port (ports other than 80 and 443: --http-port)"},
		{[]string{"--", "-c", "true"}, `the command "-c" looks like a flag`},
		{[]string{"--bogus", "python3"}, "put the command after --"},
		{[]string{"--box", "vm", "--", "true"}, `--box "vm": want bwrap, gvisor, docker, podman, firecracker, e2b or null`},
	} {
		_, errOut, code := run(t, "", append([]string{"run"}, c.args...)...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: code %d stderr %q, want %q", c.args, code, errOut, c.want)
		}
	}
	// The command's own flags are its own, with or without --.
	if out, errOut, code := run(t, "", "run", "--box", "bwrap", "python3", "-c", "print(6*7)"); code != 0 || out != "42\n" {
		t.Errorf("no --: code %d out %q err %q", code, out, errOut)
	}
	// A memory kill is said, like a timeout.
	_, errOut, code := run(t, "", "run", "--memory", "64MiB", "--", "python3", "-c", `x = bytearray(400 << 20); x[::4096] = b"a" * len(x[::4096])`)
	if code != 137 || !strings.Contains(errOut, "glovebox: the command was killed for going over its memory limit of 64 MiB (exit 137") {
		t.Errorf("memory kill: code %d stderr %q", code, errOut)
	}
	// Outputs are listed; --outputs-dir keeps them.
	script := `mkdir -p outputs/sub; printf hello > outputs/a.txt; head -c 2048 /dev/zero > outputs/sub/b.bin`
	_, errOut, code = run(t, "", "run", "--", "sh", "-c", script)
	if code != 0 || !strings.Contains(errOut, "left 2 file(s) in outputs/, not kept (keep them with --outputs-dir DIR): a.txt (5 B), sub/b.bin (2.0 KiB)") {
		t.Errorf("outputs: code %d stderr %q", code, errOut)
	}
	keep := filepath.Join(dir, "kept")
	_, errOut, code = run(t, "", "run", "--outputs-dir", keep, "--", "sh", "-c", script)
	got, _ := os.ReadFile(filepath.Join(keep, "a.txt"))
	if code != 0 || string(got) != "hello" || !strings.Contains(errOut, "outputs written to "+keep+": a.txt (5 B), sub/b.bin (2.0 KiB)") {
		t.Errorf("--outputs-dir: code %d stderr %q a.txt %q", code, errOut, got)
	}
}

// TestRunHTTPToolAndCredential: glovebox run gives the command the HTTP
// tool (--http-allow) and, through the egress proxy, a credential the
// command never holds (--credential http://HOST=VAR).
func TestRunHTTPToolAndCredential(t *testing.T) {
	requiresBwrapCLI(t)
	const canary = "cli-cred-61d0a7"
	var mu sync.Mutex
	var seen []string
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.Path+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		fmt.Fprint(w, "dev")
	})}
	go srv.Serve(ln)
	defer srv.Close()
	port := itoa(ln.Addr().(*net.TCPAddr).Port)
	dev := []string{"--http-allow-ip-literals", "--http-port", port, "--http-trust", "127.0.0.1/32"}

	args := append([]string{"run", "--json", "--http-allow", "127.0.0.1"}, dev...)
	out, errOut, code := run(t, "", append(args, "--", "python3", "-c",
		`from glovebox_tools import http_get; print(http_get("http://127.0.0.1:`+port+`/tool")["body"])`)...)
	j := runResult(t, out)
	if code != 0 || j["stdout"] != "dev\n" || !strings.Contains(fmt.Sprint(j["tool_calls"]), "http_get") {
		t.Fatalf("http tool: code %d stderr %q %v", code, errOut, j)
	}

	args = append([]string{"run", "--json", "--network", "allow:127.0.0.1", "--credential", "http://127.0.0.1=GB_TEST_TOKEN"}, dev...)
	cmd := exec.Command(bin, append(args, "--", "python3", "-c", `
import os, urllib.request
print(urllib.request.urlopen("http://127.0.0.1:`+port+`/proxy", timeout=5).read().decode())
print(any("`+revString(canary)+`"[::-1] in v for v in os.environ.values()))`)...)
	cmd.Env = append(os.Environ(), "GB_TEST_TOKEN=Bearer "+canary)
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
	if j := runResult(t, string(raw)); j["stdout"] != "dev\nFalse\n" || strings.Contains(string(raw), canary) {
		t.Errorf("credential: %s", raw)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || seen[0] != "/tool " || seen[1] != "/proxy Bearer "+canary {
		t.Errorf("the server saw %q", seen)
	}
}

// TestRunMCPServerTools: an MCP server's tools (a real npm server) become
// tools of the command in the box, as --mcp-server makes them for eval.
func TestRunMCPServerTools(t *testing.T) {
	requiresBwrapCLI(t)
	mem := npmtest.Bin(t, "@modelcontextprotocol/server-memory", "mcp-server-memory")
	cmd := exec.Command(bin, "run", "--json", "--mcp-server", "mem="+mem, "--mcp-env", "MEMORY_FILE_PATH", "--", "python3", "-c", `
import glovebox_tools as t
t.create_entities(entities=[{"name": "box", "entityType": "thing", "observations": ["runs"]}])
print(t.read_graph()["structured"]["entities"][0]["name"])`)
	cmd.Env = append(os.Environ(), "MEMORY_FILE_PATH="+filepath.Join(t.TempDir(), "mem.jsonl"))
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
	j := runResult(t, string(raw))
	if j["stdout"] != "box\n" || !strings.Contains(fmt.Sprint(j["tool_calls"]), "read_graph") {
		t.Errorf("%s", raw)
	}
}

func revString(s string) string {
	b := []byte(s)
	for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
		b[i], b[j] = b[j], b[i]
	}
	return string(b)
}

// TestRunShellToolClient: with tools, glovebox run puts itself on the
// box's PATH, so a shell inside calls them with "glovebox tool" (the
// command the run help and the README give); before, the box had no
// glovebox and the shell answered "glovebox: not found".
func TestRunShellToolClient(t *testing.T) {
	requiresBwrapCLI(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "from-host") })}
	go srv.Serve(ln)
	defer srv.Close()
	port := itoa(ln.Addr().(*net.TCPAddr).Port)
	backends := []string{"bwrap"}
	if _, err := exec.LookPath("runsc"); err == nil {
		backends = append(backends, "gvisor")
	} else {
		t.Log("runsc is not installed: bubblewrap only")
	}
	for _, b := range backends {
		out, errOut, code := run(t, "", "run", "--json", "--box", b, "--http-allow", "127.0.0.1", "--http-allow-ip-literals",
			"--http-port", port, "--http-trust", "127.0.0.1/32", "--",
			"sh", "-c", `glovebox tool --list && glovebox tool http_get --json '["http://127.0.0.1:`+port+`/"]'`)
		j := runResult(t, out)
		if code != 0 || !strings.Contains(fmt.Sprint(j["stdout"]), `"http_get"`) ||
			!strings.Contains(fmt.Sprint(j["stdout"]), "from-host") || !strings.Contains(fmt.Sprint(j["tool_calls"]), "http_get") {
			t.Errorf("%s: code %d stderr %q result %v", b, code, errOut, j)
		}
	}
}

// TestRunGVisorUnwritableMountWarns: gVisor checks permissions as uid
// 65534, so a writable mount of a directory that uid may not write fails
// every write with "Permission denied"; run says why before it starts,
// and says nothing once the directory is writable.
func TestRunGVisorUnwritableMountWarns(t *testing.T) {
	if _, err := exec.LookPath("runsc"); err != nil {
		t.Skip("runsc is not installed")
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	if os.Getuid() == 65534 {
		t.Skip("glovebox runs as uid 65534 itself")
	}
	_, errOut, _ := run(t, "", "run", "--box", "gvisor", "--mount", out+":/out:rw", "--", "sh", "-c", "echo x > /out/f")
	if !strings.Contains(errOut, "glovebox: warning: writable mount /out: gVisor runs the command as uid 65534") || !strings.Contains(errOut, "Permission denied") {
		t.Errorf("no warning for an unwritable mount:\n%s", errOut)
	}
	os.Chmod(out, 0o777)
	_, errOut, code := run(t, "", "run", "--box", "gvisor", "--mount", out+":/out:rw", "--", "sh", "-c", "echo x > /out/f")
	if code != 0 || strings.Contains(errOut, "warning") {
		t.Errorf("writable directory: code %d\n%s", code, errOut)
	}
	if b, err := os.ReadFile(filepath.Join(out, "f")); err != nil || string(b) != "x\n" {
		t.Errorf("the file written: %q %v", b, err)
	}
}

// TestRunCommandNotFound: the CLI shows one line naming a command that is
// not there, and exits 127, on both OS backends alike.
func TestRunCommandNotFound(t *testing.T) {
	requiresBwrapCLI(t)
	boxes := []string{"bwrap"}
	if _, err := exec.LookPath("runsc"); err == nil {
		boxes = append(boxes, "gvisor")
	}
	for _, b := range boxes {
		out, errOut, code := run(t, "", "run", "--box", b, "--", "nosuchcmd")
		if code != 127 || out != "" || errOut != "glovebox: nosuchcmd: command not found\n" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q", b, code, out, errOut)
		}
	}
}
