package engine

import (
	"fmt"
	"math"

	"github.com/gloveboxhq/glovebox/internal/wasmbin"
	"github.com/gloveboxhq/glovebox/internal/wt"
)

// Fuel on a metered engine (Config.NoFuel and Config.WasmtimeFuel unset)
// is counted by the guest's own code: wasmbin.PatchFuel rewrites the
// image so that loop heads and the entries of functions that loop or call
// subtract a static cost from an i64 global and trap with unreachable
// when it goes negative; such a trap is told from the guest's own
// unreachable by the global being negative (meterExhausted). The module is compiled without
// wasmtime's fuel; the epoch deadline still bounds wall-clock time. See
// RATIONALE.md, "Why glovebox meters fuel itself".

// meterVersion names the fuel rewrite (wasmbin.PatchFuel, MeterCap) in
// the module's cache key; change it whenever the rewrite changes.
const meterVersion = "meter-2"

// meterImage returns the header of the metered module made from m (the
// module sjljImage chose): what the engine needs of its imports, globals
// and exports before (or without) compiling it.
func meterImage(m *wasmbin.Module) (*wasmbin.Module, error) {
	hdr, err := m.FuelHeader()
	if err != nil {
		return nil, fmt.Errorf("glovebox: preparing the guest image for fuel metering: %w", err)
	}
	return hdr, nil
}

// compileSource is the module to compile: the image with the setjmp
// rewrite when sjljImage applied one, and with the fuel rewrite on a
// metered engine.
func (e *Engine) compileSource() (*wasmbin.Module, error) {
	m := e.wasm
	if e.meter {
		m = e.unmeter
	}
	if e.src != nil {
		var err error
		if m, _, err = e.src.PatchSjlj(wasmbin.RubyWasm4010); err != nil {
			return nil, fmt.Errorf("glovebox: rewriting the guest's setjmp: %w", err)
		}
	}
	if !e.meter {
		return m, nil
	}
	out, st, err := m.PatchFuel()
	if err != nil {
		return nil, fmt.Errorf("glovebox: inserting fuel metering into the guest: %w", err)
	}
	e.log.Debug("glovebox: fuel metering inserted", "functions", st.Functions, "entries", st.Entries, "loops", st.Loops, "leaves", st.Leaves)
	return out, nil
}

// bindMeter finds the fuel global of a metered VM's instance.
func (v *VM) bindMeter(c wt.Context) error {
	if !v.e.meter {
		return nil
	}
	g, ok := v.inst.GlobalI64(c, wasmbin.MeterGlobal)
	if !ok {
		return fmt.Errorf("the metered guest lacks its fuel global %s", wasmbin.MeterGlobal)
	}
	v.fuel = g
	return nil
}

// setMeterFuel sets the fuel left; budgets past the global's range are
// as good as unlimited.
func (v *VM) setMeterFuel(f uint64) error {
	return v.fuel.Set(v.store.Context(), int64(min(f, math.MaxInt64)))
}

// meterFuelUsed is the fuel used since setMeterFuel(fuel). A guest that
// ran out stopped at a meter point that took the global below zero; it
// used its whole budget.
func (v *VM) meterFuelUsed(fuel uint64) uint64 {
	fuel = min(fuel, math.MaxInt64)
	left := v.fuel.Get(v.store.Context())
	if left < 0 {
		return fuel
	}
	if uint64(left) > fuel {
		return 0
	}
	return fuel - uint64(left)
}

// meterExhausted reports whether the trap we is a meter point's: an
// unreachable reached with the fuel global below zero, which only a meter
// point that just took it there does (see wasmbin.PatchFuel).
func (v *VM) meterExhausted(we *wt.Error) bool {
	return v.e.meter && we.Code == wt.TrapUnreachable && v.fuel.Get(v.store.Context()) < 0
}
