package glovebox_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gloveboxhq/glovebox"
)

// A claims directory every user can write would let anyone on the host
// delete a claim and continue a paused eval twice: it is refused. A claim
// planted as a symbolic link (here dangling, to a file outside) counts as
// made and creates nothing where it points.
func TestDirStateStoreRefusesSharedDirsAndPlantedLinks(t *testing.T) {
	ctx := context.Background()
	shared := filepath.Join(t.TempDir(), "claims")
	if err := os.Mkdir(shared, 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chmod(shared, 0o1777)
	if _, err := glovebox.NewDirStateStore(shared); err == nil || !strings.Contains(err.Error(), "writable by every user") {
		t.Fatalf("a world-writable claims directory: %v", err)
	}
	os.Chmod(shared, 0o750)
	store, err := glovebox.NewDirStateStore(shared)
	if err != nil {
		t.Fatal(err)
	}
	id := strings.Repeat("ab", 16)
	target := filepath.Join(t.TempDir(), "clobbered")
	if err := os.Symlink(target, filepath.Join(shared, id)); err != nil {
		t.Fatal(err)
	}
	if err := store.Claim(ctx, id); !errors.Is(err, glovebox.ErrStateUsed) {
		t.Fatalf("a planted link: %v", err)
	}
	if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the claim created the link's target: %v", err)
	}
}
