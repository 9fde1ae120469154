package engine

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The cache holds compiled machine code this process runs, checked only
// for damage: a cache directory every user can write, or one another
// user owns, would let them run code as this user. Both are refused
// before anything is read from them.
func TestCacheDirOthersCanWriteIsRefused(t *testing.T) {
	for name, c := range map[string]struct {
		prepare func(root string) error
		want    string
	}{
		"world-writable root":   {func(root string) error { return os.Chmod(root, 0o1777) }, "writable by every user"},
		"world-writable engine": {func(root string) error { return os.Chmod(filepath.Join(root, "engine"), 0o777) }, "writable by every user"},
		"another user's engine": {func(root string) error { return os.Chown(filepath.Join(root, "engine"), 4242, 4242) }, "belongs to uid 4242"},
	} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			if err := os.Mkdir(filepath.Join(root, "engine"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := c.prepare(root); err != nil {
				t.Skipf("cannot set up the directory here: %v", err)
			}
			_, err := Open(context.Background(), Config{ImagePath: testImage, CacheDir: filepath.Join(root, "engine")})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Open: %v, want an error saying %q", err, c.want)
			}
			if ents, _ := os.ReadDir(filepath.Join(root, "engine")); len(ents) != 0 {
				t.Fatalf("something was written to the refused cache: %v", ents)
			}
		})
	}
}
