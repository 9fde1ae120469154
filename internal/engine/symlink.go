package engine

import (
	"encoding/binary"
	"fmt"
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gloveboxhq/glovebox/internal/wt"
)

// Symbolic links in the scratch directory and writable mounts.
//
// A link is made only when its target, read from the link's own place,
// stays inside the mount (or scratch directory) that holds it: a
// relative target may not climb above the mount's root with "..", and an
// absolute one must name a guest path inside the same mount. Anything
// else is refused with EPERM, as wasmtime refuses absolute targets.
// The check is lexical, at creation; following links (chains of them,
// links whose directories were moved since) is checked again at every
// use, by wasmtime and by the guard's RESOLVE_BENEATH lookups, which
// refuse any path that leads out.
//
// On the host a link always holds a relative target, so that a host
// program following it stays inside the mount too: an absolute guest
// target (/tmp/d/a) is written as the equivalent relative one (a, from
// /tmp/d). The guard remembers the target the guest gave, so readlink
// and lstat answer with it, for links this VM made (at most
// maxLinkRecords of them; older or other links read back as stored).

// linkRecord is a link made with an absolute target: what the guest gave
// and what the host holds.
type linkRecord struct{ guest, host string }

// maxLinkRecords bounds the links a VM remembers (sessions keep theirs
// across evals).
const maxLinkRecords = 4096

func hostPathSymlink(c *wt.Caller, vals wt.Vals) error {
	v := vmOf(c)
	g := v.fs
	g.named = true
	fd := vals.U32(2)
	f := g.fds[fd]
	if f == nil || !g.domains[f.domain].Write {
		return v.create(c, vals, fd, shPathSymlink, 5, 3) // wasmtime answers
	}
	target, ok1 := v.guestPath(c, vals.U32(0), vals.U32(1))
	name, ok2 := v.guestPath(c, vals.U32(3), vals.U32(4))
	if !ok1 || !ok2 {
		return ret(vals, errnoInval)
	}
	if target == "" {
		return ret(vals, errnoNoent)
	}
	dir, base := path.Split(name)
	if base == "" || base == "." || base == ".." {
		return v.create(c, vals, fd, shPathSymlink, 5, 3) // wasmtime answers (EEXIST, ENOENT)
	}
	if dir == "" {
		dir = "."
	}
	parent, e := resolve(g.dirOf(f), dir, true)
	if e != errnoSuccess {
		return ret(vals, e)
	}
	defer unix.Close(parent)
	host, e := g.linkTarget(f.domain, parent, target)
	if e != errnoSuccess {
		return ret(vals, e)
	}
	if host == target {
		return v.create(c, vals, fd, shPathSymlink, 5, 3) // relative and inside: wasmtime makes it
	}
	if !g.entryRoom() {
		return ret(vals, errnoDquot)
	}
	if err := unix.Symlinkat(host, parent, base); err != nil {
		return ret(vals, wasiErrno(err))
	}
	h, e := resolve(parent, base, false)
	var st unix.Stat_t
	if e != errnoSuccess || unix.Fstat(h, &st) != nil {
		if e == errnoSuccess {
			unix.Close(h)
		}
		g.use.entries++ // moved away already: it stays counted
		return ret(vals, errnoSuccess)
	}
	unix.Close(h)
	g.made(&st)
	if g.links == nil {
		g.links = map[fileID]linkRecord{}
	}
	if len(g.links) < maxLinkRecords {
		g.links[idOf(&st)] = linkRecord{guest: target, host: host}
	}
	return ret(vals, errnoSuccess)
}

// linkTarget checks the target of a link to be made in the directory
// parent (an O_PATH descriptor) of domain dom, and returns what the host
// link should hold: the target itself when relative, the equivalent
// relative path when absolute. A target that leads out of the domain is
// EPERM.
func (g *fsGuard) linkTarget(dom, parent int, target string) (string, uint32) {
	const errnoPerm = 63
	at, ok := g.placeOf(dom, parent)
	if !ok {
		return "", errnoPerm
	}
	if !strings.HasPrefix(target, "/") {
		if _, ok := walk(at, target, false); !ok {
			return "", errnoPerm
		}
		return target, errnoSuccess
	}
	abs, _ := walk(nil, target, true)
	// The domain holding the target: the longest guest path it is under.
	best, rest := -1, []string(nil)
	for i, d := range g.domains {
		root, _ := walk(nil, d.Guest, true)
		if len(root) <= len(abs) && equalParts(root, abs[:len(root)]) && (best < 0 || len(root) > len(g.guestParts(best))) {
			best, rest = i, abs[len(root):]
		}
	}
	if best != dom {
		return "", errnoPerm
	}
	return relPath(at, rest), errnoSuccess
}

func (g *fsGuard) guestParts(i int) []string {
	p, _ := walk(nil, g.domains[i].Guest, true)
	return p
}

// placeOf returns where the directory parent is inside domain dom, as
// path components below its root.
func (g *fsGuard) placeOf(dom, parent int) ([]string, bool) {
	r, ok1 := fdPath(g.domains[dom].root)
	h, ok2 := fdPath(parent)
	if !ok1 || !ok2 {
		return nil, false
	}
	switch {
	case h == r:
		return nil, true
	case r == "/":
		return strings.Split(strings.TrimPrefix(h, "/"), "/"), true
	case strings.HasPrefix(h, r+"/"):
		return strings.Split(h[len(r)+1:], "/"), true
	}
	return nil, false
}

// fdPath is the host path of the open descriptor fd.
func fdPath(fd int) (string, bool) {
	b := make([]byte, unix.PathMax)
	n, err := unix.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd), b)
	if err != nil || n >= len(b) {
		return "", false
	}
	return string(b[:n]), true
}

// walk applies the slash-separated path p to the components at and
// returns the result; ok is false when ".." climbs above the start, unless
// rooted, where ".." at the top stays there (as at "/").
func walk(at []string, p string, rooted bool) ([]string, bool) {
	out := append([]string(nil), at...)
	for _, c := range strings.Split(p, "/") {
		switch c {
		case "", ".":
		case "..":
			if len(out) == 0 {
				if !rooted {
					return nil, false
				}
				continue
			}
			out = out[:len(out)-1]
		default:
			out = append(out, c)
		}
	}
	return out, true
}

func equalParts(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// relPath is the relative path from the directory from to to, both as
// components below the same root.
func relPath(from, to []string) string {
	n := 0
	for n < len(from) && n < len(to) && from[n] == to[n] {
		n++
	}
	parts := make([]string, 0, len(from)-n+len(to)-n)
	for range from[n:] {
		parts = append(parts, "..")
	}
	parts = append(parts, to[n:]...)
	if len(parts) == 0 {
		return "."
	}
	return strings.Join(parts, "/")
}

// linkRecordOf returns the record of the symbolic link h (an O_PATH
// descriptor of the link itself, st its status), when this VM made it
// with an absolute target and it still holds what was written.
func (g *fsGuard) linkRecordOf(h int, st *unix.Stat_t) (linkRecord, bool) {
	if len(g.links) == 0 || st.Mode&unix.S_IFMT != unix.S_IFLNK {
		return linkRecord{}, false
	}
	r, ok := g.links[idOf(st)]
	if !ok {
		return r, false
	}
	buf := make([]byte, len(r.host)+1)
	n, err := unix.Readlinkat(h, "", buf)
	if err != nil || string(buf[:n]) != r.host {
		return r, false
	}
	return r, true
}

// hostPathReadlink is wasmtime's readlink, except that a link this VM
// made with an absolute target reads back as that target.
func hostPathReadlink(c *wt.Caller, vals wt.Vals) error {
	v := vmOf(c)
	g := v.fs
	e, err := v.original(c, shPathReadlink, vals.Raw(6)...)
	if err != nil || e != errnoSuccess || len(g.links) == 0 {
		return firstErr(err, ret(vals, e))
	}
	f := g.fds[vals.U32(0)]
	p, ok := v.guestPath(c, vals.U32(1), vals.U32(2))
	if f == nil || !ok {
		return ret(vals, e)
	}
	h, he := resolve(g.dirOf(f), p, false)
	if he != errnoSuccess {
		return ret(vals, e)
	}
	defer unix.Close(h)
	var st unix.Stat_t
	if unix.Fstat(h, &st) != nil {
		return ret(vals, e)
	}
	r, ok := g.linkRecordOf(h, &st)
	if !ok {
		return ret(vals, e)
	}
	buf, ok1 := v.guest(c.Context(), vals.U32(3), vals.U32(4))
	used, ok2 := v.guest(c.Context(), vals.U32(5), 4)
	if !ok1 || !ok2 {
		return ret(vals, errnoFault)
	}
	binary.LittleEndian.PutUint32(used, uint32(copy(buf, r.guest)))
	return ret(vals, errnoSuccess)
}
