package gvisor_test

import (
	"context"
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
	"github.com/gloveboxhq/glovebox/box/gvisor"
)

func requiresRunsc(t *testing.T) *gvisor.Box {
	t.Helper()
	b, err := gvisor.New(gvisor.Config{})
	if errors.Is(err, box.ErrUnavailable) {
		t.Skipf("runsc is not installed: %v", err)
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

func TestGVisorRun(t *testing.T) {
	b := requiresRunsc(t)
	t.Setenv("GB_HOST_SECRET", "canary-4a2e")
	res := run(t, b, box.Command{
		Shell: `cat data.txt; read l; echo "$l" > outputs/o.txt; echo $MODE; env | grep -c canary-4a2e; id -u; (echo x > /usr/x) 2>/dev/null || echo ro; exit 5`,
		Files: map[string][]byte{"data.txt": []byte("in\n")}, Stdin: []byte("line\n"), Env: map[string]string{"MODE": "m"},
	})
	if res.Stdout != "in\nm\n0\n65534\nro\n" || res.ExitStatus != 5 || string(res.Outputs["o.txt"]) != "line\n" {
		t.Errorf("%+v", res)
	}
	if res.Isolation != box.IsolationGVisor || res.Trust != box.TrustHost || res.OffHost() {
		t.Errorf("posture %+v", res.Posture)
	}
}

func TestGVisorNoNetwork(t *testing.T) {
	b := requiresRunsc(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	script := fmt.Sprintf(`
import socket
try:
    socket.create_connection(("127.0.0.1", %d), timeout=2); print("connected")
except OSError: print("refused")
try:
    socket.create_connection(("1.1.1.1", 80), timeout=2); print("connected")
except OSError: print("refused")
`, ln.Addr().(*net.TCPAddr).Port)
	res := run(t, b, box.Command{Argv: []string{"python3", "-c", script}})
	if res.Stdout != "refused\nrefused\n" {
		t.Errorf("%+v", res)
	}
}

func TestGVisorTimeout(t *testing.T) {
	b := requiresRunsc(t)
	marker := fmt.Sprintf("%d", 800000+os.Getpid()%99999)
	res := run(t, b, box.Command{Shell: "(sleep " + marker + " &); sleep " + marker, Timeout: 2 * time.Second})
	if !res.TimedOut || res.ExitStatus != 124 {
		t.Fatalf("%+v", res)
	}
	if out, _ := exec.Command("pgrep", "-f", "runsc.*glovebox-run"+"|sleep "+marker).Output(); len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("left behind: %s", out)
	}
}

func TestGVisorOutputCapped(t *testing.T) {
	b := requiresRunsc(t)
	res := run(t, b, box.Command{Shell: "head -c 3000000 /dev/zero", Limits: box.Limits{Output: 4096}})
	if len(res.Stdout) != 4096 || !res.StdoutTruncated {
		t.Errorf("stdout %d truncated %v", len(res.Stdout), res.StdoutTruncated)
	}
}

func TestGVisorToolsFromPython(t *testing.T) {
	b := requiresRunsc(t)
	ts := &glovebox.Toolset{}
	ts.Add("orders", func(ctx context.Context, a glovebox.Args) (any, error) {
		return map[string]any{"id": a.Positional[0]}, nil
	})
	rt, err := glovebox.New(context.Background(), glovebox.Config{Tools: ts, PoolSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	res := run(t, b, box.Command{Tools: rt.ToolSession(0), Argv: []string{"python3", "-c", "from glovebox_tools import orders; print(orders(7))"}})
	if res.Stdout != "{'id': 7}\n" || !strings.Contains(string(res.ToolCalls), `"name":"orders"`) {
		t.Errorf("stdout %q stderr %q calls %s", res.Stdout, res.Stderr, res.ToolCalls)
	}
}

// TestGVisorPidsLimit: fork fails with EAGAIN at the process limit (the
// sentry's RLIMIT_NPROC), and a shell fork bomb leaves the sandbox alive
// to finish its script, with nothing left behind on the host.
func TestGVisorPidsLimit(t *testing.T) {
	b := requiresRunsc(t)
	res := run(t, b, box.Command{Argv: []string{"python3", "-c", `
import os, errno
kids = []
try:
    while True:
        pid = os.fork()
        if pid == 0:
            import time; time.sleep(30); os._exit(0)
        kids.append(pid)
except OSError as e:
    print(errno.errorcode[e.errno], len(kids))
for k in kids: os.kill(k, 9)
for k in kids: os.waitpid(k, 0)
`}, Limits: box.Limits{Pids: 32}, Timeout: 60 * time.Second})
	if res.Stdout != "EAGAIN 31\n" || res.ExitStatus != 0 {
		t.Errorf("fork loop: %+v", res)
	}
	res = run(t, b, box.Command{Shell: `(f(){ f|f& }; f) 2>/dev/null; sleep 2; echo survived`, Limits: box.Limits{Pids: 64}, Timeout: 60 * time.Second})
	if res.Stdout != "survived\n" || res.ExitStatus != 0 || res.TimedOut {
		t.Errorf("fork bomb: %+v", res)
	}
	if !strings.Contains(strings.Join(res.Enforced, ","), "pids:rlimit-nproc") {
		t.Errorf("enforced %v", res.Enforced)
	}
}

// TestGVisorMemoryKill: a memory hog past Limits.Memory is killed and
// reported as killed for memory (the run's cgroup counted an OOM kill);
// the same program under a larger limit runs.
func TestGVisorMemoryKill(t *testing.T) {
	b := requiresRunsc(t)
	hog := `x = bytearray(400 << 20); x[::4096] = b"a" * len(x[::4096]); print("alive")`
	res := run(t, b, box.Command{Argv: []string{"python3", "-c", hog}, Limits: box.Limits{Memory: 128 << 20}})
	if !strings.Contains(strings.Join(res.Enforced, ","), "memory:cgroup") {
		t.Skipf("no cgroup for the sandbox here (enforced %v): a memory kill cannot be told", res.Enforced)
	}
	if !res.KilledForMemory || res.ExitStatus != 137 || res.Stdout != "" {
		t.Errorf("hog: %+v", res)
	}
	res = run(t, b, box.Command{Argv: []string{"python3", "-c", hog}, Limits: box.Limits{Memory: 1 << 30}})
	if res.KilledForMemory || res.Stdout != "alive\n" {
		t.Errorf("under 1 GiB: %+v", res)
	}
}

// TestMounts: a read-only mount is readable and refuses writes; a
// writable one takes them, on the host; a missing host directory is an
// invalid command.
func TestMounts(t *testing.T) {
	b := requiresRunsc(t)
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
