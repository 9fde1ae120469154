// Host descriptors: per-VM and per-process budgets, nothing held that the guest should not reach.

package glovebox_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gloveboxhq/glovebox"
	"golang.org/x/sys/unix"
)

// One session hoarding open files must not starve the others: each VM
// has its own bound (EMFILE for the hoarder), well inside the process's
// shared budget, so other sessions and fresh evals still open files.
func TestAttackDescriptorHoarding(t *testing.T) {
	var lim unix.Rlimit
	must(t, unix.Getrlimit(unix.RLIMIT_NOFILE, &lim))
	low := lim
	low.Cur = 1024
	must(t, unix.Setrlimit(unix.RLIMIT_NOFILE, &low))
	defer unix.Setrlimit(unix.RLIMIT_NOFILE, &lim)
	r := newRuntime(t, glovebox.Config{PoolSize: -1})
	hoard := `File.write("/tmp/x", "x"); $fs = []
		begin; 1000.times { $fs << File.open("/tmp/x") }; [$fs.size, "none"]
		rescue SystemCallError => e; [$fs.size, e.class.name]; end`
	var hoarders []*glovebox.Session
	for i := range 3 {
		s := newSession(t, r)
		hoarders = append(hoarders, s)
		res := sessionEval(t, s, hoard)
		wantStatus(t, res, glovebox.StatusOK)
		got, _ := res.Value.([]any)
		if len(got) != 2 || got[1] != "Errno::EMFILE" {
			t.Fatalf("hoarding session %d: %v, want [n, Errno::EMFILE] (its own bound)", i, res.Value)
		}
		t.Logf("hoarding session %d holds %v files", i, got[0])
	}
	// The hoarders keep their files; another session and a fresh eval
	// still get theirs.
	s := newSession(t, r)
	res := sessionEval(t, s, `File.write("/tmp/y", "y"); fs = 20.times.map { File.open("/tmp/y") }; fs.map(&:read).join.size`)
	wantStatus(t, res, glovebox.StatusOK)
	if res.Value != int64(20) {
		t.Errorf("another session beside the hoarders: %v, want 20", res.Value)
	}
	res = eval(t, r, attempt(`File.write("/tmp/z", "z"); 20.times.map { File.open("/tmp/z") }.size.to_s`))
	if res.Value != "20" {
		t.Errorf("a fresh eval beside the hoarders: %v, want 20", res.Value)
	}
	for _, h := range hoarders {
		h.Close()
	}
}

// BenchmarkOpen1000 measures an eval that opens and closes a scratch
// file 1,000 times: the cost of the guard's path_open (and its deadline
// watchdog).
func BenchmarkOpen1000(b *testing.B) {
	r, err := rt.WithLimits(glovebox.Limits{})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		res := eval(b, r, `File.write("/tmp/a", "x"); 1000.times { File.open("/tmp/a") {} }; 1`)
		if res.Status != glovebox.StatusOK {
			b.Fatal(res.Status)
		}
	}
}

// Sessions keep the files their guests open (two host descriptors each:
// wasmtime's and the guard's mirror). However many sessions there are,
// the guests together must leave the host process descriptors of its own.
func TestAttackSessionsExhaustHostFDs(t *testing.T) {
	var lim unix.Rlimit
	must(t, unix.Getrlimit(unix.RLIMIT_NOFILE, &lim))
	low := lim
	low.Cur = 3000
	must(t, unix.Setrlimit(unix.RLIMIT_NOFILE, &low))
	defer unix.Setrlimit(unix.RLIMIT_NOFILE, &lim)
	f := newMountFixture(t, -1, glovebox.Limits{})
	refused := 0
	for range 12 { // 12 x 250 files = 6,000 host descriptors asked for
		s := newSession(t, f.r)
		res := sessionEval(t, s, `$a = []; begin; 250.times { $a << File.open("/ro/secret.txt") }; rescue SystemCallError => e; e.class.name; end`)
		wantStatus(t, res, glovebox.StatusOK)
		if res.Value != int64(250) {
			refused++
		}
	}
	var held []*os.File
	defer func() {
		for _, h := range held {
			h.Close()
		}
	}()
	for range 200 {
		h, err := os.Open(filepath.Join(f.ro, "secret.txt"))
		if err != nil {
			t.Fatalf("the host process ran out of descriptors (%v) after %d of 200 opens; %d sessions were refused files", err, len(held), refused)
		}
		held = append(held, h)
	}
	if refused == 0 {
		t.Fatal("no session was refused a file")
	}
}

// Raw descriptor numbers reach only what the guest was granted, and a
// read-only mount stays read-only through every descriptor trick.
func TestAttackRawFDsAndReadOnlyDescriptors(t *testing.T) {
	f := newMountFixture(t, -1, glovebox.Limits{})
	roBefore, outBefore := treeSum(t, f.ro), treeSum(t, f.outside)
	failed := func(got string) bool {
		return strings.HasPrefix(got, "Errno::") || got == "IOError" || got == "ArgumentError" || got == "NotImplementedError"
	}
	for name, code := range map[string]string{
		"for_fd preopen ro write": `IO.for_fd(4, "w", autoclose: false).syswrite("x")`,
		"for_fd preopen ro read":  `IO.for_fd(4, autoclose: false).sysread(10)`,
		"new fd 100":              `IO.new(100).sysread(1)`,
		"truncate ro fd":          `File.open("/ro/secret.txt") { |io| io.truncate(0) }`,
		"syswrite ro fd":          `File.open("/ro/secret.txt") { |io| io.syswrite("X") }`,
		"pwrite ro fd":            `File.open("/ro/secret.txt") { |io| io.pwrite("X", 0) }`,
		"append ro":               `File.open("/ro/secret.txt", File::RDONLY | File::APPEND) { |io| io.syswrite("X") }`,
		"wronly ro":               `File.open("/ro/secret.txt", File::WRONLY) { |io| io.syswrite("X") }`,
		"creat excl ro":           `File.open("/ro/n", File::WRONLY | File::CREAT | File::EXCL) { 1 }`,
		"utime ro dir":            `File.utime(0, 0, "/ro")`,
		"utime ro sub":            `File.utime(0, 0, "/ro/sub")`,
		"rename ro dir":           `File.rename("/ro/sub", "/ro/sub2")`,
		"unlink ro link":          `File.unlink("/ro/escape")`,
		"symlink in ro sub":       `File.symlink("x", "/ro/sub/x")`,
		"mkdir in ro sub":         `Dir.mkdir("/ro/sub/x")`,
		"renumber ro over rw":     `a = File.open("/ro/secret.txt"); b = File.open("/rw/w.txt", "r+"); b.reopen(a); b.syswrite("X")`,
		"realpath escape":         `File.realpath("/ro/escape")`,
		"glob through link":       `File.symlink("../outside", "/rw/ol"); Dir.glob("/rw/ol/*").join(",").then { |s| s.empty? ? raise(Errno::ENOENT) : s }`,
		"glob deep through link":  `Dir.glob("/rw/**/*.txt").select { |p| p.include?("outside") }.join(",").then { |s| s.empty? ? raise(Errno::ENOENT) : s }`,
		"chdir symlink up":        `File.symlink("..", "/rw/up"); Dir.chdir("/rw/up") { File.read("outside/outside.txt") }`,
		"chdir dotdot":            `Dir.chdir("/rw") { Dir.chdir("..") { File.read("outside/outside.txt") } }`,
		"open dir then relative":  `Dir.open("/rw") { |d| File.read("/rw/../outside/outside.txt") }`,
		"dir fd chdir":            `Dir.mkdir("/rw/cd"); d = Dir.new("/rw/cd"); d.chdir { File.read("../../outside/outside.txt") }`,
		"fchdir":                  `Dir.mkdir("/rw/fc"); d = Dir.new("/rw/fc"); Dir.fchdir(d.fileno) { File.read("../../outside/outside.txt") }`,
		"for_fd dir":              `d = Dir.open("/rw"); Dir.for_fd(d.fileno).children.join(",")`, // lists /rw: allowed
		"rmdir mount root":        `Dir.rmdir("/rw")`,
		"rmdir scratch root":      `Dir.rmdir("/tmp")`,
		"rename mount root":       `File.rename("/rw", "/rw2")`,
		"rename root into itself": `File.rename("/rw/.", "/rw/x")`,
		"unlink dot":              `File.unlink("/rw/.")`,
		"symlink loop":            `File.symlink("lp2", "/rw/lp1"); File.symlink("lp1", "/rw/lp2"); File.read("/rw/lp1")`,
		"many iovecs":             `File.open("/rw/iov", "w") { |io| io.write(*(["ab"] * 5000)) }; File.size("/rw/iov") == 10000 ? raise(Errno::E2BIG) : "short"`,
		"link symlink out":        `File.symlink("/etc/passwd", "/rw/pl"); File.link("/rw/pl", "/rw/hl"); File.read("/rw/hl")`,
		"rename symlink out":      `File.symlink("../outside/outside.txt", "/rw/rl"); File.rename("/rw/rl", "/rw/rl2"); File.read("/rw/rl2")`,
		"stat link out":           `File.symlink("/etc", "/rw/el"); File.stat("/rw/el/passwd").size.to_s`,
		"readlink out":            `File.symlink("/etc/shadow", "/rw/sl"); File.readlink("/rw/sl")`, // wasmtime refuses even the text
	} {
		t.Run(name, func(t *testing.T) {
			res := eval(t, f.r, attempt(code))
			got, _ := res.Value.(string)
			if res.Status != glovebox.StatusOK {
				t.Logf("status %s %v", res.Status, res.Error)
				return
			}
			if name == "for_fd dir" {
				if !strings.Contains(got, "w.txt") {
					t.Errorf("Dir.for_fd: %q", got)
				}
				return
			}
			if !failed(got) {
				t.Errorf("guest got %q", got)
			}
		})
	}
	if treeSum(t, f.ro) != roBefore {
		t.Error("the read-only mount changed on the host")
	}
	if treeSum(t, f.outside) != outBefore {
		t.Error("the directory outside the mounts changed")
	}
	if b, _ := os.ReadFile(filepath.Join(f.rw, "w.txt")); string(b) != "writable data" {
		t.Errorf("w.txt is %q", b)
	}
}

// Host descriptors: an eval opening files up to the cap leaves none
// behind, in a fresh VM or a session's.
func TestAttackHostFDs(t *testing.T) {
	f := newMountFixture(t, -1, glovebox.Limits{})
	count := func() int { ents, _ := os.ReadDir("/proc/self/fd"); return len(ents) }
	eval(t, f.r, `1`)
	before := count()
	for range 5 {
		res := eval(t, f.r, attempt(`a = []; 300.times { a << File.open("/ro/secret.txt"); a << Dir.open("/ro/sub") }; "no limit"`))
		if res.Value != "Errno::EMFILE" {
			t.Fatalf("opening 600 files: %v", res.Value)
		}
	}
	if after := count(); after > before+2 {
		t.Errorf("host descriptors %d before, %d after", before, after)
	}
	s := newSession(t, f.r)
	res := sessionEval(t, s, attempt(`$a = []; 200.times { $a << File.open("/ro/secret.txt") }; "ok"`))
	if res.Value != "ok" {
		t.Fatalf("%v", res.Value)
	}
	res = sessionEval(t, s, attempt(`200.times { $a << File.open("/ro/secret.txt") }; "no limit"`))
	if res.Value != "Errno::EMFILE" {
		t.Fatalf("a session past the cap: %v", res.Value)
	}
	res = sessionEval(t, s, attempt(`$a.each(&:close); $a = []; 250.times { $a << File.open("/rw/w.txt") }; $a.each(&:close); "ok"`))
	if res.Value != "ok" {
		t.Fatalf("closing did not release: %v", res.Value)
	}
	s.Close()
	if after := count(); after > before+2 {
		t.Errorf("host descriptors %d before, %d after the session", before, after)
	}
}
