package image

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestNoNPMSaysWhatToDo(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	t.Setenv(EnvImage, "")
	_, err := Path(context.Background(), t.TempDir())
	if !errors.Is(err, ErrNoNPM) {
		t.Fatalf("err %v", err)
	}
	for _, want := range []string{"apt-get install -y npm", "glovebox setup", EnvImage, Package + "@" + Version} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message lacks %q: %v", want, err)
		}
	}
}

func TestEnvImage(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.wasm")
	os.WriteFile(p, []byte("\x00asm"), 0o644)
	t.Setenv(EnvImage, p)
	if got, err := Path(context.Background(), t.TempDir()); err != nil || got != p {
		t.Fatalf("got %q, %v", got, err)
	}
	t.Setenv(EnvImage, p+".missing")
	if _, err := Path(context.Background(), t.TempDir()); err == nil {
		t.Fatal("a missing GLOVEBOX_IMAGE was accepted")
	}
}

func TestExtractChecksIntegrity(t *testing.T) {
	if _, err := Extract([]byte("not a tarball")); err == nil || !strings.Contains(err.Error(), "integrity") {
		t.Fatalf("err %v", err)
	}
}

func TestCachedImageIsVerified(t *testing.T) {
	dir := t.TempDir()
	dst := CachedPath(dir)
	os.MkdirAll(filepath.Dir(dst), 0o755)
	os.WriteFile(dst, []byte("tampered"), 0o644)
	t.Setenv(EnvImage, "")
	t.Setenv("PATH", t.TempDir()) // no npm: a bad cached file must not be used
	if _, err := Path(context.Background(), dir); !errors.Is(err, ErrNoNPM) {
		t.Fatalf("a cached image with the wrong hash was used: %v", err)
	}
}

// besideExe makes a directory holding a fake executable and, when img is
// not "", a BesideName file with img's contents (or a symbolic link to
// link), and points executable at it for the test.
func besideExe(t *testing.T, img []byte, link string) string {
	t.Helper()
	dir := t.TempDir()
	exe := filepath.Join(dir, "glovebox")
	if err := os.WriteFile(exe, []byte("#!/bin/false\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, BesideName)
	switch {
	case link != "":
		if err := os.Symlink(link, p); err != nil {
			t.Fatal(err)
		}
	case img != nil:
		if err := os.WriteFile(p, img, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := executable
	executable = func() (string, error) { return exe, nil }
	t.Cleanup(func() { executable = old })
	return p
}

// pinnedImage is the pinned image in the machine's glovebox cache, or a
// skip when it has not been fetched yet (`glovebox setup` fetches it).
func pinnedImage(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("GLOVEBOX_CACHE_DIR")
	if dir == "" {
		d, err := os.UserCacheDir()
		if err != nil {
			t.Skip("no user cache directory")
		}
		dir = filepath.Join(d, "glovebox")
	}
	p := CachedPath(dir)
	if ok, _ := verifyFile(p); !ok {
		t.Skipf("the pinned image is not in %s: run `glovebox setup` first", dir)
	}
	return p
}

// An image beside the executable is used before the cache and before
// npm: with neither (an empty cache, no npm on PATH), Path finds it.
func TestBesideImageUsedWithoutNPM(t *testing.T) {
	want := besideExe(t, nil, pinnedImage(t))
	t.Setenv(EnvImage, "")
	t.Setenv("PATH", t.TempDir())
	cache := t.TempDir()
	for i := range 2 { // the second call takes the stamp the first left
		got, err := Path(context.Background(), cache)
		if err != nil || got != want {
			t.Fatalf("call %d: got %q, %v; want %q", i, got, err, want)
		}
	}
	if m, _ := filepath.Glob(filepath.Join(cache, "image", "beside-*.verified")); len(m) != 1 {
		t.Fatalf("stamps %v, want one in the cache directory", m)
	}
	if _, err := os.Stat(CachedPath(cache)); !os.IsNotExist(err) {
		t.Fatalf("the pinned image was fetched into the cache: %v", err)
	}
}

// An image beside the executable with the wrong hash is an error naming
// the file, not a silent fall-back to the cache or npm; so is one changed
// after it was checked once.
func TestBesideImageMismatchNamesFile(t *testing.T) {
	p := besideExe(t, []byte("\x00asm not ruby"), "")
	t.Setenv(EnvImage, "")
	_, err := Path(context.Background(), t.TempDir())
	if err == nil {
		t.Fatal("an image beside the executable with the wrong hash was accepted")
	}
	for _, want := range []string{p, "SHA-256", SHA256, EnvImage} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message lacks %q: %v", want, err)
		}
	}
}

func TestBesideImageRecheckedWhenChanged(t *testing.T) {
	src := pinnedImage(t)
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	p := besideExe(t, b, "")
	t.Setenv(EnvImage, "")
	cache := t.TempDir()
	if _, err := Path(context.Background(), cache); err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 1
	b = append(b, 0) // another size: the stamp no longer matches
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Path(context.Background(), cache); err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("a changed image beside the executable was accepted: %v", err)
	}
}

// $GLOVEBOX_IMAGE wins over an image beside the executable (even a bad
// one, which is then not read).
func TestEnvImageBeforeBeside(t *testing.T) {
	besideExe(t, []byte("bad"), "")
	p := filepath.Join(t.TempDir(), "x.wasm")
	os.WriteFile(p, []byte("\x00asm"), 0o644)
	t.Setenv(EnvImage, p)
	if got, err := Path(context.Background(), t.TempDir()); err != nil || got != p {
		t.Fatalf("got %q, %v", got, err)
	}
}

// Find says when the image must be fetched, without fetching it.
func TestFindReportsFetch(t *testing.T) {
	besideExe(t, nil, "")
	t.Setenv(EnvImage, "")
	t.Setenv("PATH", t.TempDir())
	cache := t.TempDir()
	p, fetch, err := Find(cache)
	if err != nil || !fetch || p != CachedPath(cache) {
		t.Fatalf("Find = %q, %v, %v; want %q, true, nil", p, fetch, err, CachedPath(cache))
	}
}
