package glovebox

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	"github.com/gloveboxhq/glovebox/internal/engine"
)

// Mount grants the guest a host directory. The guest sees it at GuestPath;
// nothing outside HostPath is reachable through it: every path the guest
// uses is resolved by the host kernel beneath the mount's directory
// (openat2 with RESOLVE_BENEATH), so "..", absolute or relative symbolic
// links and hard-link or rename tricks cannot leave it.
//
// A read-only mount (the default) refuses every change: creating, writing,
// truncating, renaming, linking, changing times or deleting. In any mount,
// FIFOs, sockets and device nodes can be listed and stat'ed but not opened
// (Errno::EACCES in the guest): opening one could block the host thread
// or act on a device. A writable
// mount lets the guest do all of that inside HostPath, with the host
// process's permissions: its blast radius is every file under HostPath the
// host user may change, and symbolic links the guest creates there stay
// behind on the host, pointing wherever the guest wrote (they are refused
// when followed from inside the sandbox, but a host program that later
// follows them is not protected). Mount a directory made for the purpose,
// never one holding anything else.
type Mount struct {
	// HostPath is the host directory. It is checked when an eval starts:
	// a missing path, or one that is not a directory, ends that eval
	// with StatusSandboxError and a message naming it.
	HostPath string
	// GuestPath is where the guest sees it: absolute, normalized (no
	// ".", "..", repeated or trailing slashes), not the root, and not on
	// or under a reserved path (see ReservedGuestPaths).
	GuestPath string
	// Writable grants write access; the zero value is read-only.
	Writable bool
	// Description says what the directory holds, for the model-facing
	// description of the sandbox; it has no effect on access.
	Description string
}

// MaxMounts is the most mounts one configuration may have: 16, as the
// sandbox's requirements set it. Each mount costs every VM a host
// descriptor and is part of the layout its boot snapshot is built for.
const MaxMounts = 16

// ScratchPath is the guest path of each eval's private scratch directory:
// writable, empty when the eval starts and wiped when it ends (in a
// session too: keep files across evals in a writable mount). Ruby's
// Dir.tmpdir and Tempfile use it. Its host directory is made for each VM
// under Config.ScratchDir: /dev/shm when that is writable, else the
// host's temporary directory ($TMPDIR).
const ScratchPath = engine.ScratchGuest

// ReservedGuestPaths returns the guest paths no mount may be on, under or
// above: ScratchPath, and /usr, where the guest's own Ruby standard
// library lives inside the image. The slice is the caller's.
func ReservedGuestPaths() []string { return []string{ScratchPath, "/usr"} }

// ErrInvalidMount wraps every rejection of a [Mount] configuration.
var ErrInvalidMount = errors.New("glovebox: invalid mount")

// validateMounts checks a mount list as Config.Mounts, without touching
// the host file system (see checkHostDirs).
func validateMounts(ms []Mount) error {
	if len(ms) > MaxMounts {
		return fmt.Errorf("%w: %d mounts, more than the %d allowed", ErrInvalidMount, len(ms), MaxMounts)
	}
	for i, m := range ms {
		if m.HostPath == "" {
			return fmt.Errorf("%w: mount %d (%q) has no HostPath", ErrInvalidMount, i, m.GuestPath)
		}
		if strings.IndexByte(m.HostPath, 0) >= 0 {
			return fmt.Errorf("%w: mount %d's HostPath contains a NUL byte", ErrInvalidMount, i)
		}
		if err := checkGuestPath(m.GuestPath); err != nil {
			return fmt.Errorf("%w: mount %d: %v", ErrInvalidMount, i, err)
		}
		for _, r := range ReservedGuestPaths() {
			if overlaps(m.GuestPath, r) {
				return fmt.Errorf("%w: mount %d: guest path %s overlaps %s, which the sandbox reserves", ErrInvalidMount, i, m.GuestPath, r)
			}
		}
		for j := range i {
			if ms[j].GuestPath == m.GuestPath {
				return fmt.Errorf("%w: mounts %d and %d both use guest path %s", ErrInvalidMount, j, i, m.GuestPath)
			}
			if overlaps(ms[j].GuestPath, m.GuestPath) {
				return fmt.Errorf("%w: mounts %d and %d nest (%s and %s); mount them side by side", ErrInvalidMount, j, i, ms[j].GuestPath, m.GuestPath)
			}
		}
	}
	return nil
}

// checkHostDirs reports the first mount whose host path is not a
// directory now, so that New reports the mistake before any slow step
// rather than the first eval (host paths are checked again per eval,
// since they may change). Profiles do not call it: a registered
// configuration may name a directory made later.
func checkHostDirs(ms []Mount) error {
	for i, m := range ms {
		if fi, err := os.Stat(m.HostPath); err != nil {
			return fmt.Errorf("%w: mount %d (%s): host directory %s: %v", ErrInvalidMount, i, m.GuestPath, m.HostPath, errors.Unwrap(err))
		} else if !fi.IsDir() {
			return fmt.Errorf("%w: mount %d (%s): host path %s is not a directory", ErrInvalidMount, i, m.GuestPath, m.HostPath)
		}
	}
	return nil
}

// checkGuestPath enforces the GuestPath rules.
func checkGuestPath(p string) error {
	switch {
	case p == "":
		return errors.New("GuestPath is empty")
	case !strings.HasPrefix(p, "/"):
		return fmt.Errorf("guest path %q is relative; it must be absolute, like /data", p)
	case p == "/":
		return errors.New("guest path / would hide the whole guest file system; mount at a directory such as /data")
	case strings.ContainsAny(p, "\x00\\"):
		return fmt.Errorf("guest path %q contains a NUL byte or a backslash", p)
	case path.Clean(p) != p:
		return fmt.Errorf("guest path %q is not normalized (it would be %s)", p, path.Clean(p))
	case len(p) > 1024:
		return fmt.Errorf("guest path is %d bytes, more than 1024", len(p))
	}
	return nil
}

// overlaps reports whether one of two clean absolute paths is the other or
// lies under it.
func overlaps(a, b string) bool {
	return a == b || strings.HasPrefix(a, b+"/") || strings.HasPrefix(b, a+"/")
}
