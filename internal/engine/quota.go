package engine

import (
	"math"
	"sync"

	"golang.org/x/sys/unix"
)

// File quotas bound what an eval's files hold, the way a file-system
// quota does, not how much it ever wrote:
//
//   - bytes: the disk space (st_blocks) the files it wrote allocate, in the
//     scratch directory and writable mounts together. A write, a truncate
//     that extends a file on a file system without holes, and an open that
//     truncates are measured before and after; what a file gains is
//     charged to it and what it loses is given back (never more than was
//     charged to that file: shrinking a file the host put in a mount frees
//     nothing for the guest). A file's charge is given back when its last
//     name is removed and no guest of this process holds it open any more
//     (unlinked files that are still open keep their space, as on disk).
//   - entries: the names (files, directories, symbolic and hard links) it
//     made that still exist. Removing or renaming over a name it made
//     gives the entry back.
//
// Before a write the guard bounds what it can allocate (the blocks it
// touches that the file does not hold yet, on a file system that keeps
// holes; every block up to its end on one that does not; plus one block
// of file-system metadata where the file system has such), and refuses it
// with EDQUOT when that would pass the quota, so usage never passes the
// bound by more than a file system's own speculative preallocation. A
// sparse file counts for the blocks it allocates, not its size.
//
// Both are per eval: a session's scratch directory is wiped after every
// eval, and what earlier evals left in a mount is the host's from then on.

// fileID names an inode.
type fileID struct{ dev, ino uint64 }

func idOf(st *unix.Stat_t) fileID { return fileID{st.Dev, st.Ino} }

// allocated is the disk space a file holds, in bytes.
func allocated(st *unix.Stat_t) int64 { return max(st.Blocks, 0) * 512 }

// openInodes counts the guard's mirrors open on each inode, in every VM
// of the process: a file with no name left still holds its space while a
// guest has it open.
var openInodes = struct {
	mu sync.Mutex
	n  map[fileID]int
}{n: map[fileID]int{}}

func holdInode(id fileID) {
	openInodes.mu.Lock()
	openInodes.n[id]++
	openInodes.mu.Unlock()
}

func releaseInode(id fileID) {
	openInodes.mu.Lock()
	if openInodes.n[id] <= 1 {
		delete(openInodes.n, id)
	} else {
		openInodes.n[id]--
	}
	openInodes.mu.Unlock()
}

func inodeHeld(id fileID) bool {
	openInodes.mu.Lock()
	defer openInodes.mu.Unlock()
	return openInodes.n[id] > 0
}

// usage is what one eval's files hold.
type usage struct {
	bytes   int64            // charged, in total
	entries int              // names made that still exist
	charged map[fileID]int64 // bytes charged per inode that has a name
	pending map[fileID]int64 // charges of inodes with no name left, still open
	names   map[fileID]int   // names made per inode
}

func newUsage() usage {
	return usage{charged: map[fileID]int64{}, pending: map[fileID]int64{}, names: map[fileID]int{}}
}

// room reports whether need more bytes fit in the quota, first giving
// back the space of nameless files nobody holds open any more.
func (g *fsGuard) room(need int64) bool {
	if need <= g.limits.Write-g.use.bytes {
		return true
	}
	for id, n := range g.use.pending {
		if !inodeHeld(id) {
			g.use.bytes -= n
			delete(g.use.pending, id)
		}
	}
	return need <= g.limits.Write-g.use.bytes
}

// account charges the change of a file's allocation from before to after
// bytes: never below zero for one file.
func (g *fsGuard) account(id fileID, before, after int64) {
	old := g.use.charged[id]
	c := max(old+after-before, 0)
	g.use.bytes += c - old
	if c == 0 {
		delete(g.use.charged, id)
	} else {
		g.use.charged[id] = c
	}
}

// entryRoom reports whether one more name fits in the quota.
func (g *fsGuard) entryRoom() bool { return g.use.entries < g.limits.Creates }

// made counts a name the eval made for the inode st describes.
func (g *fsGuard) made(st *unix.Stat_t) {
	g.use.names[idOf(st)]++
	g.use.entries++
}

// unnamed accounts for the removal of a name of the inode pinned by pin,
// whose link count was nlink before: after is the inode now. A name the
// eval made gives its entry back; an inode with no name left gives back
// its bytes, at once or (while a guest holds it open) when room looks.
func (g *fsGuard) unnamed(nlink uint64, after *unix.Stat_t) {
	id := idOf(after)
	if after.Nlink != 0 && uint64(after.Nlink) >= nlink {
		return // no name went away (renamed onto itself, or replaced meanwhile)
	}
	if n := g.use.names[id]; n > 0 {
		drop := 1
		if after.Nlink == 0 {
			drop = n
		}
		g.use.entries -= drop
		if n == drop {
			delete(g.use.names, id)
		} else {
			g.use.names[id] = n - drop
		}
	}
	if after.Nlink != 0 || after.Mode&unix.S_IFMT != unix.S_IFREG {
		return
	}
	if c := g.use.charged[id]; c > 0 {
		delete(g.use.charged, id)
		if inodeHeld(id) {
			g.use.pending[id] += c
		} else {
			g.use.bytes -= c
		}
	}
}

// File systems with known block-allocation behaviour (statfs f_type).
const (
	fsTmpfs = 0x01021994
	fsExt   = 0xEF53
	fsXFS   = 0x58465342
	fsBtrfs = 0x9123683E
	fsF2FS  = 0xF2F52010
	fsZFS   = 0x2FC12FC1
	fsOvl   = 0x794C7630
)

// fsKind is how a file system allocates: sparse when it leaves holes
// unallocated, meta when its files' block counts include metadata blocks
// a write may add.
type fsKind struct{ sparse, meta bool }

// kindOf returns the allocation behaviour of the file system holding the
// open file fd (cached by device). An unknown one is taken to allocate
// every block up to a file's end, with metadata.
func (g *fsGuard) kindOf(fd int, dev uint64) fsKind {
	if k, ok := g.kinds[dev]; ok {
		return k
	}
	k := fsKind{meta: true}
	var s unix.Statfs_t
	if unix.Fstatfs(fd, &s) == nil {
		switch uint32(s.Type) {
		case fsTmpfs:
			k = fsKind{sparse: true}
		case fsExt, fsXFS, fsBtrfs, fsF2FS, fsZFS, fsOvl:
			k.sparse = true
		}
	}
	if g.kinds == nil {
		g.kinds = map[uint64]fsKind{}
	}
	g.kinds[dev] = k
	return k
}

// allocBound is the most bytes writing n bytes at off can add to the
// allocation of the regular file st describes. The allocation unit is
// st_blksize (4 KiB on common file systems; 2 MiB on tmpfs with huge
// pages). An offset past the largest file size has no bound.
func allocBound(st *unix.Stat_t, k fsKind, off, n uint64) uint64 {
	if n == 0 {
		return 0
	}
	if off > math.MaxInt64 || n > math.MaxInt64-off {
		return math.MaxUint64
	}
	bs := uint64(max(st.Blksize, 512))
	size, alloc := uint64(max(st.Size, 0)), uint64(allocated(st))
	first, last := off/bs, (off+n-1)/bs
	held := (size + bs - 1) / bs // blocks up to the end of the file
	from := first
	switch {
	case !k.sparse:
		from = held // every block to the end is (or will be) allocated
	case alloc >= held*bs:
		from = max(first, held) // no holes: only blocks past the end are new
	}
	if last < from {
		return 0
	}
	need := (last - from + 1) * bs
	if k.meta {
		need += bs
	}
	return need
}

// growBound is the most bytes extending a file st describes to size can
// allocate: nothing on a file system that keeps holes.
func growBound(st *unix.Stat_t, k fsKind, size uint64) uint64 {
	if k.sparse || size <= uint64(max(st.Size, 0)) {
		return 0
	}
	return allocBound(st, k, uint64(max(st.Size, 0)), size-uint64(max(st.Size, 0)))
}
