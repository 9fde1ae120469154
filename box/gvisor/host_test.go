package gvisor_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/internal/spawn/spawntest"
)

// TestNoInheritedDescriptors: descriptors this process holds without
// close-on-exec (a file and a directory) reach neither the command nor
// the host processes runsc runs (runsc itself, its gofer, the sandbox),
// looked at while the command waits.
func TestNoInheritedDescriptors(t *testing.T) {
	b := requiresRunsc(t)
	p := spawntest.Plant(t)
	g := p.Gate(t)
	res := run(t, b, box.Command{
		Shell:   g.Script("/gate"),
		Mounts:  []box.Mount{{HostPath: g.Dir, GuestPath: "/gate"}},
		Stream:  func(_ int, b []byte) { g.Seen(b) },
		Timeout: 20 * time.Second,
	})
	g.Check(t, "gvisor run", res.Stdout+res.Stderr)
}

// TestProcShowsNoHost: what /proc shows inside a gVisor run names nothing
// of the host (the sentry's mount table gives no host paths; the
// environment is the command's; the host name is the box's).
func TestProcShowsNoHost(t *testing.T) {
	b := requiresRunsc(t)
	res := run(t, b, box.Command{Shell: spawntest.ProcDump})
	if !strings.Contains(res.Stdout, "environ 1: ") || !strings.Contains(res.Stdout, "mountinfo: ") {
		t.Fatalf("the dump did not run:\n%s\n%s", res.Stdout, res.Stderr)
	}
	if bad := spawntest.HostLeaks(res.Stdout); len(bad) > 0 {
		t.Errorf("a run shows the host:\n%s", strings.Join(bad, "\n"))
	}
}
