package glovebox_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gloveboxhq/glovebox"
)

// privateScratch is the directory under a Config.ScratchDir where this
// user's scratch directories go.
func privateScratch(base string) string {
	return filepath.Join(base, fmt.Sprintf("glovebox-%d", os.Geteuid()))
}

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
