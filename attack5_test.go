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
