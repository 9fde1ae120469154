// Package spawntest plants descriptors without close-on-exec in a test's
// own process, the way a shell's "exec 7<file 8<dir" leaves them in a
// program it starts, and checks that a child glovebox starts (a sandboxed
// command, an eval worker, an MCP server) holds none of them.
package spawntest

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// Planted is a canary file and a directory, each open in this process
// without close-on-exec as descriptor File and Dir.
type Planted struct {
	File, Dir int
	Canary    string // the file's content
	DirPath   string // the directory, empty unless a child wrote into it
}

// Plant opens a fresh canary file and directory without close-on-exec, at
// the first free descriptor numbers from 40 up (clear of those any box
// passes on purpose); t's cleanup closes them.
func Plant(t testing.TB) *Planted {
	t.Helper()
	d := t.TempDir()
	p := &Planted{Canary: fmt.Sprintf("canary-fd-%d-%s", os.Getpid(), filepath.Base(d)), DirPath: filepath.Join(d, "dir")}
	if err := os.WriteFile(filepath.Join(d, "secret"), []byte(p.Canary+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(p.DirPath, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(p.DirPath, 0o777) // a guest of another uid could write, were it reachable
	next := 40
	plant := func(path string, flags int) int {
		fd, err := unix.Open(path, flags, 0) // no O_CLOEXEC: inheritable
		if err != nil {
			t.Fatal(err)
		}
		for ; ; next++ {
			if _, err := unix.FcntlInt(uintptr(next), unix.F_GETFD, 0); err != nil {
				break
			}
		}
		if err := unix.Dup3(fd, next, 0); err != nil {
			t.Fatal(err)
		}
		unix.Close(fd)
		n := next
		next++
		t.Cleanup(func() { unix.Close(n) })
		return n
	}
	p.File = plant(filepath.Join(d, "secret"), unix.O_RDONLY)
	p.Dir = plant(p.DirPath, unix.O_RDONLY|unix.O_DIRECTORY)
	return p
}

// Probe is a shell script that shows what a child holds of the planted
// descriptors: the list of its open descriptors ("fds: 0 1 2 …"), the
// canary file read through /proc/self/fd, and the errno of creating a
// file through the directory descriptor ("dirfd 9" is EBADF: not open).
// It needs python3 in the child.
func (p *Planted) Probe() string {
	return fmt.Sprintf(`echo "fds: $(ls /proc/self/fd | tr '\n' ' ')"; cat /proc/self/fd/%d 2>&1; python3 -c '
import os
try:
    os.close(os.open("leaked", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=%d))
    print("dirfd CREATED")
except OSError as e:
    print("dirfd", e.errno)
'`, p.File, p.Dir)
}

// ProbeArgv is Probe as an argv for a command run without a shell.
func (p *Planted) ProbeArgv() []string { return []string{"/bin/sh", "-c", p.Probe()} }

// Check fails t when out (Probe's output in the child) or the directory
// shows that a planted descriptor reached the child, when the child holds
// any descriptor but 0, 1 and 2 (and the one the probe's ls opens), or
// when the probe did not run to its end.
func (p *Planted) Check(t testing.TB, where, out string) {
	t.Helper()
	if strings.Contains(out, p.Canary) {
		t.Errorf("%s: the child read the host file through an inherited descriptor:\n%s", where, out)
	}
	if ents, _ := os.ReadDir(p.DirPath); len(ents) > 0 {
		t.Errorf("%s: the child created %s in a host directory through an inherited descriptor", where, ents[0].Name())
	}
	fds, ok := "", false
	for _, l := range strings.Split(out, "\n") {
		if s, found := strings.CutPrefix(l, "fds: "); found {
			fds = s
		}
		if strings.HasPrefix(l, "dirfd ") {
			ok = true
		}
	}
	// 0, 1 and 2, and 3: the directory ls lists.
	for _, f := range strings.Fields(fds) {
		switch f {
		case "0", "1", "2", "3":
		case strconv.Itoa(p.File), strconv.Itoa(p.Dir):
			t.Errorf("%s: the child holds planted descriptor %s (its descriptors: %s)", where, f, fds)
		default:
			t.Errorf("%s: the child holds descriptor %s, which nothing passed on purpose (its descriptors: %s)", where, f, fds)
		}
	}
	if !ok || !strings.Contains(out, "fds: ") {
		t.Errorf("%s: the probe did not run to its end:\n%s", where, out)
	}
}

// Holders lists the host processes other than this one that hold a
// descriptor of the planted file or directory ("pid comm: fd -> path"),
// such as a sandbox's host-side processes (bwrap, runsc and its gofer)
// while a run is going on.
func (p *Planted) Holders() []string {
	secret := filepath.Join(filepath.Dir(p.DirPath), "secret")
	var out []string
	links, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	self := strconv.Itoa(os.Getpid())
	for _, l := range links {
		pid := strings.Split(l, "/")[2]
		if pid == self {
			continue
		}
		if t, err := os.Readlink(l); err == nil && (t == secret || t == p.DirPath) {
			comm, _ := os.ReadFile("/proc/" + pid + "/comm")
			out = append(out, fmt.Sprintf("%s %s: %s -> %s", pid, strings.TrimSpace(string(comm)), l, t))
		}
	}
	return out
}

// Gate holds a probing child until the host has listed the processes
// holding planted descriptors (see Holders): the child runs Script, which
// prints "ready" after the probe and then waits for a file in Dir (seen
// inside at the guest path given to Script); Seen, called with the
// child's output as it arrives, does the listing and lets the child go.
type Gate struct {
	Dir     string
	p       *Planted
	mu      sync.Mutex
	done    bool
	holders []string
}

// Gate returns a fresh gate for p.
func (p *Planted) Gate(t testing.TB) *Gate { return &Gate{Dir: t.TempDir(), p: p} }

// Script is the probe, then "ready", then a wait for the gate's file at
// guest (the path Dir has inside the child).
func (g *Gate) Script(guest string) string {
	return g.p.Probe() + "; echo ready; while [ ! -e " + guest + "/go ]; do sleep 0.05; done"
}

// Seen looks at b, output of the child; at the first "ready" it lists the
// holders and opens the gate.
func (g *Gate) Seen(b []byte) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.done || !strings.Contains(string(b), "ready") {
		return
	}
	g.done = true
	g.holders = g.p.Holders()
	os.WriteFile(filepath.Join(g.Dir, "go"), nil, 0o644)
}

// Check is Planted.Check, and fails t when the gate never opened or some
// host process held a planted descriptor then.
func (g *Gate) Check(t testing.TB, where, out string) {
	t.Helper()
	g.p.Check(t, where, out)
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.done {
		t.Errorf("%s: the child never said ready:\n%s", where, out)
	}
	if len(g.holders) > 0 {
		t.Errorf("%s: host processes of the run hold planted descriptors: %q", where, g.holders)
	}
}

// ExtraFiles opens the planted file and directory afresh and places them
// for exec.Cmd.ExtraFiles so that a child (a glovebox CLI started by the
// test) inherits them as descriptors File and Dir, as a shell's
// "exec 40<f 41<d" would; t's cleanup closes them.
func (p *Planted) ExtraFiles(t testing.TB) []*os.File {
	t.Helper()
	f, err := os.Open(filepath.Join(filepath.Dir(p.DirPath), "secret"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := os.Open(p.DirPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close(); d.Close() })
	extra := make([]*os.File, max(p.File, p.Dir)-2)
	extra[p.File-3], extra[p.Dir-3] = f, d
	return extra
}

// ProcDump is a shell script that prints what /proc shows a sandboxed
// command of the host: every process's environment, command line and
// working directory, its own mount table, and the host name, each line
// prefixed with what it is ("environ 1: …", "mountinfo: …").
const ProcDump = `for p in /proc/[0-9]*; do n=${p#/proc/}; echo "environ $n: $(tr '\0' ' ' < $p/environ)"; echo "cmdline $n: $(tr '\0' ' ' < $p/cmdline)"; echo "cwd $n: $(readlink $p/cwd)"; done 2>/dev/null; sed 's/^/mountinfo: /' /proc/self/mountinfo; echo "hostname: $(cat /proc/sys/kernel/hostname)"`

// HostLeaks lists the lines of ProcDump's output that show the host:
// this process's working directory or host name, or a path under the
// host's temp directory; a mount line whose mount point is in allowed (a
// directory the box binds from a host path by design) is let through.
func HostLeaks(out string, allowed ...string) []string {
	cwd, _ := os.Getwd()
	host, _ := os.Hostname()
	tmp := filepath.Clean(os.TempDir()) + "/"
	var bad []string
	for _, l := range strings.Split(out, "\n") {
		if m, ok := strings.CutPrefix(l, "mountinfo: "); ok {
			if f := strings.Fields(m); len(f) > 4 && slices.Contains(allowed, f[4]) {
				continue
			}
		}
		if strings.Contains(l, cwd) || strings.Contains(l, tmp) || (host != "glovebox" && host != "" && l == "hostname: "+host) {
			bad = append(bad, l)
		}
	}
	return bad
}
