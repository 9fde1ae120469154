// Package wasmbin reads and rewrites the parts of a WebAssembly binary that
// glovebox needs to change: exports, globals, the memory minimum, the start
// function and data segments. Everything else passes through byte for byte.
//
// The format is the WebAssembly core specification, binary format chapter
// (section ids 0–13, LEB128 integers, constant expressions ending in 0x0B).
package wasmbin

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Section ids from the core specification.
const (
	SecCustom    = 0
	SecType      = 1
	SecImport    = 2
	SecFunction  = 3
	SecTable     = 4
	SecMemory    = 5
	SecGlobal    = 6
	SecExport    = 7
	SecStart     = 8
	SecElement   = 9
	SecCode      = 10
	SecData      = 11
	SecDataCount = 12
	SecTag       = 13
)

// External kinds used by imports and exports.
const (
	KindFunc   = 0
	KindTable  = 1
	KindMemory = 2
	KindGlobal = 3
	KindTag    = 4
)

// Value types of globals.
const (
	ValI32 = 0x7F
	ValI64 = 0x7E
	ValF32 = 0x7D
	ValF64 = 0x7C
)

var magic = []byte{0x00, 0x61, 0x73, 0x6D, 0x01, 0x00, 0x00, 0x00}

// ErrMalformed is returned for input that is not a well-formed module.
var ErrMalformed = errors.New("wasmbin: malformed module")

// Section is one section of a module: its id and undecoded payload.
type Section struct {
	ID      byte
	Payload []byte
}

// Module is a parsed module: its sections in file order.
type Module struct {
	Sections []Section
}

// Parse splits b into sections. It checks the header and section framing
// only; payloads are decoded on demand.
func Parse(b []byte) (*Module, error) {
	if len(b) < 8 || !bytes.Equal(b[:8], magic) {
		return nil, fmt.Errorf("%w: bad header", ErrMalformed)
	}
	r := &reader{b: b, off: 8}
	m := &Module{}
	for r.off < len(r.b) {
		id, err := r.byte()
		if err != nil {
			return nil, err
		}
		n, err := r.u32()
		if err != nil {
			return nil, err
		}
		p, err := r.bytes(int(n))
		if err != nil {
			return nil, err
		}
		m.Sections = append(m.Sections, Section{ID: id, Payload: p})
	}
	return m, nil
}

// Encode writes the module back to bytes.
func (m *Module) Encode() []byte {
	var out bytes.Buffer
	out.Write(magic)
	for _, s := range m.Sections {
		out.WriteByte(s.ID)
		out.Write(AppendU32(nil, uint32(len(s.Payload))))
		out.Write(s.Payload)
	}
	return out.Bytes()
}

func (m *Module) section(id byte) *Section {
	for i := range m.Sections {
		if m.Sections[i].ID == id {
			return &m.Sections[i]
		}
	}
	return nil
}

// setSection replaces the payload of section id, inserting a new section in
// canonical order when the module has none.
func (m *Module) setSection(id byte, payload []byte) {
	if s := m.section(id); s != nil {
		s.Payload = payload
		return
	}
	pos := len(m.Sections)
	for i, s := range m.Sections {
		if s.ID != SecCustom && order(s.ID) > order(id) {
			pos = i
			break
		}
	}
	m.Sections = append(m.Sections, Section{})
	copy(m.Sections[pos+1:], m.Sections[pos:])
	m.Sections[pos] = Section{ID: id, Payload: payload}
}

// order gives the position a known section must take (the specification
// orders data count before code and tags after memory).
func order(id byte) int {
	switch id {
	case SecType:
		return 1
	case SecImport:
		return 2
	case SecFunction:
		return 3
	case SecTable:
		return 4
	case SecMemory:
		return 5
	case SecTag:
		return 6
	case SecGlobal:
		return 7
	case SecExport:
		return 8
	case SecStart:
		return 9
	case SecElement:
		return 10
	case SecDataCount:
		return 11
	case SecCode:
		return 12
	case SecData:
		return 13
	}
	return 100
}

// Import is one entry of the import section. Only the kind matters to the
// rewrites here; the descriptor stays undecoded.
type Import struct {
	Module, Name string
	Kind         byte
	TypeIndex    uint32 // for function imports: index into Types
}

// FuncType is a function signature; value types use the binary encoding
// (ValI32 and friends).
type FuncType struct {
	Params, Results []byte
}

// Types decodes the type section. Only function types are supported.
func (m *Module) Types() ([]FuncType, error) {
	s := m.section(SecType)
	if s == nil {
		return nil, nil
	}
	r := &reader{b: s.Payload}
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	out := make([]FuncType, 0, n)
	for i := uint32(0); i < n; i++ {
		form, err := r.byte()
		if err != nil {
			return nil, err
		}
		if form != 0x60 {
			return nil, fmt.Errorf("%w: type %d is not a function type", ErrMalformed, i)
		}
		var ft FuncType
		for _, dst := range []*[]byte{&ft.Params, &ft.Results} {
			k, err := r.u32()
			if err != nil {
				return nil, err
			}
			if *dst, err = r.bytes(int(k)); err != nil {
				return nil, err
			}
		}
		out = append(out, ft)
	}
	return out, nil
}

// Imports decodes the import section.
func (m *Module) Imports() ([]Import, error) {
	s := m.section(SecImport)
	if s == nil {
		return nil, nil
	}
	r := &reader{b: s.Payload}
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	var out []Import
	for i := uint32(0); i < n; i++ {
		mod, err := r.name()
		if err != nil {
			return nil, err
		}
		name, err := r.name()
		if err != nil {
			return nil, err
		}
		kind, err := r.byte()
		if err != nil {
			return nil, err
		}
		var tidx uint32
		switch kind {
		case KindFunc:
			tidx, err = r.u32()
		case KindTable:
			if _, err = r.byte(); err == nil {
				_, _, err = r.limits()
			}
		case KindMemory:
			_, _, err = r.limits()
		case KindGlobal:
			_, err = r.bytes(2)
		case KindTag:
			if _, err = r.byte(); err == nil {
				_, err = r.u32()
			}
		default:
			err = fmt.Errorf("%w: import kind %d", ErrMalformed, kind)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, Import{Module: mod, Name: name, Kind: kind, TypeIndex: tidx})
	}
	return out, nil
}

func (m *Module) importCount(kind byte) (int, error) {
	imps, err := m.Imports()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, im := range imps {
		if im.Kind == kind {
			n++
		}
	}
	return n, nil
}

// Global is one global defined (not imported) by the module.
type Global struct {
	Index   uint32 // index in the global index space (imports first)
	Type    byte   // ValI32, ValI64, ValF32 or ValF64
	Mutable bool
	Init    []byte // constant expression including the final 0x0B
}

// Globals decodes the global section.
func (m *Module) Globals() ([]Global, error) {
	base, err := m.importCount(KindGlobal)
	if err != nil {
		return nil, err
	}
	s := m.section(SecGlobal)
	if s == nil {
		return nil, nil
	}
	r := &reader{b: s.Payload}
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	out := make([]Global, 0, n)
	for i := uint32(0); i < n; i++ {
		t, err := r.byte()
		if err != nil {
			return nil, err
		}
		mut, err := r.byte()
		if err != nil {
			return nil, err
		}
		init, err := r.constExpr()
		if err != nil {
			return nil, err
		}
		out = append(out, Global{Index: uint32(base) + i, Type: t, Mutable: mut == 1, Init: init})
	}
	return out, nil
}

// Memory is the module's single defined linear memory, in 64 KiB pages.
type Memory struct {
	Min    uint32
	Max    uint32
	HasMax bool
}

// Memory decodes the memory section. A module without one, or with more
// than one memory, is an error: the rewrites here assume exactly one.
func (m *Module) Memory() (Memory, error) {
	s := m.section(SecMemory)
	if s == nil {
		return Memory{}, fmt.Errorf("%w: no memory section", ErrMalformed)
	}
	r := &reader{b: s.Payload}
	n, err := r.u32()
	if err != nil {
		return Memory{}, err
	}
	if n != 1 {
		return Memory{}, fmt.Errorf("%w: %d memories, want 1", ErrMalformed, n)
	}
	min, max, err := r.limits()
	if err != nil {
		return Memory{}, err
	}
	return Memory{Min: min, Max: uint32(max), HasMax: max >= 0}, nil
}

// Export is one entry of the export section.
type Export struct {
	Name  string
	Kind  byte
	Index uint32
}

// Exports decodes the export section.
func (m *Module) Exports() ([]Export, error) {
	s := m.section(SecExport)
	if s == nil {
		return nil, nil
	}
	r := &reader{b: s.Payload}
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	out := make([]Export, 0, n)
	for i := uint32(0); i < n; i++ {
		name, err := r.name()
		if err != nil {
			return nil, err
		}
		kind, err := r.byte()
		if err != nil {
			return nil, err
		}
		idx, err := r.u32()
		if err != nil {
			return nil, err
		}
		out = append(out, Export{Name: name, Kind: kind, Index: idx})
	}
	return out, nil
}

// SetExports replaces the export section.
func (m *Module) SetExports(exps []Export) {
	p := AppendU32(nil, uint32(len(exps)))
	for _, e := range exps {
		p = AppendName(p, e.Name)
		p = append(p, e.Kind)
		p = AppendU32(p, e.Index)
	}
	m.setSection(SecExport, p)
}

// Segment is one data segment. Active segments are placed at Offset in
// memory 0 at instantiation; passive ones are only reachable by memory.init.
type Segment struct {
	Passive bool
	Offset  uint32
	Data    []byte
}

// DataSegments decodes the data section. Active segments must use an
// i32.const offset into memory 0.
func (m *Module) DataSegments() ([]Segment, error) {
	s := m.section(SecData)
	if s == nil {
		return nil, nil
	}
	r := &reader{b: s.Payload}
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	out := make([]Segment, 0, n)
	for i := uint32(0); i < n; i++ {
		flag, err := r.u32()
		if err != nil {
			return nil, err
		}
		var seg Segment
		switch flag {
		case 0, 2:
			if flag == 2 {
				mem, err := r.u32()
				if err != nil {
					return nil, err
				}
				if mem != 0 {
					return nil, fmt.Errorf("%w: data segment for memory %d", ErrMalformed, mem)
				}
			}
			expr, err := r.constExpr()
			if err != nil {
				return nil, err
			}
			off, ok := i32Const(expr)
			if !ok {
				return nil, fmt.Errorf("%w: data segment %d has a non-constant offset", ErrMalformed, i)
			}
			seg.Offset = uint32(off)
		case 1:
			seg.Passive = true
		default:
			return nil, fmt.Errorf("%w: data segment flag %d", ErrMalformed, flag)
		}
		ln, err := r.u32()
		if err != nil {
			return nil, err
		}
		if seg.Data, err = r.bytes(int(ln)); err != nil {
			return nil, err
		}
		out = append(out, seg)
	}
	return out, nil
}

func i32Const(expr []byte) (int32, bool) {
	if len(expr) < 2 || expr[0] != 0x41 {
		return 0, false
	}
	r := &reader{b: expr[1:]}
	v, err := r.s32()
	if err != nil || r.off != len(r.b)-1 || r.b[r.off] != 0x0B {
		return 0, false
	}
	return v, true
}

// ExportGlobals returns a copy of m that also exports every mutable global
// defined by the module, under prefix followed by the global's index.
func (m *Module) ExportGlobals(prefix string) (*Module, error) {
	gs, err := m.Globals()
	if err != nil {
		return nil, err
	}
	exps, err := m.Exports()
	if err != nil {
		return nil, err
	}
	for _, g := range gs {
		if g.Mutable {
			exps = append(exps, Export{Name: fmt.Sprintf("%s%d", prefix, g.Index), Kind: KindGlobal, Index: g.Index})
		}
	}
	out := m.clone()
	out.SetExports(exps)
	return out, nil
}

func (m *Module) clone() *Module {
	return &Module{Sections: append([]Section(nil), m.Sections...)}
}

// PageSize is the WebAssembly page size in bytes.
const PageSize = 65536

// Split separates a module's initial memory from its code. It returns a
// copy of m in which every active data segment has become an empty passive
// one (so segment indices and the data count are unchanged) and every
// mutable global is exported as prefix followed by its index, together with
// the initial linear memory those active segments described (the memory
// minimum in pages, times 64 KiB). An instance of the returned module whose
// memory starts as that image behaves as an instance of m.
func (m *Module) Split(prefix string) (*Module, []byte, error) {
	mem, err := m.Memory()
	if err != nil {
		return nil, nil, err
	}
	segs, err := m.DataSegments()
	if err != nil {
		return nil, nil, err
	}
	img := make([]byte, int(mem.Min)*PageSize)
	body := AppendU32(nil, uint32(len(segs)))
	for i, s := range segs {
		if s.Passive {
			body = append(body, 1)
			body = AppendU32(body, uint32(len(s.Data)))
			body = append(body, s.Data...)
			continue
		}
		if uint64(s.Offset)+uint64(len(s.Data)) > uint64(len(img)) {
			return nil, nil, fmt.Errorf("%w: data segment %d ends past the initial memory", ErrMalformed, i)
		}
		copy(img[s.Offset:], s.Data)
		body = append(body, 1, 0)
	}
	out, err := m.ExportGlobals(prefix)
	if err != nil {
		return nil, nil, err
	}
	out.setSection(SecData, body)
	return out, img, nil
}

// NonZeroRanges returns the [start,end) byte ranges of mem that hold
// non-zero bytes, found at the given granularity and trimmed to the first
// and last non-zero byte of each run.
func NonZeroRanges(mem []byte, gran int) [][2]int {
	var out [][2]int
	start := -1
	for off := 0; off < len(mem); off += gran {
		end := min(off+gran, len(mem))
		if allZero(mem[off:end]) {
			if start >= 0 {
				out = append(out, trim(mem, start, off))
				start = -1
			}
			continue
		}
		if start < 0 {
			start = off
		}
	}
	if start >= 0 {
		out = append(out, trim(mem, start, len(mem)))
	}
	return out
}

func trim(mem []byte, s, e int) [2]int {
	for s < e && mem[s] == 0 {
		s++
	}
	for e > s && mem[e-1] == 0 {
		e--
	}
	return [2]int{s, e}
}

func allZero(b []byte) bool {
	for len(b) >= 8 {
		if binary.LittleEndian.Uint64(b) != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

type reader struct {
	b   []byte
	off int
}

func (r *reader) byte() (byte, error) {
	if r.off >= len(r.b) {
		return 0, fmt.Errorf("%w: unexpected end", ErrMalformed)
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

func (r *reader) bytes(n int) ([]byte, error) {
	if n < 0 || n > len(r.b)-r.off {
		return nil, fmt.Errorf("%w: length %d past end", ErrMalformed, n)
	}
	p := r.b[r.off : r.off+n : r.off+n]
	r.off += n
	return p, nil
}

func (r *reader) u32() (uint32, error) {
	var v uint64
	for shift := 0; shift < 35; shift += 7 {
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		v |= uint64(c&0x7F) << shift
		if c&0x80 == 0 {
			if v > math.MaxUint32 {
				return 0, fmt.Errorf("%w: u32 overflow", ErrMalformed)
			}
			return uint32(v), nil
		}
	}
	return 0, fmt.Errorf("%w: u32 too long", ErrMalformed)
}

func (r *reader) sleb(bits int) (int64, error) {
	var v int64
	shift := 0
	for {
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		v |= int64(c&0x7F) << shift
		shift += 7
		if c&0x80 == 0 {
			if shift < 64 && c&0x40 != 0 {
				v |= -1 << shift
			}
			return v, nil
		}
		if shift >= bits+7 {
			return 0, fmt.Errorf("%w: signed LEB128 too long", ErrMalformed)
		}
	}
}

func (r *reader) s32() (int32, error) {
	v, err := r.sleb(32)
	return int32(v), err
}

func (r *reader) name() (string, error) {
	n, err := r.u32()
	if err != nil {
		return "", err
	}
	b, err := r.bytes(int(n))
	return string(b), err
}

// limits reads a limits pair; max is -1 when absent.
func (r *reader) limits() (uint32, int64, error) {
	flag, err := r.byte()
	if err != nil {
		return 0, 0, err
	}
	min, err := r.u32()
	if err != nil {
		return 0, 0, err
	}
	max := int64(-1)
	if flag&1 != 0 {
		m, err := r.u32()
		if err != nil {
			return 0, 0, err
		}
		max = int64(m)
	}
	if flag&^1 != 0 {
		return 0, 0, fmt.Errorf("%w: unsupported limits flag 0x%x (shared or 64-bit memory)", ErrMalformed, flag)
	}
	return min, max, nil
}

// constExpr reads a constant expression up to and including its 0x0B end.
func (r *reader) constExpr() ([]byte, error) {
	start := r.off
	for {
		op, err := r.byte()
		if err != nil {
			return nil, err
		}
		switch op {
		case 0x0B:
			return r.b[start:r.off:r.off], nil
		case 0x41:
			_, err = r.sleb(32)
		case 0x42:
			_, err = r.sleb(64)
		case 0x43:
			_, err = r.bytes(4)
		case 0x44:
			_, err = r.bytes(8)
		case 0x23, 0xD2:
			_, err = r.u32()
		case 0xD0:
			_, err = r.byte()
		case 0x6A, 0x6B, 0x6C, 0x7C, 0x7D, 0x7E:
			// extended-const arithmetic: no immediates
		default:
			return nil, fmt.Errorf("%w: opcode 0x%x in constant expression", ErrMalformed, op)
		}
		if err != nil {
			return nil, err
		}
	}
}

// AppendU32 appends v in unsigned LEB128, the binary format's integer
// encoding.
func AppendU32(b []byte, v uint32) []byte {
	for {
		c := byte(v & 0x7F)
		v >>= 7
		if v != 0 {
			b = append(b, c|0x80)
			continue
		}
		return append(b, c)
	}
}

// AppendName appends s as a binary-format name: its length, then its bytes.
func AppendName(b []byte, s string) []byte {
	b = AppendU32(b, uint32(len(s)))
	return append(b, s...)
}
