package glovebox_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

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
