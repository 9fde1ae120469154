package boxtest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/internal/spawn"
	"github.com/gloveboxhq/glovebox/internal/spawn/spawntest"
)

// host: what a sandbox made of host processes inherits, shows and leaves.
func (s *suite) host(t *testing.T) {
	// NoInheritedDescriptors: descriptors this process holds without
	// close-on-exec (a file and a directory, as a shell's "exec 7<f 8<d"
	// leaves them) reach no run (plain, with tools, with the egress
	// proxy, which passes the sandbox more descriptors), nor the host
	// processes the backend starts, looked at while the command waits.
	s.sub(t, "NoInheritedDescriptors", needs(Exec, Host), func(t *testing.T, b box.Box) {
		p := spawntest.Plant(t)
		gated := func(where string, bx box.Box, c box.Command) {
			t.Helper()
			g := p.Gate(t)
			c.Shell, c.Timeout = g.Script("/gate"), 20*time.Second
			c.Mounts = []box.Mount{{HostPath: g.Dir, GuestPath: "/gate"}}
			c.Stream = func(_ int, b []byte) { g.Seen(b) }
			res := run(t, bx, c)
			g.Check(t, where, res.Stdout+res.Stderr)
		}
		gated("run", b, box.Command{})
		if s.can(Tools) {
			gated("run with tools", b, box.Command{Tools: pingRuntime(t).ToolSession(0)})
		}
		if s.can(Egress) && s.b.WithEgress != nil {
			gated("run with egress", s.egressBox(t, fakeDNS{"allowed.test": "127.0.0.1"}), box.Command{Network: box.Network{Allow: []string{"allowed.test"}}})
		}
	})
	// ProcShowsNoHost: what /proc shows inside a run (with the tool
	// socket, where the backend has one) names nothing of the host: no
	// process's environment holds the host's working directory, no
	// mount's source is a host temp path (but the backend's HostMounts),
	// and the host name is the box's.
	s.sub(t, "ProcShowsNoHost", needs(Exec, Host), func(t *testing.T, b box.Box) {
		c := box.Command{Shell: spawntest.ProcDump}
		if s.can(Tools) {
			c.Tools = pingRuntime(t).ToolSession(0)
		}
		res := run(t, b, c)
		if !strings.Contains(res.Stdout, "environ 1: ") || !strings.Contains(res.Stdout, "mountinfo: ") {
			t.Fatalf("the dump did not run:\n%s\n%s", res.Stdout, res.Stderr)
		}
		if bad := spawntest.HostLeaks(res.Stdout, s.b.HostMounts...); len(bad) > 0 {
			t.Errorf("a run shows the host:\n%s", strings.Join(bad, "\n"))
		}
	})
	// KilledFromOutside: a program outside the run SIGKILLs every
	// process of the run's cgroup (what a sweep that misjudged ownership,
	// or an operator, would do): the Result says killed_externally with
	// exit status 137, not an ordinary exit. The command killing itself
	// stays its own 137, without the flag.
	s.sub(t, "KilledFromOutside", needs(Exec, Host), func(t *testing.T, b box.Box) {
		tmp := walkableTemp(t)
		t.Setenv("TMPDIR", tmp)
		sig := t.TempDir()
		os.Chmod(sig, 0o777)
		done := make(chan *box.Result, 1)
		go func() {
			res, err := b.Run(context.Background(), box.Command{Shell: `touch /sig/up; sleep 100`, Timeout: 2 * time.Minute,
				Mounts: []box.Mount{{HostPath: sig, GuestPath: "/sig", Writable: true}}})
			if err != nil {
				t.Errorf("Run: %v", err)
			}
			done <- res
		}()
		waitFile(t, filepath.Join(sig, "up"))
		groups := runGroups(runName(t, tmp))
		if len(groups) == 0 {
			t.Skip("no cgroup holds the run here")
		}
		// Kill the sandbox first and runsc's gofer last: when the gofer
		// dies first, gVisor ends the command itself, which looks like the
		// command's own 137 (the gap box.Result.KilledExternally documents).
		var pids, gofers []int
		for _, g := range groups {
			b, _ := os.ReadFile(filepath.Join(g, "cgroup.procs"))
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					if cl, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); strings.Contains(string(cl), "gofer") {
						gofers = append(gofers, pid)
					} else {
						pids = append(pids, pid)
					}
				}
			}
		}
		for _, pid := range append(pids, gofers...) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		res := <-done
		if res == nil {
			return
		}
		if !res.KilledExternally || res.ExitStatus != 137 || res.TimedOut || res.Canceled || res.KilledForMemory {
			t.Errorf("killed from outside: %+v", res)
		}
		own := run(t, b, box.Command{Shell: `kill -9 $$`})
		if own.KilledExternally || own.ExitStatus != 137 {
			t.Errorf("the command killing itself: %+v", own)
		}
	})
	// SweepSparesLiveRuns: two glovebox processes with different temp
	// dirs. A live run of one (its directory and cgroups aged past the
	// sweep's threshold) survives the other's sweep and ends normally;
	// the leftovers of a third, killed with SIGKILL mid-run, are swept:
	// its cgroups (and whatever still ran in them) by any glovebox
	// process, its run directory by the next run using its temp dir.
	s.sub(t, "SweepSparesLiveRuns", needs(Exec, Host), func(t *testing.T, _ box.Box) {
		if s.b.CLI == "" {
			t.Skipf("%s has no --box name for the CLI", s.b.Name)
		}
		sweepSparesLiveRuns(t, cli(t), s.b.CLI)
	})
}

func sweepSparesLiveRuns(t *testing.T, gb, name string) {
	root := walkableTemp(t)
	sig := filepath.Join(root, "sig")
	ta, tb, td := filepath.Join(root, "ta"), filepath.Join(root, "tb"), filepath.Join(root, "td")
	for _, d := range []string{sig, ta, tb, td} {
		os.Mkdir(d, 0o777)
		os.Chmod(d, 0o777)
	}
	start := func(tmp, script string) (*exec.Cmd, *strings.Builder) {
		c := exec.Command(gb, "run", "--box", name, "--timeout", "120s", "--json",
			"--mount", sig+":/sig:rw", "--", "sh", "-c", script)
		c.Env = append(os.Environ(), "TMPDIR="+tmp)
		var out strings.Builder
		c.Stdout = &out
		if err := spawn.Start(c); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Process.Kill() })
		return c, &out
	}
	live, liveOut := start(ta, `touch /sig/a; while [ ! -e /sig/go ]; do sleep 0.05; done; echo survived`)
	dead, _ := start(td, `touch /sig/d; sleep 1000`)
	waitFile(t, filepath.Join(sig, "a"))
	waitFile(t, filepath.Join(sig, "d"))
	liveName, deadName := runName(t, ta), runName(t, td)
	liveGroups, deadGroups := runGroups(liveName), runGroups(deadName)
	if len(liveGroups) == 0 {
		t.Logf("no cgroups here: only the run directories are checked")
	}
	dead.Process.Kill()
	dead.Wait()
	backdate(t, append(append([]string{filepath.Join(ta, liveName), filepath.Join(td, deadName)}, liveGroups...), deadGroups...)...)

	other := func(tmp string) {
		t.Helper()
		c := exec.Command(gb, "run", "--box", name, "--", "true")
		c.Env = append(os.Environ(), "TMPDIR="+tmp)
		if out, err := spawn.CombinedOutput(c); err != nil {
			t.Fatalf("a run in %s: %v\n%s", tmp, err, out)
		}
	}
	other(tb) // the sweeping run
	for _, g := range liveGroups {
		if !exists(g) {
			t.Errorf("the live run's cgroup %s was removed", g)
		}
	}
	for _, g := range deadGroups {
		if exists(g) {
			t.Errorf("the killed run's cgroup %s was left", g)
		}
	}

	os.WriteFile(filepath.Join(sig, "go"), nil, 0o666)
	live.Wait()
	var res box.Result
	if err := json.Unmarshal([]byte(liveOut.String()), &res); err != nil {
		t.Fatalf("the live run's output: %v\n%s", err, liveOut)
	}
	if res.Stdout != "survived\n" || res.ExitStatus != 0 || res.KilledExternally {
		t.Errorf("the live run: %s", liveOut)
	}

	// The next run in the killed one's temp dir removes its directory.
	if !exists(filepath.Join(td, deadName)) {
		t.Fatalf("the killed run's directory went before its temp dir's next run")
	}
	other(td)
	if exists(filepath.Join(td, deadName)) {
		t.Errorf("the killed run's directory %s was left", deadName)
	}
}

// runGroups lists the cgroup directories of the run named name (the base
// name of its run directory), in every hierarchy.
func runGroups(name string) []string {
	var out []string
	if b, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if own, ok := strings.CutPrefix(line, "0::"); ok {
				if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", own, name)); err == nil {
					out = append(out, filepath.Join("/sys/fs/cgroup", own, name))
				}
			}
		}
	}
	v1, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/*/glovebox", name))
	return append(out, v1...)
}

// runName waits for the single run directory in tmp and returns its name.
func runName(t *testing.T, tmp string) string {
	t.Helper()
	for i := 0; i < 1000; i++ {
		if m, _ := filepath.Glob(filepath.Join(tmp, "glovebox-run-*")); len(m) == 1 {
			return filepath.Base(m[0])
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no run directory appeared in %s", tmp)
	return ""
}

// waitFile waits for p to exist, failing after a minute.
func waitFile(t *testing.T, p string) {
	t.Helper()
	for i := 0; i < 6000; i++ {
		if _, err := os.Stat(p); err == nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s never appeared", p)
}

// backdate makes paths look two minutes old: past the sweep's age
// threshold, so only ownership decides (no test waits a minute).
func backdate(t *testing.T, paths ...string) {
	t.Helper()
	old := time.Now().Add(-2 * time.Minute)
	for _, p := range paths {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatalf("backdating %s: %v", p, err)
		}
	}
}
