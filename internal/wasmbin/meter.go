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
// directly, capped at MeterCap (and at least 1). Within one pass through a
// region control only moves forward, so between two meter points the
// guest runs each instruction of one region at most once, plus the leaves
// it calls: the fuel used bounds the work done, and the same program on
// the same image uses the same fuel every run.
//
// The fuel left is a mutable i64 global the module exports as
// MeterGlobal; a meter point subtracts its cost and, when the result is
// negative, traps with unreachable. The guest's own code never reads or
// writes that global: only the inserted meter points do, and the host
// through the export. So a trap is the meter's exactly when the global is
// negative at the trap: no guest instruction runs between the meter point
// that takes it below zero and that point's unreachable, and none can run
// while it is below zero.
//
// Why unreachable and not a call to a host function that traps: a call,
// even on the cold path, clobbers the caller-saved registers, so Cranelift
// keeps a metered loop's values on the stack across the whole iteration;
// measured on the 1M-iteration while loop, the call version cost +18%
// over the unmetered guest, this one +5%.

// MeterGlobal is the export name PatchFuel gives the fuel global.
const MeterGlobal = "glovebox_fuel"

// MeterCap is the most one meter point charges. Regions of ruby.wasm reach
// 100,000 instructions (the interpreter's dispatch loop, of which one
// iteration runs one handler), so charging a whole region would count a
// Ruby instruction as a hundred thousand; 64 keeps a meter point's charge
// near what runs between two of them in the loops and calls that make up
// most of the work (the median loop region of ruby.wasm is 70
// instructions).
const MeterCap = 64

// ErrMetered is returned by FuelHeader and PatchFuel for a module that
// already exports MeterGlobal.
var ErrMetered = errors.New("wasmbin: the module is already metered")

// FuelStats describes what PatchFuel inserted.
type FuelStats struct {
	Functions int // function bodies
	Entries   int // meter points at function entries
	Loops     int // meter points at loop heads
	Leaves    int // functions with neither loop nor call
}

// FuelHeader returns a copy of m with the module-level changes PatchFuel
// makes (the fuel global and its export) but not the code, which still
// aliases m's: cheap, and enough for what needs the globals and exports.
func (m *Module) FuelHeader() (*Module, error) {
	out, _, err := m.fuelHeader()
	return out, err
}

// fuelHeader also returns the fuel global's index.
func (m *Module) fuelHeader() (*Module, uint32, error) {
	exps, err := m.Exports()
	if err != nil {
		return nil, 0, err
	}
	for _, e := range exps {
		if e.Name == MeterGlobal {
			return nil, 0, ErrMetered
		}
	}
	out := m.clone()
	g, err := out.addGlobal(ValI64, true, []byte{0x42, 0})
	if err != nil {
		return nil, 0, err
	}
	out.SetExports(append(exps, Export{Name: MeterGlobal, Kind: KindGlobal, Index: g}))
	return out, g, nil
}

// PatchFuel returns a copy of m with fuel metering inserted as described
// above, and what it inserted. It fails, changing nothing, when a body
// holds an instruction the decoder does not know (ErrUnknownOpcode) or m
// is metered already (ErrMetered).
func (m *Module) PatchFuel() (*Module, FuelStats, error) {
	var st FuelStats
	out, global, err := m.fuelHeader()
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
	nimpi, err := m.importCount(KindFunc)
	if err != nil {
		return nil, st, err
	}
	nimp := uint32(nimpi)
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
			newBodies[i] = b // nothing to meter
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
		nb, err := meterBody(b, hdr, costs, global, uint32(nlocals))
		if err != nil {
			return nil, st, fmt.Errorf("function %d: %w", int(nimp)+i, err)
		}
		newBodies[i] = nb
	}
	out.setFunctions(ftypes, newBodies)
	return out, st, nil
}

// meterBody returns b with an i64 local added (index tmp), a meter point
// charging costs[0] at its start and one charging costs[k] at the head of
// its k-th loop.
func meterBody(b []byte, hdr Body, costs []int32, global, tmp uint32) ([]byte, error) {
	code := b[hdr.Code:]
	out := make([]byte, 0, len(b)+len(costs)*24+8)
	out = AppendU32(out, uint32(len(hdr.Locals)+1))
	for _, l := range hdr.Locals {
		out = append(AppendU32(out, l.Count), l.Type)
	}
	out = append(out, 1, ValI64)
	out = appendMeter(out, costs[0], global, tmp)
	loop, last := 0, 0
	var in Instr
	d := NewDecoder(code)
	for d.More() {
		if err := d.Next(&in); err != nil {
			return nil, err
		}
		if in.Op == 0x03 {
			loop++
			out = append(out, code[last:in.End]...)
			out = appendMeter(out, costs[loop], global, tmp)
			last = in.End
		}
	}
	return append(out, code[last:]...), nil
}

// appendMeter appends a meter point: fuel -= cost; if fuel < 0, trap.
func appendMeter(b []byte, cost int32, global, tmp uint32) []byte {
	b = AppendU32(append(b, 0x23), global)      // global.get fuel
	b = AppendS32(append(b, 0x42), cost)        // i64.const cost
	b = append(b, 0x7D)                         // i64.sub
	b = AppendU32(append(b, 0x22), tmp)         // local.tee tmp
	b = AppendU32(append(b, 0x24), global)      // global.set fuel
	b = AppendU32(append(b, 0x20), tmp)         // local.get tmp
	b = append(b, 0x42, 0x00, 0x53, 0x04, 0x40) // i64.const 0; i64.lt_s; if
	return append(b, 0x00, 0x0B)                // unreachable; end
}
