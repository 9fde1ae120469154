package bwrap_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gloveboxhq/glovebox/box"
)

// TestNoSetuidFilesInWritableMount: the guest's uid maps to the uid that
// runs bwrap (root, for a service), so a setuid file the command made in a
// writable mount was a setuid-root program on the host. Every way to set
// S_ISUID or S_ISGID (chmod, fchmod, fchmodat, open, openat, creat, mknod)
// is refused, and no file in the mount carries either bit afterwards.
func TestNoSetuidFilesInWritableMount(t *testing.T) {
	b := requiresBwrap(t)
	dir := t.TempDir()
	os.Chmod(dir, 0o777)
	script := `import os, ctypes
libc = ctypes.CDLL(None, use_errno=True)
def attempt(name, f):
    try:
        f(); print(name, "ok")
    except OSError as e:
        print(name, e.errno)
open("/data/a", "w").close(); open("/work/a", "w").close()
attempt("chmod", lambda: os.chmod("/data/a", 0o4755))
attempt("chmod-tmp", lambda: os.chmod("/tmp", 0o3777))
attempt("chmod-work", lambda: os.chmod("/work/a", 0o2755))
fd = os.open("/data/a", os.O_RDONLY)
attempt("fchmod", lambda: os.fchmod(fd, 0o6755))
attempt("fchmodat", lambda: os.chmod("a", 0o4755, dir_fd=os.open("/data", os.O_RDONLY)))
attempt("open", lambda: os.close(os.open("/data/b", os.O_CREAT|os.O_WRONLY, 0o4755)))
attempt("creat", lambda: (lambda r: r >= 0 or (_ for _ in ()).throw(OSError(ctypes.get_errno(), "creat")))(libc.creat(b"/data/c", 0o2755)))
attempt("mknod", lambda: os.mknod("/data/d", 0o104755))
attempt("chmod-plain", lambda: os.chmod("/data/a", 0o755))
attempt("open-plain", lambda: os.close(os.open("/data/e", os.O_CREAT|os.O_WRONLY, 0o755)))
`
	res := run(t, b, box.Command{
		Argv:   []string{"python3", "-c", script},
		Mounts: []box.Mount{{HostPath: dir, GuestPath: "/data", Writable: true}},
	})
	for _, want := range []string{"chmod 1\n", "chmod-tmp 1\n", "chmod-work 1\n", "fchmod 1\n", "fchmodat 1\n", "open 1\n", "creat 1\n", "mknod 1\n", "chmod-plain ok\n", "open-plain ok\n"} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("want %q (EPERM is 1) in:\n%s%s", want, res.Stdout, res.Stderr)
		}
	}
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if fi, err := os.Lstat(p); err == nil && fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
			t.Errorf("%s is %v on the host", p, fi.Mode())
		}
		return nil
	})
}
