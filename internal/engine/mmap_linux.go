package engine

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// mapFile maps path read-only. Reading a cache file through a mapping
// avoids copying it into fresh heap memory, which on a paravirtualized
// host costs a page fault per 4 KiB (measured at 11–16 µs each here).
func mapFile(path string) ([]byte, func(), error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if st.Size() == 0 {
		return nil, func() {}, nil
	}
	b, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("mmap %s: %w", path, err)
	}
	return b, func() { unix.Munmap(b) }, nil
}

// dropPageCache writes f's dirty pages to disk and drops its pages from
// the page cache. Cache files that processes map (the compiled modules,
// memory.raw) are written or read whole, in large chunks, and the page
// cache then holds them as large folios; Linux 6.18 maps a whole large
// folio into a process on its first touch, so a start that runs a few
// hundred KiB of guest code got tens of MiB of the file counted in its
// resident memory (`glovebox eval -e 1+1` peaked at 65 MiB instead of
// 37 MiB here). Dropped, the pages come back through the faults of the
// processes that use them, a read-around at a time. Errors are ignored:
// this only affects memory accounting, never what a process reads.
func dropPageCache(f *os.File) {
	fd := int(f.Fd())
	if unix.Fdatasync(fd) == nil {
		unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED)
	}
}

// dropPageCachePath is dropPageCache for the file at path.
func dropPageCachePath(path string) {
	if f, err := os.Open(path); err == nil {
		dropPageCache(f)
		f.Close()
	}
}
