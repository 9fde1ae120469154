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
