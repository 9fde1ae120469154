package wasmbin_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/bytecodealliance/wasmtime-go/v39"

	"github.com/gloveboxhq/glovebox/internal/image"
	"github.com/gloveboxhq/glovebox/internal/wasmbin"
)

// pinnedImage returns the pinned guest image, fetching it with npm into
// the user's glovebox cache like the engine does.
func pinnedImage(t *testing.T) []byte {
	t.Helper()
	dir := os.Getenv("GLOVEBOX_CACHE_DIR")
	if dir == "" {
		c, err := os.UserCacheDir()
		if err != nil {
			t.Skipf("no cache directory: %v", err)
		}
		dir = filepath.Join(c, "glovebox")
	}
	t.Setenv(image.EnvImage, "")
	p, err := image.Path(context.Background(), dir)
	if errors.Is(err, image.ErrNoNPM) {
		t.Skipf("the pinned image is not cached and npm is missing: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The layout describes the pinned image: bumping image.Version without
// re-reading the layout must fail here, not in a guest.
func TestSjljLayoutIsThePinnedImage(t *testing.T) {
	if wasmbin.RubyWasm4010.ImageSHA256 != image.SHA256 {
		t.Fatalf("RubyWasm4010 describes image %s, the pinned image is %s", wasmbin.RubyWasm4010.ImageSHA256, image.SHA256)
	}
}

func TestPatchSjljPinnedImage(t *testing.T) {
	raw := pinnedImage(t)
	m, err := wasmbin.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	out, n, err := m.PatchSjlj(wasmbin.RubyWasm4010)
	if err != nil {
		t.Fatal(err)
	}
	// 35 functions call _rb_wasm_setjmp in this image (binaryen's wasm-dis:
	// every function with "call $10037").
	if n != 35 {
		t.Fatalf("wrapped %d functions, want 35", n)
	}
	if !bytes.Equal(m.Encode(), raw) {
		t.Fatal("PatchSjlj changed its input")
	}
	enc := out.Encode()
	if err := wasmtime.ModuleValidate(wasmtime.NewEngine(), enc); err != nil {
		t.Fatalf("the patched module does not validate: %v", err)
	}
	// Deterministic: the cached compiled module is keyed by the rewrite's
	// version, not its bytes.
	again, _, err := m.PatchSjlj(wasmbin.RubyWasm4010)
	if err != nil || !bytes.Equal(again.Encode(), enc) {
		t.Fatal("two rewrites of the same image differ")
	}
	// The header alone has the same memory and globals.
	hdr, err := m.SjljHeader()
	if err != nil {
		t.Fatal(err)
	}
	mo, _ := out.Memory()
	mh, _ := hdr.Memory()
	mi, _ := m.Memory()
	if mo != mh || mo.Min != mi.Min+wasmbin.ReserveBytes/wasmbin.PageSize {
		t.Fatalf("memory: patched %+v, header %+v, image %+v", mo, mh, mi)
	}
	go_, _ := out.Globals()
	gh, _ := hdr.Globals()
	gi, _ := m.Globals()
	if len(go_) != len(gi)+1 || len(gh) != len(go_) || !go_[len(go_)-1].Mutable {
		t.Fatalf("globals: patched %d, header %d, image %d", len(go_), len(gh), len(gi))
	}
	// Nothing the image places in memory reaches the reserved region.
	segs, _ := m.DataSegments()
	for i, s := range segs {
		if !s.Passive && uint64(s.Offset)+uint64(len(s.Data)) > uint64(mi.Min)*wasmbin.PageSize {
			t.Fatalf("data segment %d ends past the initial memory", i)
		}
	}
}

// A module that is not the image the layout describes is refused, not
// rewritten blindly.
func TestPatchSjljRefusesOtherModules(t *testing.T) {
	wasm, err := wasmtime.Wat2Wasm(`(module (memory 1) (func (export "f")))`)
	if err != nil {
		t.Fatal(err)
	}
	m, err := wasmbin.Parse(wasm)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.PatchSjlj(wasmbin.RubyWasm4010); !errors.Is(err, wasmbin.ErrSjljLayout) {
		t.Fatalf("err %v, want ErrSjljLayout", err)
	}
}

// rb_wasm_try_catch_loop_run clears its target's owner tag where it marks
// the target captured, and changes nothing else: vm_exec's tag jmp_buf is
// reused malloc memory and no setjmp captures it, so a tag left there by an
// earlier capture would let a wrapper claim a longjmp meant for the loop
// (the end-to-end case is TestSetjmpRethrowIntoReusedTag).
func TestPatchSjljTryCatchClearsOwnerTag(t *testing.T) {
	m, err := wasmbin.Parse(pinnedImage(t))
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := m.PatchSjlj(wasmbin.RubyWasm4010)
	if err != nil {
		t.Fatal(err)
	}
	imps, _ := m.Imports()
	nimp := 0
	for _, im := range imps {
		if im.Kind == wasmbin.KindFunc {
			nimp++
		}
	}
	l := wasmbin.RubyWasm4010
	before, _ := m.Bodies()
	after, _ := out.Bodies()
	old, neu := before[int(l.TryCatchRun)-nimp], after[int(l.TryCatchRun)-nimp]
	// locals; target->state = 2 (CAPTURED)
	prologue := wasmbin.AppendU32([]byte{1, 2, wasmbin.ValI32, 0x20, 1, 0x41, 2, 0x36, 2}, l.JmpBufState)
	// target->owner sp = 0 (no wrapper's shadow-stack pointer is 0)
	clear := wasmbin.AppendU32([]byte{0x20, 1, 0x41, 0, 0x36, 2}, l.JmpBufOwner)
	want := append(append(append([]byte(nil), prologue...), clear...), old[len(prologue):]...)
	if !bytes.HasPrefix(old, prologue) || !bytes.Equal(neu, want) {
		t.Fatalf("rb_wasm_try_catch_loop_run was rewritten as % x", neu[:min(len(neu), 32)])
	}
}

// Every tag's jmp_buf allocation (i32.const JmpBufSize; call ruby_xmalloc)
// calls the slot allocator instead, and ruby_xfree starts with the check
// that puts a slot back, then runs its original body.
func TestPatchSjljJmpBufSlots(t *testing.T) {
	m, err := wasmbin.Parse(pinnedImage(t))
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := m.PatchSjlj(wasmbin.RubyWasm4010)
	if err != nil {
		t.Fatal(err)
	}
	l := wasmbin.RubyWasm4010
	imps, _ := m.Imports()
	nimp := 0
	for _, im := range imps {
		if im.Kind == wasmbin.KindFunc {
			nimp++
		}
	}
	before, _ := m.Bodies()
	after, _ := out.Bodies()
	alloc := uint32(nimp + len(before)) // the first function the rewrite adds
	count := func(bodies [][]byte, fn uint32) int {
		site := wasmbin.AppendU32(append(wasmbin.AppendS32([]byte{0x41}, int32(l.JmpBufSize)), 0x10), fn)
		n := 0
		for _, b := range bodies {
			n += bytes.Count(b, site)
		}
		return n
	}
	// The wrapped functions' bodies are copied to new indices, so a site
	// in one of them counts in the copy, not in the wrapper.
	if got := count(before, l.Xmalloc); got < l.JmpBufAllocs {
		t.Fatalf("the image has %d jmp_buf allocations, the layout says %d", got, l.JmpBufAllocs)
	}
	if got := count(after, l.Xmalloc); got != 0 {
		t.Errorf("%d jmp_buf allocations still call ruby_xmalloc", got)
	}
	if got := count(after, alloc); got != l.JmpBufAllocs {
		t.Errorf("%d jmp_buf allocations call the slot allocator, want %d", got, l.JmpBufAllocs)
	}
	xfree := after[int(l.Xfree)-nimp]
	if !bytes.HasPrefix(xfree, l.XfreeBody[:3]) || !bytes.HasSuffix(xfree, l.XfreeBody[3:]) || len(xfree) <= len(l.XfreeBody) {
		t.Errorf("ruby_xfree was rewritten as % x", xfree)
	}
	if n := wasmbin.JmpBufSlots(l.JmpBufSize); n != 42 {
		t.Errorf("%d slots, want 42 (1 MiB of 24,608-byte slots)", n)
	}
}
