package glovebox_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox"
)

// mountFixture is a read-only and a writable host directory side by side
// with a directory no mount grants, and a Runtime mounting the first two.
type mountFixture struct {
	ro, rw, outside string
	r               *glovebox.Runtime
}

func newMountFixture(t *testing.T, pool int, l glovebox.Limits) *mountFixture {
	t.Helper()
	base := t.TempDir()
	f := &mountFixture{ro: filepath.Join(base, "ro"), rw: filepath.Join(base, "rw"), outside: filepath.Join(base, "outside")}
	for _, d := range []string{f.ro, f.rw, f.outside, filepath.Join(f.ro, "sub")} {
		must(t, os.MkdirAll(d, 0o755))
	}
	must(t, os.WriteFile(filepath.Join(f.ro, "secret.txt"), []byte("read-only data"), 0o644))
	must(t, os.WriteFile(filepath.Join(f.rw, "w.txt"), []byte("writable data"), 0o644))
	must(t, os.WriteFile(filepath.Join(f.outside, "outside.txt"), []byte("host secret"), 0o644))
	for name, when := range map[string]time.Time{
		"old.txt":    time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC),
		"future.txt": time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC),
	} {
		p := filepath.Join(f.ro, name)
		must(t, os.WriteFile(p, []byte(name), 0o644))
		must(t, os.Chtimes(p, when, when))
	}
	must(t, os.Chtimes(filepath.Join(f.ro, "sub"), time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC)))
	// A link the host left in the read-only mount, pointing out of it.
	must(t, os.Symlink("../outside/outside.txt", filepath.Join(f.ro, "escape")))
	f.r = newRuntime(t, glovebox.Config{PoolSize: pool, Limits: l, Mounts: []glovebox.Mount{
		{HostPath: f.ro, GuestPath: "/ro", Description: "reference data"},
		{HostPath: f.rw, GuestPath: "/rw", Writable: true},
	}})
	return f
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// treeSum describes a host tree: every entry's path, type, mode, size,
// modification time and content (or link target).
func treeSum(t *testing.T, root string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s %v %d %d\n", p, fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			fmt.Fprintln(h, target)
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			h.Write(b)
		}
		return nil
	})
	must(t, err)
	return fmt.Sprintf("%x", h.Sum(nil))
}

// attempt wraps a guest operation: "ok" (or its value, when it is a
// String) if it succeeded, else the exception's class name.
func attempt(code string) string {
	return `begin; v = (` + code + `); v.is_a?(String) ? v : "ok"; rescue SystemCallError, IOError, ArgumentError, NotImplementedError => e; e.class.name; end`
}

func TestMountEscapes(t *testing.T) {
	f := newMountFixture(t, -1, glovebox.Limits{})
	roBefore, outBefore := treeSum(t, f.ro), treeSum(t, f.outside)
	failed := func(got string) bool {
		return strings.HasPrefix(got, "Errno::") || got == "ArgumentError" || got == "IOError" || got == "NotImplementedError"
	}

	cases := []struct {
		name, code string
		want       func(string) bool // on the guest's answer
		desc       string
	}{
		{"read", `File.read("/ro/secret.txt")`, is("read-only data"), "reads work"},
		{"list", `Dir.children("/ro").sort.join(",")`, is("escape,future.txt,old.txt,secret.txt,sub"), "lists work"},
		// Read-only means no change of any kind.
		{"create", `File.write("/ro/new.txt", "x")`, failed, "no create"},
		{"write", `File.open("/ro/secret.txt", "r+") { |io| io.write("X") }`, failed, "no write"},
		{"append", `File.open("/ro/secret.txt", "a") { |io| io.write("X") }`, failed, "no append"},
		{"overwrite", `File.write("/ro/secret.txt", "x")`, failed, "no overwrite"},
		{"truncate-only open", `File.open("/ro/secret.txt", File::RDONLY | File::TRUNC) { 1 }`, is("Errno::EROFS"), "GHSA-2r75-cxrj-cmph"},
		{"truncate", `File.truncate("/ro/secret.txt", 0)`, failed, "no truncate"},
		{"rename within", `File.rename("/ro/secret.txt", "/ro/moved.txt")`, failed, "no rename"},
		{"link within", `File.link("/ro/secret.txt", "/ro/l.txt")`, failed, "no link"},
		{"symlink within", `File.symlink("secret.txt", "/ro/s")`, failed, "no symlink"},
		{"chmod", `File.chmod(0o777, "/ro/secret.txt")`, failed, "no chmod"},
		{"utime", `File.utime(Time.at(0), Time.at(0), "/ro/secret.txt")`, failed, "no time change"},
		{"delete", `File.delete("/ro/secret.txt")`, failed, "no delete"},
		{"mkdir", `Dir.mkdir("/ro/d")`, failed, "no mkdir"},
		{"rmdir", `Dir.rmdir("/ro/sub")`, failed, "no rmdir"},
		// Across mounts (GHSA-4ch3-9j33-3pmj).
		{"link ro into rw", `File.link("/ro/secret.txt", "/rw/l.txt")`, is("Errno::EXDEV"), "hard link of a read-only file into a writable mount"},
		{"link rw into ro", `File.link("/rw/w.txt", "/ro/l.txt")`, is("Errno::EXDEV"), "hard link of a writable file into a read-only mount"},
		{"rename out of ro", `File.rename("/ro/secret.txt", "/rw/s.txt")`, is("Errno::EXDEV"), "rename out of a read-only mount"},
		{"rename into ro", `File.rename("/rw/w.txt", "/ro/w.txt")`, is("Errno::EXDEV"), "rename into a read-only mount"},
		// Paths that try to leave.
		{"dotdot", `File.read("/ro/../outside/outside.txt")`, failed, ".. out of a mount"},
		{"dotdot deep", `File.read("/rw/../../../../../../etc/passwd")`, failed, ".. to the host root"},
		{"relative dotdot", `Dir.chdir("/ro") { File.read("../outside/outside.txt") }`, failed, "relative .. after chdir"},
		{"host root", `File.read("/etc/passwd")`, failed, "no host root"},
		{"host symlink out", `File.read("/ro/escape")`, failed, "a host-made link out is refused"},
		{"abs symlink", `File.symlink("/etc/passwd", "/rw/abs"); File.read("/rw/abs")`, failed, "absolute symlink out"},
		{"rel symlink", `File.symlink("../outside/outside.txt", "/rw/rel"); File.read("/rw/rel")`, failed, "relative symlink out"},
		{"symlink to ro", `File.symlink("../ro/secret.txt", "/rw/toro"); File.write("/rw/toro", "x")`, failed, "symlink from rw to ro"},
		{"symlink stat", `File.symlink("/", "/rw/root"); File.stat("/rw/root").directory?.to_s`, failed, "stat through a link out"},
		{"symlink dir", `File.symlink("../outside", "/rw/od"); Dir.children("/rw/od").join`, failed, "listing through a link out"},
		{"trailing slash file", `File.read("/ro/secret.txt/")`, failed, "trailing slash on a file"},
		{"trailing slash create", `File.write("/rw/new.txt/", "x")`, failed, "trailing slash on create"},
		{"nul", `File.read("/ro/secret.txt\0/../../outside")`, is("ArgumentError"), "NUL in a path"},
		{"long name", `File.read("/ro/" + "a" * 5000)`, failed, "very long name"},
		{"long path", `File.read("/ro/" + "a/" * 3000 + "x")`, failed, "very long path"},
		// Extreme times (GHSA-j2g9-4prp-pf6h) must not take the host down.
		{"old mtime", `File.mtime("/ro/old.txt").year.to_s`, is("1970"), "a file dated 1900"},
		{"old read", `File.read("/ro/old.txt")`, is("old.txt"), "reading a file dated 1900"},
		{"future stat", `File.stat("/ro/future.txt").size.to_s`, is("10"), "a file dated 9999"},
		{"future read", `File.read("/ro/future.txt")`, is("future.txt"), "reading a file dated 9999"},
		{"old dir", `File.stat("/ro/sub").directory?.to_s`, is("true"), "a directory dated 1900"},
		{"glob stat", `Dir.glob("/ro/*").map { |p| File.lstat(p).mtime.year }.min.to_s`, is("1970"), "stat of every entry"},
		// The writable mount does work.
		{"rw write", `File.write("/rw/new.txt", "hello"); File.read("/rw/new.txt")`, is("hello"), "writes work"},
		{"rw link within", `File.link("/rw/w.txt", "/rw/w2.txt"); File.read("/rw/w2.txt")`, is("writable data"), "links inside one mount work"},
		{"rw rename within", `File.rename("/rw/new.txt", "/rw/renamed.txt"); File.read("/rw/renamed.txt")`, is("hello"), "renames inside one mount work"},
		{"rw symlink within", `File.symlink("w.txt", "/rw/sl"); File.read("/rw/sl")`, is("writable data"), "links inside one mount work"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := eval(t, f.r, attempt(c.code))
			wantStatus(t, res, glovebox.StatusOK)
			got, _ := res.Value.(string)
			if !c.want(got) {
				t.Errorf("%s: guest got %q", c.desc, got)
			}
		})
	}
	if treeSum(t, f.ro) != roBefore {
		t.Error("the read-only mount changed on the host")
	}
	if treeSum(t, f.outside) != outBefore {
		t.Error("the directory outside the mounts changed")
	}
	if b, _ := os.ReadFile(filepath.Join(f.rw, "renamed.txt")); string(b) != "hello" {
		t.Errorf("the writable mount's file is %q on the host", b)
	}
}

func is(want string) func(string) bool { return func(got string) bool { return got == want } }

func TestMountHostPathProblems(t *testing.T) {
	f := newMountFixture(t, 1, glovebox.Limits{})
	wantStatus(t, eval(t, f.r, `File.read("/rw/w.txt")`), glovebox.StatusOK)

	moved := f.rw + ".moved"
	must(t, os.Rename(f.rw, moved))
	res := eval(t, f.r, `File.read("/rw/w.txt")`)
	wantStatus(t, res, glovebox.StatusSandboxError)
	if !strings.Contains(res.Error.Message, f.rw) || !strings.Contains(res.Error.Message, "/rw") {
		t.Errorf("message %q does not name the mount", res.Error.Message)
	}

	must(t, os.WriteFile(f.rw, []byte("a file"), 0o644))
	res = eval(t, f.r, `1`)
	wantStatus(t, res, glovebox.StatusSandboxError)
	if !strings.Contains(res.Error.Message, "not a directory") {
		t.Errorf("message %q", res.Error.Message)
	}

	// Put a different directory back: the eval sees it, not the old one a
	// pooled VM had open.
	must(t, os.Remove(f.rw))
	must(t, os.Mkdir(f.rw, 0o755))
	must(t, os.WriteFile(filepath.Join(f.rw, "w.txt"), []byte("new dir"), 0o644))
	res = eval(t, f.r, `File.read("/rw/w.txt")`)
	wantStatus(t, res, glovebox.StatusOK)
	if res.Value != "new dir" {
		t.Errorf("read %v", res.Value)
	}
}

func TestMountConfigRules(t *testing.T) {
	dir := t.TempDir()
	m := func(guest string) glovebox.Mount { return glovebox.Mount{HostPath: dir, GuestPath: guest} }
	var many []glovebox.Mount
	for i := range glovebox.MaxMounts + 1 {
		many = append(many, m(fmt.Sprintf("/m%d", i)))
	}
	cases := map[string][]glovebox.Mount{
		"relative":       {m("data")},
		"dot":            {m("/data/.")},
		"dotdot":         {m("/data/../etc")},
		"double slash":   {m("//data")},
		"trailing slash": {m("/data/")},
		"root":           {m("/")},
		"empty":          {m("")},
		"nul":            {m("/da\x00ta")},
		"scratch":        {m("/tmp")},
		"under scratch":  {m("/tmp/x")},
		"usr":            {m("/usr")},
		"under usr":      {m("/usr/local/lib/ruby")},
		"duplicate":      {m("/data"), m("/data")},
		"nested":         {m("/data"), m("/data/sub")},
		"too many":       many,
		"no host":        {{GuestPath: "/data"}},
	}
	for name, ms := range cases {
		_, err := glovebox.New(context.Background(), glovebox.Config{Mounts: ms, PoolSize: -1})
		if !errors.Is(err, glovebox.ErrInvalidMount) {
			t.Errorf("%s: err %v, want ErrInvalidMount", name, err)
		}
	}
	// The limit itself is fine.
	r := newRuntime(t, glovebox.Config{Mounts: many[:glovebox.MaxMounts], PoolSize: -1})
	res := eval(t, r, `Dir.exist?("/m15")`)
	wantStatus(t, res, glovebox.StatusOK)
	if res.Value != true {
		t.Error("the 16th mount is not visible")
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

func TestFileQuotas(t *testing.T) {
	f := newMountFixture(t, -1, glovebox.Limits{FileWrite: 1 << 20, FileCreates: 10})
	for name, code := range map[string]string{
		"bytes scratch": `File.open("/tmp/big", "w") { |io| 3.times { io.write("x" * 512 * 1024) } }`,
		"bytes mount":   `File.open("/rw/big", "w") { |io| 3.times { io.write("x" * 512 * 1024) } }`,
		"sparse filled": `File.open("/tmp/sparse", "w") { |io| io.truncate(1 << 30); 3.times { |i| io.pwrite("x" * 512 * 1024, i << 20) } }`,
		"files":         `20.times { |i| File.write("/tmp/f#{i}", "") }`,
		"dirs":          `20.times { |i| Dir.mkdir("/rw/d#{i}") }`,
		"links":         `File.write("/tmp/t", ""); 20.times { |i| File.symlink("t", "/tmp/l#{i}") }`,
	} {
		t.Run(name, func(t *testing.T) {
			res := eval(t, f.r, attempt(code))
			wantStatus(t, res, glovebox.StatusOK)
			if res.Value != "Errno::EDQUOT" {
				t.Errorf("got %v, want Errno::EDQUOT", res.Value)
			}
		})
	}
	// The quotas bound what is in use: rewriting one file, or making and
	// removing files, takes nothing for good.
	res := eval(t, f.r, attempt(`30.times { File.write("/tmp/same", "x" * 600_000) }; 30.times { |i| File.write("/rw/n#{i}", "y"); File.delete("/rw/n#{i}") }; "fine"`))
	if res.Value != "fine" {
		t.Errorf("rewriting one file: %v", res.Value)
	}
}

// Scratch directories a dead process left behind are removed by the next
// process that uses the same base.
func TestStaleScratchSwept(t *testing.T) {
	base := privateScratch(t.TempDir())
	must(t, os.Mkdir(base, 0o700))
	cmd := exec.Command("true")
	must(t, cmd.Run())
	dead := filepath.Join(base, fmt.Sprintf("glovebox-scratch-%d-123", cmd.Process.Pid))
	alive := filepath.Join(base, fmt.Sprintf("glovebox-scratch-%d-456", os.Getppid()))
	for _, d := range []string{dead, alive} {
		must(t, os.MkdirAll(filepath.Join(d, "sub"), 0o755))
		must(t, os.WriteFile(filepath.Join(d, "sub", "f"), []byte("x"), 0o644))
	}
	newRuntime(t, glovebox.Config{PoolSize: -1, ScratchDir: filepath.Dir(base)})
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("a dead process's scratch directory is still there: %v", err)
	}
	if _, err := os.Stat(alive); err != nil {
		t.Errorf("a live process's scratch directory was removed: %v", err)
	}
}
