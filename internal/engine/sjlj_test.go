package engine

import (
	"fmt"
	"testing"
	"time"

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

// A tag's jmp_buf (24,600 bytes) comes from the rewrite's slot cache, not
// from ruby_xmalloc: GC.stat's malloc_increase_bytes does not grow inside
// a catch, while past the cache (tags nested deeper than it holds) each
// further tag is malloc'd as before, and everything unwinds correctly.
func TestTagJmpBufsFromSlots(t *testing.T) {
	slots := int(wasmbin.JmpBufSlots(wasmbin.RubyWasm4010.JmpBufSize))
	code := fmt.Sprintf(`def nest(d, &blk) = d == 0 ? blk.call : catch(:t) { nest(d - 1, &blk) }
		m = -> { GC.stat(:malloc_increase_bytes) }
		base = m.call
		shallow = nest(3) { m.call } - base
		deep = nest(%d) { m.call } - base
		thrown = nest(%d) { throw :t, 7 }
		after = m.call - base
		[shallow, deep, thrown, after]`, slots+40, slots+40)
	out := evalOut(t, code, 30*time.Second)
	if out.Status != StatusOK {
		t.Fatalf("%s %+v", out.Status, out.Error)
	}
	v, _ := out.Value.([]any)
	if len(v) != 4 {
		t.Fatalf("value %v", out.Value)
	}
	num := func(x any) float64 {
		switch n := x.(type) {
		case int64:
			return float64(n)
		case float64:
			return n
		}
		t.Fatalf("%v (%T) is not a number", x, x)
		return 0
	}
	size := float64(wasmbin.RubyWasm4010.JmpBufSize)
	if s := num(v[0]); s >= size {
		t.Errorf("3 nested tags grew malloc by %.0f bytes: their jmp_bufs were malloc'd", s)
	}
	// Past the cache at least 40 - (tags the eval itself holds) more are
	// malloc'd; the eval's driver holds fewer than 10.
	if d := num(v[1]); d < 30*size {
		t.Errorf("%d nested tags grew malloc by %.0f bytes, want at least %.0f (jmp_bufs past the cache are malloc'd)", slots+40, d, 30*size)
	}
	if num(v[2]) != 7 || num(v[3]) >= size {
		t.Errorf("throw through %d tags: %v, malloc afterwards %.0f (every malloc'd jmp_buf freed)", slots+40, v[2], num(v[3]))
	}
}

// Slots are freed in any order: fibers hold tags (a fiber's start, the
// blocks it runs) while others are taken and freed, and exceptions
// unwind through slot-held and malloc'd tags alike, thousands of times.
func TestTagJmpBufSlotsOutOfOrder(t *testing.T) {
	out := evalOut(t, `def nest(d, &blk) = d == 0 ? blk.call : [d].each { return nest(d - 1, &blk) }
		fibers = Array.new(60) { |i| Fiber.new { |x| loop { x = Fiber.yield(nest(i % 50) { x * 2 }) } } }
		sum = 0
		300.times do |k|
		  f = fibers[(k * 7) % 60]
		  sum += f.resume(k)
		  begin
		    nest(k % 70) { raise IndexError } if k.odd?
		  rescue IndexError
		    sum += 1
		  end
		end
		sum`, 30*time.Second)
	want := 0
	for k := range 300 {
		want += 2 * k
		if k%2 == 1 {
			want++
		}
	}
	if out.Status != StatusOK || fmt.Sprint(out.Value) != fmt.Sprint(want) {
		t.Fatalf("%s %v %+v, want %d", out.Status, out.Value, out.Error, want)
	}
}
