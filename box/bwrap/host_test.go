package bwrap_test

import (
	"bufio"
	"context"
	"io"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/bwrap"
	"github.com/gloveboxhq/glovebox/box/egress"
	"github.com/gloveboxhq/glovebox/httptool"
	"github.com/gloveboxhq/glovebox/internal/spawn/spawntest"
)

// pingRuntime is a Runtime with one tool, for runs with a tool socket.
func pingRuntime(t *testing.T) *glovebox.Runtime {
	t.Helper()
	ts := &glovebox.Toolset{}
	ts.Add("ping", func(ctx context.Context, a glovebox.Args) (any, error) { return "pong", nil })
	rt, err := glovebox.New(context.Background(), glovebox.Config{Tools: ts, PoolSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt
}

// TestNoInheritedDescriptors: descriptors this process holds without
// close-on-exec (a file and a directory, as a shell's "exec 7<f 8<d"
// leaves them) reach no run (plain, with tools, with the egress proxy,
// which passes bwrap more descriptors) and no worker, nor the bwrap
// processes on the host, looked at while the command waits.
func TestNoInheritedDescriptors(t *testing.T) {
	b := requiresBwrap(t)
	p := spawntest.Plant(t)
	gated := func(where string, bx *bwrap.Box, c box.Command) {
		t.Helper()
		g := p.Gate(t)
		c.Shell, c.Timeout = g.Script("/gate"), 20*time.Second
		c.Mounts = []box.Mount{{HostPath: g.Dir, GuestPath: "/gate"}}
		c.Stream = func(_ int, b []byte) { g.Seen(b) }
		res := run(t, bx, c)
		g.Check(t, where, res.Stdout+res.Stderr)
	}
	gated("run", b, box.Command{})

	rt := pingRuntime(t)
	gated("run with tools", b, box.Command{Tools: rt.ToolSession(0)})

	eb, err := bwrap.New(bwrap.Config{Egress: egress.HTTPTool(httptool.Config{
		TrustedPrefixes: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, Resolver: fakeDNS{"allowed.test": "127.0.0.1"}})})
	if err != nil {
		t.Fatal(err)
	}
	gated("run with egress", eb, box.Command{Network: box.Network{Allow: []string{"allowed.test"}}})

	g := p.Gate(t)
	w, err := b.StartWorker(bwrap.WorkerSpec{Argv: []string{"/bin/sh", "-c", g.Script(g.Dir)},
		ReadOnly: []string{g.Dir}, Env: []string{"PATH=/usr/bin:/bin"}})
	if err != nil {
		t.Fatal(err)
	}
	w.Stdin.Close()
	var out strings.Builder
	sc := bufio.NewScanner(w.Stdout)
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		g.Seen(sc.Bytes())
	}
	w.Wait()
	g.Check(t, "worker", out.String())
}

// TestProcShowsNoHost: what /proc shows inside a run and a worker names
// nothing of the host: no process's environment holds the host's working
// directory (the wrapper shell's PWD reached bwrap, the sandbox's first
// process), no mount's source is a host temp path (the /etc files were
// bound from the run's host directory), and the host name is the box's.
// The working directory (/work) and the tool socket's directory are bound
// from the run's host directory: their mount lines are the known
// exception.
func TestProcShowsNoHost(t *testing.T) {
	b := requiresBwrap(t)
	rt := pingRuntime(t)
	res := run(t, b, box.Command{Shell: spawntest.ProcDump, Tools: rt.ToolSession(0)})
	if !strings.Contains(res.Stdout, "environ 1: ") || !strings.Contains(res.Stdout, "mountinfo: ") {
		t.Fatalf("the dump did not run:\n%s\n%s", res.Stdout, res.Stderr)
	}
	if bad := spawntest.HostLeaks(res.Stdout, "/work", "/run/glovebox"); len(bad) > 0 {
		t.Errorf("a run shows the host:\n%s", strings.Join(bad, "\n"))
	}
	w, err := b.StartWorker(bwrap.WorkerSpec{Argv: []string{"/bin/sh", "-c", spawntest.ProcDump}, Env: []string{"PATH=/usr/bin:/bin"}})
	if err != nil {
		t.Fatal(err)
	}
	w.Stdin.Close()
	out, _ := io.ReadAll(w.Stdout)
	w.Wait()
	if bad := spawntest.HostLeaks(string(out)); len(bad) > 0 || !strings.Contains(string(out), "environ 1: ") {
		t.Errorf("a worker shows the host:\n%s\n(all: %s)", strings.Join(bad, "\n"), out)
	}
}
