package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gloveboxhq/glovebox/internal/wt"
)

// Mount is a host directory the guest sees at Guest.
type Mount struct {
	Host, Guest string
	Write       bool
}

// ScratchGuest is where every VM's private scratch directory appears.
const ScratchGuest = "/tmp"

// The guest's file system is wasmtime's WASI implementation over the
// preopened directories (the scratch directory, then the mounts, at file
// descriptors 3, 4, ...), with a few calls shadowed by checked wrappers.
// wasmtime 39.0.1, the release wasmtime-go v39.0.1 links, has three
// published flaws there, each closed here:
//
//   - GHSA-2r75-cxrj-cmph: path_open with the truncate flag and no write
//     right skips the write-permission check. The wrapper refuses
//     truncation in a read-only mount.
//   - GHSA-4ch3-9j33-3pmj: path_link and path_rename do not check the
//     destination's permissions, so a file can be linked or moved between
//     a read-only and a writable mount. The wrapper refuses both across
//     mounts (EXDEV, as between file systems).
//   - GHSA-j2g9-4prp-pf6h: a file time before 1970 (or too far ahead)
//     panics the host while building stat results, which would take the
//     whole process down. fd_filestat_get and path_filestat_get are
//     answered here, from the host kernel, never by wasmtime.
//
// Beyond those, fd_readdir is answered here too (wasmtime's re-reads the
// whole directory on every call: quadratic, inside host calls no deadline
// reaches), path_open refuses FIFOs and device nodes (opening one can
// block the host thread), writes, truncations, creations and removals are
// accounted against the eval's quotas on space and names in use (see
// quota.go), path_symlink and path_readlink let links inside a mount have
// absolute targets (see symlink.go), and open files count against a
// process-wide descriptor budget.
//
// To answer stat calls the guard keeps, for every file descriptor the guest
// has open in a mount, a host O_PATH descriptor of the same file
// (a "mirror"), opened with openat2 and RESOLVE_BENEATH from the mirror of
// the directory the guest opened it from: the kernel refuses any path,
// "..", absolute or relative symbolic link that leads out.

// WASI preview 1 numbers used here.
const (
	errnoBadf     = 8
	errnoDquot    = 19
	errnoMfile    = 33
	errnoExist    = 20
	errnoNfile    = 41
	errnoNoent    = 44
	errnoNotcap   = 76
	errnoRofs     = 69
	errnoXdev     = 75
	errnoIO       = 29
	oflagCreat    = 1
	oflagExcl     = 4
	whenceCur     = 1
	errnoAcces    = 2
	oflagTrunc    = 8
	lookupFollow  = 1
	filestatSize  = 64
	maxOpenFiles  = 256
	wasiFiletypes = 8
)

// guestFiles counts the host descriptors that guests hold open through
// the guard, in every VM of the process: two for each file or directory
// a guest has open (wasmtime's and the mirror). Sessions keep their
// guests' files across evals, so without a process-wide bound enough of
// them would take every descriptor the process may have.
var guestFiles atomic.Int64

// guestFileBudget is the most host descriptors guests may hold together:
// half the process's soft RLIMIT_NOFILE, leaving the other half to the
// host program (and to the VMs' own preopens and scratch directories).
func guestFileBudget() int64 {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil || lim.Cur == unix.RLIM_INFINITY || lim.Cur > 1<<40 {
		return 1 << 30
	}
	return int64(lim.Cur / 2)
}

// vmFileBound is the most files and directories one VM's guest may hold
// open at once (beyond its preopened directories): maxOpenFiles (256),
// or fewer when the process's descriptor limit is low, so that no VM
// (and so no session, which keeps its VM's files across evals) takes
// more than a quarter of guestFileBudget. With RLIMIT_NOFILE at 1024 the
// budget is 512 host descriptors and a VM may hold 64 files (128
// descriptors); Go raises the soft limit to the hard one at start, which
// on common systems leaves the 256. A guest past its bound gets EMFILE;
// one that finds the shared budget taken (by four or more hoarding VMs)
// gets ENFILE.
func vmFileBound() int {
	return int(max(min(maxOpenFiles, guestFileBudget()/2/4), 1))
}

// dropMirror closes f's mirror and returns its two descriptors to the
// process-wide budget.
func dropMirror(f *guestFD) {
	if f != nil && f.mirror >= 0 {
		unix.Close(f.mirror)
		f.mirror = -1
		guestFiles.Add(-2)
		releaseInode(f.id)
	}
}

// FSLimits bound what one eval's files may hold at once (see usage).
type FSLimits struct {
	Write   int64 // bytes allocated by the files it wrote (scratch and writable mounts)
	Creates int   // names (files, directories, links) it made that exist
}

// fsGuard is one VM's file-system state: its domains (0 is the scratch
// directory, then the mounts in order), the guest's open descriptors in
// them, and the per-eval quotas.
type fsGuard struct {
	domains []domain
	fds     map[uint32]*guestFD
	use     usage
	limits  FSLimits
	kinds   map[uint64]fsKind     // allocation behaviour by device
	links   map[fileID]linkRecord // symbolic links made with absolute targets
	orig    [numShadowed]wt.Func  // the trampoline's exports
	// stdioGone marks stdout and stderr once the guest closed or
	// replaced them: their writes then go to wasmtime like any other.
	stdioGone [3]bool
	// scratchID is the scratch directory's inode: its times are shown
	// no earlier than the eval's start (see putFilestat).
	scratchID fileID
	// named is set once the guest may have added a name to a directory:
	// it called path_open with O_CREAT, path_create_directory,
	// path_symlink, path_link or path_rename (the only calls that make a
	// name; each is shadowed here), whatever their outcome. A new guard
	// starts with it set. While it is clear, the scratch directory is as
	// the last wipe left it, empty, and need not be wiped (wipeScratch).
	named bool
}

type domain struct {
	Mount
	root int // O_PATH descriptor of the host directory
}

type guestFD struct {
	domain int
	mirror int    // O_PATH descriptor of the same file
	id     fileID // the mirror's inode
	dirPos dirPos // where the guest's listing of it stopped
}

// newFSGuard opens the mirrors of scratch and mounts. A mount whose host
// path is missing or not a directory is an error naming it.
func newFSGuard(scratch string, mounts []Mount) (*fsGuard, error) {
	g := &fsGuard{fds: map[uint32]*guestFD{}, use: newUsage(), named: true}
	all := append([]Mount{{Host: scratch, Guest: ScratchGuest, Write: true}}, mounts...)
	for i, m := range all {
		fd, err := unix.Open(m.Host, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			g.close()
			what := "cannot be opened"
			switch {
			case errors.Is(err, unix.ENOENT):
				what = "does not exist"
			case errors.Is(err, unix.ENOTDIR):
				what = "is not a directory"
			}
			return nil, &MountError{Host: m.Host, Guest: m.Guest, Msg: fmt.Sprintf("the host path %s for mount %s %s (%v)", m.Host, m.Guest, what, err)}
		}
		if i == 0 {
			var st unix.Stat_t
			if unix.Fstat(fd, &st) == nil {
				g.scratchID = idOf(&st)
			}
		}
		g.domains = append(g.domains, domain{Mount: m, root: fd})
		g.fds[uint32(3+i)] = &guestFD{domain: i, mirror: -1}
	}
	return g, nil
}

// MountError reports a mount whose host directory is unusable.
type MountError struct {
	Host, Guest, Msg string
}

func (e *MountError) Error() string { return e.Msg }

func (g *fsGuard) close() {
	for _, f := range g.fds {
		dropMirror(f)
	}
	for _, d := range g.domains {
		unix.Close(d.root)
	}
	g.fds, g.domains = nil, nil
}

// emptyScratchFiles empties every scratch file the guest still has open.
// After the scratch directory is wiped they have no name, but an open
// descriptor would keep their data for a session's later evals, and on
// /dev/shm pin host memory past FileWrite, eval after eval.
func (g *fsGuard) emptyScratchFiles() error {
	for _, f := range g.fds {
		var st unix.Stat_t
		if f.domain != 0 || f.mirror < 0 || unix.Fstat(f.mirror, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size == 0 {
			continue
		}
		// The mirror is an O_PATH descriptor; truncate through its /proc link.
		if err := unix.Truncate(fmt.Sprintf("/proc/self/fd/%d", f.mirror), 0); err != nil {
			return fmt.Errorf("emptying a scratch file the guest keeps open: %w", err)
		}
	}
	return nil
}

// reset starts a new eval's quotas.
func (g *fsGuard) reset(l FSLimits) { g.limits, g.use = l, newUsage() }

// dirOf returns the host directory descriptor behind a guest descriptor.
func (g *fsGuard) dirOf(f *guestFD) int {
	if f.mirror >= 0 {
		return f.mirror
	}
	return g.domains[f.domain].root
}

// The shadowed imports.
const (
	shPathOpen = iota
	shFdClose
	shFdRenumber
	shPathLink
	shPathRename
	shFdWrite
	shFdPwrite
	shFdSetSize
	shPathMkdir
	shPathSymlink
	shPathUnlink
	shPathRmdir
	shPathReadlink
	shFdSeek // not shadowed: the guard calls it to learn a write's offset
	numShadowed
)

var shadowNames = [numShadowed]string{
	"path_open", "fd_close", "fd_renumber", "path_link", "path_rename",
	"fd_write", "fd_pwrite", "fd_filestat_set_size",
	"path_create_directory", "path_symlink", "path_unlink_file",
	"path_remove_directory", "path_readlink", "fd_seek",
}

// original calls wasmtime's own implementation of shadowed import i,
// through the trampoline.
func (v *VM) original(c *wt.Caller, i int, args ...uint64) (uint32, error) {
	var buf [maxShadowArgs]uint64
	copy(buf[:], args)
	if err := v.fs.orig[i].Call(c.Context(), buf[:max(len(args), 1)]); err != nil {
		return 0, err
	}
	return uint32(buf[0]), nil
}

const maxShadowArgs = 9

// fsHostFuncs are the shadowing wrappers, by import name.
var fsHostFuncs = map[string]wt.HostFunc{
	"path_open":             hostPathOpen,
	"fd_close":              hostFdClose,
	"fd_renumber":           hostFdRenumber,
	"path_link":             hostPathLink,
	"path_rename":           hostPathRename,
	"fd_filestat_get":       hostFdFilestatGet,
	"path_filestat_get":     hostPathFilestatGet,
	"fd_write":              hostFdWrite,
	"fd_pwrite":             hostFdPwrite,
	"fd_filestat_set_size":  hostFdSetSize,
	"fd_readdir":            hostFdReaddir,
	"path_create_directory": hostPathMkdir,
	"path_symlink":          hostPathSymlink,
	"path_unlink_file":      hostPathUnlink,
	"path_remove_directory": hostPathRmdir,
	"path_readlink":         hostPathReadlink,
}

func ret(vals wt.Vals, errno uint32) error {
	vals.SetI32(0, int32(errno))
	return nil
}

// guestPath reads a path argument; a path that is not in memory, or holds
// a NUL byte, is EINVAL.
func (v *VM) guestPath(c *wt.Caller, ptr, n uint32) (string, bool) {
	if n > 1<<16 {
		return "", false
	}
	b, ok := v.guest(c.Context(), ptr, n)
	if !ok || strings.IndexByte(string(b), 0) >= 0 {
		return "", false
	}
	return string(b), true
}

// resolve opens an O_PATH descriptor for path beneath dir, following a
// final symbolic link if follow is set. It returns a WASI errno.
func resolve(dir int, path string, follow bool) (int, uint32) {
	if path == "" {
		return -1, errnoNoent
	}
	flags := uint64(unix.O_PATH | unix.O_CLOEXEC)
	if !follow {
		flags |= unix.O_NOFOLLOW
	}
	for {
		fd, err := unix.Openat2(dir, path, &unix.OpenHow{Flags: flags, Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS})
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		if err != nil {
			return -1, wasiErrno(err)
		}
		return fd, errnoSuccess
	}
}

// wasiErrno maps a host errno to WASI's numbering; escaping the mount
// (EXDEV from RESOLVE_BENEATH) is "not capable".
func wasiErrno(err error) uint32 {
	var en unix.Errno
	if !errors.As(err, &en) {
		return errnoIO
	}
	switch en {
	case unix.EXDEV:
		return errnoNotcap
	case unix.ENOENT:
		return errnoNoent
	case unix.ENOTDIR:
		return 54
	case unix.ELOOP:
		return 32
	case unix.ENAMETOOLONG:
		return 37
	case unix.EACCES:
		return 2
	case unix.EPERM:
		return 63
	case unix.EMFILE, unix.ENFILE:
		return errnoMfile
	case unix.EINVAL:
		return errnoInval
	case unix.EEXIST:
		return errnoExist
	case unix.EISDIR:
		return 31
	case unix.ENOTEMPTY:
		return 55
	case unix.ENOSPC:
		return 51
	case unix.EDQUOT:
		return errnoDquot
	case unix.EROFS:
		return errnoRofs
	case unix.EFBIG:
		return 22
	}
	return errnoIO
}

func hostPathOpen(c *wt.Caller, vals wt.Vals) error {
	v := vmOf(c)
	fd, dirflags, pptr, plen, oflags := vals.U32(0), vals.U32(1), vals.U32(2), vals.U32(3), vals.U32(4)
	rightsBase, rightsInh, fdflags, retptr := vals.I64(5), vals.I64(6), vals.U32(7), vals.U32(8)
	g := v.fs
	if oflags&oflagCreat != 0 {
		g.named = true
	}
	parent, tracked := g.fds[fd]
	if !tracked {
		// stdio, or nothing: wasmtime answers (EBADF, ENOTDIR).
		e, err := v.original(c, shPathOpen, uint64(fd), uint64(dirflags), uint64(pptr), uint64(plen), uint64(oflags), uint64(rightsBase), uint64(rightsInh), uint64(fdflags), uint64(retptr))
		return firstErr(err, ret(vals, e))
	}
	path, ok := v.guestPath(c, pptr, plen)
	if !ok {
		return ret(vals, errnoInval)
	}
	// wasmtime opens by name, so the type check below cannot stop a FIFO
	// swapped in meanwhile: the open is bounded by the eval's deadline
	// (boundOpen), and what it opened by then is closed.
	open := func(oflags uint32) (e uint32, err error) {
		over := v.boundOpen(g.dirOf(parent), path, dirflags&lookupFollow != 0, func() {
			e, err = v.original(c, shPathOpen, uint64(fd), uint64(dirflags), uint64(pptr), uint64(plen), uint64(oflags), uint64(rightsBase), uint64(rightsInh), uint64(fdflags), uint64(retptr))
		})
		if over && err == nil {
			if e == errnoSuccess {
				if b, ok := v.guest(c.Context(), retptr, 4); ok {
					v.original(c, shFdClose, uint64(binary.LittleEndian.Uint32(b)))
				}
			}
			return e, v.stopOver()
		}
		return e, err
	}
	d := g.domains[parent.domain]
	if oflags&oflagTrunc != 0 && !d.Write {
		return ret(vals, errnoRofs) // GHSA-2r75-cxrj-cmph
	}
	if len(g.fds) >= vmFileBound()+len(g.domains) {
		return ret(vals, errnoMfile) // this VM's own share is taken
	}
	if guestFiles.Load()+2 > guestFileBudget() {
		return ret(vals, errnoNfile) // the whole process's share for guests is taken
	}
	// Look at what the path names now, as the open will (following a
	// final link only if asked): a FIFO or device would block or act on
	// the host inside wasmtime's open, and a missing name is a creation.
	follow := dirflags&lookupFollow != 0
	pre, pe := resolve(g.dirOf(parent), path, follow)
	var preSt unix.Stat_t // what the name held before: a truncation frees its blocks
	if pre >= 0 {
		err := unix.Fstat(pre, &preSt)
		unix.Close(pre)
		if err != nil {
			return ret(vals, wasiErrno(err))
		}
		if !openable(preSt.Mode) {
			return ret(vals, errnoAcces)
		}
	}
	// A name that exists is opened without O_CREAT, so an open counts
	// against FileCreates exactly when it may make a file, whatever
	// another session renames under it meanwhile.
	asked, creating := oflags, false
	if oflags&oflagCreat != 0 && d.Write {
		switch {
		case pe == errnoSuccess && oflags&oflagExcl != 0:
			return ret(vals, errnoExist)
		case pe == errnoSuccess:
			oflags &^= oflagCreat
		case !g.entryRoom():
			return ret(vals, errnoDquot)
		default:
			creating = true
		}
	}
	e, err := open(oflags)
	if err == nil && e == errnoNoent && oflags != asked {
		// It vanished after the check: make it, if the quota allows.
		if !g.entryRoom() {
			return ret(vals, errnoDquot)
		}
		creating = true
		e, err = open(asked)
	}
	if err != nil || e != errnoSuccess {
		return firstErr(err, ret(vals, e))
	}
	b, ok := v.guest(c.Context(), retptr, 4)
	if !ok {
		if creating {
			g.use.entries++
		}
		return ret(vals, errnoInval)
	}
	newfd := binary.LittleEndian.Uint32(b)
	mirror, me := resolve(g.dirOf(parent), path, follow)
	var st unix.Stat_t
	if me == errnoSuccess && unix.Fstat(mirror, &st) != nil {
		unix.Close(mirror)
		me = errnoIO
	}
	if me != errnoSuccess {
		// The file changed between wasmtime's open and ours: give up on it.
		if creating {
			g.use.entries++ // what it made is not known: it stays counted
		}
		v.original(c, shFdClose, uint64(newfd))
		return ret(vals, me)
	}
	id := idOf(&st)
	if creating {
		g.made(&st)
	}
	if oflags&oflagTrunc != 0 && d.Write && pe == errnoSuccess && idOf(&preSt) == id && st.Mode&unix.S_IFMT == unix.S_IFREG {
		g.account(id, allocated(&preSt), allocated(&st))
	}
	dropMirror(g.fds[newfd])
	guestFiles.Add(2)
	holdInode(id)
	g.fds[newfd] = &guestFD{domain: parent.domain, mirror: mirror, id: id}
	return ret(vals, errnoSuccess)
}

// openable reports whether the guest may open a file of this mode: a
// directory, a regular file or a symbolic link (opened as a link, with
// lookups that do not follow it). A FIFO, socket or device node a host
// program left in a mount is refused: opening one can block the host
// thread inside wasmtime, where no deadline reaches it, or act on a
// device.
func openable(mode uint32) bool {
	switch mode & unix.S_IFMT {
	case unix.S_IFDIR, unix.S_IFREG, unix.S_IFLNK:
		return true
	}
	return false
}

func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func hostFdClose(c *wt.Caller, vals wt.Vals) error {
	v := vmOf(c)
	fd := vals.U32(0)
	e, err := v.original(c, shFdClose, uint64(fd))
	if err != nil {
		return err
	}
	if e == errnoSuccess && fd <= 2 {
		v.fs.stdioGone[fd] = true
	}
	if f := v.fs.fds[fd]; f != nil && e == errnoSuccess {
		dropMirror(f)
		delete(v.fs.fds, fd)
	}
	return ret(vals, e)
}

func hostFdRenumber(c *wt.Caller, vals wt.Vals) error {
	v := vmOf(c)
	from, to := vals.U32(0), vals.U32(1)
	e, err := v.original(c, shFdRenumber, uint64(from), uint64(to))
	if err != nil || e != errnoSuccess {
		return firstErr(err, ret(vals, e))
	}
	g := v.fs
	for _, fd := range []uint32{from, to} {
		if fd <= 2 && from != to {
			g.stdioGone[fd] = true
		}
	}
	if from != to {
		dropMirror(g.fds[to])
	}
	if from != to {
		if f := g.fds[from]; f != nil {
			g.fds[to] = f
		} else {
			delete(g.fds, to)
		}
		delete(g.fds, from)
	}
	return ret(vals, e)
}

// sameDomain answers link and rename between two guest descriptors: both
// must be in the same mount (GHSA-4ch3-9j33-3pmj).
func (g *fsGuard) sameDomain(a, b uint32) uint32 {
	fa, fb := g.fds[a], g.fds[b]
	if fa == nil || fb == nil {
		return errnoBadf
	}
	if fa.domain != fb.domain {
		return errnoXdev
	}
	return errnoSuccess
}

func hostPathLink(c *wt.Caller, vals wt.Vals) error {
	v := vmOf(c)
	v.fs.named = true
	if e := v.fs.sameDomain(vals.U32(0), vals.U32(4)); e != errnoSuccess {
		return ret(vals, e)
	}
	if !v.fs.domains[v.fs.fds[vals.U32(4)].domain].Write {
		return ret(vals, errnoRofs)
	}
	return v.create(c, vals, vals.U32(4), shPathLink, 7, 5)
}

func hostPathRename(c *wt.Caller, vals wt.Vals) error {
	v := vmOf(c)
	v.fs.named = true
	if e := v.fs.sameDomain(vals.U32(0), vals.U32(3)); e != errnoSuccess {
		return ret(vals, e)
	}
	if !v.fs.domains[v.fs.fds[vals.U32(0)].domain].Write {
		return ret(vals, errnoRofs)
	}
	// Renaming over a name removes it.
	return v.remove(c, vals, vals.U32(3), shPathRename, 6, 4)
}

func hostPathMkdir(c *wt.Caller, vals wt.Vals) error {
	v := vmOf(c)
	v.fs.named = true
	return v.create(c, vals, vals.U32(0), shPathMkdir, 3, 1)
}

func hostPathUnlink(c *wt.Caller, vals wt.Vals) error {
	return vmOf(c).remove(c, vals, vals.U32(0), shPathUnlink, 3, 1)
}

func hostPathRmdir(c *wt.Caller, vals wt.Vals) error {
	return vmOf(c).remove(c, vals, vals.U32(0), shPathRmdir, 3, 1)
}

// create runs shadowed call i (with its first nargs arguments), which
// makes one entry, named by the path at arguments pathArg and pathArg+1,
// in the directory fd, under the FileCreates quota: in a writable mount
// or the scratch directory a call past the quota gets EDQUOT, and each
// one that succeeds counts until its name is removed.
func (v *VM) create(c *wt.Caller, vals wt.Vals, fd uint32, i, nargs, pathArg int) error {
	g := v.fs
	f := g.fds[fd]
	w := f != nil && g.domains[f.domain].Write
	if w && !g.entryRoom() {
		return ret(vals, errnoDquot)
	}
	e, err := v.original(c, i, vals.Raw(nargs)...)
	if err == nil && e == errnoSuccess && w {
		g.madeAt(c, v, f, vals.U32(pathArg), vals.U32(pathArg+1))
	}
	return firstErr(err, ret(vals, e))
}

// madeAt counts the entry just made at the guest path (ptr, n) in f.
func (g *fsGuard) madeAt(c *wt.Caller, v *VM, f *guestFD, ptr, n uint32) {
	if path, ok := v.guestPath(c, ptr, n); ok {
		if h, e := resolve(g.dirOf(f), path, false); e == errnoSuccess {
			var st unix.Stat_t
			err := unix.Fstat(h, &st)
			unix.Close(h)
			if err == nil {
				g.made(&st)
				return
			}
		}
	}
	g.use.entries++ // moved away already: it stays counted
}

// remove runs shadowed call i (with its first nargs arguments), which
// removes the name at the path at arguments pathArg and pathArg+1 in the
// directory fd (unlink, rmdir, or rename over it), and gives back what
// the name held: the inode is pinned first, so what the call removed is
// known whatever else renames meanwhile.
func (v *VM) remove(c *wt.Caller, vals wt.Vals, fd uint32, i, nargs, pathArg int) error {
	g := v.fs
	pin := -1
	var before unix.Stat_t
	if f := g.fds[fd]; f != nil && g.domains[f.domain].Write {
		if path, ok := v.guestPath(c, vals.U32(pathArg), vals.U32(pathArg+1)); ok {
			if h, e := resolve(g.dirOf(f), path, false); e == errnoSuccess {
				if unix.Fstat(h, &before) == nil {
					pin = h
				} else {
					unix.Close(h)
				}
			}
		}
	}
	e, err := v.original(c, i, vals.Raw(nargs)...)
	if pin >= 0 {
		var after unix.Stat_t
		if err == nil && e == errnoSuccess && unix.Fstat(pin, &after) == nil && idOf(&after) == idOf(&before) {
			g.unnamed(uint64(before.Nlink), &after)
		}
		unix.Close(pin)
	}
	return firstErr(err, ret(vals, e))
}

// hostFdReaddir lists a directory from the host kernel. wasmtime's own
// fd_readdir reads the whole directory (and stats every entry) on each
// call, to skip to the cookie: listing 100,000 entries took minutes of
// host calls that no deadline interrupts. Here cookies are entry numbers,
// as wasmtime's are (wasi-libc's telldir keeps them in 32 bits), and a
// call that goes on where the previous one stopped seeks straight there.
func hostFdReaddir(c *wt.Caller, vals wt.Vals) error {
	v := vmOf(c)
	fd, buf, bufLen, cookie, retptr := vals.U32(0), vals.U32(1), vals.U32(2), uint64(vals.I64(3)), vals.U32(4)
	f := v.fs.fds[fd]
	if f == nil {
		return ret(vals, errnoBadf) // stdio, or nothing
	}
	out, ok := v.guest(c.Context(), buf, bufLen)
	if !ok {
		return ret(vals, errnoFault)
	}
	used, e := readdir(v.fs.dirOf(f), cookie, out, &f.dirPos)
	if e != errnoSuccess {
		return ret(vals, e)
	}
	b, ok := v.guest(c.Context(), retptr, 4)
	if !ok {
		return ret(vals, errnoFault)
	}
	binary.LittleEndian.PutUint32(b, uint32(used))
	return ret(vals, errnoSuccess)
}

// dirPos is where a directory listing stopped: entry number next starts
// at the kernel's directory offset off.
type dirPos struct{ next, off uint64 }

// readdir fills out with WASI dirents of the directory dir (an O_PATH
// descriptor) from entry number cookie on: each a 24-byte header (the
// next entry's cookie, the inode, the name's length, the file type) and
// the name. The last one is cut short when it does not fit, as WASI asks,
// so a full buffer tells the caller to retry with a bigger one. pos is
// read to resume and updated.
func readdir(dir int, cookie uint64, out []byte, pos *dirPos) (int, uint32) {
	d, err := unix.Openat(dir, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, wasiErrno(err)
	}
	defer unix.Close(d)
	idx, at := uint64(0), uint64(0)
	if cookie != 0 && cookie == pos.next && pos.off != 0 && pos.off <= math.MaxInt64 {
		if _, err := unix.Seek(d, int64(pos.off), 0); err == nil {
			idx, at = cookie, pos.off
		}
	}
	used := 0
	var raw [32 << 10]byte
	defer func() { *pos = dirPos{next: idx, off: at} }()
	for used < len(out) {
		n, err := unix.Getdents(d, raw[:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, wasiErrno(err)
		}
		if n <= 0 {
			break // the end
		}
		for p := 0; p < n; {
			// struct linux_dirent64: ino u64, off i64, reclen u16, type u8, name.
			ino := binary.NativeEndian.Uint64(raw[p:])
			off := binary.NativeEndian.Uint64(raw[p+8:])
			reclen := int(binary.NativeEndian.Uint16(raw[p+16:]))
			typ := raw[p+18]
			name := raw[p+19 : p+reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			p += reclen
			if idx < cookie { // skipping to the cookie
				idx, at = idx+1, off
				continue
			}
			var ent [24]byte
			binary.LittleEndian.PutUint64(ent[0:], idx+1)
			binary.LittleEndian.PutUint64(ent[8:], ino)
			binary.LittleEndian.PutUint32(ent[16:], uint32(len(name)))
			ent[20] = direntType(typ)
			whole := len(out)-used >= len(ent)+len(name)
			used += copy(out[used:], ent[:])
			used += copy(out[used:], name)
			if !whole {
				return used, errnoSuccess // cut short: the caller asks again from here
			}
			idx, at = idx+1, off
			if used == len(out) {
				return used, errnoSuccess
			}
		}
	}
	return used, errnoSuccess
}

// direntType maps a Linux DT_ value to a WASI filetype (FIFOs have none:
// unknown, as wasmtime answers).
func direntType(t uint8) uint8 {
	switch t {
	case unix.DT_BLK:
		return 1
	case unix.DT_CHR:
		return 2
	case unix.DT_DIR:
		return 3
	case unix.DT_REG:
		return 4
	case unix.DT_SOCK:
		return 6
	case unix.DT_LNK:
		return 7
	}
	return 0
}

// iovecBytes sums the lengths of an iovec array in guest memory.
func (v *VM) iovecBytes(c *wt.Caller, ptr, n uint32) (int64, bool) {
	if n > 1024 {
		return 0, false
	}
	b, ok := v.guest(c.Context(), ptr, 8*n)
	if !ok {
		return 0, false
	}
	var total int64
	for i := range n {
		total += int64(binary.LittleEndian.Uint32(b[8*i+4:]))
	}
	return total, true
}

func hostFdWrite(c *wt.Caller, vals wt.Vals) error {
	v := vmOf(c)
	fd := vals.U32(0)
	if (fd == 1 || fd == 2) && !v.fs.stdioGone[fd] {
		return ret(vals, v.writeStdio(c, fd, vals.U32(1), vals.U32(2), vals.U32(3)))
	}
	f, st, e, err := v.boundWrite(c, fd, vals.U32(1), vals.U32(2), 0, false)
	if err != nil || e != errnoSuccess {
		return firstErr(err, ret(vals, e))
	}
	e, err = v.original(c, shFdWrite, vals.Raw(4)...)
	v.fs.measure(f, &st)
	return firstErr(err, ret(vals, e))
}

func hostFdPwrite(c *wt.Caller, vals wt.Vals) error {
	v := vmOf(c)
	f, st, e, err := v.boundWrite(c, vals.U32(0), vals.U32(1), vals.U32(2), uint64(vals.I64(3)), true)
	if err != nil || e != errnoSuccess {
		return firstErr(err, ret(vals, e))
	}
	e, err = v.original(c, shFdPwrite, vals.Raw(5)...)
	v.fs.measure(f, &st)
	return firstErr(err, ret(vals, e))
}

// accounted returns the guest descriptor fd when what is written through
// it counts against the quota (a regular file in the scratch directory
// or a writable mount), with the file as it is now.
func (g *fsGuard) accounted(fd uint32) (*guestFD, unix.Stat_t, bool) {
	var st unix.Stat_t
	f, ok := g.fds[fd]
	if !ok || f.mirror < 0 || !g.domains[f.domain].Write || unix.Fstat(f.mirror, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, st, false
	}
	return f, st, true
}

// boundWrite checks, before a write of the iovec array iovs (n entries)
// to fd at offset off (at false: at the descriptor's position, or at the
// end in append mode), that what it can allocate fits in the quota. It
// returns the file to measure afterwards (nil: nothing to measure) and
// how it was.
func (v *VM) boundWrite(c *wt.Caller, fd, iovs, n uint32, off uint64, at bool) (*guestFD, unix.Stat_t, uint32, error) {
	g := v.fs
	f, st, ok := g.accounted(fd)
	if !ok {
		return nil, st, errnoSuccess, nil // stdout and stderr have their own limits
	}
	total, ok := v.iovecBytes(c, iovs, n)
	if !ok {
		return nil, st, errnoInval, nil
	}
	k := g.kindOf(f.mirror, st.Dev)
	var need uint64
	if at {
		need = allocBound(&st, k, off, uint64(total))
	} else {
		need = allocBound(&st, k, uint64(max(st.Size, 0)), uint64(total)) // append mode writes at the end
		pos, ok, err := v.tell(c, fd, iovs)
		if err != nil {
			return nil, st, errnoSuccess, err
		}
		if ok {
			need = max(need, allocBound(&st, k, pos, uint64(total)))
		}
	}
	if need > math.MaxInt64 || !g.room(int64(need)) {
		return nil, st, errnoDquot, nil
	}
	return f, st, errnoSuccess, nil
}

// measure charges what the file f (nil: none) allocates now beyond what
// it did as before.
func (g *fsGuard) measure(f *guestFD, before *unix.Stat_t) {
	if f == nil || f.mirror < 0 {
		return
	}
	var st unix.Stat_t
	if unix.Fstat(f.mirror, &st) == nil && idOf(&st) == idOf(before) {
		g.account(idOf(&st), allocated(before), allocated(&st))
	}
}

// tell returns fd's position, asking wasmtime's fd_seek; its answer is
// written to the 8 bytes of guest memory at scratch, which are restored.
func (v *VM) tell(c *wt.Caller, fd, scratch uint32) (uint64, bool, error) {
	b, ok := v.guest(c.Context(), scratch, 8)
	if !ok {
		return 0, false, nil
	}
	saved := binary.LittleEndian.Uint64(b)
	e, err := v.original(c, shFdSeek, uint64(fd), 0, whenceCur, uint64(scratch))
	if err != nil || e != errnoSuccess {
		return 0, false, err
	}
	b, _ = v.guest(c.Context(), scratch, 8) // fd_seek does not grow memory
	pos := binary.LittleEndian.Uint64(b)
	binary.LittleEndian.PutUint64(b, saved)
	return pos, true, nil
}

// writeStdio delivers a write to stdout or stderr straight to the VM's
// capture buffers, as wasmtime would through the store's output hook.
func (v *VM) writeStdio(c *wt.Caller, fd, iovs, n, nwritten uint32) uint32 {
	if n > 1024 {
		return errnoInval
	}
	ctx := c.Context()
	vec, ok := v.guest(ctx, iovs, 8*n)
	if !ok {
		return errnoFault
	}
	vec = append([]byte(nil), vec...) // the guest memory slice is not ours to keep
	total := 0
	for i := range n {
		p, l := binary.LittleEndian.Uint32(vec[8*i:]), binary.LittleEndian.Uint32(vec[8*i+4:])
		b, ok := v.guest(ctx, p, l)
		if !ok {
			return errnoFault
		}
		total += v.Write(int(fd), b)
	}
	out, ok := v.guest(ctx, nwritten, 4)
	if !ok {
		return errnoFault
	}
	binary.LittleEndian.PutUint32(out, uint32(total))
	return errnoSuccess
}

func hostFdSetSize(c *wt.Caller, vals wt.Vals) error {
	v := vmOf(c)
	f, st, ok := v.fs.accounted(vals.U32(0))
	if ok && vals.I64(1) > 0 {
		need := growBound(&st, v.fs.kindOf(f.mirror, st.Dev), uint64(vals.I64(1)))
		if need > math.MaxInt64 || !v.fs.room(int64(need)) {
			return ret(vals, errnoDquot)
		}
	}
	e, err := v.original(c, shFdSetSize, vals.Raw(2)...)
	if ok {
		v.fs.measure(f, &st)
	}
	return firstErr(err, ret(vals, e))
}

func hostFdFilestatGet(c *wt.Caller, vals wt.Vals) error {
	v := vmOf(c)
	fd, buf := vals.U32(0), vals.U32(1)
	f := v.fs.fds[fd]
	if f == nil {
		if fd <= 2 {
			// stdio: a character device with no times.
			return ret(vals, v.putFilestat(c, buf, &unix.Stat_t{Mode: unix.S_IFCHR}))
		}
		return ret(vals, errnoBadf)
	}
	var st unix.Stat_t
	if err := unix.Fstat(v.fs.dirOf(f), &st); err != nil {
		return ret(vals, wasiErrno(err))
	}
	return ret(vals, v.putFilestat(c, buf, &st))
}

func hostPathFilestatGet(c *wt.Caller, vals wt.Vals) error {
	v := vmOf(c)
	fd, flags, pptr, plen, buf := vals.U32(0), vals.U32(1), vals.U32(2), vals.U32(3), vals.U32(4)
	f := v.fs.fds[fd]
	if f == nil {
		return ret(vals, errnoBadf)
	}
	path, ok := v.guestPath(c, pptr, plen)
	if !ok {
		return ret(vals, errnoInval)
	}
	h, e := resolve(v.fs.dirOf(f), path, flags&lookupFollow != 0)
	if e != errnoSuccess {
		return ret(vals, e)
	}
	defer unix.Close(h)
	var st unix.Stat_t
	if err := unix.Fstat(h, &st); err != nil {
		return ret(vals, wasiErrno(err))
	}
	if r, ok := v.fs.linkRecordOf(h, &st); ok {
		st.Size = int64(len(r.guest)) // a link's size is its target's length, as the guest gave it
	}
	return ret(vals, v.putFilestat(c, buf, &st))
}

// putFilestat writes a WASI filestat. Times are nanoseconds since 1970 as
// an unsigned 64-bit number: earlier times are written as 0 and later
// ones (after 2554) as the largest value, never a failure.
func (v *VM) putFilestat(c *wt.Caller, ptr uint32, st *unix.Stat_t) uint32 {
	b, ok := v.guest(c.Context(), ptr, filestatSize)
	if !ok {
		return errnoInval
	}
	clear(b)
	ft := uint8(0)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFBLK:
		ft = 1
	case unix.S_IFCHR:
		ft = 2
	case unix.S_IFDIR:
		ft = 3
	case unix.S_IFREG:
		ft = 4
	case unix.S_IFSOCK:
		ft = 6
	case unix.S_IFLNK:
		ft = 7
	}
	binary.LittleEndian.PutUint64(b[0:], st.Dev)
	binary.LittleEndian.PutUint64(b[8:], st.Ino)
	b[16] = ft
	binary.LittleEndian.PutUint64(b[24:], uint64(st.Nlink))
	binary.LittleEndian.PutUint64(b[32:], uint64(max(st.Size, 0)))
	if v.fs != nil && idOf(st) == v.fs.scratchID && !v.started.IsZero() {
		// The scratch directory outlives evals (a rewound VM keeps it,
		// and directories are recycled between VMs): times from before
		// this eval would tell it when the last one wrote there.
		start := unix.NsecToTimespec(v.started.UnixNano())
		for _, ts := range []*unix.Timespec{&st.Atim, &st.Mtim, &st.Ctim} {
			if ts.Nano() < start.Nano() {
				*ts = start
			}
		}
	}
	binary.LittleEndian.PutUint64(b[40:], wasiTime(st.Atim))
	binary.LittleEndian.PutUint64(b[48:], wasiTime(st.Mtim))
	binary.LittleEndian.PutUint64(b[56:], wasiTime(st.Ctim))
	return errnoSuccess
}

func wasiTime(ts unix.Timespec) uint64 {
	sec, nsec := int64(ts.Sec), int64(ts.Nsec)
	switch {
	case sec < 0:
		return 0
	case uint64(sec) >= math.MaxUint64/1_000_000_000-1:
		return math.MaxUint64
	}
	return uint64(sec)*1e9 + uint64(nsec)
}

// scratchDirs hands out private scratch directories under base and takes
// them back for reuse: creating and removing a directory cost 0.25 and
// 0.8 ms on the development machine's ext4 disk, against 10 µs to list an
// empty one. A directory is wiped when it is given
// back (when its VM is freed, right after its last eval), so nothing an
// eval wrote stays on the host while the directory waits to be reused.
//
// base is this user's private directory (see privateScratchBase) inside
// the configured one; err, when set, is why it cannot be used, and every
// get returns it.
type scratchDirs struct {
	base   string
	err    error
	mu     sync.Mutex
	used   []string
	closed bool
	// locks hold each directory this process made open, flocked, until
	// it is removed: sweepScratch's proof, in any process, of an owner.
	locks map[string]*os.File
}

// maxIdleScratch bounds the directories kept for reuse.
const maxIdleScratch = 64

// DefaultScratchBase is where scratch directories go when no base is
// configured: /dev/shm when it is a writable directory (tmpfs: directory
// operations cost microseconds, not the milliseconds of a journaling
// disk), else the host's temporary directory.
func DefaultScratchBase() string {
	if d, err := os.MkdirTemp("/dev/shm", "glovebox-probe-"); err == nil {
		os.Remove(d)
		return "/dev/shm"
	}
	return os.TempDir()
}

func newScratchDirs(base string) *scratchDirs {
	if base == "" {
		base = DefaultScratchBase()
	}
	priv, err := privateScratchBase(base)
	if err != nil {
		return &scratchDirs{base: priv, err: err}
	}
	if _, done := swept.LoadOrStore(priv, true); !done {
		sweepScratch(priv)
	}
	return &scratchDirs{base: priv}
}

// ScratchBaseError reports a private scratch base that is not safe to
// use: not a directory, a symbolic link, owned by another user, or open
// to other users.
type ScratchBaseError struct {
	Path, Msg string
}

func (e *ScratchBaseError) Error() string { return e.Msg }

// privateScratchBase returns, creating it if needed, this user's private
// directory under base, glovebox-<uid>, mode 0700. Scratch directories
// are made and swept only there: a shared base such as /dev/shm or /tmp
// lets any local user plant entries, and the sweep would then act on
// their choice of directory. An existing one must be a real directory
// (not a symbolic link) owned by this user and closed to others;
// anything else is refused with a *ScratchBaseError naming it, never
// repaired.
func privateScratchBase(base string) (string, error) {
	uid := os.Geteuid()
	p := filepath.Join(base, fmt.Sprintf("glovebox-%d", uid))
	if err := unix.Mkdir(p, 0o700); err != nil && err != unix.EEXIST {
		return p, &ScratchBaseError{Path: p, Msg: fmt.Sprintf("cannot create the private scratch directory %s: %v", p, err)}
	}
	fd, err := unix.Open(p, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return p, &ScratchBaseError{Path: p, Msg: fmt.Sprintf("cannot open the private scratch directory %s: %v", p, err)}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return p, &ScratchBaseError{Path: p, Msg: fmt.Sprintf("cannot check the private scratch directory %s: %v", p, err)}
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return p, &ScratchBaseError{Path: p, Msg: fmt.Sprintf("refusing the scratch directory %s: it is not a directory (a symbolic link or other file is there); remove it or choose another ScratchDir", p)}
	case int(st.Uid) != uid:
		return p, &ScratchBaseError{Path: p, Msg: fmt.Sprintf("refusing the scratch directory %s: it is owned by uid %d, not by this user (uid %d); remove it or choose another ScratchDir", p, st.Uid, uid)}
	case st.Mode&0o077 != 0:
		return p, &ScratchBaseError{Path: p, Msg: fmt.Sprintf("refusing the scratch directory %s: its mode %#o lets other users in (want 0700); fix it (chmod 700) or choose another ScratchDir", p, st.Mode&0o7777)}
	}
	return p, nil
}

// swept records the bases swept by this process.
var swept sync.Map

// sweepScratch removes scratch directories under base (this user's
// private base) left by processes that have exited without closing their
// Runtimes (killed, or never calling Close). Ownership is proved by lock:
// the process that made a directory holds a flock on it until it removes
// it, and the kernel drops the lock when that process dies, so a
// directory whose lock can be taken has no live owner, whatever PID or
// PID namespace its maker had (a PID in the name, checked with kill,
// took a live owner in another PID namespace for dead, and a dead one
// whose PID was reused for alive). A directory is named
// glovebox-scratch-… only once its maker holds the lock (see get). Only
// real directories owned by this user are touched, and nothing below them
// is followed through a symbolic link (see removeTree).
func sweepScratch(base string) {
	bfd, err := unix.Open(base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(bfd)
	names, err := dirNames(bfd)
	if err != nil {
		return
	}
	for _, name := range names {
		// A glovebox-newscratch- directory is one a process died making
		// (between mkdir and rename), unless it is under a minute old.
		fresh := strings.HasPrefix(name, "glovebox-newscratch-")
		if !fresh && !strings.HasPrefix(name, "glovebox-scratch-") {
			continue
		}
		fd, err := unix.Openat(bfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			continue // not a real directory: not ours to judge
		}
		var st unix.Stat_t
		young := fresh && (unix.Fstat(fd, &st) != nil || time.Since(time.Unix(st.Mtim.Unix())) < time.Minute)
		if !young && unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) == nil {
			removeTree(bfd, name)
		}
		unix.Close(fd)
	}
}

func (s *scratchDirs) get() (string, error) {
	if s.err != nil {
		return "", s.err
	}
	s.mu.Lock()
	if n := len(s.used); n > 0 {
		d := s.used[n-1]
		s.used = s.used[:n-1]
		s.mu.Unlock()
		return d, nil
	}
	s.mu.Unlock()
	// Made under another name, locked, then renamed: a sweep never sees
	// a glovebox-scratch- directory whose lock is free while its maker
	// lives.
	tmp, err := os.MkdirTemp(s.base, "glovebox-newscratch-")
	if err != nil {
		return "", fmt.Errorf("creating the scratch directory: %w", err)
	}
	d := filepath.Join(s.base, "glovebox-scratch-"+strings.TrimPrefix(filepath.Base(tmp), "glovebox-newscratch-"))
	lock, err := os.OpenFile(tmp, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err == nil {
		if err = unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err == nil {
			err = unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, d, unix.RENAME_NOREPLACE)
		}
		if err != nil {
			lock.Close()
		}
	}
	if err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("creating the scratch directory: %w", err)
	}
	s.mu.Lock()
	if s.locks == nil {
		s.locks = map[string]*os.File{}
	}
	s.locks[d] = lock
	s.mu.Unlock()
	return d, nil
}

// put takes back a directory no VM uses any more: wiped and found empty,
// it is kept for reuse, else removed.
func (s *scratchDirs) put(d string) {
	if wipeDir(d) != nil { // nothing adds entries meanwhile: no error, empty
		s.remove(d)
		return
	}
	s.mu.Lock()
	if !s.closed && len(s.used) < maxIdleScratch {
		s.used = append(s.used, d)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	s.remove(d)
}

// close removes the idle directories; later puts remove theirs.
func (s *scratchDirs) close() {
	s.mu.Lock()
	ds := s.used
	s.used, s.closed = nil, true
	s.mu.Unlock()
	for _, d := range ds {
		s.remove(d)
	}
}

// remove removes the scratch directory d, then lets its lock go.
func (s *scratchDirs) remove(d string) {
	removeScratch(d)
	s.mu.Lock()
	lock := s.locks[d]
	delete(s.locks, d)
	s.mu.Unlock()
	if lock != nil {
		lock.Close()
	}
}

// removeScratch removes the scratch directory d (a path this process
// made) and everything in it, following no symbolic link.
func removeScratch(d string) {
	pfd, err := unix.Open(filepath.Dir(d), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(pfd)
	removeTree(pfd, filepath.Base(d))
}

// wipeScratch empties the VM's scratch directory (see wipeDir), unless
// the guest can have added nothing to it since the last wipe (named).
func (g *fsGuard) wipeScratch(dir string) error {
	if !g.named {
		return nil
	}
	if err := wipeDir(dir); err != nil {
		return err
	}
	g.named = false
	return nil
}

// wipeDir empties the scratch directory dir, leaving it in place. It
// walks with directory descriptors and never follows a symbolic link:
// the guest can make links in its scratch directory (and, in a mount it
// shares with another VM, swap a directory for one while the walk is
// under way), and a wipe that followed one would delete or change
// permissions on host files outside. Write permission is restored, on the
// opened descriptor, on directories the guest made unwritable; entries
// owned by another user are left alone and reported.
func wipeDir(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return emptyDir(fd)
}

// maxWipeDepth is how deep a wipe descends while holding one descriptor
// per level. A deeper directory (a guest can nest directories without
// bound, renaming chains into each other eval after eval) is moved up to
// the top of the tree being removed, and the top is listed again, so a
// tree of any depth is removed with at most this many descriptors.
const maxWipeDepth = 64

// emptyDir removes every entry of the open directory fd.
func emptyDir(fd int) error {
	var first error
	for pass := 0; ; pass++ {
		names, err := dirNames(fd)
		if err != nil {
			return err
		}
		if len(names) == 0 {
			return first
		}
		moved := false
		for _, name := range names {
			m, err := removeTreeAt(fd, name, fd, 0)
			if err != nil && first == nil {
				first = err
			}
			moved = moved || m
		}
		if !moved {
			return first
		}
	}
}

// removeTree removes the entry name of the directory parent and, when it
// is a directory this user owns, everything in it.
func removeTree(parent int, name string) error {
	_, err := removeTreeAt(parent, name, -1, 0)
	return err
}

// testHookWipeDir, when set (by tests), runs as a wipe is about to
// descend into the directory name of parent: the moment an attacker
// would swap it for a symbolic link.
var testHookWipeDir func(parent int, name string)

// removeTreeAt removes the entry name of parent, a directory depth levels
// below top. A directory nested too deep is moved into top instead
// (moved: top must be listed again). With top -1, name itself is the top.
func removeTreeAt(parent int, name string, top, depth int) (moved bool, err error) {
	err = unix.Unlinkat(parent, name, 0)
	if err == nil || err == unix.ENOENT {
		return false, nil
	}
	if err != unix.EISDIR && err != unix.EPERM {
		return false, fmt.Errorf("removing %s from a scratch directory: %w", name, err)
	}
	if depth >= maxWipeDepth {
		up := fmt.Sprintf(".glovebox-deep-%d-%d", depth, deepSeq.Add(1))
		if err := unix.Renameat(parent, name, top, up); err != nil {
			return false, fmt.Errorf("moving %s up in a scratch directory: %w", name, err)
		}
		return true, nil
	}
	if testHookWipeDir != nil {
		testHookWipeDir(parent, name)
	}
	// A directory: pin it with O_PATH and O_NOFOLLOW (a symbolic link
	// swapped in meanwhile fails here, ENOTDIR), check its owner and mode
	// on that descriptor, then list it.
	p, err := unix.Openat(parent, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if err == unix.ENOTDIR || err == unix.ELOOP {
			// Swapped for a file or link after the unlink: remove that.
			if err := unix.Unlinkat(parent, name, 0); err != nil && err != unix.ENOENT {
				return false, fmt.Errorf("removing %s from a scratch directory: %w", name, err)
			}
			return false, nil
		}
		return false, fmt.Errorf("opening %s in a scratch directory: %w", name, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(p, &st); err != nil {
		unix.Close(p)
		return false, err
	}
	if int(st.Uid) != os.Geteuid() {
		unix.Close(p)
		return false, fmt.Errorf("a scratch directory holds %s, owned by uid %d, not this user: left alone", name, st.Uid)
	}
	if st.Mode&0o700 != 0o700 {
		// chmod through the descriptor's /proc link reaches exactly the
		// pinned directory, never what its name points to now.
		if err := unix.Chmod(fmt.Sprintf("/proc/self/fd/%d", p), 0o700); err != nil {
			unix.Close(p)
			return false, fmt.Errorf("making %s in a scratch directory writable: %w", name, err)
		}
	}
	d, err := unix.Openat(p, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	unix.Close(p)
	if err != nil {
		return false, fmt.Errorf("opening %s in a scratch directory: %w", name, err)
	}
	if top < 0 {
		err = emptyDir(d)
	} else {
		var names []string
		names, err = dirNames(d)
		for _, n := range names {
			m, e := removeTreeAt(d, n, top, depth+1)
			moved = moved || m
			if e != nil && err == nil {
				err = e
			}
		}
	}
	unix.Close(d)
	if err != nil || moved {
		return moved, err
	}
	if err := unix.Unlinkat(parent, name, unix.AT_REMOVEDIR); err != nil && err != unix.ENOENT {
		return false, fmt.Errorf("removing the directory %s from a scratch directory: %w", name, err)
	}
	return false, nil
}

// deepSeq numbers the directories a wipe moves up.
var deepSeq atomic.Int64

// direntBufs are dirNames' buffers: 16 KiB on the stack grew the stack
// of every fresh goroutine that reset a VM's scratch directory (each
// executor request runs on one), a copy costing more than the listing.
var direntBufs = sync.Pool{New: func() any { return new([16 << 10]byte) }}

// dirNames lists the open directory fd (without "." and ".."), from its
// start.
func dirNames(fd int) ([]string, error) {
	if _, err := unix.Seek(fd, 0, 0); err != nil {
		return nil, err
	}
	var names []string
	bp := direntBufs.Get().(*[16 << 10]byte)
	defer direntBufs.Put(bp)
	buf := bp[:]
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return names, nil
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
}

// checkMounts checks that every mount's host path is a directory, and
// returns a test of whether a VM's mounts are still those directories.
func checkMounts(mounts []Mount) (func(*VM) bool, error) {
	if len(mounts) == 0 {
		return func(*VM) bool { return true }, nil
	}
	ids := make([][2]uint64, len(mounts))
	for i, m := range mounts {
		var st unix.Stat_t
		err := unix.Stat(m.Host, &st)
		switch {
		case err != nil:
			return nil, &MountError{Host: m.Host, Guest: m.Guest, Msg: fmt.Sprintf("the host path %s for mount %s cannot be used: %v", m.Host, m.Guest, err)}
		case st.Mode&unix.S_IFMT != unix.S_IFDIR:
			return nil, &MountError{Host: m.Host, Guest: m.Guest, Msg: fmt.Sprintf("the host path %s for mount %s is not a directory", m.Host, m.Guest)}
		}
		ids[i] = [2]uint64{st.Dev, st.Ino}
	}
	return func(v *VM) bool {
		for i := range mounts {
			var st unix.Stat_t
			if unix.Fstat(v.fs.domains[i+1].root, &st) != nil || [2]uint64{st.Dev, st.Ino} != ids[i] {
				return false
			}
		}
		return true
	}, nil
}
