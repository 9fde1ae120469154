package bwrap_test

import (
	"bufio"
	"io"
	"strings"
	"testing"

	"github.com/gloveboxhq/glovebox/box/bwrap"
	"github.com/gloveboxhq/glovebox/internal/spawn/spawntest"
)

// TestWorkerNoInheritedDescriptors: descriptors this process holds
// without close-on-exec reach no worker, nor its bwrap process on the
// host, looked at while the worker waits (runs: the boxtest suite).
func TestWorkerNoInheritedDescriptors(t *testing.T) {
	b := requiresBwrap(t)
	p := spawntest.Plant(t)
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

// TestWorkerProcShowsNoHost: what /proc shows inside a worker names
// nothing of the host (no host working directory in an environment, no
// host temp path as a mount's source; runs: the boxtest suite).
func TestWorkerProcShowsNoHost(t *testing.T) {
	b := requiresBwrap(t)
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
