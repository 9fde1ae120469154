package engine

import (
	"testing"

	"github.com/bytecodealliance/wasmtime-go/v39"

	"github.com/gloveboxhq/glovebox/internal/wasmbin"
)

// The compiled module's cache key names the setjmp rewrite for the image
// it applies to, and nothing for any other image.
func TestSjljImageKey(t *testing.T) {
	wasm, err := wasmtime.Wat2Wasm(`(module (memory 2) (global (mut i32) (i32.const 0)))`)
	if err != nil {
		t.Fatal(err)
	}
	m, err := wasmbin.Parse(wasm)
	if err != nil {
		t.Fatal(err)
	}
	got, suffix, err := sjljImage(m, "0123")
	if err != nil || got != m || suffix != "" {
		t.Fatalf("another image: %v %q %v", got == m, suffix, err)
	}
	got, suffix, err = sjljImage(m, wasmbin.RubyWasm4010.ImageSHA256)
	if err != nil || suffix != "+"+sjljVersion {
		t.Fatalf("pinned image: suffix %q, %v", suffix, err)
	}
	mem, _ := got.Memory()
	if mem.Min != 2+wasmbin.ReserveBytes/wasmbin.PageSize {
		t.Fatalf("header memory %+v", mem)
	}
}

// wasm's stack is three quarters of the thread's, at most maxWasmStack,
// and wasmtime's default when that is no more than it.
func TestWasmStackFor(t *testing.T) {
	for _, c := range []struct{ thread, want int }{
		{8 << 20, 6 << 20}, {64 << 20, 6 << 20}, {2 << 20, 3 << 19}, {512 << 10, 0}, {0, 0},
	} {
		if got := wasmStackFor(c.thread); got != c.want {
			t.Errorf("wasmStackFor(%d) = %d, want %d", c.thread, got, c.want)
		}
	}
}
