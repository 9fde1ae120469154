package wasmbin_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/bytecodealliance/wasmtime-go/v39"

	"github.com/gloveboxhq/glovebox/internal/wasmbin"
)

// meterWAT has a loop, a leaf, a recursive function, a call through a
// table (so function indices in elements and call_indirect matter), a
// start function and ref.func.
const meterWAT = `(module
  (import "env" "log" (func $log (param i32)))
  (table 4 funcref)
  (elem (i32.const 1) $leaf $count)
  (elem declare func $rec)
  (global $started (mut i32) (i32.const 0))
  (func $start (global.set $started (i32.const 1)))
  (start $start)
  (func $leaf (param i32) (result i32) (i32.add (local.get 0) (i32.const 1)))
  (func $count (export "count") (param $n i32) (result i32)
    (local $i i32)
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (local.set $i (call $leaf (local.get $i)))
        (br $next)))
    (local.get $i))
  (func $rec (export "rec") (param $n i32) (result i32)
    (if (result i32) (i32.eqz (local.get $n))
      (then (i32.const 0))
      (else (i32.add (i32.const 1) (call $rec (i32.sub (local.get $n) (i32.const 1)))))))
  (func (export "indirect") (param i32) (result i32)
    (call_indirect (param i32) (result i32) (local.get 0) (i32.const 2)))
  (func (export "started") (result i32) (global.get $started))
  (func (export "reffunc") (result i32) (ref.is_null (ref.func $rec))))`

type metered struct {
	store *wasmtime.Store
	inst  *wasmtime.Instance
	fuel  *wasmtime.Global
}

func instantiateMetered(t *testing.T, wasm []byte) *metered {
	t.Helper()
	m, err := wasmbin.Parse(wasm)
	if err != nil {
		t.Fatal(err)
	}
	out, st, err := m.PatchFuel()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", st)
	eng := wasmtime.NewEngine()
	mod, err := wasmtime.NewModule(eng, out.Encode())
	if err != nil {
		t.Fatalf("the metered module does not compile: %v", err)
	}
	mt := &metered{store: wasmtime.NewStore(eng)}
	linker := wasmtime.NewLinker(eng)
	linker.FuncWrap("env", "log", func(int32) {})
	if mt.inst, err = linker.Instantiate(mt.store, mod); err != nil {
		t.Fatal(err)
	}
	if mt.fuel = mt.inst.GetExport(mt.store, wasmbin.MeterGlobal).Global(); mt.fuel == nil {
		t.Fatal("no fuel global exported")
	}
	return mt
}

// call runs export name with fuel f and returns its result, the fuel used
// and the error.
func (mt *metered) call(t *testing.T, f int64, name string, args ...any) (any, int64, error) {
	t.Helper()
	if err := mt.fuel.Set(mt.store, wasmtime.ValI64(f)); err != nil {
		t.Fatal(err)
	}
	r, err := mt.inst.GetFunc(mt.store, name).Call(mt.store, args...)
	return r, f - mt.fuel.Get(mt.store).I64(), err
}

func TestPatchFuelMetersLoopsAndCalls(t *testing.T) {
	wasm, err := wasmtime.Wat2Wasm(meterWAT)
	if err != nil {
		t.Fatal(err)
	}
	mt := instantiateMetered(t, wasm)
	// The start function, the table, call_indirect and ref.func work as
	// before.
	if r, _, err := mt.call(t, 1e9, "started"); err != nil || r.(int32) != 1 {
		t.Fatalf("start function: %v %v", r, err)
	}
	if r, _, err := mt.call(t, 1e9, "indirect", int32(5)); err != nil || r.(int32) != 5 {
		t.Fatalf("call_indirect to count(5): %v %v", r, err)
	}
	if r, _, err := mt.call(t, 1e9, "reffunc"); err != nil || r.(int32) != 0 {
		t.Fatalf("ref.func: %v %v", r, err)
	}
	// Fuel grows linearly with the loop's iterations and the recursion's
	// depth, and the same call uses the same fuel every time.
	_, f10, err := mt.call(t, 1e9, "count", int32(10))
	if err != nil {
		t.Fatal(err)
	}
	_, f110, _ := mt.call(t, 1e9, "count", int32(110))
	_, again, _ := mt.call(t, 1e9, "count", int32(110))
	perIter := (f110 - f10) / 100
	if perIter <= 0 || f110-f10 != 100*perIter || again != f110 {
		t.Fatalf("count: 10 iterations %d fuel, 110 iterations %d then %d", f10, f110, again)
	}
	// An iteration runs the loop's body and the leaf it calls (4
	// instructions): it costs no less than that.
	if perIter < 8 {
		t.Fatalf("an iteration costs %d fuel, less than the instructions it runs", perIter)
	}
	_, r5, _ := mt.call(t, 1e9, "rec", int32(5))
	_, r10, _ := mt.call(t, 1e9, "rec", int32(10))
	_, r20, _ := mt.call(t, 1e9, "rec", int32(20))
	if r5 <= 0 || r20-r10 != 2*(r10-r5) {
		t.Fatalf("rec: depth 5 %d fuel, 10 %d, 20 %d: not linear", r5, r10, r20)
	}
	// Running out traps with the fuel global below zero (and only then:
	// the runs above ended with fuel left).
	_, _, err = mt.call(t, 1e9, "count", int32(1e6))
	if err != nil {
		t.Fatalf("a million iterations within 1e9 fuel: %v", err)
	}
	_, used, err := mt.call(t, 50*perIter, "count", int32(1e6))
	if err == nil || !strings.Contains(err.Error(), "unreachable") || mt.fuel.Get(mt.store).I64() >= 0 {
		t.Fatalf("a million iterations on %d fuel: err %v, fuel left %d", 50*perIter, err, mt.fuel.Get(mt.store).I64())
	}
	if used <= 50*perIter || used > 52*perIter {
		t.Fatalf("stopped after %d fuel of %d", used, 50*perIter)
	}
	_, _, err = mt.call(t, 1e3, "rec", int32(1e4))
	if err == nil || mt.fuel.Get(mt.store).I64() >= 0 {
		t.Fatalf("deep recursion on 1000 fuel: %v", err)
	}
}

// The pinned image, after the setjmp rewrite the engine makes, meters:
// the result validates, the rewrite is deterministic, and the header has
// the result's imports, globals and exports.
func TestPatchFuelPinnedImage(t *testing.T) {
	raw := pinnedImage(t)
	m, err := wasmbin.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	sj, _, err := m.PatchSjlj(wasmbin.RubyWasm4010)
	if err != nil {
		t.Fatal(err)
	}
	sjEnc := sj.Encode()
	out, st, err := sj.PatchFuel()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", st)
	if st.Loops < 10000 || st.Entries < 15000 || st.Leaves < 1000 {
		t.Fatalf("implausible meter counts %+v", st)
	}
	if !bytes.Equal(sj.Encode(), sjEnc) {
		t.Fatal("PatchFuel changed its input")
	}
	enc := out.Encode()
	if err := wasmtime.ModuleValidate(wasmtime.NewEngine(), enc); err != nil {
		t.Fatalf("the metered module does not validate: %v", err)
	}
	again, _, _ := sj.PatchFuel()
	if !bytes.Equal(again.Encode(), enc) {
		t.Fatal("two rewrites of the same image differ")
	}
	hdr, err := sj.FuelHeader()
	if err != nil {
		t.Fatal(err)
	}
	for _, sec := range []byte{wasmbin.SecType, wasmbin.SecImport, wasmbin.SecGlobal, wasmbin.SecExport, wasmbin.SecElement, wasmbin.SecMemory, wasmbin.SecFunction} {
		if !bytes.Equal(section(hdr, sec), section(out, sec)) {
			t.Fatalf("section %d of the header differs from the metered module's", sec)
		}
	}
	if _, _, err := out.PatchFuel(); !errors.Is(err, wasmbin.ErrMetered) {
		t.Fatalf("metering twice: %v", err)
	}
	// The only export of the new global is the host's, and the only code
	// that reads or writes it is the meter points': one global.get and one
	// global.set each.
	exps, _ := out.Exports()
	gs, _ := out.Globals()
	fuelIdx := gs[len(gs)-1].Index
	for _, e := range exps {
		if e.Kind == wasmbin.KindGlobal && e.Index == fuelIdx && e.Name != wasmbin.MeterGlobal {
			t.Fatalf("the fuel global is also exported as %s", e.Name)
		}
	}
	bodies, _ := out.Bodies()
	gets, sets := 0, 0
	for _, b := range bodies {
		hb, _ := wasmbin.DecodeLocals(b)
		d := wasmbin.NewDecoder(b[hb.Code:])
		var in wasmbin.Instr
		for d.More() {
			if err := d.Next(&in); err != nil {
				t.Fatal(err)
			}
			if in.Op == 0x23 && uint32(in.Imm[0]) == fuelIdx {
				gets++
			}
			if in.Op == 0x24 && uint32(in.Imm[0]) == fuelIdx {
				sets++
			}
		}
	}
	if points := st.Entries + st.Loops; gets != points || sets != points {
		t.Fatalf("%d meter points, but %d reads and %d writes of the fuel global", points, gets, sets)
	}
}

func section(m *wasmbin.Module, id byte) []byte {
	for _, s := range m.Sections {
		if s.ID == id {
			return s.Payload
		}
	}
	return nil
}

// A body the decoder cannot read fails the rewrite: never a silently
// unmetered guest.
func TestPatchFuelUnknownOpcodeFails(t *testing.T) {
	wasm, err := wasmtime.Wat2Wasm(`(module (func (export "f") (loop (br 0))))`)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := wasmbin.Parse(wasm)
	// Replace the loop's br (0x0C 0x00) with a legacy try opcode.
	var code []byte
	for _, s := range m.Sections {
		if s.ID == wasmbin.SecCode {
			code = s.Payload
		}
	}
	i := bytes.Index(code, []byte{0x03, 0x40, 0x0C, 0x00})
	if i < 0 {
		t.Fatalf("unexpected code % x", code)
	}
	code[i+2] = 0x06
	if _, _, err := m.PatchFuel(); !errors.Is(err, wasmbin.ErrUnknownOpcode) {
		t.Fatalf("err %v, want ErrUnknownOpcode", err)
	}
}
