package bwrap_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox/box"
)

// TestSweepStaleRuns: a run sweeps the run directories killed runs left in
// its temp dir (lock free, over a minute old) and their cgroups (lock
// free), and leaves a live run's directory and cgroup (their locks held
// by another process), a young one, a symbolic link and its target.
func TestSweepStaleRuns(t *testing.T) {
	b := requiresBwrap(t)
	flock, err := exec.LookPath("flock")
	if err != nil {
		t.Skipf("flock(1) is not installed: %v", err)
	}
	base := t.TempDir()
	t.Setenv("TMPDIR", base)
	old := time.Now().Add(-2 * time.Minute)
	plant := func(name string, lock bool, mtime time.Time) string {
		d := filepath.Join(base, name)
		if err := os.MkdirAll(filepath.Join(d, "work", "outputs"), 0o777); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(d, "work", "outputs", "f"), []byte("x"), 0o666)
		if lock {
			os.WriteFile(filepath.Join(d, ".lock"), nil, 0o600)
		}
		for _, p := range []string{filepath.Join(d, "work", "outputs"), filepath.Join(d, "work"), d} {
			os.Chtimes(p, mtime, mtime)
		}
		return d
	}
	stale := plant("glovebox-run-stale1", true, old)
	legacy := plant("glovebox-run-legacy1", false, time.Now().Add(-2*time.Hour))
	live := plant("glovebox-run-live1", true, old)
	young := plant("glovebox-run-young1", true, time.Now())
	target := plant("elsewhere", true, old)
	link := filepath.Join(base, "glovebox-run-link1")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	// Another process holds the live run's lock.
	holder := exec.Command(flock, "-x", filepath.Join(live, ".lock"), "sleep", "60")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { holder.Process.Kill(); holder.Wait() }()
	waitLocked(t, filepath.Join(live, ".lock"))

	// Cgroups (v1, where this host has them and lets us): one for the
	// stale run, one for the live run.
	var groups []string
	cg := func(name string) string {
		d := filepath.Join("/sys/fs/cgroup/pids/glovebox", name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return ""
		}
		os.Chtimes(d, old, old)
		groups = append(groups, d)
		return d
	}
	staleGroup, liveGroup := cg("glovebox-run-stale1"), cg("glovebox-run-live1")
	defer func() {
		for _, g := range groups {
			os.Remove(g)
		}
	}()
	// The live run's owner holds its group's lock (cgroup.New does).
	if liveGroup != "" {
		h := exec.Command(flock, "-x", liveGroup, "sleep", "60")
		if err := h.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { h.Process.Kill(); h.Wait() }()
		waitLocked(t, liveGroup)
	}
	// A process the killed run left in its group (a sandbox's init that
	// missed its parent's death): the sweep kills it, then removes the
	// group.
	var strayDone chan error
	if staleGroup != "" {
		stray := exec.Command("sleep", "60")
		if err := stray.Start(); err != nil {
			t.Fatal(err)
		}
		defer stray.Process.Kill()
		if err := os.WriteFile(filepath.Join(staleGroup, "cgroup.procs"), []byte(strconv.Itoa(stray.Process.Pid)), 0o644); err != nil {
			t.Fatal(err)
		}
		os.Chtimes(staleGroup, old, old)
		strayDone = make(chan error, 1)
		go func() { strayDone <- stray.Wait() }()
	}

	res := run(t, b, box.Command{Argv: []string{"true"}})
	if res.ExitStatus != 0 {
		t.Fatalf("%+v", res)
	}
	gone := func(p string) bool { _, err := os.Lstat(p); return os.IsNotExist(err) }
	if !gone(stale) || !gone(legacy) {
		t.Errorf("stale run directories left: stale gone %v, lockless two-hour-old gone %v", gone(stale), gone(legacy))
	}
	for _, p := range []string{live, young, link, filepath.Join(target, "work", "outputs", "f")} {
		if gone(p) {
			t.Errorf("%s was removed", p)
		}
	}
	if staleGroup != "" && !gone(staleGroup) {
		t.Errorf("the stale run's cgroup %s was left", staleGroup)
	}
	if strayDone != nil {
		select {
		case <-strayDone:
		case <-time.After(5 * time.Second):
			t.Errorf("the process left in the stale run's cgroup was not killed")
		}
	}
	if liveGroup != "" && gone(liveGroup) {
		t.Errorf("the live run's cgroup %s was removed", liveGroup)
	}
	if staleGroup == "" {
		t.Logf("cgroup part not checked: cannot make v1 pids groups here")
	}
	ents, _ := os.ReadDir(base)
	for _, e := range ents {
		if e.Name() != "glovebox-run-live1" && e.Name() != "glovebox-run-young1" && e.Name() != "glovebox-run-link1" && e.Name() != "elsewhere" {
			t.Errorf("left in the temp dir: %s", e.Name())
		}
	}
}

// waitLocked waits until another process holds the flock of p.
func waitLocked(t *testing.T, p string) {
	t.Helper()
	for i := 0; ; i++ {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		f.Close()
		if err != nil {
			return
		}
		if i == 500 {
			t.Fatalf("flock(1) never took the lock of %s", p)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
