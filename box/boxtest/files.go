package boxtest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gloveboxhq/glovebox/box"
)

// setidScript tries every way to give a file in /out (a writable mount),
// /work and /tmp a privilege the host would honour, and prints one line
// per attempt: "NAME ok" or "NAME refused".
const setidScript = `
import ctypes, errno, os, shutil
libc = ctypes.CDLL(None, use_errno=True)
def creat(p, m):
    if libc.creat(p.encode(), m) < 0:
        e = ctypes.get_errno(); raise OSError(e, os.strerror(e))
def attempt(name, f):
    try:
        f()
        print(name, "ok")
    except OSError as e:
        print(name, "refused" if e.errno in (errno.EPERM, errno.EACCES, errno.EOPNOTSUPP) else e)
for d in ("/out", "/work", "/tmp"):
    t = d + "/t"
    shutil.copy("/bin/true", t)
    attempt(d + " chmod 4755", lambda: os.chmod(t, 0o4755))
    attempt(d + " chmod 2755", lambda: os.chmod(t, 0o2755))
    attempt(d + " chmod 6755", lambda: os.chmod(t, 0o6755))
    attempt(d + " fchmod 4755", lambda: os.fchmod(os.open(t, os.O_RDONLY), 0o4755))
    attempt(d + " fchmodat 4755", lambda: os.chmod("t", 0o4755, dir_fd=os.open(d, os.O_RDONLY)))
    attempt(d + " open 4755", lambda: os.close(os.open(d + "/o", os.O_CREAT | os.O_WRONLY, 0o4755)))
    attempt(d + " open 2755", lambda: os.close(os.open(d + "/o", os.O_CREAT | os.O_WRONLY, 0o2755)))
    attempt(d + " creat 2755", lambda: creat(d + "/c", 0o2755))
    os.mkdir(d + "/dir")
    attempt(d + " chmod dir 2777", lambda: os.chmod(d + "/dir", 0o2777))
    attempt(d + " setcap", lambda: os.setxattr(t, "security.capability", bytes.fromhex("0000000200200000000000000000000000000000")))
    attempt(d + " mknod chr", lambda: os.mknod(d + "/null", 0o20666, os.makedev(1, 3)))
    attempt(d + " mknod blk", lambda: os.mknod(d + "/sda", 0o60666, os.makedev(8, 0)))
    attempt(d + " mknod setuid", lambda: os.mknod(d + "/f", 0o104755))
    attempt(d + " chmod 755", lambda: os.chmod(t, 0o755))
attempt("chmod /tmp 3777", lambda: os.chmod("/tmp", 0o3777))
`

// files: host directories bound in, and the file policy in every
// writable place.
func (s *suite) files(t *testing.T) {
	// Mounts: a read-only mount is readable and refuses writes; a
	// writable one takes them, on the host; a missing host directory is
	// an invalid command.
	s.sub(t, "Mounts", needs(Exec, Mounts), func(t *testing.T, b box.Box) {
		in, out := walkableTemp(t), walkableTemp(t)
		os.WriteFile(filepath.Join(in, "data.txt"), []byte("mounted\n"), 0o644)
		os.Chmod(out, 0o777)
		res := run(t, b, box.Command{Shell: `cat /data/data.txt; (echo x > /data/new) 2>/dev/null || echo ro; echo w > /mnt/out/new.txt && echo wrote`,
			Mounts: []box.Mount{{HostPath: in, GuestPath: "/data"}, {HostPath: out, GuestPath: "/mnt/out", Writable: true}}})
		if res.Stdout != "mounted\nro\nwrote\n" {
			t.Errorf("stdout %q stderr %q", res.Stdout, res.Stderr)
		}
		if b, _ := os.ReadFile(filepath.Join(out, "new.txt")); string(b) != "w\n" {
			t.Errorf("the host sees %q", b)
		}
		if _, err := os.Stat(filepath.Join(in, "new")); err == nil {
			t.Error("a write went through the read-only mount")
		}
		_, err := b.Run(context.Background(), box.Command{Argv: []string{"true"}, Mounts: []box.Mount{{HostPath: filepath.Join(in, "none"), GuestPath: "/data"}}})
		if !errors.Is(err, box.ErrInvalidCommand) {
			t.Errorf("missing host dir: %v", err)
		}
	})
	// NoSetidFiles: the file policy of the box package (see its doc):
	// no set-user-ID or set-group-ID bit, no file capability and no
	// device node can be made, in a writable mount (seen from the host:
	// stat shows none of the bits), the working directory or /tmp, by
	// any call that sets a mode (chmod, fchmod, fchmodat, open, creat,
	// mknod); an ordinary chmod works.
	s.sub(t, "NoSetidFiles", needs(Exec, Mounts), func(t *testing.T, b box.Box) {
		var want strings.Builder
		for _, d := range []string{"/out", "/work", "/tmp"} {
			for _, a := range []string{"chmod 4755", "chmod 2755", "chmod 6755", "fchmod 4755", "fchmodat 4755", "open 4755", "open 2755",
				"creat 2755", "chmod dir 2777", "setcap", "mknod chr", "mknod blk", "mknod setuid"} {
				want.WriteString(d + " " + a + " refused\n")
			}
			want.WriteString(d + " chmod 755 ok\n")
		}
		want.WriteString("chmod /tmp 3777 refused\n")
		out := walkableTemp(t)
		os.Chmod(out, 0o1777)
		res := run(t, b, box.Command{Argv: []string{"python3", "-c", setidScript},
			Mounts: []box.Mount{{HostPath: out, GuestPath: "/out", Writable: true}}})
		if res.ExitStatus != 0 || res.Stdout != want.String() {
			t.Errorf("exit %d stderr %s\n got:\n%s\nwant:\n%s", res.ExitStatus, res.Stderr, res.Stdout, want.String())
		}
		filepath.Walk(out, func(p string, fi os.FileInfo, err error) error {
			if err != nil {
				return nil
			}
			if fi.Mode()&(os.ModeSetuid|os.ModeSetgid|os.ModeDevice|os.ModeCharDevice) != 0 {
				t.Errorf("the host sees %s as %v", p, fi.Mode())
			}
			if n, err := syscall.Getxattr(p, "security.capability", nil); err == nil || n > 0 {
				t.Errorf("the host sees a file capability on %s", p)
			}
			return nil
		})
	})
}
