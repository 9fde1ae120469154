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
