package glovebox_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gloveboxhq/glovebox"
)

// TestNewLogsSlowStepsWithoutProgress: with Config.Progress nil, a slow
// first-run step (here the boot snapshot, in a cache that has the
// compiled module but no snapshot) is logged through Config.Logger at
// Info level as it starts and ends.
func TestNewLogsSlowStepsWithoutProgress(t *testing.T) {
	base, err := glovebox.DefaultCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	images, _ := filepath.Glob(filepath.Join(base, "image", "*", "ruby+stdlib.wasm"))
	if os.Getenv("GLOVEBOX_IMAGE") != "" {
		images = []string{os.Getenv("GLOVEBOX_IMAGE")}
	}
	if len(images) != 1 {
		t.Skipf("no single cached image under %s (found %v)", base, images)
	}
	// A cache with everything but the snapshots: link (or copy) the
	// engine's files, leave out the snap-* directories.
	cache := t.TempDir()
	src := filepath.Join(base, "engine")
	err = filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		dst := filepath.Join(cache, "engine", rel)
		switch {
		case d.IsDir() && strings.HasPrefix(d.Name(), "snap-"):
			return filepath.SkipDir
		case d.IsDir():
			return os.MkdirAll(dst, 0o755)
		case d.Name() == ".lock":
			return nil
		}
		if os.Link(p, dst) == nil {
			return nil
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		defer out.Close()
		_, err = io.Copy(out, in)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	r, err := glovebox.New(context.Background(), glovebox.Config{
		CacheDir: cache, ImagePath: images[0], PoolSize: -1,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if !strings.Contains(logs.String(), "level=INFO") || !strings.Contains(logs.String(), "snapshot") || !strings.Contains(logs.String(), "done") {
		t.Fatalf("the slow step was not logged:\n%s", logs.String())
	}
	if res := eval(t, r, "1 + 1"); res.Value != int64(2) && res.Value != 2 {
		t.Fatalf("value %#v", res.Value)
	}
}
