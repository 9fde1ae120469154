package wt

// #include <stdlib.h>
// #include "wt.h"
import "C"

import (
	"unsafe"
)

// PageSize is the granularity of Written and DiffXOR: 4 KiB.
const PageSize = 4096

// Written returns the runs of pages below the image's end that were
// written since the memory was mapped (a superset of those that differ
// from its checkpoint or image: a page written back to its old bytes, or
// restored by a rewind, stays written), as pairs of first page and pages,
// ascending, and how many pages they hold. Pages past the image's end
// (memory grown since) are the caller's to compare. It fails with
// ErrNoCheckpoint for an instance not made by InstantiateImage with a
// resettable image.
func (i *Instance) Written() (runs []uint64, pages int, err error) {
	if i.slot == nil {
		return nil, 0, ErrNoCheckpoint
	}
	var c *C.size_t
	var nruns C.size_t
	n := C.gb_slot_written(i.slot, &c, &nruns)
	if n < 0 {
		return nil, 0, ErrNoCheckpoint
	}
	defer C.free(unsafe.Pointer(c))
	runs = make([]uint64, 2*int(nruns))
	if nruns > 0 {
		for j, x := range unsafe.Slice(c, 2*int(nruns)) {
			runs[j] = uint64(x)
		}
	}
	return runs, int(n), nil
}

// DiffXOR compares each page of runs (from Written; a share of them) with
// its base, the checkpoint's page (the image's when fromImage is set or
// there is no checkpoint); for each that differs it stores
// its number in pages and its bytes XORed with the base's in out (a
// PageSize each), and it returns how many differ. A memory at that base
// that XORs them in holds the instance's bytes; pages that differ little
// from their base give mostly zeros, which compress much better and
// faster than the pages themselves. pages and out must have room for
// every page of runs. Calls on disjoint runs may run at once.
func (i *Instance) DiffXOR(fromImage bool, runs []uint64, pages []uint32, out []byte) int {
	total := 0
	for j := 1; j < len(runs); j += 2 {
		total += int(runs[j])
	}
	if total == 0 {
		return 0
	}
	if len(pages) < total || len(out) < total*PageSize {
		panic("wt: DiffXOR: no room for the pages")
	}
	useCk := C.int(1)
	if fromImage {
		useCk = 0
	}
	c := make([]C.size_t, len(runs))
	for j, x := range runs {
		c[j] = C.size_t(x)
	}
	return int(C.gb_slot_diff_xor(i.slot, useCk, &c[0], C.size_t(len(runs)/2), (*C.uint32_t)(unsafe.Pointer(&pages[0])), (*C.uint8_t)(unsafe.Pointer(&out[0]))))
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

// PopulateWrite faults in b, a page-aligned range of a memory's Data,
// for writing in one call, before it is written: one fault per page costs
// far more (see OpenImage). It is best effort, and touches no store (so
// several threads may populate parts of one memory at once).
func PopulateWrite(b []byte) {
	if len(b) > 0 {
		C.gb_populate_write((*C.uint8_t)(unsafe.Pointer(&b[0])), C.size_t(len(b)))
	}
}

// PopulateWrite faults in pages [first, first+n) of the instance's
// memory (below the image's end) for writing, as the function
// PopulateWrite does, but skips the pages its last rewind found written,
// which are resident already. Without an image slot it populates the
// whole range of mem (the memory's Data). Best effort; calls on disjoint
// ranges may run at once.
func (i *Instance) PopulateWrite(mem []byte, first, n int) {
	if n <= 0 {
		return
	}
	if i.slot == nil || (first+n)*PageSize > int(C.gb_slot_image_len(i.slot)) {
		PopulateWrite(mem[first*PageSize : (first+n)*PageSize])
		return
	}
	C.gb_slot_populate_write(i.slot, C.size_t(first), C.size_t(n))
}

// Same reports whether g and h are handles to the same global (a global
// exported under two names gives two handles).
func (g Global) Same(h Global) bool {
	return g.g != nil && h.g != nil && *g.g == *h.g
}
