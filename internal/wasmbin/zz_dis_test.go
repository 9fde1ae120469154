package wasmbin_test

import (
	"os"
	"testing"

	"github.com/bytecodealliance/wasmtime-go/v39"

	"github.com/gloveboxhq/glovebox/internal/wasmbin"
)

func TestZZDis(t *testing.T) {
	wasm, _ := wasmtime.Wat2Wasm(`(module
  (import "env" "log" (func $log (param i32)))
  (func $count (export "count") (param $n i32) (result i32)
    (local $i i32)
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (local.set $i (i32.add (local.get $i) (i32.const 3)))
        (br $next)))
    (local.get $i)))`)
	m, _ := wasmbin.Parse(wasm)
	out, _, _ := m.PatchFuel()
	cfg := wasmtime.NewConfig()
	cfg.SetEpochInterruption(true)
	eng := wasmtime.NewEngineWithConfig(cfg)
	mod, err := wasmtime.NewModule(eng, out.Encode())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := mod.Serialize()
	os.WriteFile("/tmp/dis.cwasm", b, 0o644)
}
