package wt

// #include <stdlib.h>
// #include "wt.h"
import "C"

import (
	"unsafe"
)

// PageSize is the granularity of Diff: 4 KiB.
const PageSize = 4096

// Diff returns, ascending, the 4 KiB pages below the image's end that
// differ from the instance's checkpoint (from its image when fromImage
// is set, or when it has no checkpoint). Pages past the image's end
// (memory grown since) are the caller's to compare. It fails with
// ErrNoCheckpoint for an instance not made by InstantiateImage with a
// resettable image.
func (i *Instance) Diff(fromImage bool) ([]uint32, error) {
	if i.slot == nil {
		return nil, ErrNoCheckpoint
	}
	useCk := C.int(1)
	if fromImage {
		useCk = 0
	}
	var pages *C.size_t
	n := C.gb_slot_diff(i.slot, useCk, &pages)
	if n < 0 {
		return nil, ErrNoCheckpoint
	}
	defer C.free(unsafe.Pointer(pages))
	out := make([]uint32, n)
	if n > 0 {
		for j, p := range unsafe.Slice((*C.size_t)(pages), int(n)) {
			out[j] = uint32(p)
		}
	}
	return out, nil
}

// XORPages writes to out (len(pages) pages long), for each of pages
// (below the memory's size), the page's bytes XORed with the same page of
// the checkpoint (of the image when fromImage is set or there is no
// checkpoint; zeros past the image's end), as Diff compares them: a
// memory at that base that XORs them in holds the instance's bytes. Pages
// that differ little from their base give mostly zeros, which compress
// much better and faster than the pages themselves.
func (i *Instance) XORPages(fromImage bool, pages []uint32, out []byte) error {
	if i.slot == nil {
		return ErrNoCheckpoint
	}
	if len(out) < len(pages)*PageSize {
		panic("wt: XORPages: out too short")
	}
	if len(pages) == 0 {
		return nil
	}
	useCk := C.int(1)
	if fromImage || C.gb_slot_has_ck(i.slot) == 0 {
		useCk = 0
	}
	C.gb_slot_xor_pages(i.slot, useCk, (*C.uint32_t)(unsafe.Pointer(&pages[0])), C.size_t(len(pages)), (*C.uint8_t)(unsafe.Pointer(&out[0])))
	return nil
}

// CheckpointHash is a hash (FNV-1a, 64 bits) of the instance's checkpoint:
// the page numbers and bytes that differ from the image. It is 0 without
// a checkpoint. Two instances of one image whose checkpoints hash alike
// hold the same memory at their checkpoints (up to a collision).
func (i *Instance) CheckpointHash() uint64 {
	if i.slot == nil {
		return 0
	}
	return uint64(C.gb_slot_ck_hash(i.slot))
}

// HasCheckpoint reports whether the instance's memory has a checkpoint.
func (i *Instance) HasCheckpoint() bool { return i.slot != nil && C.gb_slot_has_ck(i.slot) != 0 }

// ImageLen is the size in bytes of the image the instance's memory was
// made from (0 if none).
func (i *Instance) ImageLen() int {
	if i.slot == nil {
		return 0
	}
	return int(C.gb_slot_image_len(i.slot))
}

// Grow grows the memory by delta wasm pages (64 KiB each), past any
// limit set for calls (SetMemoryLimit applies only while wasm runs).
func (m Memory) Grow(c Context, delta uint64) error {
	var prev C.uint64_t
	return takeError(C.wasmtime_memory_grow(c.ptr, m.m, C.uint64_t(delta), &prev))
}

// PopulateWrite faults in bytes [off, off+n) of the memory for writing
// in one call, before they are written: one fault per page costs far
// more (see OpenImage). The range must lie inside the memory and be
// page-aligned; it is best effort.
func (m Memory) PopulateWrite(c Context, off, n int) {
	d := m.Data(c)
	if off < 0 || n <= 0 || off+n > len(d) {
		return
	}
	C.gb_populate_write((*C.uint8_t)(unsafe.Pointer(&d[off])), C.size_t(n))
}

// Same reports whether g and h are handles to the same global (a global
// exported under two names gives two handles).
func (g Global) Same(h Global) bool {
	return g.g != nil && h.g != nil && *g.g == *h.g
}
