package bwrap_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/bwrap"
)

func requiresBwrap(t *testing.T) *bwrap.Box {
	t.Helper()
	b, err := bwrap.New(bwrap.Config{})
	if errors.Is(err, box.ErrUnavailable) {
		t.Skipf("bubblewrap is not installed: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func run(t *testing.T, b box.Box, c box.Command) *box.Result {
	t.Helper()
	res, err := b.Run(context.Background(), c)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return res
}

func TestArgvAndShell(t *testing.T) {
	b := requiresBwrap(t)
	res := run(t, b, box.Command{Argv: []string{"echo", "a b", "$HOME"}})
	if res.Stdout != "a b $HOME\n" || res.ExitStatus != 0 {
		t.Errorf("argv: %+v", res)
	}
	res = run(t, b, box.Command{Shell: "echo $((6*7)); exit 3"})
	if res.Stdout != "42\n" || res.ExitStatus != 3 {
		t.Errorf("shell: %+v", res)
	}
	if res.Posture != b.Posture() || res.Trust != box.TrustHost || res.OffHost() {
		t.Errorf("posture: %+v", res.Posture)
	}
	if err := box.RequireOffHost(b); !errors.Is(err, box.ErrNotOffHost) {
		t.Errorf("RequireOffHost(bwrap) = %v", err)
	}
}

func TestFilesStdinOutputs(t *testing.T) {
	b := requiresBwrap(t)
	res := run(t, b, box.Command{
		Shell: "cat in/data.txt; tr a-z A-Z > outputs/up.txt; mkdir outputs/d; echo deep > outputs/d/x",
		Files: map[string][]byte{"in/data.txt": []byte("file content\n")},
		Stdin: []byte("from stdin"),
	})
	if res.Stdout != "file content\n" || res.ExitStatus != 0 {
		t.Fatalf("%+v", res)
	}
	if string(res.Outputs["up.txt"]) != "FROM STDIN" || string(res.Outputs["d/x"]) != "deep\n" {
		t.Errorf("outputs: %q", res.Outputs)
	}
	res = run(t, b, box.Command{Shell: "head -c 3000 /dev/zero > outputs/a; head -c 3000 /dev/zero > outputs/b", Limits: box.Limits{OutputFiles: 4000}})
	if !res.OutputsTruncated || len(res.Outputs) != 1 {
		t.Errorf("bounded outputs: truncated=%v n=%d", res.OutputsTruncated, len(res.Outputs))
	}
}

func TestEnvDefaultDeny(t *testing.T) {
	b := requiresBwrap(t)
	t.Setenv("GB_HOST_SECRET", "canary-8d1f")
	res := run(t, b, box.Command{Argv: []string{"env"}, Env: map[string]string{"MODE": "batch"}})
	if strings.Contains(res.Stdout, "canary-8d1f") || !strings.Contains(res.Stdout, "MODE=batch\n") {
		t.Errorf("env:\n%s", res.Stdout)
	}
}

func TestCredentialsNeverInResult(t *testing.T) {
	b := requiresBwrap(t)
	const canary = "tok-5b7c0e93"
	c := box.Command{
		Shell:       `test "$TOKEN" = tok-5b7c0e93 && echo has-token`,
		Credentials: map[string]func(context.Context) (string, error){"TOKEN": func(context.Context) (string, error) { return canary, nil }},
	}
	res := run(t, b, c)
	j, _ := json.Marshal(res)
	if res.Stdout != "has-token\n" || strings.Contains(string(j), canary) {
		t.Errorf("result: %s", j)
	}
	c.Credentials["TOKEN"] = func(context.Context) (string, error) { return "", fmt.Errorf("vault said %s", canary) }
	_, err := b.Run(context.Background(), c)
	if err == nil || strings.Contains(err.Error(), canary) || !strings.Contains(err.Error(), "TOKEN") {
		t.Errorf("credential error: %v", err)
	}
}

func TestNetworkNone(t *testing.T) {
	b := requiresBwrap(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("reached"))
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	script := fmt.Sprintf(`
import socket
try:
    s = socket.create_connection(("127.0.0.1", %d), timeout=2); print("connected", s.recv(10))
except OSError as e: print("refused")
try:
    socket.getaddrinfo("example.com", 80); print("resolved")
except OSError: print("no dns")
`, port)
	res := run(t, b, box.Command{Argv: []string{"python3", "-c", script}})
	if res.Stdout != "refused\nno dns\n" {
		t.Errorf("network none: %+v", res)
	}
}

func TestTimeoutKillsTree(t *testing.T) {
	b := requiresBwrap(t)
	marker := fmt.Sprintf("%d", 900000+os.Getpid()%99999)
	res := run(t, b, box.Command{Shell: "(sleep " + marker + " &) ; sleep " + marker, Timeout: time.Second})
	if !res.TimedOut || res.ExitStatus != 124 {
		t.Fatalf("%+v", res)
	}
	out, _ := exec.Command("pgrep", "-f", "sleep "+marker).Output()
	if len(out) > 0 {
		t.Errorf("a sleep survived the timeout: pids %s", out)
	}
}

func TestForkBombStopped(t *testing.T) {
	b := requiresBwrap(t)
	res := run(t, b, box.Command{Shell: "b() { b | b & }; b; sleep 1; echo survived", Timeout: 10 * time.Second, Limits: box.Limits{Pids: 32}})
	if res.TimedOut {
		t.Errorf("fork bomb ran to the timeout: %+v", res.Enforced)
	}
	if !contains(res.Enforced, "pids:cgroup") {
		t.Skipf("no pids cgroup on this host (enforced: %v)", res.Enforced)
	}
	if !strings.Contains(res.Stderr, "fork") && !strings.Contains(res.Stderr, "Resource temporarily unavailable") {
		t.Errorf("no fork failure seen: %q", res.Stderr[:min(len(res.Stderr), 300)])
	}
}

func TestMemoryHog(t *testing.T) {
	b := requiresBwrap(t)
	res := run(t, b, box.Command{Argv: []string{"python3", "-c", "x = bytearray(400 << 20); print('allocated')"}, Limits: box.Limits{Memory: 64 << 20}})
	if strings.Contains(res.Stdout, "allocated") || res.ExitStatus == 0 {
		t.Fatalf("hog not stopped: %+v", res)
	}
	if contains(res.Enforced, "memory:cgroup") && !res.KilledForMemory && !strings.Contains(res.Stderr, "MemoryError") {
		t.Errorf("cgroup present but not reported: %+v", res)
	}
}

func TestOutputCapped(t *testing.T) {
	b := requiresBwrap(t)
	var streamed int
	res := run(t, b, box.Command{Shell: "head -c 5000000 /dev/zero; head -c 10 /dev/zero >&2", Limits: box.Limits{Output: 1000},
		Stream: func(s int, p []byte) {
			if s == 1 {
				streamed += len(p)
			}
		}})
	if len(res.Stdout) != 1000 || !res.StdoutTruncated || len(res.Stderr) != 10 || res.StderrTruncated || streamed != 1000 {
		t.Errorf("stdout %d trunc %v stderr %d streamed %d", len(res.Stdout), res.StdoutTruncated, len(res.Stderr), streamed)
	}
}

func TestReadOnlyRootAndHostUntouched(t *testing.T) {
	b := requiresBwrap(t)
	sum := func() string {
		h := sha256.New()
		for _, f := range []string{"/usr/bin/env", "/etc/passwd"} {
			b, _ := os.ReadFile(f)
			h.Write(b)
		}
		return fmt.Sprintf("%x", h.Sum(nil))
	}
	before := sum()
	res := run(t, b, box.Command{Shell: `
for f in /usr/bin/env /usr/x /etc/passwd /x /bin/sh; do (echo pwned > $f) 2>/dev/null && echo "wrote $f"; done
cat /etc/shadow 2>/dev/null && echo "read shadow"
echo ok > /tmp/t && echo ok > here && echo writable`})
	if res.Stdout != "writable\n" {
		t.Errorf("%+v", res)
	}
	if sum() != before {
		t.Errorf("a host file changed")
	}
}

func TestSeccompDenies(t *testing.T) {
	b := requiresBwrap(t)
	// unshare(2) and ptrace(2) are refused with EPERM whatever the caps.
	script := `
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
print(libc.unshare(0x10000000), ctypes.get_errno())
print(libc.ptrace(0, 0, 0, 0), ctypes.get_errno())
print(libc.syscall(435, 0, 0), ctypes.get_errno())
`
	res := run(t, b, box.Command{Argv: []string{"python3", "-c", script}})
	want := "-1 1\n-1 1\n-1 38\n"
	if res.Stdout != want {
		t.Errorf("got %q (stderr %q), want %q", res.Stdout, res.Stderr, want)
	}
}

func TestToolsFromPython(t *testing.T) {
	b := requiresBwrap(t)
	ts := &glovebox.Toolset{}
	ts.Add("orders", func(ctx context.Context, a glovebox.Args) (any, error) {
		return map[string]any{"id": a.Positional[0], "status": a.Keyword["status"]}, nil
	})
	ts.Add("refund", func(ctx context.Context, a glovebox.Args) (any, error) {
		return nil, &glovebox.ToolError{Class: "NotFound", Message: "no such order"}
	})
	var seen []string
	rt, err := glovebox.New(context.Background(), glovebox.Config{Tools: ts, PoolSize: -1, Hooks: glovebox.Hooks{
		BeforeCall: func(ctx context.Context, name string, a glovebox.Args) error {
			seen = append(seen, name)
			return nil
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	res := run(t, b, box.Command{Tools: rt.ToolSession(0), Argv: []string{"python3", "-c", `
from glovebox_tools import orders, refund, ToolError
import glovebox_tools
print(orders(42, status="open"))
try:
    refund()
except ToolError as e:
    print(e.klass, e)
print(glovebox_tools.tools())
`}})
	want := "{'id': 42, 'status': 'open'}\nNotFound no such order\n['orders', 'refund']\n"
	if res.Stdout != want {
		t.Fatalf("got %q, stderr %q", res.Stdout, res.Stderr)
	}
	var calls []map[string]any
	if err := json.Unmarshal(res.ToolCalls, &calls); err != nil || len(calls) != 2 || calls[0]["name"] != "orders" || calls[1]["error"] != "no such order" {
		t.Errorf("transcript %s (%v)", res.ToolCalls, err)
	}
	if strings.Join(seen, ",") != "orders,refund" {
		t.Errorf("BeforeCall saw %v", seen)
	}
}

func TestToolsFromRuby(t *testing.T) {
	b := requiresBwrap(t)
	if _, err := os.Stat("/usr/bin/ruby"); err != nil {
		t.Skip("no /usr/bin/ruby on this host to run the Ruby client inside the box")
	}
	ts := &glovebox.Toolset{}
	ts.Add("double", func(ctx context.Context, a glovebox.Args) (any, error) { return a.Positional[0].(int64) * 2, nil })
	rt, err := glovebox.New(context.Background(), glovebox.Config{Tools: ts, PoolSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	res := run(t, b, box.Command{Tools: rt.ToolSession(0), Argv: []string{"ruby", "-rglovebox_tools", "-e", "p GloveboxTools.double(21)"}})
	if res.Stdout != "42\n" {
		t.Errorf("%+v", res)
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func TestToolCLIInside(t *testing.T) {
	requiresBwrap(t)
	if testing.Short() {
		t.Skip("builds the glovebox CLI")
	}
	dir := t.TempDir()
	if out, err := exec.Command("go", "build", "-o", dir+"/glovebox", "../../cmd/glovebox").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	b, err := bwrap.New(bwrap.Config{ReadOnly: []string{"/usr", "/etc/alternatives", "/etc/ld.so.cache", dir}})
	if err != nil {
		t.Fatal(err)
	}
	ts := &glovebox.Toolset{}
	ts.Add("orders", func(ctx context.Context, a glovebox.Args) (any, error) {
		return []any{a.Positional[0], a.Keyword["status"]}, nil
	})
	rt, err := glovebox.New(context.Background(), glovebox.Config{Tools: ts, PoolSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	res := run(t, b, box.Command{Tools: rt.ToolSession(0),
		Shell: dir + `/glovebox tool orders --json 7 --kw '{"status":"open"}'; ` + dir + `/glovebox tool nope; echo "exit $?"`})
	if res.Stdout != "[7,\"open\"]\nexit 1\n" || !strings.Contains(res.Stderr, "UnknownToolError") {
		t.Errorf("stdout %q stderr %q", res.Stdout, res.Stderr)
	}
}

// TestProcHidesHostPaths: no process the guest can see names the run's
// host directories (bwrap's own arguments come through a pipe).
func TestProcHidesHostPaths(t *testing.T) {
	b := requiresBwrap(t)
	res := run(t, b, box.Command{Shell: `for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' < $f; echo; done`})
	if res.ExitStatus != 0 || !strings.Contains(res.Stdout, "bwrap --args") || strings.Contains(res.Stdout, os.TempDir()) || strings.Contains(res.Stdout, "glovebox-run-") {
		t.Errorf("exit %d\n%s\nstderr %s", res.ExitStatus, res.Stdout, res.Stderr)
	}
}

// TestMounts: a read-only mount is readable and refuses writes; a
// writable one takes them, on the host; a missing host directory is an
// invalid command.
func TestMounts(t *testing.T) {
	b := requiresBwrap(t)
	in, out := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(in, "data.txt"), []byte("mounted\n"), 0o644)
	os.Chmod(out, 0o777)
	res := run(t, b, box.Command{Shell: `cat /data/data.txt; (echo x > /data/new) 2>/dev/null || echo ro; echo w > /mnt/out/new.txt && echo wrote`,
		Mounts: []box.Mount{{HostPath: in, GuestPath: "/data"}, {HostPath: out, GuestPath: "/mnt/out", Writable: true}}})
	if res.Stdout != "mounted\nro\nwrote\n" {
		t.Errorf("stdout %q stderr %q", res.Stdout, res.Stderr)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "new.txt")); string(b) != "w\n" {
		t.Errorf("the host sees %q", b)
	}
	if _, err := os.Stat(filepath.Join(in, "new")); err == nil {
		t.Error("a write went through the read-only mount")
	}
	_, err := b.Run(context.Background(), box.Command{Argv: []string{"true"}, Mounts: []box.Mount{{HostPath: filepath.Join(in, "none"), GuestPath: "/data"}}})
	if !errors.Is(err, box.ErrInvalidCommand) {
		t.Errorf("missing host dir: %v", err)
	}
}
