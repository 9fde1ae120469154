package engine

import (
	"encoding/binary"
	"fmt"

	"github.com/gloveboxhq/glovebox/internal/wasmbin"
	"github.com/gloveboxhq/glovebox/internal/wt"
)

// sjljVersion names the setjmp rewrite (wasmbin.PatchSjlj) in the module's
// cache key; change it whenever the rewrite changes.
const sjljVersion = "sjlj-3"

// sjljImage prepares a parsed image for the setjmp rewrite. For the image
// wasmbin.RubyWasm4010 describes (recognised by its SHA-256, sum) it
// returns the module whose memory and globals the engine must use
// (wasmbin.SjljHeader: cheap, the code still aliases the mapped file) and
// the module-version suffix for the cache key. Any other image is used as
// it is: its setjmp keeps ruby.wasm's limits (about 90 levels of nested
// inspect), and the suffix is empty.
func sjljImage(parsed *wasmbin.Module, sum string) (*wasmbin.Module, string, error) {
	if sum != wasmbin.RubyWasm4010.ImageSHA256 {
		return parsed, "", nil
	}
	hdr, err := parsed.SjljHeader()
	if err != nil {
		return nil, "", fmt.Errorf("glovebox: preparing the guest image: %w", err)
	}
	return hdr, "+" + sjljVersion, nil
}

// machineStackMax is the C (shadow) stack, in bytes, the guest's Ruby may
// use before it raises SystemStackError: ec->machine.stack_maxsize, which
// the WASI build leaves at 0 (no check). Measured against the 6 MiB wasm
// stack: the recursions of Array#inspect, Array#hash and Hash#to_s use 5 to
// 6 bytes of wasm stack per byte of shadow stack, so 768 KiB trips at 63%
// to 78% of the depth where the wasm stack would run out (Array#inspect
// 2,699 levels, Array#hash 2,314, Hash#to_s 2,113). See RATIONALE.md,
// "Deep recursion".
const machineStackMax = 768 << 10

// sjljBooted adjusts a freshly booted memory before it becomes a snapshot:
// it sets the main execution context's machine.stack_maxsize so Ruby's
// stack check (and the setjmp wrappers' copy of it) raise SystemStackError
// before the wasm stack runs out.
func (e *Engine) sjljBooted(mem []byte) {
	if e.src == nil {
		return
	}
	l := wasmbin.RubyWasm4010
	if int(l.CurrentEC)+4 > len(mem) {
		return
	}
	ec := binary.LittleEndian.Uint32(mem[l.CurrentEC:])
	if ec == 0 || int(ec)+int(l.ECStackMaxSize)+4 > len(mem) {
		return
	}
	binary.LittleEndian.PutUint32(mem[ec+l.ECStackMaxSize:], machineStackMax)
}

// wasmStackFor is the native stack wasm may use (wasmtime's max_wasm_stack)
// on threads of threadStack bytes: three quarters of it, at most
// maxWasmStack, and 0 (wasmtime's default, 512 KiB) when that is less.
// Wasm runs on the calling thread's stack, so the limit must leave room
// for the host frames below it and the host functions wasm calls (2 MiB of
// glibc's usual 8 MiB); past the real stack the process would crash
// instead of trapping.
func wasmStackFor(threadStack int) int {
	s := min(threadStack/4*3, maxWasmStack)
	if s <= 512<<10 {
		return 0
	}
	return s
}

// maxWasmStack is the most native stack wasm gets (RATIONALE.md, "Deep
// recursion").
const maxWasmStack = 6 << 20

// sjljBeforeFlush runs before the flush after a trap. A trap leaves the
// shadow stack pointer where the guest stopped; when that was deep, Ruby's
// stack check (machineStackMax) would refuse the flush with a
// SystemStackError, so the check is switched off for the rest of this VM's
// life (it is discarded after the flush).
func (v *VM) sjljBeforeFlush(c wt.Context) {
	if v.e.src == nil {
		return
	}
	l := wasmbin.RubyWasm4010
	mem := v.mem.Data(c)
	if int(l.CurrentEC)+4 > len(mem) {
		return
	}
	ec := binary.LittleEndian.Uint32(mem[l.CurrentEC:])
	if ec != 0 && int(ec)+int(l.ECStackMaxSize)+4 <= len(mem) {
		binary.LittleEndian.PutUint32(mem[ec+l.ECStackMaxSize:], 0)
	}
}
