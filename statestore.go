package glovebox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// DirStateStore is a [StateStore] that records each claimed state id as
// an empty file in a directory: claims are atomic (O_CREAT|O_EXCL) across
// the processes sharing the directory on one host (a shared network file
// system needs its own exclusive-create guarantees). Ids are never
// removed: delete files older than the states you keep to bound it.
type DirStateStore struct {
	dir string
}

// NewDirStateStore uses dir, making it (mode 0700) if needed. It fails if
// dir cannot be made, is not a directory, or is writable by every user
// (mode o+w, /tmp's sticky kind included): anyone on the host could then
// delete a claim and continue a paused eval a second time, or claim one
// first. A claim's name is never followed as a symbolic link.
func NewDirStateStore(dir string) (*DirStateStore, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("glovebox: state store: %w", err)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("glovebox: state store: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("glovebox: state store: %s is not a directory", dir)
	}
	if perm := st.Mode().Perm(); perm&0o002 != 0 {
		return nil, fmt.Errorf("glovebox: state store: %s is writable by every user (mode %#o): anyone on this host could "+
			"delete a claim and continue a paused eval again; use a directory only the app's user can write (chmod o-w)", dir, perm)
	}
	return &DirStateStore{dir: dir}, nil
}

// Claim records id, failing with an error wrapping [ErrStateUsed] when it
// was recorded before. id must be a state id (32 hex digits).
func (d *DirStateStore) Claim(ctx context.Context, id string) error {
	if !validStateID(id) {
		return fmt.Errorf("%w: %q is not a state id", ErrStateInvalid, id)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(d.dir, id), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%w: state %s", ErrStateUsed, id)
	}
	if err != nil {
		return fmt.Errorf("glovebox: state store: %w", err)
	}
	return f.Close()
}

func validStateID(id string) bool {
	if len(id) != 2*stateIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
