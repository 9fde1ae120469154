package wasmbin

import (
	"fmt"
)

// A decoder for function bodies: every instruction and its immediates, as
// the core specification's binary format (chapter 5.4) encodes them, for
// the MVP and the proposals the engine enables and ruby.wasm may use:
// sign extension, non-trapping float-to-int conversions, bulk memory,
// reference types, multi-value block types, fixed-width SIMD and tail
// calls. Anything else (exceptions, threads, GC, relaxed SIMD) is an
// error: a rewrite that needs the decoder fails rather than pass over code
// it cannot read.

// Instr is one decoded instruction.
type Instr struct {
	Op  byte   // the first opcode byte
	Sub uint32 // the sub-opcode of a 0xFC or 0xFD prefixed instruction
	// Off and End delimit the instruction's bytes in the expression.
	Off, End int
	// Imm holds the numeric immediates in order (labels, indices, memarg
	// fields, lane numbers, constants; block types as signed values, -64
	// meaning empty); Raw the fixed-width ones (float and v128 constants,
	// shuffle lanes); Vec the vector immediate of br_table (its labels,
	// the default last) or of a typed select (the value types).
	Imm [3]int64
	Raw []byte
	Vec []uint32

	layout string // see layouts
}

// Immediate layouts, one letter an immediate:
//
//	u  u32 (LEB128)        s  s32         S  s64
//	b  block type (s33)    y  one byte    4/8/16  that many raw bytes
//	m  memarg (align, then a memory index when align has bit 6, offset)
//	L  br_table: vector of labels, then the default
//	T  typed select: vector of value types
//	h  heap type (one byte)
var layouts [256]string

// ok marks the one-byte opcodes the decoder knows (an empty layout is
// a valid "no immediates").
var known [256]bool

func init() {
	set := func(lo, hi byte, l string) {
		for op := int(lo); op <= int(hi); op++ {
			layouts[op], known[op] = l, true
		}
	}
	set(0x00, 0x01, "")   // unreachable, nop
	set(0x02, 0x04, "b")  // block, loop, if
	set(0x05, 0x05, "")   // else
	set(0x0B, 0x0B, "")   // end
	set(0x0C, 0x0D, "u")  // br, br_if
	set(0x0E, 0x0E, "L")  // br_table
	set(0x0F, 0x0F, "")   // return
	set(0x10, 0x10, "u")  // call
	set(0x11, 0x11, "uu") // call_indirect type table
	set(0x12, 0x12, "u")  // return_call
	set(0x13, 0x13, "uu") // return_call_indirect
	set(0x1A, 0x1B, "")   // drop, select
	set(0x1C, 0x1C, "T")  // select t*
	set(0x20, 0x24, "u")  // local.get/set/tee, global.get/set
	set(0x25, 0x26, "u")  // table.get, table.set
	set(0x28, 0x3E, "m")  // loads and stores
	set(0x3F, 0x40, "u")  // memory.size, memory.grow (memory index)
	set(0x41, 0x41, "s")  // i32.const
	set(0x42, 0x42, "S")  // i64.const
	set(0x43, 0x43, "4")  // f32.const
	set(0x44, 0x44, "8")  // f64.const
	set(0x45, 0xC4, "")   // numeric, sign extension
	set(0xD0, 0xD0, "h")  // ref.null
	set(0xD1, 0xD1, "")   // ref.is_null
	set(0xD2, 0xD2, "u")  // ref.func
	set(0xFC, 0xFD, "")   // prefixes: see prefixed
}

// fcLayout is the layout of the 0xFC instruction sub.
func fcLayout(sub uint32) (string, bool) {
	switch {
	case sub <= 7: // trunc_sat
		return "", true
	case sub == 8: // memory.init data memory
		return "uu", true
	case sub == 9: // data.drop
		return "u", true
	case sub == 10: // memory.copy dst src
		return "uu", true
	case sub == 11: // memory.fill
		return "u", true
	case sub == 12: // table.init elem table
		return "uu", true
	case sub == 13: // elem.drop
		return "u", true
	case sub == 14: // table.copy dst src
		return "uu", true
	case sub >= 15 && sub <= 17: // table.grow, table.size, table.fill
		return "u", true
	}
	return "", false
}

// fdLayout is the layout of the SIMD (0xFD) instruction sub.
func fdLayout(sub uint32) (string, bool) {
	switch {
	case sub <= 11: // v128.load*, v128.store
		return "m", true
	case sub == 12: // v128.const
		return "16", true
	case sub == 13: // i8x16.shuffle
		return "16", true
	case sub >= 14 && sub <= 20: // swizzle, splats
		return "", true
	case sub >= 21 && sub <= 34: // extract_lane, replace_lane
		return "y", true
	case sub >= 35 && sub <= 83:
		return "", true
	case sub >= 84 && sub <= 91: // load/store lane
		return "my", true
	case sub == 92 || sub == 93: // load32_zero, load64_zero
		return "m", true
	case sub >= 94 && sub <= 255:
		return "", true
	}
	return "", false
}

// ErrUnknownOpcode is returned for an instruction the decoder does not
// know.
var ErrUnknownOpcode = fmt.Errorf("%w: unknown or unsupported opcode", ErrMalformed)

// Body is a decoded function body header: its local declarations and where
// its expression starts.
type Body struct {
	Locals []LocalDecl
	Code   int // offset of the expression in the body
}

// LocalDecl declares Count locals of one value type.
type LocalDecl struct {
	Count uint32
	Type  byte
}

// DecodeLocals reads a function body's local declarations.
func DecodeLocals(body []byte) (Body, error) {
	r := &reader{b: body}
	n, err := r.u32()
	if err != nil {
		return Body{}, err
	}
	var out Body
	total := uint64(0)
	for i := uint32(0); i < n; i++ {
		c, err := r.u32()
		if err != nil {
			return Body{}, err
		}
		t, err := r.byte()
		if err != nil {
			return Body{}, err
		}
		if !isValType(t) {
			return Body{}, fmt.Errorf("%w: local of type 0x%x", ErrUnknownOpcode, t)
		}
		total += uint64(c)
		out.Locals = append(out.Locals, LocalDecl{Count: c, Type: t})
	}
	if total > 50000 { // wasmtime's limit on locals per function
		return Body{}, fmt.Errorf("%w: %d locals", ErrMalformed, total)
	}
	out.Code = r.off
	return out, nil
}

func isValType(t byte) bool {
	switch t {
	case ValI32, ValI64, ValF32, ValF64, 0x7B, 0x70, 0x6F: // v128, funcref, externref
		return true
	}
	return false
}

// Decoder reads the instructions of one expression in order.
type Decoder struct {
	r reader
}

// NewDecoder decodes code (a function body's expression, from Body.Code
// on, up to and including its final end).
func NewDecoder(code []byte) *Decoder { return &Decoder{r: reader{b: code}} }

// More reports whether instructions are left.
func (d *Decoder) More() bool { return d.r.off < len(d.r.b) }

// Next decodes the next instruction into in (reusing its slices).
func (d *Decoder) Next(in *Instr) error {
	r := &d.r
	in.Off = r.off
	in.Sub, in.Raw, in.Vec = 0, in.Raw[:0], in.Vec[:0]
	in.Imm = [3]int64{}
	op, err := r.byte()
	if err != nil {
		return err
	}
	in.Op = op
	if !known[op] {
		return fmt.Errorf("%w 0x%02x at offset %d", ErrUnknownOpcode, op, in.Off)
	}
	layout := layouts[op]
	if op == 0xFC || op == 0xFD {
		if in.Sub, err = r.u32(); err != nil {
			return err
		}
		var ok bool
		if op == 0xFC {
			layout, ok = fcLayout(in.Sub)
		} else {
			layout, ok = fdLayout(in.Sub)
		}
		if !ok {
			return fmt.Errorf("%w 0x%02x %d at offset %d", ErrUnknownOpcode, op, in.Sub, in.Off)
		}
	}
	in.layout = layout
	k := 0
	for i := 0; i < len(layout); i++ {
		var v int64
		switch layout[i] {
		case 'u':
			var u uint32
			u, err = r.u32()
			v = int64(u)
		case 's':
			v, err = r.sleb(32)
			if err == nil && (v < -1<<31 || v >= 1<<31) {
				err = fmt.Errorf("%w: i32 constant out of range", ErrMalformed)
			}
		case 'S':
			v, err = r.sleb(64)
		case 'b':
			v, err = r.blockType()
		case 'y', 'h':
			var c byte
			c, err = r.byte()
			v = int64(c)
			if err == nil && layout[i] == 'h' && c != 0x70 && c != 0x6F {
				err = fmt.Errorf("%w: heap type 0x%x", ErrUnknownOpcode, c)
			}
		case '4', '8', '1':
			n := 4
			if layout[i] == '8' {
				n = 8
			} else if layout[i] == '1' {
				n, i = 16, i+1 // "16"
			}
			var p []byte
			p, err = r.bytes(n)
			in.Raw = append(in.Raw, p...)
			continue
		case 'm':
			var align, mem uint32
			var off uint64
			if align, err = r.u32(); err != nil {
				return err
			}
			if align&0x40 != 0 {
				if mem, err = r.u32(); err != nil {
					return err
				}
				if mem != 0 {
					return fmt.Errorf("%w: memory %d (multi-memory)", ErrUnknownOpcode, mem)
				}
			}
			if off, err = r.u64(); err != nil {
				return err
			}
			in.Imm[k], in.Imm[k+1] = int64(align), int64(off)
			k += 2
			continue
		case 'L', 'T':
			var n uint32
			if n, err = r.u32(); err != nil {
				return err
			}
			if int(n) > len(r.b)-r.off {
				return fmt.Errorf("%w: vector of %d past end", ErrMalformed, n)
			}
			for j := uint32(0); j < n; j++ {
				var x uint32
				if layout[i] == 'L' {
					x, err = r.u32()
				} else {
					var c byte
					c, err = r.byte()
					if err == nil && !isValType(c) {
						err = fmt.Errorf("%w: select type 0x%x", ErrUnknownOpcode, c)
					}
					x = uint32(c)
				}
				if err != nil {
					return err
				}
				in.Vec = append(in.Vec, x)
			}
			if layout[i] == 'L' {
				var def uint32
				if def, err = r.u32(); err != nil {
					return err
				}
				in.Vec = append(in.Vec, def)
			}
			continue
		}
		if err != nil {
			return err
		}
		in.Imm[k] = v
		k++
	}
	in.End = r.off
	return nil
}

// blockType reads a block type: 0x40 (empty, returned as -64), a value
// type (its negative one-byte s33 value), or a type index (>= 0).
func (r *reader) blockType() (int64, error) {
	v, err := r.sleb(33)
	if err != nil {
		return 0, err
	}
	if v < 0 {
		if v != -64 && !isValType(byte(v&0x7F)) {
			return 0, fmt.Errorf("%w: block type %d", ErrUnknownOpcode, v)
		}
	}
	return v, nil
}

func (r *reader) u64() (uint64, error) {
	var v uint64
	for shift := 0; shift < 70; shift += 7 {
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		if shift == 63 && c > 1 {
			return 0, fmt.Errorf("%w: u64 overflow", ErrMalformed)
		}
		v |= uint64(c&0x7F) << shift
		if c&0x80 == 0 {
			return v, nil
		}
	}
	return 0, fmt.Errorf("%w: u64 too long", ErrMalformed)
}

// AppendInstr encodes in (as Next decoded it) in the canonical (shortest)
// form.
func AppendInstr(b []byte, in *Instr) []byte {
	b = append(b, in.Op)
	if in.Op == 0xFC || in.Op == 0xFD {
		b = AppendU32(b, in.Sub)
	}
	k, raw := 0, in.Raw
	l := in.layout
	for i := 0; i < len(l); i++ {
		switch l[i] {
		case 'u':
			b = AppendU32(b, uint32(in.Imm[k]))
		case 's', 'S', 'b':
			b = AppendS64(b, in.Imm[k])
		case 'y', 'h':
			b = append(b, byte(in.Imm[k]))
		case '4', '8', '1':
			n := 4
			if l[i] == '8' {
				n = 8
			} else if l[i] == '1' {
				n, i = 16, i+1
			}
			b, raw = append(b, raw[:n]...), raw[n:]
			continue
		case 'm':
			b = AppendU32(b, uint32(in.Imm[k]))
			if in.Imm[k]&0x40 != 0 {
				b = AppendU32(b, 0)
			}
			b = AppendU64(b, uint64(in.Imm[k+1]))
			k += 2
			continue
		case 'L':
			b = AppendU32(b, uint32(len(in.Vec)-1))
			for _, x := range in.Vec {
				b = AppendU32(b, x)
			}
			continue
		case 'T':
			b = AppendU32(b, uint32(len(in.Vec)))
			for _, x := range in.Vec {
				b = append(b, byte(x))
			}
			continue
		}
		k++
	}
	return b
}

// AppendS64 appends v in signed LEB128.
func AppendS64(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7F)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

// AppendU64 appends v in unsigned LEB128.
func AppendU64(b []byte, v uint64) []byte {
	for {
		c := byte(v & 0x7F)
		v >>= 7
		if v == 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}
