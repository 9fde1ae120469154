package wasmbin

import (
	"bytes"
	"errors"
	"testing"

	"github.com/bytecodealliance/wasmtime-go/v39"
)

const testWAT = `(module
  (import "env" "f" (func $f (param i32) (result i32)))
  (import "env" "g" (global $g i32))
  (memory (export "memory") 2)
  (global $sp (mut i32) (i32.const 1024))
  (global $k i64 (i64.const 7))
  (global $m (mut f64) (f64.const 1.5))
  (data (i32.const 16) "hello")
  (data "passive")
  (data (i32.const 70000) "world")
  (func (export "run") (result i32) (i32.const 1)))`

func TestSplit(t *testing.T) {
	wasm, err := wasmtime.Wat2Wasm(testWAT)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Parse(wasm)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m.Encode(), wasm) {
		t.Fatal("Parse then Encode changed the module")
	}
	gs, err := m.Globals()
	if err != nil || len(gs) != 3 || gs[0].Index != 1 || !gs[0].Mutable || gs[1].Mutable || gs[2].Type != ValF64 {
		t.Fatalf("globals %+v, %v", gs, err)
	}
	out, img, err := m.Split("g:")
	if err != nil {
		t.Fatal(err)
	}
	if len(img) != 2*PageSize || string(img[16:21]) != "hello" || string(img[70000:70005]) != "world" {
		t.Fatalf("image wrong (%d bytes)", len(img))
	}
	if rs := NonZeroRanges(img, 4096); len(rs) != 2 || rs[0] != [2]int{16, 21} || rs[1] != [2]int{70000, 70005} {
		t.Fatalf("ranges %v", rs)
	}
	segs, err := out.DataSegments()
	if err != nil || len(segs) != 3 {
		t.Fatalf("segments %+v %v", segs, err)
	}
	for i, s := range segs {
		if !s.Passive {
			t.Fatalf("segment %d still active", i)
		}
	}
	if string(segs[1].Data) != "passive" || len(segs[0].Data) != 0 {
		t.Fatalf("passive segments not kept in place: %+v", segs)
	}
	exps, _ := out.Exports()
	names := map[string]uint32{}
	for _, e := range exps {
		names[e.Name] = e.Index
	}
	if names["g:1"] != 1 || names["g:3"] != 3 {
		t.Fatalf("exports %+v", exps)
	}
	if _, ok := names["g:2"]; ok {
		t.Fatal("immutable global exported")
	}
	// The rewritten module is valid.
	if _, err := wasmtime.NewModule(wasmtime.NewEngine(), out.Encode()); err != nil {
		t.Fatal(err)
	}
	imps, _ := out.Imports()
	types, _ := out.Types()
	if len(imps) != 2 || imps[0].Kind != KindFunc || len(types[imps[0].TypeIndex].Params) != 1 {
		t.Fatalf("imports %+v types %+v", imps, types)
	}
}

func TestParseRejectsGarbage(t *testing.T) {
	for _, b := range [][]byte{nil, []byte("\x00asm"), []byte("\x00asm\x01\x00\x00\x00\x05\xff"), []byte("\x00asm\x01\x00\x00\x00\x05\x80\x80\x80\x80\x80\x01")} {
		if _, err := Parse(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%q: %v", b, err)
		}
	}
}
