package box_test

// Cases every OS backend must pass the same way: each test is a table over
// the real tiers (bwrap and gVisor here), so a conformance suite can take
// the cases as they are and add backends to tiers.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/box/bwrap"
	"github.com/gloveboxhq/glovebox/box/gvisor"
)

// tier is one backend under test: its --box name for the CLI and a
// constructor for in-process runs.
type tier struct {
	name string
	make func() (box.Box, error)
}

var tiers = []tier{
	{"bwrap", func() (box.Box, error) { return bwrap.New(bwrap.Config{}) }},
	{"gvisor", func() (box.Box, error) { return gvisor.New(gvisor.Config{}) }},
}

// forTiers runs f as a subtest for each tier installed here, skipping the
// others with the reason.
func forTiers(t *testing.T, f func(t *testing.T, tr tier, b box.Box)) {
	for _, tr := range tiers {
		t.Run(tr.name, func(t *testing.T) {
			b, err := tr.make()
			if errors.Is(err, box.ErrUnavailable) {
				t.Skipf("%s is not installed: %v", tr.name, err)
			}
			if err != nil {
				t.Fatal(err)
			}
			f(t, tr, b)
		})
	}
}

func runIn(t *testing.T, b box.Box, c box.Command) *box.Result {
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

var (
	cliOnce sync.Once
	cliPath string
	cliErr  error
)

// cli builds the glovebox CLI once per test binary.
func cli(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the glovebox CLI")
	}
	cliOnce.Do(func() {
		dir, err := os.MkdirTemp("", "glovebox-tiers")
		if err != nil {
			cliErr = err
			return
		}
		cliPath = filepath.Join(dir, "glovebox")
		if out, err := exec.Command("go", "build", "-o", cliPath, "../cmd/glovebox").CombinedOutput(); err != nil {
			cliErr = errors.New(string(out))
		}
	})
	if cliErr != nil {
		t.Fatalf("building the CLI: %v", cliErr)
	}
	return cliPath
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

// walkableTemp is a fresh directory under the system temp dir that any
// user may walk through (t.TempDir's are 0700, and runsc's sandbox, not
// root, opens its way down to the run directory), removed after t.
func walkableTemp(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "glovebox-tiers")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(d, 0o755)
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

// TestTierSweepSparesLiveRuns: two glovebox processes with different temp
// dirs. A live run of one (its directory and cgroups aged past the sweep's
// threshold) survives the other's sweep and ends normally; the leftovers
// of a third, killed with SIGKILL mid-run, are swept: its cgroups (and
// whatever still ran in them) by any glovebox process, its run directory
// by the next run using its temp dir.
func TestTierSweepSparesLiveRuns(t *testing.T) {
	gb := cli(t)
	forTiers(t, func(t *testing.T, tr tier, _ box.Box) {
		root := walkableTemp(t)
		sig := filepath.Join(root, "sig")
		ta, tb, td := filepath.Join(root, "ta"), filepath.Join(root, "tb"), filepath.Join(root, "td")
		for _, d := range []string{sig, ta, tb, td} {
			os.Mkdir(d, 0o777)
			os.Chmod(d, 0o777)
		}
		start := func(tmp, script string) (*exec.Cmd, *strings.Builder) {
			c := exec.Command(gb, "run", "--box", tr.name, "--timeout", "120s", "--json",
				"--mount", sig+":/sig:rw", "--", "sh", "-c", script)
			c.Env = append(os.Environ(), "TMPDIR="+tmp)
			var out strings.Builder
			c.Stdout = &out
			if err := c.Start(); err != nil {
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

		sweeper := exec.Command(gb, "run", "--box", tr.name, "--", "true")
		sweeper.Env = append(os.Environ(), "TMPDIR="+tb)
		if out, err := sweeper.CombinedOutput(); err != nil {
			t.Fatalf("the sweeping run: %v\n%s", err, out)
		}
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
		next := exec.Command(gb, "run", "--box", tr.name, "--", "true")
		next.Env = append(os.Environ(), "TMPDIR="+td)
		if out, err := next.CombinedOutput(); err != nil {
			t.Fatalf("the next run: %v\n%s", err, out)
		}
		if exists(filepath.Join(td, deadName)) {
			t.Errorf("the killed run's directory %s was left", deadName)
		}
	})
}

// TestTierKilledFromOutside: a program outside the run SIGKILLs every
// process of the run's cgroup (what a sweep that misjudged ownership, or
// an operator, would do): the Result says killed_externally with exit
// status 137, not an ordinary exit. The command killing itself stays its
// own 137, without the flag.
func TestTierKilledFromOutside(t *testing.T) {
	forTiers(t, func(t *testing.T, tr tier, b box.Box) {
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
		own := runIn(t, b, box.Command{Shell: `kill -9 $$`})
		if own.KilledExternally || own.ExitStatus != 137 {
			t.Errorf("the command killing itself: %+v", own)
		}
	})
}

// setidScript tries every way to give a file in /out (a writable mount),
// /work and /tmp a privilege the host would honour, and prints one line
// per attempt: "NAME ok" or "NAME refused".
const setidScript = `
import errno, os, shutil
def attempt(name, f):
    try:
        f()
        print(name, "ok")
    except OSError as e:
        print(name, "refused" if e.errno in (errno.EPERM, errno.EACCES, errno.EOPNOTSUPP) else e)
for d in ("/out", "/work", "/tmp"):
    t = d + "/t"
    shutil.copy("/bin/true", t)
    attempt(d + " chmod 4755", lambda: os.chmod(t, 0o4755))
    attempt(d + " chmod 2755", lambda: os.chmod(t, 0o2755))
    attempt(d + " chmod 6755", lambda: os.chmod(t, 0o6755))
    attempt(d + " fchmod 4755", lambda: os.fchmod(os.open(t, os.O_RDONLY), 0o4755))
    attempt(d + " open 4755", lambda: os.close(os.open(d + "/o", os.O_CREAT | os.O_WRONLY, 0o4755)))
    attempt(d + " open 2755", lambda: os.close(os.open(d + "/o", os.O_CREAT | os.O_WRONLY, 0o2755)))
    os.mkdir(d + "/dir")
    attempt(d + " chmod dir 2777", lambda: os.chmod(d + "/dir", 0o2777))
    attempt(d + " setcap", lambda: os.setxattr(t, "security.capability", bytes.fromhex("0000000200200000000000000000000000000000")))
    attempt(d + " mknod chr", lambda: os.mknod(d + "/null", 0o20666, os.makedev(1, 3)))
    attempt(d + " mknod blk", lambda: os.mknod(d + "/sda", 0o60666, os.makedev(8, 0)))
    attempt(d + " chmod 755", lambda: os.chmod(t, 0o755))
`

// TestTierNoSetidFiles: the file policy of the box package (see doc.go)
// holds on every tier: no set-user-ID or set-group-ID bit, no file
// capability and no device node can be made, in a writable mount (seen
// from the host: stat shows none of the bits), the working directory or
// /tmp; an ordinary chmod works.
func TestTierNoSetidFiles(t *testing.T) {
	var want strings.Builder
	for _, d := range []string{"/out", "/work", "/tmp"} {
		for _, a := range []string{"chmod 4755", "chmod 2755", "chmod 6755", "fchmod 4755", "open 4755", "open 2755",
			"chmod dir 2777", "setcap", "mknod chr", "mknod blk"} {
			want.WriteString(d + " " + a + " refused\n")
		}
		want.WriteString(d + " chmod 755 ok\n")
	}
	forTiers(t, func(t *testing.T, tr tier, b box.Box) {
		out := walkableTemp(t)
		os.Chmod(out, 0o1777)
		res := runIn(t, b, box.Command{Argv: []string{"python3", "-c", setidScript},
			Mounts: []box.Mount{{HostPath: out, GuestPath: "/out", Writable: true}}})
		if res.ExitStatus != 0 || res.Stdout != want.String() {
			t.Errorf("exit %d stderr %s\n got:\n%s\nwant:\n%s", res.ExitStatus, res.Stderr, res.Stdout, want.String())
		}
		filepath.Walk(out, func(p string, fi os.FileInfo, err error) error {
			if err != nil {
				return nil
			}
			if fi.Mode()&(os.ModeSetuid|os.ModeSetgid|os.ModeDevice|os.ModeCharDevice) != 0 {
				t.Errorf("the host sees %s as %v", p, fi.Mode())
			}
			if n, err := syscall.Getxattr(p, "security.capability", nil); err == nil || n > 0 {
				t.Errorf("the host sees a file capability on %s", p)
			}
			return nil
		})
	})
}
