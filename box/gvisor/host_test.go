package gvisor_test

import (
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
