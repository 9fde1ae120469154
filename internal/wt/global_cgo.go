package wt

// #include "wt.h"
import "C"

import (
	"fmt"
	"unsafe"
)

// Global is an exported numeric global, looked up once so that reading
// and writing it costs one C call each (no name lookup). It lives in C
// memory owned by its store. The zero Global is not valid.
type Global struct {
	g    *C.wasmtime_global_t
	kind ValKind
}

// lookupGlobal finds the exported numeric global name: a copy of its
// handle and its kind, or false if there is none or it is not numeric.
func (i *Instance) lookupGlobal(c Context, name string) (C.wasmtime_global_t, ValKind, bool) {
	ext, ok := i.export(c, name, externGlobal)
	if !ok {
		return C.wasmtime_global_t{}, 0, false
	}
	g := *(*C.wasmtime_global_t)(unsafe.Pointer(&ext.of))
	var cur C.wasmtime_val_t
	C.wasmtime_global_get(c.ptr, &g, &cur)
	switch k := ValKind(cur.kind); k {
	case I32, I64, F32, F64:
		return g, k, true
	}
	return C.wasmtime_global_t{}, 0, false
}

// Global returns the exported global name, or false if there is none or
// it is not numeric.
func (i *Instance) Global(c Context, name string) (Global, bool) {
	g, k, ok := i.lookupGlobal(c, name)
	if !ok {
		return Global{}, false
	}
	p := (*C.wasmtime_global_t)(i.store.calloc(C.size_t(unsafe.Sizeof(C.wasmtime_global_t{}))))
	*p = g
	return Global{g: p, kind: k}, true
}

// GlobalI64 returns the exported global name, which must be an i64; ok is
// false when there is no such export or it is not an i64 global.
func (i *Instance) GlobalI64(c Context, name string) (Global, bool) {
	if g, ok := i.Global(c, name); ok && g.kind == I64 {
		return g, true
	}
	return Global{}, false
}

// GlobalBits returns the raw bits of the exported global name (i32 and
// f32 in the low 32 bits), or false if there is no numeric global so
// named. It looks the global up each time: see Global for a handle.
func (i *Instance) GlobalBits(c Context, name string) (uint64, bool) {
	g, k, ok := i.lookupGlobal(c, name)
	if !ok {
		return 0, false
	}
	return Global{g: &g, kind: k}.Bits(c), true
}

// SetGlobalBits sets the exported mutable global name from raw bits, as
// Global.SetBits does. It fails if there is no numeric global so named.
func (i *Instance) SetGlobalBits(c Context, name string, bits uint64) error {
	g, k, ok := i.lookupGlobal(c, name)
	if !ok {
		return fmt.Errorf("wt: no numeric exported global %q", name)
	}
	return Global{g: &g, kind: k}.SetBits(c, bits)
}

// Valid reports whether g was found.
func (g Global) Valid() bool { return g.g != nil }

// Bits reads the global as raw bits (i32 and f32 in the low 32 bits).
func (g Global) Bits(c Context) uint64 {
	var v C.wasmtime_val_t
	C.wasmtime_global_get(c.ptr, g.g, &v)
	if g.kind == I32 || g.kind == F32 {
		return uint64(*(*uint32)(unsafe.Pointer(&v.of)))
	}
	return *(*uint64)(unsafe.Pointer(&v.of))
}

// Get reads an i64 global.
func (g Global) Get(c Context) int64 { return int64(g.Bits(c)) }

// Set writes an i64 global, which must be mutable.
func (g Global) Set(c Context, x int64) error { return g.SetBits(c, uint64(x)) }

// SetBits sets the global from raw bits (i32 and f32 take the low 32).
// It fails if the global is immutable.
func (g Global) SetBits(c Context, bits uint64) error {
	v := C.wasmtime_val_t{kind: C.uint8_t(g.kind)}
	switch g.kind {
	case I32, F32:
		*(*uint32)(unsafe.Pointer(&v.of)) = uint32(bits)
	default:
		*(*uint64)(unsafe.Pointer(&v.of)) = bits
	}
	return takeError(C.wasmtime_global_set(c.ptr, g.g, &v))
}
