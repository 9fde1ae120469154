package glovebox_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gloveboxhq/glovebox"
)

// Symbolic links whose targets stay inside the guest's own writable tree
// work, absolute or relative, and read back as given; on the host they
// hold relative targets that stay inside the mount too.
func TestSymlinkInsideMount(t *testing.T) {
	f := newMountFixture(t, -1, glovebox.Limits{})
	for _, c := range []struct{ name, code, want string }{
		{"absolute in scratch", `Dir.mkdir("/tmp/d"); File.write("/tmp/d/a", "1"); File.symlink("/tmp/d/a", "/tmp/d/l"); [File.read("/tmp/d/l"), File.readlink("/tmp/d/l"), File.lstat("/tmp/d/l").size].join(" ")`, "1 /tmp/d/a 8"},
		{"absolute in mount", `Dir.mkdir("/rw/d"); File.symlink("/rw/w.txt", "/rw/d/l"); [File.read("/rw/d/l"), File.readlink("/rw/d/l"), File.realpath("/rw/d/l")].join(" ")`, "writable data /rw/w.txt /rw/w.txt"},
		{"absolute directory", `Dir.mkdir("/rw/e"); File.symlink("/rw", "/rw/e/top"); File.read("/rw/e/top/w.txt")`, "writable data"},
		{"absolute with dots", `Dir.mkdir("/rw/g"); File.symlink("/rw/g/../w.txt", "/rw/g/l"); File.read("/rw/g/l")`, "writable data"},
		{"absolute root of tree", `File.symlink("/tmp", "/tmp/self"); Dir.children("/tmp/self").sort.join(",")`, "self"},
		{"relative", `File.write("/tmp/r", "r"); File.symlink("r", "/tmp/lr"); [File.read("/tmp/lr"), File.readlink("/tmp/lr")].join(" ")`, "r r"},
		{"relative up inside", `Dir.mkdir("/tmp/u"); File.write("/tmp/t", "t"); File.symlink("../t", "/tmp/u/l"); File.read("/tmp/u/l")`, "t"},
		{"chain absolute", `File.write("/tmp/f", "f"); File.symlink("/tmp/f", "/tmp/b"); File.symlink("/tmp/b", "/tmp/a"); [File.read("/tmp/a"), File.realpath("/tmp/a")].join(" ")`, "f /tmp/f"},
		{"chain mixed", `File.symlink("w.txt", "/rw/m2"); Dir.mkdir("/rw/h"); File.symlink("/rw/m2", "/rw/h/m1"); File.read("/rw/h/m1")`, "writable data"},
		{"dangling then made", `File.symlink("/tmp/later", "/tmp/dl"); File.write("/tmp/dl", "via link"); File.read("/tmp/later")`, "via link"},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := eval(t, f.r, attempt(c.code))
			wantStatus(t, res, glovebox.StatusOK)
			if res.Value != c.want {
				t.Errorf("got %v, want %q", res.Value, c.want)
			}
		})
	}
	for link, want := range map[string]string{"d/l": "../w.txt", "e/top": "..", "h/m1": "../m2"} {
		if got, err := os.Readlink(filepath.Join(f.rw, link)); err != nil || got != want {
			t.Errorf("the host link %s holds %q (%v), want %q", link, got, err, want)
		}
	}
}

// A link that would lead outside its mount is refused (EPERM), whatever
// the spelling; and a link made inside that leads out once its directory
// moved is refused where it is followed.
func TestSymlinkOutsideRefused(t *testing.T) {
	f := newMountFixture(t, -1, glovebox.Limits{})
	base := filepath.Dir(f.rw)
	must(t, os.WriteFile(filepath.Join(base, "w.txt"), []byte("host secret"), 0o644))
	for _, c := range []struct{ name, code string }{
		{"absolute out", `File.symlink("/etc/passwd", "/rw/x1")`},
		{"absolute dots out", `File.symlink("/rw/../etc/passwd", "/rw/x2")`},
		{"absolute scratch dots out", `File.symlink("/tmp/../../etc", "/tmp/x3")`},
		{"absolute to other mount", `File.symlink("/ro/secret.txt", "/rw/x4")`},
		{"absolute to scratch from mount", `File.symlink("/tmp", "/rw/x5")`},
		{"absolute to mount from scratch", `File.symlink("/rw/w.txt", "/tmp/x6")`},
		{"relative up", `File.symlink("../outside/outside.txt", "/rw/x7")`},
		{"relative up and back", `File.symlink("../rw/w.txt", "/rw/x8")`},
		{"relative dots", `File.symlink("a/../../x", "/rw/x9")`},
		{"relative parent", `File.symlink("..", "/rw/x10")`},
		{"nested up", `Dir.mkdir("/rw/n"); File.symlink("../../w.txt", "/rw/n/x11")`},
		{"deep dots", `Dir.mkdir("/tmp/n"); File.symlink("./.././../x", "/tmp/n/x12")`},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := eval(t, f.r, attempt(c.code))
			wantStatus(t, res, glovebox.StatusOK)
			if res.Value != "Errno::EPERM" {
				t.Errorf("got %v, want Errno::EPERM", res.Value)
			}
		})
	}
	for _, n := range []string{"x1", "x2", "x4", "x5", "x7", "x8", "x9", "x10", "n/x11"} {
		if _, err := os.Lstat(filepath.Join(f.rw, n)); err == nil {
			t.Errorf("a refused link %s was made on the host", n)
		}
	}
	// Made inside, then its directory moved up a level: followed, it would
	// lead to the host's file next to the mount.
	res := eval(t, f.r, attempt(`Dir.mkdir("/rw/a"); Dir.mkdir("/rw/a/b"); File.symlink("../../w.txt", "/rw/a/b/l"); r = File.read("/rw/a/b/l"); File.rename("/rw/a/b", "/rw/b"); r + "|" + File.read("/rw/b/l")`))
	wantStatus(t, res, glovebox.StatusOK)
	if res.Value == "writable data|host secret" || res.Value == "ok" {
		t.Fatalf("read through a moved link: %v", res.Value)
	}
	if s, _ := res.Value.(string); len(s) < 7 || s[:7] != "Errno::" {
		t.Fatalf("got %v, want an Errno", res.Value)
	}
	// A read-only mount takes no links at all.
	res = eval(t, f.r, attempt(`File.symlink("secret.txt", "/ro/l")`))
	if s, _ := res.Value.(string); len(s) < 7 || s[:7] != "Errno::" {
		t.Fatalf("a link in a read-only mount: %v", res.Value)
	}
}
