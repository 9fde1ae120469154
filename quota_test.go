package glovebox_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox"
)

// hostAllocated sums the disk space (st_blocks) of the regular files
// under dir.
func hostAllocated(t testing.TB, dir string) int64 {
	t.Helper()
	var n int64
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		var st syscall.Stat_t
		if syscall.Lstat(p, &st) == nil {
			n += st.Blocks * 512
		}
		return nil
	})
	return n
}

// emptyDir removes everything in dir but keep.
func emptyDir(t testing.TB, dir string, keep ...string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	must(t, err)
	for _, e := range ents {
		if !strings.Contains(strings.Join(keep, "\x00"), e.Name()) {
			must(t, os.RemoveAll(filepath.Join(dir, e.Name())))
		}
	}
}

// The file quotas bound what is in use, like a file-system quota: loops
// that make and remove, or rewrite, never run out; loops that keep what
// they make still end in EDQUOT once the bytes allocated or the names
// existing pass the bound.
func TestQuotaInUse(t *testing.T) {
	const limit = 1 << 20
	f := newMountFixture(t, -1, glovebox.Limits{FileWrite: limit, FileCreates: 10})
	fits := map[string]string{
		"create delete scratch": `2000.times { File.write("/tmp/f", "x"); File.delete("/tmp/f") }`,
		"create delete mount":   `500.times { |i| File.write("/rw/f#{i}", "x" * 5000); File.delete("/rw/f#{i}") }`,
		"rewrite":               `m = "x" * 900_000; 100.times { File.write("/tmp/f", m); File.write("/rw/g", "y") }; File.delete("/rw/g")`,
		"mkdir rmdir":           `300.times { |i| Dir.mkdir("/rw/d#{i}"); Dir.rmdir("/rw/d#{i}") }`,
		"symlink unlink":        `300.times { |i| File.symlink("w.txt", "/rw/l#{i}"); File.delete("/rw/l#{i}") }`,
		"truncate gives back":   `File.open("/tmp/t", "w") { |io| 50.times { io.write("z" * 900_000); io.flush; io.truncate(0); io.rewind } }`,
		"rename over":           `50.times { File.write("/tmp/a", "a" * 600_000); File.write("/tmp/b", "b" * 300_000); File.rename("/tmp/b", "/tmp/a") }`,
		"rename dir over":       `Dir.mkdir("/tmp/x"); 50.times { Dir.mkdir("/tmp/y"); File.rename("/tmp/y", "/tmp/x") }`,
		"closed unlinked file":  `10.times { io = File.open("/tmp/u", "w"); io.write("u" * 900_000); io.flush; File.delete("/tmp/u"); io.close }`,
		"hard link removed":     `File.write("/tmp/h", "h" * 900_000); 20.times { File.link("/tmp/h", "/tmp/h2"); File.delete("/tmp/h"); File.rename("/tmp/h2", "/tmp/h") }`,
	}
	for name, code := range fits {
		t.Run(name, func(t *testing.T) {
			res := eval(t, f.r, attempt(code+`; "fits"`))
			wantStatus(t, res, glovebox.StatusOK)
			if res.Value != "fits" {
				t.Errorf("got %v: this loop never holds more than the quota", res.Value)
			}
		})
	}
	over := map[string]string{
		"files kept":         `100.times { |i| File.write("/tmp/f#{i}", "x" * 20_000) }`,
		"names kept":         `11.times { |i| File.write("/rw/n#{i}", "") }`,
		"names kept deleted": `30.times { |i| File.write("/rw/n#{i}", ""); File.delete("/rw/n#{i}") if i.odd? }`,
		"dirs kept":          `30.times { |i| Dir.mkdir("/tmp/d#{i}"); Dir.rmdir("/tmp/d#{i}") if i % 3 == 0 }`,
		"append":             `File.open("/rw/a", "a") { |io| 1000.times { io.syswrite("a" * 4096) } }`,
		"rewrite grows":      `1.upto(300) { |i| File.write("/rw/r", "r" * (i * 4096)) }`,
		"open unlinked held": `io = File.open("/tmp/u", "w"); io.write("u" * 900_000); io.flush; File.delete("/tmp/u"); File.write("/tmp/v", "v" * 900_000)`,
		"link keeps data":    `File.write("/rw/a", "a" * 900_000); File.link("/rw/a", "/rw/b"); File.delete("/rw/a"); File.write("/rw/c", "c" * 900_000)`,
		"host file deleted":  `File.delete("/rw/host.bin"); File.write("/rw/c", "c" * 1_500_000)`,
		"host file emptied":  `File.write("/rw/host.bin", ""); File.write("/rw/c", "c" * 1_500_000)`,
	}
	for name, code := range over {
		t.Run(name, func(t *testing.T) {
			emptyDir(t, f.rw, "w.txt")
			must(t, os.WriteFile(filepath.Join(f.rw, "host.bin"), make([]byte, 2<<20), 0o644))
			res := eval(t, f.r, attempt(code+`; "no quota"`))
			wantStatus(t, res, glovebox.StatusOK)
			if res.Value != "Errno::EDQUOT" {
				t.Errorf("got %v, want Errno::EDQUOT", res.Value)
			}
			os.Remove(filepath.Join(f.rw, "host.bin"))
			if n := hostAllocated(t, f.rw); n > limit+64<<10 {
				t.Errorf("the guest's files in the mount allocate %d bytes on the host, past FileWrite (%d)", n, limit)
			}
		})
	}
}

// A session's scratch directory is wiped after every eval, and each eval
// gets its quota afresh; within one eval, space in use is what counts.
func TestQuotaInUseSession(t *testing.T) {
	s := newSession(t, withLimits(t, glovebox.Limits{FileWrite: 1 << 20, FileCreates: 10}))
	for i := range 3 {
		res := sessionEval(t, s, attempt(`20.times { |i| File.write("/tmp/f#{i % 5}", "s" * 150_000) }; "fits"`))
		if res.Value != "fits" {
			t.Fatalf("eval %d: %v", i, res.Value)
		}
	}
	res := sessionEval(t, s, attempt(`20.times { |i| File.write("/tmp/g#{i}", "s" * 150_000) }; "no quota"`))
	if res.Value != "Errno::EDQUOT" {
		t.Fatalf("got %v, want Errno::EDQUOT", res.Value)
	}
}

// A file with no name left still holds its space while any guest of the
// process has it open: another session keeping open a file this eval
// wrote must not let it delete the file and write the space again.
func TestAttackQuotaHeldByOtherSession(t *testing.T) {
	f := newMountFixture(t, -1, glovebox.Limits{FileWrite: 1 << 20, Timeout: 20 * time.Second})
	writer, holder := newSession(t, f.r), newSession(t, f.r)
	done := make(chan *glovebox.Result)
	go func() {
		done <- sessionEval(t, holder, `t0 = Time.now
			sleep 0.01 until File.exist?("/rw/big") && File.size("/rw/big") == 900_000 || Time.now - t0 > 10
			$held = File.open("/rw/big"); File.write("/rw/marker", ""); "holding"`)
	}()
	res := sessionEval(t, writer, attempt(`File.write("/rw/big", "b" * 900_000)
		t0 = Time.now
		sleep 0.01 until File.exist?("/rw/marker") || Time.now - t0 > 10
		File.delete("/rw/big")
		File.write("/rw/again", "a" * 900_000); "no quota"`))
	if h := <-done; h.Value != "holding" {
		t.Fatalf("holder: %v %+v", h.Value, h.Error)
	}
	if res.Value != "Errno::EDQUOT" {
		t.Fatalf("got %v, want Errno::EDQUOT: the deleted file is still held open by another session", res.Value)
	}
	// Once the holder lets go, the space comes back.
	wantStatus(t, sessionEval(t, holder, `$held.close; 1`), glovebox.StatusOK)
	res = sessionEval(t, writer, attempt(`File.write("/rw/big", "b" * 900_000); io = File.open("/rw/big"); File.delete("/rw/big"); io.close; File.write("/rw/again", "a" * 900_000); "fits"`))
	if res.Value != "fits" {
		t.Fatalf("after the file was closed: got %v", res.Value)
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

func TestFileQuotas(t *testing.T) {
	f := newMountFixture(t, -1, glovebox.Limits{FileWrite: 1 << 20, FileCreates: 10})
	for name, code := range map[string]string{
		"bytes scratch": `File.open("/tmp/big", "w") { |io| 3.times { io.write("x" * 512 * 1024) } }`,
		"bytes mount":   `File.open("/rw/big", "w") { |io| 3.times { io.write("x" * 512 * 1024) } }`,
		"sparse filled": `File.open("/tmp/sparse", "w") { |io| io.truncate(1 << 30); 3.times { |i| io.pwrite("x" * 512 * 1024, i << 20) } }`,
		"files":         `20.times { |i| File.write("/tmp/f#{i}", "") }`,
		"dirs":          `20.times { |i| Dir.mkdir("/rw/d#{i}") }`,
		"links":         `File.write("/tmp/t", ""); 20.times { |i| File.symlink("t", "/tmp/l#{i}") }`,
	} {
		t.Run(name, func(t *testing.T) {
			res := eval(t, f.r, attempt(code))
			wantStatus(t, res, glovebox.StatusOK)
			if res.Value != "Errno::EDQUOT" {
				t.Errorf("got %v, want Errno::EDQUOT", res.Value)
			}
		})
	}
	// The quotas bound what is in use: rewriting one file, or making and
	// removing files, takes nothing for good.
	res := eval(t, f.r, attempt(`30.times { File.write("/tmp/same", "x" * 600_000) }; 30.times { |i| File.write("/rw/n#{i}", "y"); File.delete("/rw/n#{i}") }; "fine"`))
	if res.Value != "fine" {
		t.Errorf("rewriting one file: %v", res.Value)
	}
}
