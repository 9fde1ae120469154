// Package boxtest is the conformance suite every [box.Box] backend runs:
// the behaviours the box package promises (exec and exit statuses, the
// default-deny environment, limits, mounts and the file policy, the
// egress allowlist, the tool socket, no inherited descriptors, no host
// in /proc, no orphans, sweeps, a kill from outside) written once. A
// backend's test file calls [Run] with a [Backend]; what the backend
// cannot do it names in Backend.Cannot, and the subtests needing it skip
// with that reason. A new backend gets the whole contract by calling it:
//
//	func TestConformance(t *testing.T) {
//		boxtest.Run(t, boxtest.Backend{Name: "mybox", New: func(t *testing.T) box.Box { … },
//			Posture: want, Cannot: map[boxtest.Capability]string{boxtest.Egress: "no proxy yet"}})
//	}
package boxtest

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/internal/spawn"
)

// Capability is a part of the contract a backend may lack.
type Capability string

// The capabilities. A subtest names the ones it needs; each is assumed
// present unless the backend's Cannot names it.
const (
	// Results: Run returns a Result for a valid Command (the null box
	// refuses every one).
	Results Capability = "results"
	// Exec: the Command's own program runs and its output, exit status
	// and files are the Result's (a backend tested against a fake
	// engine or service cannot).
	Exec Capability = "exec"
	// Limits: Timeout and Limits (output, memory, processes) are
	// enforced.
	Limits Capability = "limits"
	// Mounts: host directories are bound in, under the file policy.
	Mounts Capability = "mounts"
	// Egress: Network.Allow goes through an egress proxy applying
	// httptool's rules (the backend sets Backend.WithEgress).
	Egress Capability = "egress"
	// Tools: Command.Tools are reachable through the tool socket.
	Tools Capability = "tools"
	// Host: the sandbox is processes and cgroups on this host, so what it
	// inherits, what its /proc shows and what it leaves can be looked at.
	Host Capability = "host"
)

// Backend is one backend under the suite.
type Backend struct {
	// Name names the backend in messages ("bwrap").
	Name string
	// New returns the box to test; it may skip t (the backend's program
	// is not installed here) or fail it.
	New func(t *testing.T) box.Box
	// WithEgress returns a box whose runs with Network.Allow reach the
	// network through egress; nil makes the Egress subtests skip.
	WithEgress func(t *testing.T, egress box.EgressFunc) box.Box
	// Posture is what the box's Posture and every Result must say.
	Posture box.Posture
	// Cannot names what the backend cannot do, each with the reason the
	// skipped subtests give.
	Cannot map[Capability]string
	// CLI is the backend's --box name for `glovebox run`; empty skips the
	// subtests that run the CLI (sweeps across processes).
	CLI string
	// HostMounts are guest paths bound from the run's host directory,
	// whose /proc/self/mountinfo lines name host paths by design (bwrap's
	// /work and /run/glovebox).
	HostMounts []string
}

// Fake is the Cannot of a backend tested through a fake engine or
// service, each capability with the reason why: such a backend checks
// only the contract (its Posture, the refusal of an invalid Command, a
// typed nil Tools) and that Run returns a Result with the posture.
func Fake(why string) map[Capability]string {
	return map[Capability]string{Exec: why, Limits: why, Mounts: why, Egress: why, Tools: why, Host: why}
}

// Run runs every subtest of the suite against b, as subtests of t named
// after the behaviour: Posture, InvalidCommand, TypedNilTools (every
// backend); ArgvAndShell, FilesStdinOutputs, EnvDefaultDeny,
// CredentialsNeverInResult, CommandNotExecuted (126/127),
// ReadOnlyRootAndHostUntouched, NetworkNone (Exec); TimeoutKillsTree,
// OutputCapped, MemoryHog, PidsLimit (Limits); Mounts, NoSetidFiles
// (Mounts); EgressAllowlist, CredentialsProxyMode (Egress);
// ToolsFromPython, ToolsFromRuby (Tools); NoInheritedDescriptors,
// ProcShowsNoHost, KilledFromOutside, SweepSparesLiveRuns (Host; the last
// builds the CLI, skipped under -short). Commands inside the box use
// /bin/sh and python3 from the host's /usr.
func Run(t *testing.T, b Backend) {
	s := &suite{b: b}
	s.contract(t)
	s.exec(t)
	s.limits(t)
	s.files(t)
	s.egress(t)
	s.tools(t)
	s.host(t)
}

type suite struct{ b Backend }

// can reports whether the backend has c.
func (s *suite) can(c Capability) bool { _, no := s.b.Cannot[c]; return !no }

// sub runs f as subtest name, skipped with the backend's reason when it
// lacks one of needs.
func (s *suite) sub(t *testing.T, name string, needs []Capability, f func(t *testing.T, b box.Box)) {
	t.Run(name, func(t *testing.T) {
		for _, c := range needs {
			if why, no := s.b.Cannot[c]; no {
				t.Skipf("%s cannot %s: %s", s.b.Name, c, why)
			}
		}
		f(t, s.b.New(t))
	})
}

// needs builds a subtest's list of capabilities.
func needs(c ...Capability) []Capability { return c }

// Available returns b, skipping t when err says the backend's program
// is not installed here (ErrUnavailable) and failing it on another error:
// for a backend's New, b, err := bwrap.New(cfg).
func Available[B box.Box](t testing.TB, b B, err error) B {
	t.Helper()
	if errors.Is(err, box.ErrUnavailable) {
		t.Skipf("%v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// MustRun runs c in b, as every subtest of the suite does: it skips t
// when the sandbox cannot start on this host (ErrBackend) and fails it on
// any other error.
func MustRun(t testing.TB, b box.Box, c box.Command) *box.Result {
	t.Helper()
	return run(t, b, c)
}

// run runs c in b, skipping t when the sandbox cannot start on this host
// (ErrBackend) and failing it on any other error.
func run(t testing.TB, b box.Box, c box.Command) *box.Result {
	t.Helper()
	res, err := b.Run(context.Background(), c)
	if errors.Is(err, box.ErrBackend) {
		t.Skipf("the sandbox cannot start here: %v", err)
	}
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return res
}

// walkableTemp is a fresh directory under the system temp dir that any
// user may walk through (t.TempDir's are 0700, and runsc's sandbox, not
// root, opens its way down to a run directory), removed after t.
func walkableTemp(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "glovebox-boxtest")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(d, 0o755)
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

var (
	cliOnce sync.Once
	cliPath string
	cliErr  error
)

// cli builds the glovebox CLI once per test binary, from the module
// holding the working directory.
func cli(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the glovebox CLI")
	}
	cliOnce.Do(func() {
		root, err := os.Getwd()
		for err == nil && !exists(filepath.Join(root, "go.mod")) {
			if filepath.Dir(root) == root {
				err = errors.New("no go.mod above the working directory")
			}
			root = filepath.Dir(root)
		}
		if err != nil {
			cliErr = err
			return
		}
		dir, err := os.MkdirTemp("", "glovebox-boxtest-cli")
		if err != nil {
			cliErr = err
			return
		}
		cliPath = filepath.Join(dir, "glovebox")
		c := exec.Command("go", "build", "-o", cliPath, "./cmd/glovebox")
		c.Dir = root
		if out, err := spawn.CombinedOutput(c); err != nil {
			cliErr = errors.New(string(out))
		}
	})
	if cliErr != nil {
		t.Fatalf("building the CLI: %v", cliErr)
	}
	return cliPath
}
