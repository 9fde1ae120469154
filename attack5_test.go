package glovebox_test

import (
	"context"
	"os"
	"path/filepath"
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

// Growing a file past its end by writing at a far offset (a sparse file)
// counts against FileWrite, as growing it with truncate does.
func TestAttackSparseWritesCount(t *testing.T) {
	f := newMountFixture(t, -1, glovebox.Limits{FileWrite: 1 << 20})
	for name, code := range map[string]string{
		"pwrite scratch": `File.open("/tmp/s", "w") { |io| io.pwrite("x", 1 << 40) }; File.size("/tmp/s").to_s`,
		"pwrite mount":   `File.open("/rw/s", "w") { |io| io.pwrite("x", 1 << 40) }; File.size("/rw/s").to_s`,
		"seek write":     `File.open("/tmp/s2", "w") { |io| io.seek(1 << 40); io.write("x") }; File.size("/tmp/s2").to_s`,
		"seek syswrite":  `File.open("/rw/s3", "w") { |io| io.sysseek(1 << 30); io.syswrite("x") }; File.size("/rw/s3").to_s`,
		"many gaps":      `File.open("/tmp/s4", "w") { |io| 100.times { |i| io.seek(i * (1 << 20), IO::SEEK_SET); io.write("x") } }; File.size("/tmp/s4").to_s`,
	} {
		t.Run(name, func(t *testing.T) {
			res := eval(t, f.r, attempt(code))
			wantStatus(t, res, glovebox.StatusOK)
			if res.Value != "Errno::EDQUOT" {
				t.Errorf("got %v, want Errno::EDQUOT", res.Value)
			}
		})
	}
	// Writing inside a file never counts a gap.
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
