package wt

// #include "wt.h"
import "C"

import "unsafe"

// Global is an exported numeric global, looked up once so that reading
// and writing it costs one C call each (no name lookup). It lives in C
// memory owned by its store. The zero Global is not valid.
type Global struct {
	g    *C.wasmtime_global_t
	kind ValKind
}

// GlobalI64 returns the exported global name, which must be an i64; ok is
// false when there is no such export or it is not an i64 global.
func (i *Instance) GlobalI64(c Context, name string) (g Global, ok bool) {
	ext, ok := i.export(c, name, externGlobal)
	if !ok {
		return Global{}, false
	}
	p := (*C.wasmtime_global_t)(i.store.calloc(C.size_t(unsafe.Sizeof(C.wasmtime_global_t{}))))
	*p = *(*C.wasmtime_global_t)(unsafe.Pointer(&ext.of))
	var v C.wasmtime_val_t
	C.wasmtime_global_get(c.ptr, p, &v)
	if ValKind(v.kind) != I64 {
		return Global{}, false
	}
	return Global{g: p, kind: I64}, true
}

// Valid reports whether g was found.
func (g Global) Valid() bool { return g.g != nil }

// Get reads the global.
func (g Global) Get(c Context) int64 {
	var v C.wasmtime_val_t
	C.wasmtime_global_get(c.ptr, g.g, &v)
	return *(*int64)(unsafe.Pointer(&v.of))
}

// Set writes the global, which must be mutable.
func (g Global) Set(c Context, x int64) error {
	v := C.wasmtime_val_t{kind: C.uint8_t(I64)}
	*(*int64)(unsafe.Pointer(&v.of)) = x
	return takeError(C.wasmtime_global_set(c.ptr, g.g, &v))
}

// Global returns the exported global name, or false if there is none or
// it is not numeric.
func (i *Instance) Global(c Context, name string) (Global, bool) {
	ext, ok := i.export(c, name, externGlobal)
	if !ok {
		return Global{}, false
	}
	g := (*C.wasmtime_global_t)(i.store.calloc(C.size_t(unsafe.Sizeof(C.wasmtime_global_t{}))))
	*g = *(*C.wasmtime_global_t)(unsafe.Pointer(&ext.of))
	var cur C.wasmtime_val_t
	C.wasmtime_global_get(c.ptr, g, &cur)
	switch k := ValKind(cur.kind); k {
	case I32, I64, F32, F64:
		return Global{g: g, kind: k}, true
	}
	return Global{}, false
}

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
