package glovebox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gloveboxhq/glovebox"
)

// A session whose Runtime has tools runs each eval's VM on its own
// goroutine; the scratch directory must be wiped before the next eval may
// start, never while it runs.
func TestAttackSessionWipeBeforeNextEval(t *testing.T) {
	var ts glovebox.Toolset
	must(t, ts.Func("ping", func() int { return 1 }))
	r := newRuntime(t, glovebox.Config{PoolSize: -1, Tools: &ts})
	s := newSession(t, r)
	for i := range 5 {
		res := sessionEval(t, s, `800.times { |i| File.write("/tmp/f#{i}", "secret") }; 1`)
		wantStatus(t, res, glovebox.StatusOK)
		res = sessionEval(t, s, `File.write("/tmp/mine", "kept during this eval"); n = Dir.children("/tmp").size; sleep 0.05; [n, File.exist?("/tmp/mine")]`)
		wantStatus(t, res, glovebox.StatusOK)
		if !equalValue(res.Value, []any{int64(1), true}) {
			t.Fatalf("round %d: the next eval saw [entries in /tmp, own file still there] = %v, want [1, true]", i, res.Value)
		}
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

// FileCreates counts every file an open makes, including one made through
// a dangling symbolic link (whose own name exists) after its target was
// renamed away.
func TestAttackCreateQuotaThroughDanglingLink(t *testing.T) {
	f := newMountFixture(t, -1, glovebox.Limits{FileCreates: 10})
	res := eval(t, f.r, attempt(`
		File.symlink("t", "/tmp/l")
		30.times { |i| File.open("/tmp/l", "w") {}; File.rename("/tmp/t", "/tmp/k#{i}") }
		Dir.children("/tmp").size.to_s`))
	wantStatus(t, res, glovebox.StatusOK)
	if res.Value != "Errno::EDQUOT" {
		t.Fatalf("got %v, want Errno::EDQUOT (10 creations allowed)", res.Value)
	}
}

// A sparse file counts for the blocks it allocates, not for its size: a
// write at a far offset (or a truncate far past the end) costs a block,
// and many of them add up to EDQUOT. Whatever the guest does, the host
// never holds more than FileWrite (plus a block or two) for it.
func TestAttackSparseWritesCount(t *testing.T) {
	f := newMountFixture(t, -1, glovebox.Limits{FileWrite: 1 << 20})
	for name, code := range map[string]string{
		"pwrite scratch": `File.open("/tmp/s", "w") { |io| io.pwrite("x", 1 << 40) }; File.size("/tmp/s").to_s`,
		"pwrite mount":   `File.open("/rw/s", "w") { |io| io.pwrite("x", 1 << 40) }; File.size("/rw/s").to_s`,
		"seek write":     `File.open("/tmp/s2", "w") { |io| io.seek(1 << 40); io.write("x") }; File.size("/tmp/s2").to_s`,
		"seek syswrite":  `File.open("/rw/s3", "w") { |io| io.sysseek(1 << 30); io.syswrite("x") }; File.size("/rw/s3").to_s`,
		"truncate":       `File.open("/rw/s4", "w") { |io| io.truncate(1 << 40) }; File.size("/rw/s4").to_s`,
	} {
		t.Run(name, func(t *testing.T) {
			res := eval(t, f.r, attempt(code))
			wantStatus(t, res, glovebox.StatusOK)
			if res.Value == "Errno::EDQUOT" {
				t.Errorf("a sparse file of one block was refused")
			}
		})
	}
	for name, code := range map[string]string{
		"many gaps scratch": `File.open("/tmp/g", "w") { |io| 1000.times { |i| io.seek(i * (1 << 20), IO::SEEK_SET); io.write("x") } }; File.size("/tmp/g").to_s`,
		"many gaps mount":   `File.open("/rw/g", "w") { |io| 1000.times { |i| io.pwrite("x", i * (1 << 20)) } }; File.size("/rw/g").to_s`,
		"many files":        `1000.times { |i| File.open("/rw/h#{i % 20}", File::RDWR | File::CREAT) { |io| io.pwrite("x", (i / 20) << 30) } }; "done"`,
	} {
		t.Run(name, func(t *testing.T) {
			emptyDir(t, f.rw, "w.txt")
			res := eval(t, f.r, attempt(code))
			wantStatus(t, res, glovebox.StatusOK)
			if res.Value != "Errno::EDQUOT" {
				t.Errorf("got %v, want Errno::EDQUOT: 1,000 blocks allocated with FileWrite 1 MiB", res.Value)
			}
			if n := hostAllocated(t, f.rw); n > 1<<20+64<<10 {
				t.Errorf("the mount's files allocate %d bytes on the host, past FileWrite (1 MiB)", n)
			}
		})
	}
	// Writing inside a file allocates nothing new.
	res := eval(t, f.r, attempt(`File.open("/tmp/in", "w+") { |io| io.write("a" * 1000); io.seek(10); io.write("b"); io.pwrite("c", 500); io.seek(0, IO::SEEK_END); io.write("d") }; File.read("/tmp/in").size.to_s`))
	if res.Value != "1001" {
		t.Errorf("writes inside a file: %v", res.Value)
	}
}

// A file the guest keeps open in a session must not carry scratch data
// past the wipe: its content would outlive "wiped after every eval" and,
// on /dev/shm, pin host memory beyond FileWrite, eval after eval.
func TestAttackSessionOpenScratchFileWiped(t *testing.T) {
	s := newSession(t, withLimits(t, glovebox.Limits{FileWrite: 1 << 20}))
	res := sessionEval(t, s, `$f = File.open("/tmp/x", "w+"); $f.write("secret" * 1000); $f.flush; $f.size`)
	wantStatus(t, res, glovebox.StatusOK)
	for i := range 4 {
		res = sessionEval(t, s, `[$f.stat.size, ($f.rewind; $f.read.size), ($f.write("y" * 900_000); $f.flush; 1)]`)
		wantStatus(t, res, glovebox.StatusOK)
		if !equalValue(res.Value, []any{int64(0), int64(0), int64(1)}) {
			t.Fatalf("eval %d: [size, readable bytes, wrote] of a scratch file kept open: %v, want [0, 0, 1]", i, res.Value)
		}
	}
}

// Configurations that run a different guest image are different settings:
// their fingerprints differ.
func TestAttackFingerprintImage(t *testing.T) {
	a := glovebox.Config{}
	b := glovebox.Config{ImagePath: "/opt/other-ruby.wasm"}
	if a.Fingerprint() == b.Fingerprint() {
		t.Fatal("a different guest image has the same fingerprint")
	}
}

// A tool that ignores its context and returns right around the moment
// Eval gives up on the VM: the VM is either kept (and the result says ok)
// or freed (and the result says it was abandoned), never neither. A VM
// that is neither leaks its store and its scratch directory, which stays
// on the host after Close.
func TestAttackAbandonRace(t *testing.T) {
	tmp := t.TempDir()
	var ts glovebox.Toolset
	var n atomic.Int64
	must(t, ts.Func("slow", func() bool {
		// 130 to 170 ms, around Timeout + the 100 ms grace.
		time.Sleep(130*time.Millisecond + time.Duration(n.Add(1)%9)*5*time.Millisecond)
		return true
	}))
	r, err := glovebox.New(context.Background(), glovebox.Config{PoolSize: -1, ScratchDir: tmp, Tools: &ts,
		Limits: glovebox.Limits{Timeout: 50 * time.Millisecond}})
	must(t, err)
	s, err := r.NewSession()
	must(t, err)
	statuses := map[glovebox.Status]int{}
	for range 20 {
		res, err := s.Eval(context.Background(), `slow; 1`)
		must(t, err)
		statuses[res.Status]++
		if (res.Status == glovebox.StatusOK) == res.SessionReset {
			t.Fatalf("status %s with SessionReset %v", res.Status, res.SessionReset)
		}
	}
	t.Logf("statuses %v", statuses)
	s.Close()
	r.Close()
	// An abandoned VM is freed when its tool returns, which may be after
	// Close: wait for that (a leaked VM never frees its directory).
	deadline := time.Now().Add(30 * time.Second)
	for {
		left, _ := os.ReadDir(privateScratch(tmp))
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d scratch directories left after Close: VMs leaked", len(left))
		}
		time.Sleep(50 * time.Millisecond)
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

// The scratch directory is wiped when the eval ends, not only when the
// directory is next handed out: otherwise what an eval wrote stays on the
// host (in memory, on /dev/shm) for as long as the directory sits idle,
// up to FileWrite bytes for each of the idle directories kept.
func TestAttackScratchWipedWhenEvalEnds(t *testing.T) {
	tmp := t.TempDir()
	r := newRuntime(t, glovebox.Config{PoolSize: -1, ScratchDir: tmp})
	wantStatus(t, eval(t, r, `File.write("/tmp/secret", "s3cr3t" * 1000); Dir.mkdir("/tmp/d"); File.write("/tmp/d/x", "s3cr3t"); 1`), glovebox.StatusOK)
	var found []string
	tmp = privateScratch(tmp)
	filepath.WalkDir(tmp, func(p string, d os.DirEntry, err error) error {
		if err == nil && p != tmp && !(d.IsDir() && filepath.Dir(p) == tmp) {
			found = append(found, p)
		}
		return nil
	})
	if len(found) != 0 {
		t.Fatalf("after the eval, the host still holds what it wrote: %v", found)
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

// Asking for a huge size must not wrap the write counter around: the
// quota holds for everything written afterwards.
func TestAttackQuotaCounterOverflow(t *testing.T) {
	f := newMountFixture(t, -1, glovebox.Limits{FileWrite: 1 << 20})
	for name, grow := range map[string]string{
		"truncate": `io.truncate(2**63 - 1)`,
		"pwrite":   `io.pwrite("x", 2**63 - 1)`,
		"seek":     `io.sysseek(2**63 - 1); io.syswrite("x")`,
	} {
		t.Run(name, func(t *testing.T) {
			res := eval(t, f.r, attempt(`File.write("/tmp/c", "xx"); File.open("/tmp/a", "w") { |io| begin; `+grow+`; rescue SystemCallError, RangeError; end }
				File.open("/rw/b", "w") { |io| 5.times { io.syswrite("z" * (1 << 20)) } }; "wrote 5 MiB"`))
			wantStatus(t, res, glovebox.StatusOK)
			if res.Value != "Errno::EDQUOT" {
				t.Fatalf("got %v, want Errno::EDQUOT", res.Value)
			}
		})
	}
}

// Two sessions on one writable mount: one creates files in a directory
// while the other keeps renaming that directory away and back. Every file
// made counts against the creator's FileCreates, including those whose
// directory moved between wasmtime's open and the guard's.
func TestAttackCreateQuotaRace(t *testing.T) {
	f := newMountFixture(t, -1, glovebox.Limits{FileCreates: 40, Timeout: 20 * time.Second})
	must(t, os.Mkdir(filepath.Join(f.rw, "d"), 0o755))
	creator, mover := newSession(t, f.r), newSession(t, f.r)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		sessionEval(t, mover, `t0 = Time.now; while Time.now - t0 < 1.5; File.rename("/rw/d", "/rw/e") rescue nil; File.rename("/rw/e", "/rw/d") rescue nil; end`)
	}()
	res := sessionEval(t, creator, `t0 = Time.now; i = 0; while Time.now - t0 < 1.5; (File.open("/rw/d/f#{i}", "w") { } rescue nil); (File.open("/rw/e/f#{i}", "w") { } rescue nil); i += 1; end; i`)
	wg.Wait()
	wantStatus(t, res, glovebox.StatusOK)
	n := 0
	for _, d := range []string{"d", "e"} {
		ents, _ := os.ReadDir(filepath.Join(f.rw, d))
		n += len(ents)
	}
	t.Logf("%v attempts, %d files made", res.Value, n)
	if n > 40 {
		t.Fatalf("%d files made with FileCreates 40", n)
	}
	// O_CREAT on an existing name opens it; with O_EXCL it is EEXIST.
	res = eval(t, f.r, attempt(`File.open("/rw/w.txt", File::WRONLY | File::CREAT | File::EXCL) { 1 }`))
	if res.Value != "Errno::EEXIST" {
		t.Errorf("O_EXCL on an existing file: %v", res.Value)
	}
	res = eval(t, f.r, attempt(`File.open("/rw/w.txt", File::RDWR | File::CREAT) { |io| io.read }`))
	if res.Value != "writable data" {
		t.Errorf("O_CREAT on an existing file: %v", res.Value)
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

// NewSession racing with Close: a session either is refused (ErrClosed)
// or is closed with the Runtime; none runs evals on a closed Runtime.
func TestAttackNewSessionCloseRace(t *testing.T) {
	ran := 0
	for range 20000 {
		r, err := glovebox.New(context.Background(), glovebox.Config{PoolSize: -1})
		must(t, err)
		var s *glovebox.Session
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			var err error
			if s, err = r.NewSession(); err != nil && !errors.Is(err, glovebox.ErrClosed) {
				t.Errorf("NewSession: %v", err)
			}
		}()
		go func() { defer wg.Done(); r.Close() }()
		wg.Wait()
		if s != nil {
			if _, err := s.Eval(context.Background(), `1`); err == nil {
				ran++
			}
			s.Close()
		}
	}
	if ran != 0 {
		t.Fatalf("%d sessions ran evals after their Runtime closed", ran)
	}
}
