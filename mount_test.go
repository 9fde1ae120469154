package glovebox_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox"
	"golang.org/x/sys/unix"
)

// mountFixture is a read-only and a writable host directory side by side
// with a directory no mount grants, and a Runtime mounting the first two.
type mountFixture struct {
	ro, rw, outside string
	r               *glovebox.Runtime
}

func newMountFixture(t *testing.T, pool int, l glovebox.Limits) *mountFixture {
	t.Helper()
	base := t.TempDir()
	f := &mountFixture{ro: filepath.Join(base, "ro"), rw: filepath.Join(base, "rw"), outside: filepath.Join(base, "outside")}
	for _, d := range []string{f.ro, f.rw, f.outside, filepath.Join(f.ro, "sub")} {
		must(t, os.MkdirAll(d, 0o755))
	}
	must(t, os.WriteFile(filepath.Join(f.ro, "secret.txt"), []byte("read-only data"), 0o644))
	must(t, os.WriteFile(filepath.Join(f.rw, "w.txt"), []byte("writable data"), 0o644))
	must(t, os.WriteFile(filepath.Join(f.outside, "outside.txt"), []byte("host secret"), 0o644))
	for name, when := range map[string]time.Time{
		"old.txt":    time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC),
		"future.txt": time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC),
	} {
		p := filepath.Join(f.ro, name)
		must(t, os.WriteFile(p, []byte(name), 0o644))
		must(t, os.Chtimes(p, when, when))
	}
	must(t, os.Chtimes(filepath.Join(f.ro, "sub"), time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC)))
	// A link the host left in the read-only mount, pointing out of it.
	must(t, os.Symlink("../outside/outside.txt", filepath.Join(f.ro, "escape")))
	f.r = newRuntime(t, glovebox.Config{PoolSize: pool, Limits: l, Mounts: []glovebox.Mount{
		{HostPath: f.ro, GuestPath: "/ro", Description: "reference data"},
		{HostPath: f.rw, GuestPath: "/rw", Writable: true},
	}})
	return f
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// treeSum describes a host tree: every entry's path, type, mode, size,
// modification time and content (or link target).
func treeSum(t *testing.T, root string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s %v %d %d\n", p, fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			fmt.Fprintln(h, target)
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			h.Write(b)
		}
		return nil
	})
	must(t, err)
	return fmt.Sprintf("%x", h.Sum(nil))
}

// attempt wraps a guest operation: "ok" (or its value, when it is a
// String) if it succeeded, else the exception's class name.
func attempt(code string) string {
	return `begin; v = (` + code + `); v.is_a?(String) ? v : "ok"; rescue SystemCallError, IOError, ArgumentError, NotImplementedError => e; e.class.name; end`
}

func TestMountEscapes(t *testing.T) {
	f := newMountFixture(t, -1, glovebox.Limits{})
	roBefore, outBefore := treeSum(t, f.ro), treeSum(t, f.outside)
	failed := func(got string) bool {
		return strings.HasPrefix(got, "Errno::") || got == "ArgumentError" || got == "IOError" || got == "NotImplementedError"
	}

	cases := []struct {
		name, code string
		want       func(string) bool // on the guest's answer
		desc       string
	}{
		{"read", `File.read("/ro/secret.txt")`, is("read-only data"), "reads work"},
		{"list", `Dir.children("/ro").sort.join(",")`, is("escape,future.txt,old.txt,secret.txt,sub"), "lists work"},
		// Read-only means no change of any kind.
		{"create", `File.write("/ro/new.txt", "x")`, failed, "no create"},
		{"write", `File.open("/ro/secret.txt", "r+") { |io| io.write("X") }`, failed, "no write"},
		{"append", `File.open("/ro/secret.txt", "a") { |io| io.write("X") }`, failed, "no append"},
		{"overwrite", `File.write("/ro/secret.txt", "x")`, failed, "no overwrite"},
		{"truncate-only open", `File.open("/ro/secret.txt", File::RDONLY | File::TRUNC) { 1 }`, is("Errno::EROFS"), "GHSA-2r75-cxrj-cmph"},
		{"truncate", `File.truncate("/ro/secret.txt", 0)`, failed, "no truncate"},
		{"rename within", `File.rename("/ro/secret.txt", "/ro/moved.txt")`, failed, "no rename"},
		{"link within", `File.link("/ro/secret.txt", "/ro/l.txt")`, failed, "no link"},
		{"symlink within", `File.symlink("secret.txt", "/ro/s")`, failed, "no symlink"},
		{"chmod", `File.chmod(0o777, "/ro/secret.txt")`, failed, "no chmod"},
		{"utime", `File.utime(Time.at(0), Time.at(0), "/ro/secret.txt")`, failed, "no time change"},
		{"delete", `File.delete("/ro/secret.txt")`, failed, "no delete"},
		{"mkdir", `Dir.mkdir("/ro/d")`, failed, "no mkdir"},
		{"rmdir", `Dir.rmdir("/ro/sub")`, failed, "no rmdir"},
		// Across mounts (GHSA-4ch3-9j33-3pmj).
		{"link ro into rw", `File.link("/ro/secret.txt", "/rw/l.txt")`, is("Errno::EXDEV"), "hard link of a read-only file into a writable mount"},
		{"link rw into ro", `File.link("/rw/w.txt", "/ro/l.txt")`, is("Errno::EXDEV"), "hard link of a writable file into a read-only mount"},
		{"rename out of ro", `File.rename("/ro/secret.txt", "/rw/s.txt")`, is("Errno::EXDEV"), "rename out of a read-only mount"},
		{"rename into ro", `File.rename("/rw/w.txt", "/ro/w.txt")`, is("Errno::EXDEV"), "rename into a read-only mount"},
		// Paths that try to leave.
		{"dotdot", `File.read("/ro/../outside/outside.txt")`, failed, ".. out of a mount"},
		{"dotdot deep", `File.read("/rw/../../../../../../etc/passwd")`, failed, ".. to the host root"},
		{"relative dotdot", `Dir.chdir("/ro") { File.read("../outside/outside.txt") }`, failed, "relative .. after chdir"},
		{"host root", `File.read("/etc/passwd")`, failed, "no host root"},
		{"host symlink out", `File.read("/ro/escape")`, failed, "a host-made link out is refused"},
		{"abs symlink", `File.symlink("/etc/passwd", "/rw/abs"); File.read("/rw/abs")`, failed, "absolute symlink out"},
		{"rel symlink", `File.symlink("../outside/outside.txt", "/rw/rel"); File.read("/rw/rel")`, failed, "relative symlink out"},
		{"symlink to ro", `File.symlink("../ro/secret.txt", "/rw/toro"); File.write("/rw/toro", "x")`, failed, "symlink from rw to ro"},
		{"symlink stat", `File.symlink("/", "/rw/root"); File.stat("/rw/root").directory?.to_s`, failed, "stat through a link out"},
		{"symlink dir", `File.symlink("../outside", "/rw/od"); Dir.children("/rw/od").join`, failed, "listing through a link out"},
		{"trailing slash file", `File.read("/ro/secret.txt/")`, failed, "trailing slash on a file"},
		{"trailing slash create", `File.write("/rw/new.txt/", "x")`, failed, "trailing slash on create"},
		{"nul", `File.read("/ro/secret.txt\0/../../outside")`, is("ArgumentError"), "NUL in a path"},
		{"long name", `File.read("/ro/" + "a" * 5000)`, failed, "very long name"},
		{"long path", `File.read("/ro/" + "a/" * 3000 + "x")`, failed, "very long path"},
		// Extreme times (GHSA-j2g9-4prp-pf6h) must not take the host down.
		{"old mtime", `File.mtime("/ro/old.txt").year.to_s`, is("1970"), "a file dated 1900"},
		{"old read", `File.read("/ro/old.txt")`, is("old.txt"), "reading a file dated 1900"},
		{"future stat", `File.stat("/ro/future.txt").size.to_s`, is("10"), "a file dated 9999"},
		{"future read", `File.read("/ro/future.txt")`, is("future.txt"), "reading a file dated 9999"},
		{"old dir", `File.stat("/ro/sub").directory?.to_s`, is("true"), "a directory dated 1900"},
		{"glob stat", `Dir.glob("/ro/*").map { |p| File.lstat(p).mtime.year }.min.to_s`, is("1970"), "stat of every entry"},
		// The writable mount does work.
		{"rw write", `File.write("/rw/new.txt", "hello"); File.read("/rw/new.txt")`, is("hello"), "writes work"},
		{"rw link within", `File.link("/rw/w.txt", "/rw/w2.txt"); File.read("/rw/w2.txt")`, is("writable data"), "links inside one mount work"},
		{"rw rename within", `File.rename("/rw/new.txt", "/rw/renamed.txt"); File.read("/rw/renamed.txt")`, is("hello"), "renames inside one mount work"},
		{"rw symlink within", `File.symlink("w.txt", "/rw/sl"); File.read("/rw/sl")`, is("writable data"), "links inside one mount work"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := eval(t, f.r, attempt(c.code))
			wantStatus(t, res, glovebox.StatusOK)
			got, _ := res.Value.(string)
			if !c.want(got) {
				t.Errorf("%s: guest got %q", c.desc, got)
			}
		})
	}
	if treeSum(t, f.ro) != roBefore {
		t.Error("the read-only mount changed on the host")
	}
	if treeSum(t, f.outside) != outBefore {
		t.Error("the directory outside the mounts changed")
	}
	if b, _ := os.ReadFile(filepath.Join(f.rw, "renamed.txt")); string(b) != "hello" {
		t.Errorf("the writable mount's file is %q on the host", b)
	}
}

func is(want string) func(string) bool { return func(got string) bool { return got == want } }

func TestMountHostPathProblems(t *testing.T) {
	f := newMountFixture(t, 1, glovebox.Limits{})
	wantStatus(t, eval(t, f.r, `File.read("/rw/w.txt")`), glovebox.StatusOK)

	moved := f.rw + ".moved"
	must(t, os.Rename(f.rw, moved))
	res := eval(t, f.r, `File.read("/rw/w.txt")`)
	wantStatus(t, res, glovebox.StatusSandboxError)
	if !strings.Contains(res.Error.Message, f.rw) || !strings.Contains(res.Error.Message, "/rw") {
		t.Errorf("message %q does not name the mount", res.Error.Message)
	}

	must(t, os.WriteFile(f.rw, []byte("a file"), 0o644))
	res = eval(t, f.r, `1`)
	wantStatus(t, res, glovebox.StatusSandboxError)
	if !strings.Contains(res.Error.Message, "not a directory") {
		t.Errorf("message %q", res.Error.Message)
	}

	// Put a different directory back: the eval sees it, not the old one a
	// pooled VM had open.
	must(t, os.Remove(f.rw))
	must(t, os.Mkdir(f.rw, 0o755))
	must(t, os.WriteFile(filepath.Join(f.rw, "w.txt"), []byte("new dir"), 0o644))
	res = eval(t, f.r, `File.read("/rw/w.txt")`)
	wantStatus(t, res, glovebox.StatusOK)
	if res.Value != "new dir" {
		t.Errorf("read %v", res.Value)
	}
}

func TestMountConfigRules(t *testing.T) {
	dir := t.TempDir()
	m := func(guest string) glovebox.Mount { return glovebox.Mount{HostPath: dir, GuestPath: guest} }
	var many []glovebox.Mount
	for i := range glovebox.MaxMounts + 1 {
		many = append(many, m(fmt.Sprintf("/m%d", i)))
	}
	cases := map[string][]glovebox.Mount{
		"relative":       {m("data")},
		"dot":            {m("/data/.")},
		"dotdot":         {m("/data/../etc")},
		"double slash":   {m("//data")},
		"trailing slash": {m("/data/")},
		"root":           {m("/")},
		"empty":          {m("")},
		"nul":            {m("/da\x00ta")},
		"scratch":        {m("/tmp")},
		"under scratch":  {m("/tmp/x")},
		"usr":            {m("/usr")},
		"under usr":      {m("/usr/local/lib/ruby")},
		"duplicate":      {m("/data"), m("/data")},
		"nested":         {m("/data"), m("/data/sub")},
		"too many":       many,
		"no host":        {{GuestPath: "/data"}},
	}
	for name, ms := range cases {
		_, err := glovebox.New(context.Background(), glovebox.Config{Mounts: ms, PoolSize: -1})
		if !errors.Is(err, glovebox.ErrInvalidMount) {
			t.Errorf("%s: err %v, want ErrInvalidMount", name, err)
		}
	}
	// The limit itself is fine.
	r := newRuntime(t, glovebox.Config{Mounts: many[:glovebox.MaxMounts], PoolSize: -1})
	res := eval(t, r, `Dir.exist?("/m15")`)
	wantStatus(t, res, glovebox.StatusOK)
	if res.Value != true {
		t.Error("the 16th mount is not visible")
	}
}

// A FIFO swapped in under a name the guard has just checked (a host
// process or another VM flipping a symbolic link between a regular file
// and a FIFO) must not hold the eval past its deadline, nor Close.
func TestAttackFIFOSwapRace(t *testing.T) {
	dir := t.TempDir()
	must(t, unix.Mkfifo(filepath.Join(dir, "p"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "r"), []byte("x"), 0o644))
	must(t, os.Symlink("r", filepath.Join(dir, "l")))
	must(t, os.Symlink("p", filepath.Join(dir, "lp")))
	must(t, os.Symlink("r", filepath.Join(dir, "lr")))
	stop := make(chan struct{})
	var flips atomic.Int64
	go func() { // the attacker: flip l between the file and the FIFO
		for {
			select {
			case <-stop:
				return
			default:
			}
			os.Link(filepath.Join(dir, "lp"), filepath.Join(dir, "tmp"))
			os.Rename(filepath.Join(dir, "tmp"), filepath.Join(dir, "l"))
			os.Link(filepath.Join(dir, "lr"), filepath.Join(dir, "tmp"))
			os.Rename(filepath.Join(dir, "tmp"), filepath.Join(dir, "l"))
			flips.Add(1)
		}
	}()
	// Whatever happens, release a blocked host thread before the test ends.
	release := func() {
		for range 200 {
			if fd, err := unix.Open(filepath.Join(dir, "p"), unix.O_RDWR|unix.O_NONBLOCK, 0); err == nil {
				unix.Close(fd)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	r, err := glovebox.New(context.Background(), glovebox.Config{PoolSize: -1, Limits: glovebox.Limits{Timeout: 2 * time.Second},
		Mounts: []glovebox.Mount{{HostPath: dir, GuestPath: "/data"}}})
	must(t, err)
	done := make(chan *glovebox.Result, 1)
	start := time.Now()
	go func() {
		res, _ := r.Eval(context.Background(), `n = 0; loop { begin; File.open("/data/l") { |f| n += 1 }; rescue SystemCallError; end }`)
		done <- res
	}()
	select {
	case res := <-done:
		t.Logf("eval ended after %v: %s (%d flips)", time.Since(start).Round(time.Millisecond), res.Status, flips.Load())
		if res.Status != glovebox.StatusTimeout {
			t.Errorf("status %s, want timeout; %+v", res.Status, res.Error)
		}
	case <-time.After(20 * time.Second):
		close(stop)
		if os.Getenv("GB_DEBUG") != "" {
			ts, _ := filepath.Glob("/proc/self/task/*")
			for _, d := range ts {
				sc, _ := os.ReadFile(d + "/syscall")
				wc, _ := os.ReadFile(d + "/wchan")
				st, _ := os.ReadFile(d + "/status")
				var cgt, blk string
				for _, l := range strings.Split(string(st), "\n") {
					if strings.HasPrefix(l, "SigCgt") || strings.HasPrefix(l, "SigBlk") {
						cgt += l + " "
					}
				}
				if !strings.HasPrefix(string(sc), "202 ") {
					t.Logf("%s %q %s %s %s", d, sc, wc, cgt, blk)
				}
			}
		}
		release()
		<-done
		r.Close()
		t.Fatalf("the eval was still running 20 s after its 2 s deadline: a host call blocked on the FIFO")
	}
	close(stop)
	closed := make(chan struct{})
	go func() { r.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(20 * time.Second):
		release()
		<-closed
		t.Fatal("Close hung on a VM blocked on the FIFO")
	}
}

// A FIFO the host left in a mount must not block the host thread that
// opens it: the eval ends by its limits and the process goes on.
func TestAttackFIFOInMount(t *testing.T) {
	dir := t.TempDir()
	must(t, unix.Mkfifo(filepath.Join(dir, "pipe"), 0o644))
	r := newRuntime(t, glovebox.Config{PoolSize: -1, Limits: glovebox.Limits{Timeout: 2e9},
		Mounts: []glovebox.Mount{{HostPath: dir, GuestPath: "/data"}}})
	done := make(chan *glovebox.Result, 1)
	go func() {
		res, _ := r.Eval(context.Background(), attempt(`File.read("/data/pipe")`))
		done <- res
	}()
	select {
	case res := <-done:
		wantStatus(t, res, glovebox.StatusOK)
		if res.Value != "Errno::EACCES" {
			t.Fatalf("opening a FIFO: %v, want Errno::EACCES", res.Value)
		}
	case <-time.After(10 * time.Second):
		// Unblock the host thread so the test process can finish.
		if f, err := os.OpenFile(filepath.Join(dir, "pipe"), os.O_WRONLY, 0); err == nil {
			f.Close()
		}
		<-done
		t.Fatal("opening a FIFO in a mount blocked the eval past its timeout")
	}
}

// A session's VM keeps its mounts' host directories open. When the host
// replaces a mount's directory (moves it away and makes a new one at the
// same path), the session must not go on writing into the moved one:
// pooled VMs are sent away in that case, and so is a session's, with the
// reset reported.
func TestAttackSessionMountReplaced(t *testing.T) {
	f := newMountFixture(t, -1, glovebox.Limits{})
	s := newSession(t, f.r)
	wantStatus(t, sessionEval(t, s, `x = 1; File.write("/rw/a", "1")`), glovebox.StatusOK)
	moved := f.rw + ".archived"
	must(t, os.Rename(f.rw, moved))
	must(t, os.Mkdir(f.rw, 0o755))
	res := sessionEval(t, s, `File.write("/rw/b", "2"); defined?(x).inspect`)
	wantStatus(t, res, glovebox.StatusOK)
	if _, err := os.Stat(filepath.Join(moved, "b")); err == nil {
		t.Fatal("the session wrote into the mount directory the host had moved away")
	}
	if _, err := os.Stat(filepath.Join(f.rw, "b")); err != nil {
		t.Fatalf("the write did not reach the mount's directory: %v", err)
	}
	if !res.SessionReset || res.Value != "nil" {
		t.Fatalf("reset %v, state %v: a fresh VM must be reported", res.SessionReset, res.Value)
	}
}

// Listing a big directory in a mount must not hold the host thread:
// wasmtime's fd_readdir re-reads the whole directory on every call, so
// listing 100,000 entries took minutes inside host calls no deadline
// reaches (a guest can build such a directory in a writable mount, 1,000
// files an eval).
func TestAttackBigDirectoryListing(t *testing.T) {
	dir := t.TempDir()
	for i := range 100_000 {
		fd, err := unix.Open(filepath.Join(dir, fmt.Sprintf("f%06d", i)), unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		must(t, err)
		unix.Close(fd)
	}
	must(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	must(t, os.Symlink("f000001", filepath.Join(dir, "link")))
	r := newRuntime(t, glovebox.Config{PoolSize: -1, Limits: glovebox.Limits{Timeout: 60 * time.Second},
		Mounts: []glovebox.Mount{{HostPath: dir, GuestPath: "/big"}}})
	res := eval(t, r, `c = Dir.children("/big"); [c.size, c.uniq.size, c.include?("f099999"), c.include?(".."), Dir.each_child("/big").count,
		Dir.glob("/big/*").size, File.directory?("/big/sub"), Dir.entries("/big").size,
		Dir.open("/big") { |d| 5000.times { d.read }; pos = d.tell; a = d.read; 10.times { d.read }; d.seek(pos); b = d.read; d.rewind; c = d.read; [a == b, pos < 2**31, c == "." || c == ".." || c.start_with?("f", "sub", "link")] }]`)
	wantStatus(t, res, glovebox.StatusOK)
	if !equalValue(res.Value, []any{int64(100_002), int64(100_002), true, false, int64(100_002), int64(100_002), true, int64(100_004), []any{true, true, true}}) {
		t.Fatalf("listing: %v", res.Value)
	}
	t.Logf("six listings of 100,002 entries: %v", res.Duration)
	// The scratch directory (tmpfs when /dev/shm is there), listed while
	// it changes, and with rewind.
	res = eval(t, r, `900.times { |i| File.write("/tmp/n#{i}", "") }
		d = Dir.new("/tmp"); 3.times { d.read }; pos = d.tell; rest = d.each_child.count; d.rewind; all = d.children.size; d.seek(pos); again = d.each_child.count; raise "seek: #{rest} #{again} #{pos}" unless rest == again && pos < 2**31
		Dir.each_child("/tmp") { |n| File.delete("/tmp/" + n) }
		[all, Dir.children("/tmp").size, Dir.empty?("/tmp")]`)
	wantStatus(t, res, glovebox.StatusOK)
	if !equalValue(res.Value, []any{int64(900), int64(0), true}) {
		t.Fatalf("scratch listing: %v", res.Value)
	}
}

// Two sessions share a writable mount: one keeps swapping a directory for
// a symbolic link out of the mount while the other reads and writes
// through that name. Nothing outside may be read or changed.
func TestAttackSymlinkRaceBetweenSessions(t *testing.T) {
	f := newMountFixture(t, -1, glovebox.Limits{Timeout: 20 * time.Second})
	outBefore := treeSum(t, f.outside)
	// The guest may not make links that lead out of its mount: the host
	// leaves them there, as a careless host program would.
	must(t, os.Symlink("/", filepath.Join(f.rw, "lroot")))
	must(t, os.Symlink("../outside", filepath.Join(f.rw, "lout")))
	swapper, victim := newSession(t, f.r), newSession(t, f.r)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		res := sessionEval(t, swapper, `
			Dir.mkdir("/rw/real") rescue nil
			File.write("/rw/real/outside.txt", "inside")
			t0 = Time.now
			n = 0
			while Time.now - t0 < 2
				%w[real lout lroot].each do |x|
					File.rename("/rw/#{x}", "/rw/d")
					File.rename("/rw/d", "/rw/#{x}")
				end
				n += 1
			end
			n`)
		if res.Status != glovebox.StatusOK {
			t.Errorf("swapper: %s %v", res.Status, res.Error)
		}
	}()
	res := sessionEval(t, victim, `
		seen = []
		t0 = Time.now
		while Time.now - t0 < 2
			[-> { File.read("/rw/d/outside.txt") }, -> { File.read("/rw/d/etc/hostname") },
			 -> { File.stat("/rw/d/outside.txt").size.to_s }, -> { File.write("/rw/d/outside.txt", "inside"); "w" },
			 -> { File.open("/rw/d/created", "w") { }; "c" }, -> { Dir.children("/rw/d").sort.join(",") },
			 -> { File.realpath("/rw/d/outside.txt") }].each do |op|
				begin
					seen << op.call
				rescue SystemCallError, IOError
				end
			end
		end
		seen.uniq`)
	wg.Wait()
	wantStatus(t, res, glovebox.StatusOK)
	for _, v := range res.Value.([]any) {
		s, _ := v.(string)
		if strings.Contains(s, "host secret") || strings.Contains(s, "etc") && !strings.HasPrefix(s, "/rw") {
			t.Errorf("the victim saw %q", s)
		}
	}
	t.Logf("victim saw %v", res.Value)
	for _, p := range []string{"/created", "/outside.txt"} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s was made on the host through the link to /", p)
		}
	}
	if treeSum(t, f.outside) != outBefore {
		t.Error("the directory outside the mounts changed")
	}
}

// Odd files a host program left in a mount: sockets, devices, extreme
// times (set on tmpfs, which keeps 64-bit seconds). Stat, list and open
// answer without taking the host down or blocking it.
func TestAttackOddFilesInMount(t *testing.T) {
	base := t.TempDir()
	if _, err := os.Stat("/dev/shm"); err == nil {
		if d, err := os.MkdirTemp("/dev/shm", "attack5-"); err == nil {
			base = d
			t.Cleanup(func() { os.RemoveAll(d) })
		}
	}
	l, err := net.Listen("unix", filepath.Join(base, "sock"))
	must(t, err)
	defer l.Close()
	must(t, os.WriteFile(filepath.Join(base, "far"), []byte("far"), 0o644))
	far := unix.Timespec{Sec: 1 << 62}
	must(t, unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(base, "far"), []unix.Timespec{far, far}, 0))
	if err := unix.Mknod(filepath.Join(base, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Logf("no device node: %v", err)
	}
	if err := unix.Mknod(filepath.Join(base, "zero"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 5))); err != nil {
		t.Logf("no device node: %v", err)
	}
	r := newRuntime(t, glovebox.Config{PoolSize: -1, Limits: glovebox.Limits{Timeout: 3 * time.Second},
		Mounts: []glovebox.Mount{{HostPath: base, GuestPath: "/odd", Writable: true}}})
	for name, code := range map[string]string{
		"list":        `Dir.children("/odd").sort.join(",")`,
		"stat all":    `Dir.children("/odd").sort.map { |n| s = File.lstat("/odd/" + n); "#{n}:#{s.ftype}:#{s.mtime.year}" }.join(",")`,
		"glob":        `Dir.glob("/odd/**/*").size.to_s`,
		"far mtime":   `File.mtime("/odd/far").year.to_s`,
		"far read":    `File.read("/odd/far")`,
		"open sock":   `File.read("/odd/sock")`,
		"open zero":   `File.open("/odd/zero") { |io| io.read(10).size.to_s }`,
		"write null":  `File.write("/odd/null", "x" * 1000)`,
		"utime far":   `File.utime(Time.at(1 << 40), Time.at(1 << 40), "/odd/far"); File.mtime("/odd/far").year.to_s`,
		"utime neg":   `File.utime(Time.at(-(1 << 40)), Time.at(-(1 << 40)), "/odd/far"); File.mtime("/odd/far").year.to_s`,
		"utime zero":  `File.utime(Time.at(0), Time.at(0), "/odd/far"); File.mtime("/odd/far").year.to_s`,
		"fd stat far": `File.open("/odd/far") { |io| io.stat.mtime.year.to_s }`,
	} {
		t.Run(name, func(t *testing.T) {
			res := eval(t, r, attempt(code))
			t.Logf("%s: %s %v %v", name, res.Status, res.Value, res.Error)
			if res.Status != glovebox.StatusOK {
				t.Errorf("status %s", res.Status)
			}
			if s, _ := res.Value.(string); strings.HasPrefix(name, "open") || name == "write null" {
				if s != "Errno::EACCES" {
					t.Errorf("opening a special file: %q", s)
				}
			}
		})
	}
}

// Links a host program left in a writable mount, pointing out of it
// (absolute or relative): no read, write, create, truncate, stat or
// listing goes through them. (The guest itself cannot make absolute
// links: wasmtime refuses them.)
func TestAttackHostLinksInWritableMount(t *testing.T) {
	f := newMountFixture(t, -1, glovebox.Limits{})
	must(t, os.Symlink(filepath.Join(f.outside, "outside.txt"), filepath.Join(f.rw, "abs")))
	must(t, os.Symlink("../outside/outside.txt", filepath.Join(f.rw, "rel")))
	must(t, os.Symlink(filepath.Join(f.outside, "new.txt"), filepath.Join(f.rw, "dangling")))
	must(t, os.Symlink(f.outside, filepath.Join(f.rw, "absdir")))
	outBefore := treeSum(t, f.outside)
	for name, code := range map[string]string{
		"read abs":       `File.read("/rw/abs")`,
		"read rel":       `File.read("/rw/rel")`,
		"write abs":      `File.write("/rw/abs", "x")`,
		"append rel":     `File.open("/rw/rel", "a") { |io| io.write("x") }`,
		"truncate abs":   `File.truncate("/rw/abs", 0)`,
		"create through": `File.write("/rw/dangling", "x")`,
		"stat abs":       `File.stat("/rw/abs").size.to_s`,
		"list absdir":    `Dir.children("/rw/absdir").join(",")`,
		"into absdir":    `File.write("/rw/absdir/made.txt", "x")`,
		"utime abs":      `File.utime(0, 0, "/rw/abs")`,
		"mkdir absdir":   `Dir.mkdir("/rw/absdir/d")`,
		"link from abs":  `File.link("/rw/abs", "/rw/hard"); File.read("/rw/hard")`,
		"rename abs":     `File.rename("/rw/absdir/outside.txt", "/rw/stolen")`,
		"unlink through": `File.unlink("/rw/absdir/outside.txt")`,
	} {
		t.Run(name, func(t *testing.T) {
			res := eval(t, f.r, attempt(code))
			wantStatus(t, res, glovebox.StatusOK)
			if s, _ := res.Value.(string); !strings.HasPrefix(s, "Errno::") {
				t.Errorf("guest got %q", s)
			}
		})
	}
	if treeSum(t, f.outside) != outBefore {
		t.Error("the directory outside the mounts changed")
	}
}

// TestNewRefusesMissingMountDir: a mount whose host directory is missing
// or a file fails New with ErrInvalidMount.
func TestNewRefusesMissingMountDir(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	os.WriteFile(file, nil, 0o644)
	for _, host := range []string{filepath.Join(dir, "missing"), file} {
		_, err := glovebox.New(context.Background(), glovebox.Config{Mounts: []glovebox.Mount{{HostPath: host, GuestPath: "/data"}}})
		if !errors.Is(err, glovebox.ErrInvalidMount) || !strings.Contains(err.Error(), host) {
			t.Errorf("%s: %v", host, err)
		}
	}
}

// Symbolic links whose targets stay inside the guest's own writable tree
// work, absolute or relative, and read back as given; on the host they
// hold relative targets that stay inside the mount too.
func TestSymlinkInsideMount(t *testing.T) {
	f := newMountFixture(t, -1, glovebox.Limits{})
	for _, c := range []struct{ name, code, want string }{
		{"absolute in scratch", `Dir.mkdir("/tmp/d"); File.write("/tmp/d/a", "1"); File.symlink("/tmp/d/a", "/tmp/d/l"); [File.read("/tmp/d/l"), File.readlink("/tmp/d/l"), File.lstat("/tmp/d/l").size].join(" ")`, "1 /tmp/d/a 8"},
		{"absolute in mount", `Dir.mkdir("/rw/d"); File.symlink("/rw/w.txt", "/rw/d/l"); [File.read("/rw/d/l"), File.readlink("/rw/d/l"), File.realpath("/rw/d/l")].join(" ")`, "writable data /rw/w.txt /rw/w.txt"},
		{"absolute directory", `Dir.mkdir("/rw/e"); File.symlink("/rw", "/rw/e/top"); File.read("/rw/e/top/w.txt")`, "writable data"},
		{"absolute with dots", `Dir.mkdir("/rw/g"); File.symlink("/rw/g/../w.txt", "/rw/g/l"); File.read("/rw/g/l")`, "writable data"},
		{"absolute root of tree", `File.symlink("/tmp", "/tmp/self"); Dir.children("/tmp/self").sort.join(",")`, "self"},
		{"relative", `File.write("/tmp/r", "r"); File.symlink("r", "/tmp/lr"); [File.read("/tmp/lr"), File.readlink("/tmp/lr")].join(" ")`, "r r"},
		{"relative up inside", `Dir.mkdir("/tmp/u"); File.write("/tmp/t", "t"); File.symlink("../t", "/tmp/u/l"); File.read("/tmp/u/l")`, "t"},
		{"chain absolute", `File.write("/tmp/f", "f"); File.symlink("/tmp/f", "/tmp/b"); File.symlink("/tmp/b", "/tmp/a"); [File.read("/tmp/a"), File.realpath("/tmp/a")].join(" ")`, "f /tmp/f"},
		{"chain mixed", `File.symlink("w.txt", "/rw/m2"); Dir.mkdir("/rw/h"); File.symlink("/rw/m2", "/rw/h/m1"); File.read("/rw/h/m1")`, "writable data"},
		{"dangling then made", `File.symlink("/tmp/later", "/tmp/dl"); File.write("/tmp/dl", "via link"); File.read("/tmp/later")`, "via link"},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := eval(t, f.r, attempt(c.code))
			wantStatus(t, res, glovebox.StatusOK)
			if res.Value != c.want {
				t.Errorf("got %v, want %q", res.Value, c.want)
			}
		})
	}
	for link, want := range map[string]string{"d/l": "../w.txt", "e/top": "..", "h/m1": "../m2"} {
		if got, err := os.Readlink(filepath.Join(f.rw, link)); err != nil || got != want {
			t.Errorf("the host link %s holds %q (%v), want %q", link, got, err, want)
		}
	}
}

// A link that would lead outside its mount is refused (EPERM), whatever
// the spelling; and a link made inside that leads out once its directory
// moved is refused where it is followed.
func TestSymlinkOutsideRefused(t *testing.T) {
	f := newMountFixture(t, -1, glovebox.Limits{})
	base := filepath.Dir(f.rw)
	must(t, os.WriteFile(filepath.Join(base, "w.txt"), []byte("host secret"), 0o644))
	for _, c := range []struct{ name, code string }{
		{"absolute out", `File.symlink("/etc/passwd", "/rw/x1")`},
		{"absolute dots out", `File.symlink("/rw/../etc/passwd", "/rw/x2")`},
		{"absolute scratch dots out", `File.symlink("/tmp/../../etc", "/tmp/x3")`},
		{"absolute to other mount", `File.symlink("/ro/secret.txt", "/rw/x4")`},
		{"absolute to scratch from mount", `File.symlink("/tmp", "/rw/x5")`},
		{"absolute to mount from scratch", `File.symlink("/rw/w.txt", "/tmp/x6")`},
		{"relative up", `File.symlink("../outside/outside.txt", "/rw/x7")`},
		{"relative up and back", `File.symlink("../rw/w.txt", "/rw/x8")`},
		{"relative dots", `File.symlink("a/../../x", "/rw/x9")`},
		{"relative parent", `File.symlink("..", "/rw/x10")`},
		{"nested up", `Dir.mkdir("/rw/n"); File.symlink("../../w.txt", "/rw/n/x11")`},
		{"deep dots", `Dir.mkdir("/tmp/n"); File.symlink("./.././../x", "/tmp/n/x12")`},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := eval(t, f.r, attempt(c.code))
			wantStatus(t, res, glovebox.StatusOK)
			if res.Value != "Errno::EPERM" {
				t.Errorf("got %v, want Errno::EPERM", res.Value)
			}
		})
	}
	for _, n := range []string{"x1", "x2", "x4", "x5", "x7", "x8", "x9", "x10", "n/x11"} {
		if _, err := os.Lstat(filepath.Join(f.rw, n)); err == nil {
			t.Errorf("a refused link %s was made on the host", n)
		}
	}
	// Made inside, then its directory moved up a level: followed, it would
	// lead to the host's file next to the mount.
	res := eval(t, f.r, attempt(`Dir.mkdir("/rw/a"); Dir.mkdir("/rw/a/b"); File.symlink("../../w.txt", "/rw/a/b/l"); r = File.read("/rw/a/b/l"); File.rename("/rw/a/b", "/rw/b"); r + "|" + File.read("/rw/b/l")`))
	wantStatus(t, res, glovebox.StatusOK)
	if res.Value == "writable data|host secret" || res.Value == "ok" {
		t.Fatalf("read through a moved link: %v", res.Value)
	}
	if s, _ := res.Value.(string); len(s) < 7 || s[:7] != "Errno::" {
		t.Fatalf("got %v, want an Errno", res.Value)
	}
	// A read-only mount takes no links at all.
	res = eval(t, f.r, attempt(`File.symlink("secret.txt", "/ro/l")`))
	if s, _ := res.Value.(string); len(s) < 7 || s[:7] != "Errno::" {
		t.Fatalf("a link in a read-only mount: %v", res.Value)
	}
}
