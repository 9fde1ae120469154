package bwrap_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/boxtest"
	"github.com/gloveboxhq/glovebox/box/bwrap"
)

func requiresBwrap(t *testing.T) *bwrap.Box {
	t.Helper()
	b, err := bwrap.New(bwrap.Config{})
	return boxtest.Available(t, b, err)
}

var run = boxtest.MustRun

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
