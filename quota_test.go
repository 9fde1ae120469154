package glovebox_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
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
