package wasmbin

import (
	"bytes"
	"fmt"
)

// FuncTypes decodes the function section: the type index of each function
// the module defines, in index order (the first defined function has index
// equal to the number of imported functions).
func (m *Module) FuncTypes() ([]uint32, error) {
	s := m.section(SecFunction)
	if s == nil {
		return nil, nil
	}
	r := &reader{b: s.Payload}
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	out := make([]uint32, n)
	for i := range out {
		if out[i], err = r.u32(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Bodies decodes the code section: each defined function's body (its local
// declarations and expression, without the size prefix), in index order.
// The slices alias the module's bytes.
func (m *Module) Bodies() ([][]byte, error) {
	s := m.section(SecCode)
	if s == nil {
		return nil, nil
	}
	r := &reader{b: s.Payload}
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	out := make([][]byte, n)
	for i := range out {
		k, err := r.u32()
		if err != nil {
			return nil, err
		}
		if out[i], err = r.bytes(int(k)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// setFunctions replaces the function and code sections.
func (m *Module) setFunctions(types []uint32, bodies [][]byte) {
	f := AppendU32(nil, uint32(len(types)))
	for _, t := range types {
		f = AppendU32(f, t)
	}
	m.setSection(SecFunction, f)
	size := 5
	for _, b := range bodies {
		size += 5 + len(b)
	}
	c := make([]byte, 0, size)
	c = AppendU32(c, uint32(len(bodies)))
	for _, b := range bodies {
		c = AppendU32(c, uint32(len(b)))
		c = append(c, b...)
	}
	m.setSection(SecCode, c)
}

// addGlobal appends a global with the given type, mutability and constant
// initialiser (without the final 0x0B) and returns its index.
func (m *Module) addGlobal(typ byte, mutable bool, init []byte) (uint32, error) {
	gs, err := m.Globals()
	if err != nil {
		return 0, err
	}
	base, err := m.importCount(KindGlobal)
	if err != nil {
		return 0, err
	}
	var p []byte
	p = AppendU32(p, uint32(len(gs)+1))
	if s := m.section(SecGlobal); s != nil {
		r := &reader{b: s.Payload}
		if _, err := r.u32(); err != nil {
			return 0, err
		}
		p = append(p, s.Payload[r.off:]...)
	}
	mut := byte(0)
	if mutable {
		mut = 1
	}
	p = append(p, typ, mut)
	p = append(p, init...)
	p = append(p, 0x0B)
	m.setSection(SecGlobal, p)
	return uint32(base + len(gs)), nil
}

// setMemoryMin rewrites the single memory's minimum, keeping its maximum.
func (m *Module) setMemoryMin(pages uint32) error {
	mem, err := m.Memory()
	if err != nil {
		return err
	}
	if mem.HasMax && pages > mem.Max {
		return fmt.Errorf("%w: memory minimum %d above its maximum %d", ErrMalformed, pages, mem.Max)
	}
	p := AppendU32(nil, 1)
	if mem.HasMax {
		p = append(p, 1)
		p = AppendU32(p, pages)
		p = AppendU32(p, mem.Max)
	} else {
		p = append(p, 0)
		p = AppendU32(p, pages)
	}
	m.setSection(SecMemory, p)
	return nil
}

// AppendS32 appends v in signed LEB128 (the encoding of i32.const).
func AppendS32(b []byte, v int32) []byte { return AppendS64(b, int64(v)) }

// replaceOnce returns body with the single occurrence of old replaced by
// neu; it fails when old occurs zero or several times.
func replaceOnce(body, old, neu []byte) ([]byte, error) {
	if n := bytes.Count(body, old); n != 1 {
		return nil, fmt.Errorf("wasmbin: expected one occurrence of % x, found %d", old, n)
	}
	return bytes.Replace(body, old, neu, 1), nil
}
