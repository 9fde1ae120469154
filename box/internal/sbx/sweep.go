package sbx

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gloveboxhq/glovebox/box/internal/cgroup"
)

// A run directory is named RunPrefix+random under the system temp dir and
// holds LockName, which its run keeps flocked (LOCK_EX) for its whole
// life: a directory whose lock can be taken belongs to no live run.
const (
	RunPrefix = "glovebox-run-"
	LockName  = ".lock"
)

// StaleAge is how old (modification time) a run directory or cgroup must
// be before Sweep removes it: longer than a run takes from making its
// directory to locking it, and from making its cgroup to putting its
// first process there. LegacyAge is the same for a run directory without
// a lock file (made before run directories had one): an hour, longer
// than any run's timeout we have seen used. Our choices.
const (
	StaleAge  = time.Minute
	LegacyAge = time.Hour
)

// sweepEvery bounds how often one process sweeps one base: the sweep
// reads the temp dir and the cgroup hierarchies.
const sweepEvery = 10 * time.Second

var (
	sweptMu sync.Mutex
	swept   = map[string]time.Time{}
)

// maybeSweep runs Sweep(base) unless this process did within sweepEvery.
func maybeSweep(base string) {
	sweptMu.Lock()
	last, ok := swept[base]
	due := !ok || time.Since(last) >= sweepEvery
	if due {
		swept[base] = time.Now()
	}
	sweptMu.Unlock()
	if due {
		Sweep(base)
	}
}

// Sweep removes what runs killed with their host process left behind:
// run directories in base (real directories, not symbolic links, owned by
// this user, older than StaleAge) whose lock it can take at once, and
// then the glovebox cgroups, whichever temp dir their run used, whose
// owner's lock it can take (see cgroup.Sweep: each group's directories
// stay flocked by the process that made them until the run ends, so a
// live run of any process is never touched). It returns the run
// directories' names it removed. Nothing is followed through a symbolic
// link: a directory is checked by an open with O_NOFOLLOW and compared
// with what was listed, and removed by os.RemoveAll (which unlinks a
// symbolic link it meets, never its target); a cgroup is removed with
// rmdir, which fails while it holds a process or a child group.
func Sweep(base string) []string {
	var removed []string
	d, err := os.Open(base)
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	bfd := int(d.Fd())
	now := time.Now()
	for _, name := range names {
		if !strings.HasPrefix(name, RunPrefix) {
			continue
		}
		if staleRunDir(base, bfd, name, now) {
			removed = append(removed, name)
		}
	}
	cgroup.Sweep(RunPrefix, StaleAge)
	return removed
}

// staleRunDir removes base/name when it is a stale run directory, holding
// its lock until the tree is gone, and reports whether it did.
func staleRunDir(base string, bfd int, name string, now time.Time) bool {
	var st unix.Stat_t
	if unix.Fstatat(bfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil ||
		st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Geteuid() ||
		now.Sub(time.Unix(st.Mtim.Unix())) < StaleAge {
		return false
	}
	dfd, err := unix.Openat(bfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(dfd)
	var dst unix.Stat_t
	if unix.Fstat(dfd, &dst) != nil || dst.Dev != st.Dev || dst.Ino != st.Ino {
		return false
	}
	lfd, err := unix.Openat(dfd, LockName, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		if now.Sub(time.Unix(st.Mtim.Unix())) < LegacyAge {
			return false
		}
	case err != nil:
		return false
	default:
		defer unix.Close(lfd)
		if unix.Flock(lfd, unix.LOCK_EX|unix.LOCK_NB) != nil {
			return false // a live run holds it
		}
	}
	os.RemoveAll(filepath.Join(base, name))
	return true
}
