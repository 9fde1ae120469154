// The scratch directory: private, wiped after each eval, stale ones swept.

package glovebox_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gloveboxhq/glovebox"
)

// A scratch base left open to other users is refused with an error
// naming it, by Eval.
func TestScratchBaseRefusedByEval(t *testing.T) {
	base := t.TempDir()
	must(t, os.Mkdir(privateScratch(base), 0o777))
	must(t, os.Chmod(privateScratch(base), 0o777))
	r, err := glovebox.New(context.Background(), glovebox.Config{PoolSize: -1, ScratchDir: base})
	if err == nil {
		defer r.Close()
		_, err = r.Eval(context.Background(), `1`)
	}
	if err == nil || !strings.Contains(err.Error(), privateScratch(base)) || !strings.Contains(err.Error(), "other users") {
		t.Fatalf("got %v, want an error naming %s and its mode", err, privateScratch(base))
	}
	t.Log(err)
}

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

func TestScratchIsPrivateAndWiped(t *testing.T) {
	tmp := t.TempDir()
	r := newRuntime(t, glovebox.Config{PoolSize: -1, ScratchDir: tmp})
	res := eval(t, r, `
		require "tempfile"
		File.write("/tmp/a.txt", "x" * 100)
		t = Tempfile.new("g"); t.write("y"); t.flush
		[Dir.tmpdir, Dir.children("/tmp").size, File.read("/tmp/a.txt").size]`)
	wantStatus(t, res, glovebox.StatusOK)
	if !equalValue(res.Value, []any{"/tmp", int64(2), int64(100)}) {
		t.Fatalf("got %v", res.Value)
	}
	res = eval(t, r, `Dir.children("/tmp")`)
	if !equalValue(res.Value, []any{}) {
		t.Errorf("the next eval saw %v", res.Value)
	}
	// Scratch directories are reused once wiped, and removed with the
	// Runtime.
	priv := privateScratch(tmp)
	left, _ := os.ReadDir(priv)
	if len(left) != 1 {
		t.Errorf("%d scratch directories on the host, want the one kept for reuse", len(left))
	}
	r.Close()
	if left, _ := os.ReadDir(priv); len(left) != 0 {
		t.Errorf("scratch directories left after Close: %v", left)
	}
}

// Scratch directories a dead process left behind are removed by the next
// process that uses the same base; one whose owner lives (it holds a flock
// on the directory, whatever its name says) stays.
func TestStaleScratchSwept(t *testing.T) {
	base := privateScratch(t.TempDir())
	must(t, os.Mkdir(base, 0o700))
	dead := filepath.Join(base, "glovebox-scratch-1-123")
	alive := filepath.Join(base, "glovebox-scratch-1-456")
	for _, d := range []string{dead, alive} {
		must(t, os.MkdirAll(filepath.Join(d, "sub"), 0o755))
		must(t, os.WriteFile(filepath.Join(d, "sub", "f"), []byte("x"), 0o644))
	}
	owner, err := os.Open(alive)
	must(t, err)
	defer owner.Close()
	must(t, syscall.Flock(int(owner.Fd()), syscall.LOCK_EX))
	newRuntime(t, glovebox.Config{PoolSize: -1, ScratchDir: filepath.Dir(base)})
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("a dead process's scratch directory is still there: %v", err)
	}
	if _, err := os.Stat(alive); err != nil {
		t.Errorf("a live process's scratch directory was removed: %v", err)
	}
}
