package glovebox_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gloveboxhq/glovebox"
)

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

// Scratch directories: a deep tree and many entries are wiped before the
// directory is handed out again; nothing is left after Close, with
// sessions still open.
func TestAttackScratchLeftovers(t *testing.T) {
	tmp := t.TempDir()
	r, err := glovebox.New(context.Background(), glovebox.Config{PoolSize: 2, ScratchDir: tmp})
	must(t, err)
	// wasi-libc keeps paths under 4 KiB; chains of 15 directories with
	// 250-byte names are moved into each other until the tree is 960 deep
	// (240 KB of path).
	deep := `
		n = "d" * 250
		chain = ->(top) { p = top; Dir.mkdir(p); 14.times { p += "/" + n; Dir.mkdir(p) }; p }
		ends = (0...64).map { |i| chain.("/tmp/c#{i}") }
		File.write(ends[63] + "/leak", "secret")
		63.downto(1) { |i| File.rename("/tmp/c#{i}", ends[i - 1] + "/c#{i}") }
		Dir.children("/tmp")`
	res := eval(t, r, deep)
	wantStatus(t, res, glovebox.StatusOK)
	t.Logf("deep path length %v", res.Value)
	for range 6 {
		res = eval(t, r, `Dir.glob("/tmp/**/*").size`)
		wantStatus(t, res, glovebox.StatusOK)
		if res.Value != int64(0) {
			t.Fatalf("a later eval saw %v entries in /tmp", res.Value)
		}
	}
	var ss []*glovebox.Session
	for range 3 {
		s, err := r.NewSession()
		must(t, err)
		res, err := s.Eval(context.Background(), `File.write("/tmp/s", "x"); $f = File.open("/tmp/k", "w"); 1`)
		must(t, err)
		wantStatus(t, res, glovebox.StatusOK)
		ss = append(ss, s)
	}
	r.Close()
	left, _ := os.ReadDir(privateScratch(tmp))
	if len(left) != 0 {
		t.Errorf("left after Close: %v", left)
	}
	for _, s := range ss {
		s.Close()
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

// Closing a session or its Runtime while an eval runs: the eval ends, the
// closes return, and later evals say ErrClosed.
func TestAttackCloseDuringEval(t *testing.T) {
	var ts glovebox.Toolset
	must(t, ts.Func("nap", func(ctx context.Context) bool { time.Sleep(300 * time.Millisecond); return true }))
	for _, withTools := range []bool{false, true} {
		cfg := glovebox.Config{PoolSize: -1}
		code := `t0 = Time.now; x = 0; x += 1 while Time.now - t0 < 0.5; x`
		if withTools {
			cfg.Tools = &ts
			code = `nap; nap; 1`
		}
		r := newRuntime(t, cfg)
		s, err := r.NewSession()
		must(t, err)
		sessionEval(t, s, `y = 1`)
		var wg sync.WaitGroup
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := s.Eval(context.Background(), code)
				if err == nil && res.Status != glovebox.StatusOK {
					t.Errorf("status %s %v", res.Status, res.Error)
				}
			}()
		}
		time.Sleep(100 * time.Millisecond)
		wg.Add(2)
		go func() { defer wg.Done(); s.Close() }()
		go func() { defer wg.Done(); r.Close() }()
		wg.Wait()
		if _, err := s.Eval(context.Background(), `1`); err == nil {
			t.Error("eval after close worked")
		}
	}
}

// A registered profile cannot be changed through anything the caller
// kept: the Config it registered, the pointer Derive's change received,
// the Toolset, or a Runtime made from it.
func TestAttackProfileAliasing(t *testing.T) {
	dir := t.TempDir()
	var ts glovebox.Toolset
	must(t, ts.Func("orders", func() int { return 1 }))
	cfg := glovebox.Config{Mounts: []glovebox.Mount{{HostPath: dir, GuestPath: "/data"}}, Tools: &ts, PoolSize: -1}
	var p glovebox.Profiles
	must(t, p.Register("a", cfg))
	fp := cfg.Fingerprint()
	var kept *glovebox.Config
	must(t, p.Derive("b", "a", func(c *glovebox.Config) { kept = c }))
	cfg.Mounts[0].Writable = true
	cfg.Mounts = append(cfg.Mounts[:1], glovebox.Mount{HostPath: "/", GuestPath: "/host", Writable: true})
	must(t, ts.Func("drop_tables", func() int { return 0 }))
	kept.Mounts[0].Writable = true
	must(t, kept.Tools.Func("drop_tables", func() int { return 0 }))
	kept.Limits.Timeout = time.Hour
	r, err := p.New(context.Background(), "a")
	must(t, err)
	defer r.Close()
	got, _ := p.Get("a")
	got.Mounts[0].Writable = true
	got.Tools.Func("more", func() int { return 0 })
	for _, name := range []string{"a", "b"} {
		c, _ := p.Get(name)
		if c.Fingerprint() != fp || c.Mounts[0].Writable || len(c.Mounts) != 1 || len(c.Tools.Names()) != 1 {
			t.Errorf("profile %s changed: %+v %v", name, c.Mounts, c.Tools.Names())
		}
	}
	res := eval(t, r, attempt(`File.write("/data/x", "1")`))
	if s, _ := res.Value.(string); !strings.HasPrefix(s, "Errno::") {
		t.Errorf("the profile's read-only mount took a write: %v", res.Value)
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
