package wasmbin

import (
	"errors"
	"fmt"
)

// Fuel metering by rewriting the module.
//
// wasmtime's own fuel (consume_fuel) adds to a counter in every basic
// block and stores and reloads it around every call; Ruby's interpreter is
// made of many small blocks and calls, so that cost the 1M-iteration
// while loop 30-38% (see RATIONALE.md, "Why glovebox meters fuel itself").
// PatchFuel instead charges fuel only where unbounded work can happen:
//
//   - at the head of every loop, each time an iteration starts;
//   - on entry to every function that contains a loop or a call (direct,
//     indirect or tail). A function with neither (a leaf) runs a bounded
//     number of instructions per call, charged to its callers.
//
// Each meter point charges a static cost: the instructions of its region
// (the loop's body, or the function's body, without the bodies of the
// loops nested in it), plus the whole body of every leaf the region calls
// directly, capped at MeterCap. Between two meter points the guest runs at
// most one region's straight-line code and the leaves it calls, so the
// fuel used bounds the work done, and the same program on the same image
// uses the same fuel every run.
//
// The fuel left is a mutable i64 global the module exports as
// MeterGlobal; a meter point subtracts its cost and, when the result is
// negative, calls the host function MeterModule.MeterImport, which must
// trap. The guest's own code never reads or writes that global: only the
// inserted meter points do, and the host through the export.

// Names PatchFuel gives the global and the host function.
const (
	MeterGlobal = "glovebox_fuel"
	MeterModule = "glovebox"
	MeterImport = "out_of_fuel"
)

// MeterCap is the most one meter point charges. Regions of ruby.wasm reach
// 100,000 instructions (the interpreter's dispatch loop, of which one
// iteration runs one handler), so charging a whole region would count a
// Ruby instruction as a hundred thousand; 64 keeps a meter point's charge
// near what runs between two of them in the loops and calls that make up
// most of the work (the median loop region of ruby.wasm is 70
// instructions).
const MeterCap = 64

// ErrMetered is returned by FuelHeader and PatchFuel for a module that
// already imports the meter's host function.
var ErrMetered = errors.New("wasmbin: the module is already metered")

// FuelStats describes what PatchFuel inserted.
type FuelStats struct {
	Functions int // function bodies
	Entries   int // meter points at function entries
	Loops     int // meter points at loop heads
	Leaves    int // functions with neither loop nor call
}

// fuelHeader holds what FuelHeader added: the import's function index
// (the former first defined function's), the global's index.
type fuelHeader struct {
	imp    uint32
	global uint32
}

// FuelHeader returns a copy of m with the module-level changes PatchFuel
// makes (the host function's type and import, the fuel global and its
// export, function indices in exports, elements and the start function
// moved up by one past the new import) but not the code, which still
// aliases m's: cheap, and enough for what needs the imports and globals.
// It is not a module to compile.
func (m *Module) FuelHeader() (*Module, error) {
	out, _, err := m.fuelHeader()
	return out, err
}

func (m *Module) fuelHeader() (*Module, fuelHeader, error) {
	var h fuelHeader
	imps, err := m.Imports()
	if err != nil {
		return nil, h, err
	}
	nfunc := 0
	for _, im := range imps {
		if im.Module == MeterModule && im.Name == MeterImport {
			return nil, h, ErrMetered
		}
		if im.Kind == KindFunc {
			nfunc++
		}
	}
	out := m.clone()
	types, err := out.Types()
	if err != nil {
		return nil, h, err
	}
	void := -1
	for i, t := range types {
		if len(t.Params) == 0 && len(t.Results) == 0 {
			void = i
			break
		}
	}
	if void < 0 {
		void = len(types)
		p := AppendU32(nil, uint32(len(types)+1))
		if s := out.section(SecType); s != nil {
			r := &reader{b: s.Payload}
			if _, err := r.u32(); err != nil {
				return nil, h, err
			}
			p = append(p, s.Payload[r.off:]...)
		}
		out.setSection(SecType, append(p, 0x60, 0, 0))
	}
	// The import goes last, so only defined functions move.
	p := AppendU32(nil, uint32(len(imps)+1))
	if s := out.section(SecImport); s != nil {
		r := &reader{b: s.Payload}
		if _, err := r.u32(); err != nil {
			return nil, h, err
		}
		p = append(p, s.Payload[r.off:]...)
	}
	p = AppendName(AppendName(p, MeterModule), MeterImport)
	p = AppendU32(append(p, KindFunc), uint32(void))
	out.setSection(SecImport, p)
	h.imp = uint32(nfunc)

	if h.global, err = out.addGlobal(ValI64, true, []byte{0x42, 0}); err != nil {
		return nil, h, err
	}
	exps, err := out.Exports()
	if err != nil {
		return nil, h, err
	}
	for i := range exps {
		if exps[i].Name == MeterGlobal {
			return nil, h, fmt.Errorf("%w: it exports %s already", ErrMetered, MeterGlobal)
		}
		if exps[i].Kind == KindFunc && exps[i].Index >= h.imp {
			exps[i].Index++
		}
	}
	out.SetExports(append(exps, Export{Name: MeterGlobal, Kind: KindGlobal, Index: h.global}))
	if s := out.section(SecStart); s != nil {
		r := &reader{b: s.Payload}
		f, err := r.u32()
		if err != nil {
			return nil, h, err
		}
		if f >= h.imp {
			f++
		}
		s.Payload = AppendU32(nil, f)
	}
	if s := out.section(SecElement); s != nil {
		if s.Payload, err = shiftElements(s.Payload, h.imp); err != nil {
			return nil, h, err
		}
	}
	// The name section's function numbers would be off by one; it only
	// serves debuggers, so it goes.
	kept := out.Sections[:0:0]
	for _, s := range out.Sections {
		if s.ID == SecCustom {
			r := &reader{b: s.Payload}
			if n, err := r.name(); err == nil && n == "name" {
				continue
			}
		}
		kept = append(kept, s)
	}
	out.Sections = kept
	return out, h, nil
}

// shiftElements re-encodes an element section with every function index
// at or above from moved up by one.
func shiftElements(b []byte, from uint32) ([]byte, error) {
	r := &reader{b: b}
	n, err := r.u32()
	if err != nil {
		return nil, err
	}
	out := AppendU32(nil, n)
	shift := func(f uint32) uint32 {
		if f >= from {
			return f + 1
		}
		return f
	}
	copyTo := func(start int) { out = append(out, r.b[start:r.off]...) }
	for i := uint32(0); i < n; i++ {
		flag, err := r.u32()
		if err != nil {
			return nil, err
		}
		if flag > 7 {
			return nil, fmt.Errorf("%w: element segment flag %d", ErrMalformed, flag)
		}
		out = AppendU32(out, flag)
		start := r.off
		if flag&3 == 2 { // explicit table index
			if _, err := r.u32(); err != nil {
				return nil, err
			}
		}
		if flag&1 == 0 { // active: an offset
			if _, err := r.constExpr(); err != nil {
				return nil, err
			}
		}
		if flag&3 != 0 { // elemkind or reftype
			if _, err := r.byte(); err != nil {
				return nil, err
			}
		}
		copyTo(start)
		k, err := r.u32()
		if err != nil {
			return nil, err
		}
		out = AppendU32(out, k)
		for j := uint32(0); j < k; j++ {
			if flag&4 == 0 { // function indices
				f, err := r.u32()
				if err != nil {
					return nil, err
				}
				out = AppendU32(out, shift(f))
				continue
			}
			e, err := r.constExpr() // expressions: ref.func f or ref.null
			if err != nil {
				return nil, err
			}
			if len(e) >= 2 && e[0] == 0xD2 {
				er := &reader{b: e[1:]}
				f, err := er.u32()
				if err != nil || er.off != len(er.b)-1 {
					return nil, fmt.Errorf("%w: element expression % x", ErrMalformed, e)
				}
				out = append(AppendU32(append(out, 0xD2), shift(f)), 0x0B)
				continue
			}
			out = append(out, e...)
		}
	}
	if r.off != len(r.b) {
		return nil, fmt.Errorf("%w: trailing bytes in the element section", ErrMalformed)
	}
	return out, nil
}

// PatchFuel returns a copy of m with fuel metering inserted as described
// above, and what it inserted. It fails, changing nothing, when a body
// holds an instruction the decoder does not know (ErrUnknownOpcode) or m
// is metered already (ErrMetered).
func (m *Module) PatchFuel() (*Module, FuelStats, error) {
	var st FuelStats
	out, h, err := m.fuelHeader()
	if err != nil {
		return nil, st, err
	}
	types, err := m.Types()
	if err != nil {
		return nil, st, err
	}
	ftypes, err := m.FuncTypes()
	if err != nil {
		return nil, st, err
	}
	bodies, err := m.Bodies()
	if err != nil {
		return nil, st, err
	}
	if len(ftypes) != len(bodies) {
		return nil, st, fmt.Errorf("%w: %d function types, %d bodies", ErrMalformed, len(ftypes), len(bodies))
	}
	nimp := h.imp
	st.Functions = len(bodies)

	// First pass: which functions are leaves, and their sizes.
	leaf := make([]int32, len(bodies)) // instruction count of a leaf, -1 otherwise
	var in Instr
	for i, b := range bodies {
		hdr, err := DecodeLocals(b)
		if err != nil {
			return nil, st, fmt.Errorf("function %d: %w", int(nimp)+i, err)
		}
		d := NewDecoder(b[hdr.Code:])
		n := int32(0)
		for d.More() {
			if err := d.Next(&in); err != nil {
				return nil, st, fmt.Errorf("function %d: %w", int(nimp)+i, err)
			}
			n++
			if in.Op == 0x03 || (in.Op >= 0x10 && in.Op <= 0x13) {
				n = -1
				break
			}
		}
		leaf[i] = n
		if n >= 0 {
			st.Leaves++
		}
	}
	leafCost := func(f uint32) int32 {
		if f < nimp || int(f-nimp) >= len(leaf) {
			return 0
		}
		return max(leaf[f-nimp], 0)
	}

	newBodies := make([][]byte, len(bodies))
	var costs []int32
	var frames []int32
	for i, b := range bodies {
		if int(ftypes[i]) >= len(types) {
			return nil, st, fmt.Errorf("%w: function %d has type %d", ErrMalformed, int(nimp)+i, ftypes[i])
		}
		hdr, _ := DecodeLocals(b)
		code := b[hdr.Code:]
		// Second pass: each region's cost. Region 0 is the function's
		// entry, then one per loop in order.
		costs = append(costs[:0], 0)
		frames = append(frames[:0], 0) // per open block: the region it is in (loops: their own)
		cur := int32(0)
		d := NewDecoder(code)
		for d.More() {
			d.Next(&in)
			costs[cur]++
			switch in.Op {
			case 0x02, 0x04: // block, if
				frames = append(frames, cur)
			case 0x03: // loop
				costs = append(costs, 1) // counting its end
				cur = int32(len(costs) - 1)
				frames = append(frames, cur)
			case 0x0B: // end
				frames = frames[:len(frames)-1]
				if len(frames) > 0 {
					cur = frames[len(frames)-1]
				}
			case 0x10:
				costs[cur] += leafCost(uint32(in.Imm[0]))
			}
		}
		if leaf[i] >= 0 {
			// Nothing to meter; only ref.func indices may need moving.
			nb, err := rewriteBody(b, hdr, nil, nimp, h, 0)
			if err != nil {
				return nil, st, fmt.Errorf("function %d: %w", int(nimp)+i, err)
			}
			newBodies[i] = nb
			continue
		}
		for j := range costs {
			costs[j] = min(costs[j], MeterCap)
		}
		st.Entries++
		st.Loops += len(costs) - 1
		nlocals := uint64(len(types[ftypes[i]].Params))
		for _, l := range hdr.Locals {
			nlocals += uint64(l.Count)
		}
		nb, err := rewriteBody(b, hdr, costs, nimp, h, uint32(nlocals))
		if err != nil {
			return nil, st, fmt.Errorf("function %d: %w", int(nimp)+i, err)
		}
		newBodies[i] = nb
	}
	out.setFunctions(ftypes, newBodies)
	return out, st, nil
}

// rewriteBody re-encodes one body: function indices at or above nimp move
// up by one, and when costs is set, an i64 local (index tmp) is added and a
// meter point charging costs[0] starts the body and one charging costs[k]
// starts the k-th loop.
func rewriteBody(b []byte, hdr Body, costs []int32, nimp uint32, h fuelHeader, tmp uint32) ([]byte, error) {
	code := b[hdr.Code:]
	out := make([]byte, 0, len(b)+len(b)/8+64)
	if costs == nil {
		out = append(out, b[:hdr.Code]...)
	} else {
		out = AppendU32(out, uint32(len(hdr.Locals)+1))
		for _, l := range hdr.Locals {
			out = append(AppendU32(out, l.Count), l.Type)
		}
		out = append(out, 1, ValI64)
		out = appendMeter(out, costs[0], h, tmp)
	}
	loop := 0
	var in Instr
	d := NewDecoder(code)
	for d.More() {
		if err := d.Next(&in); err != nil {
			return nil, err
		}
		switch in.Op {
		case 0x10, 0x12, 0xD2: // call, return_call, ref.func
			f := uint32(in.Imm[0])
			if f >= nimp {
				f++
			}
			out = AppendU32(append(out, in.Op), f)
			continue
		}
		out = append(out, code[in.Off:in.End]...)
		if in.Op == 0x03 && costs != nil {
			loop++
			out = appendMeter(out, costs[loop], h, tmp)
		}
	}
	return out, nil
}

// appendMeter appends a meter point: fuel -= cost; if fuel < 0, call the
// host's out_of_fuel (which traps).
func appendMeter(b []byte, cost int32, h fuelHeader, tmp uint32) []byte {
	b = AppendU32(append(b, 0x23), h.global)            // global.get fuel
	b = AppendS32(append(b, 0x42), cost)                // i64.const cost
	b = append(b, 0x7D)                                 // i64.sub
	b = AppendU32(append(b, 0x22), tmp)                 // local.tee tmp
	b = AppendU32(append(b, 0x24), h.global)            // global.set fuel
	b = AppendU32(append(b, 0x20), tmp)                 // local.get tmp
	b = append(b, 0x42, 0x00, 0x53, 0x04, 0x40)         // i64.const 0; i64.lt_s; if
	b = append(AppendU32(append(b, 0x10), h.imp), 0x0B) // call out_of_fuel; end
	return b
}
