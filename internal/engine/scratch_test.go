package engine

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// deadPID returns the process ID of a process that has exited.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

// victimDir makes a host directory (mode 0755) with a file in it, that a
// scratch wipe must never touch, and returns a check that it is intact.
func victimDir(t *testing.T) (string, func()) {
	t.Helper()
	v := filepath.Join(t.TempDir(), "victim")
	if err := os.MkdirAll(filepath.Join(v, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"precious", "sub/precious"} {
		if err := os.WriteFile(filepath.Join(v, f), []byte("keep"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(v, 0o755); err != nil {
		t.Fatal(err)
	}
	return v, func() {
		t.Helper()
		for _, f := range []string{"precious", "sub/precious"} {
			if _, err := os.Stat(filepath.Join(v, f)); err != nil {
				t.Errorf("the victim's %s is gone: %v", f, err)
			}
		}
		for _, d := range []string{v, filepath.Join(v, "sub")} {
			st, err := os.Stat(d)
			if err == nil && st.Mode().Perm() != 0o755 {
				t.Errorf("the victim directory %s was chmodded to %v", d, st.Mode().Perm())
			}
		}
	}
}

// An entry named like a dead process's scratch directory, planted as a
// symbolic link to a victim directory (in the shared base, where any
// local user can write, or in the private base), must not get the
// victim's contents deleted by the start-up sweep.
func TestAttackSweepPlantedSymlink(t *testing.T) {
	base := t.TempDir()
	victim, intact := victimDir(t)
	name := fmt.Sprintf("glovebox-scratch-%d-planted", deadPID(t))
	if err := os.Symlink(victim, filepath.Join(base, name)); err != nil {
		t.Fatal(err)
	}
	priv, err := privateScratchBase(base)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(priv, name)); err != nil {
		t.Fatal(err)
	}
	// A real stale directory next to them is still swept.
	stale := filepath.Join(priv, fmt.Sprintf("glovebox-scratch-%d-stale", deadPID(t)))
	if err := os.MkdirAll(filepath.Join(stale, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(stale, "a"), 0o500); err != nil {
		t.Fatal(err)
	}
	sweepScratch(priv)
	intact()
	if _, err := os.Lstat(stale); !os.IsNotExist(err) {
		t.Errorf("a dead process's real scratch directory was not swept: %v", err)
	}
}

// A directory swapped for a symbolic link to a victim while the wipe is
// descending into it (another VM sharing the tree, or a local user) must
// not get the victim chmodded or emptied: the wipe pins each directory
// with O_NOFOLLOW and changes modes on the pinned descriptor only.
func TestAttackWipeSwappedSubdirectory(t *testing.T) {
	for _, where := range []string{"per-eval wipe", "sweep"} {
		t.Run(where, func(t *testing.T) {
			victim, intact := victimDir(t)
			priv, err := privateScratchBase(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			top := filepath.Join(priv, fmt.Sprintf("glovebox-scratch-%d-x", deadPID(t)))
			if err := os.MkdirAll(filepath.Join(top, "d", "e"), 0o755); err != nil {
				t.Fatal(err)
			}
			// Unwritable, so the wipe has to restore a mode: the chmod
			// that once landed on the victim through the swapped name.
			if err := os.Chmod(filepath.Join(top, "d"), 0o500); err != nil {
				t.Fatal(err)
			}
			swapped := 0
			testHookWipeDir = func(parent int, name string) {
				if name != "d" {
					return
				}
				// Move the real directory away and put a link in its place.
				if err := unix.Renameat(parent, "d", parent, "moved"); err != nil {
					t.Errorf("swap: %v", err)
					return
				}
				if err := unix.Symlinkat(victim, parent, "d"); err != nil {
					t.Errorf("swap: %v", err)
				}
				swapped++
			}
			defer func() { testHookWipeDir = nil }()
			if where == "sweep" {
				sweepScratch(priv)
			} else {
				if err := wipeDir(top); err != nil {
					t.Logf("wipe: %v", err)
				}
			}
			if swapped == 0 {
				t.Fatal("the wipe never descended into the directory")
			}
			intact()
			if _, err := os.Lstat(filepath.Join(top, "d")); !os.IsNotExist(err) {
				t.Errorf("the planted link is still there: %v", err)
			}
		})
	}
}

// The private scratch base is refused, with a clear error, when it is not
// this user's own closed directory.
func TestScratchBaseRefused(t *testing.T) {
	uid := os.Geteuid()
	for name, plant := range map[string]func(p string) error{
		"wrong owner": func(p string) error {
			if err := os.Mkdir(p, 0o700); err != nil {
				return err
			}
			return os.Chown(p, uid+4242, -1)
		},
		"wrong mode": func(p string) error {
			if err := os.Mkdir(p, 0o700); err != nil {
				return err
			}
			return os.Chmod(p, 0o777)
		},
		"symlink": func(p string) error {
			d := filepath.Join(filepath.Dir(p), "elsewhere")
			if err := os.Mkdir(d, 0o700); err != nil {
				return err
			}
			return os.Symlink(d, p)
		},
		"file": func(p string) error { return os.WriteFile(p, nil, 0o600) },
	} {
		t.Run(name, func(t *testing.T) {
			if name == "wrong owner" && uid != 0 {
				t.Skip("chown to another uid needs root")
			}
			base := t.TempDir()
			p := filepath.Join(base, fmt.Sprintf("glovebox-%d", uid))
			if err := plant(p); err != nil {
				t.Fatal(err)
			}
			s := newScratchDirs(base)
			_, err := s.get()
			var be *ScratchBaseError
			if !errors.As(err, &be) || be.Path != p {
				t.Fatalf("get: %v, want a *ScratchBaseError for %s", err, p)
			}
			t.Log(err)
		})
	}
	// A fresh base is made 0700 and used.
	base := t.TempDir()
	s := newScratchDirs(base)
	d, err := s.get()
	if err != nil {
		t.Fatal(err)
	}
	s.put(d)
	s.close()
	st, err := os.Stat(filepath.Join(base, fmt.Sprintf("glovebox-%d", uid)))
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("private base: %v %v", st, err)
	}
}

// TestSweepScratchByLock: a scratch directory is swept when no process
// holds its lock, whatever PID its name carries: one named with a PID
// that is dead here but whose owner lives (in another PID namespace,
// say: another process holds its lock) stays; one named with a live PID
// (its owner died and the PID was reused: this process's own) goes; a
// directory this process's scratchDirs hands out is locked from the
// moment it has its name, and goes when it is put back and removed.
func TestSweepScratchByLock(t *testing.T) {
	flock, err := exec.LookPath("flock")
	if err != nil {
		t.Skipf("flock(1) is not installed: %v", err)
	}
	priv, err := privateScratchBase(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	live := filepath.Join(priv, fmt.Sprintf("glovebox-scratch-%d-elsewhere", deadPID(t)))
	reused := filepath.Join(priv, fmt.Sprintf("glovebox-scratch-%d-reused", os.Getpid()))
	for _, d := range []string{live, reused} {
		if err := os.MkdirAll(filepath.Join(d, "f"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	holder := exec.Command(flock, "-x", live, "sleep", "60")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { holder.Process.Kill(); holder.Wait() }()
	for i := 0; ; i++ {
		fd, err := unix.Open(live, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		err = unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		unix.Close(fd)
		if err != nil {
			break
		}
		if i == 500 {
			t.Fatal("flock(1) never took the lock")
		}
		time.Sleep(10 * time.Millisecond)
	}
	s := &scratchDirs{base: priv}
	mine, err := s.get()
	if err != nil {
		t.Fatal(err)
	}
	sweepScratch(priv)
	if _, err := os.Stat(live); err != nil {
		t.Errorf("a live owner's directory was swept: %v", err)
	}
	if _, err := os.Stat(mine); err != nil {
		t.Errorf("this process's own directory was swept: %v", err)
	}
	if _, err := os.Lstat(reused); !os.IsNotExist(err) {
		t.Errorf("a dead owner's directory (its PID alive again) was left: %v", err)
	}
	s.close()
	s.put(mine)
	if _, err := os.Lstat(mine); !os.IsNotExist(err) {
		t.Errorf("a put-back directory after close was left: %v", err)
	}
}
