package wasmbin

import (
	"bytes"
	"errors"
	"fmt"
)

// Local setjmp capture for ruby.wasm images.
//
// ruby.wasm implements setjmp/longjmp with Binaryen's Asyncify (ruby's
// wasm/setjmp.c): setjmp unwinds the WHOLE wasm call stack into a buffer
// inside the jmp_buf (24 KiB in the npm builds) up to rb_wasm_rt_start, and
// rewinds it; longjmp unwinds the whole stack into a static 24 KiB buffer
// and rewinds the setjmp snapshot from the root. So every setjmp costs time
// proportional to the stack depth, and once the stack's saved locals pass
// 24 KiB (about 90 levels of Array#inspect, each of which sets a tag in
// rb_exec_recursive) Asyncify writes past the buffer and traps. The GC's
// scan of wasm locals (wasm/machine.c) unwinds into another static 24 KiB
// buffer with the same limit.
//
// PatchSjlj rewrites the module so that:
//
//   - every function F that calls _rb_wasm_setjmp is split into F' (its
//     original body, at a new index) and a wrapper at F's index that calls
//     F' in a loop and catches the Asyncify unwinds meant for F: a setjmp
//     capture (the first wrapper above the setjmp is always F's) and a
//     longjmp to a jmp_buf F captured (recognised by an owner tag the
//     wrapper stores in the jmp_buf: its shadow-stack pointer and wrapper
//     depth). The wrapper stops the unwind there and rewinds F' from the
//     jmp_buf, doing what rb_wasm_rt_start does at the root, so a setjmp
//     snapshot holds three frames instead of the whole stack and costs
//     O(1). The tag is cleared where rb_wasm_try_catch_loop_run marks
//     its target captured without a setjmp (see TryCatchRun), so a tag
//     left in reused memory by an earlier capture cannot claim a longjmp
//     meant for that loop. Unwinds it does not own (GC scan, fiber switch, a longjmp to an
//     outer frame) pass through; the wrapper then saves its own state (the
//     shadow-stack pointer it entered with) on the Asyncify stack like any
//     instrumented function, and restores it when rewound.
//   - every EC_PUSH_TAG's jmp_buf (24,600 bytes, which ruby.wasm mallocs
//     per tag and frees at EC_POP_TAG: a malloc and a free of a large
//     chunk for every rescue, ensure, catch, recursion guard and block
//     called from C) comes from a cache of slots in the reserved region
//     instead (a free list, then slots never handed out, then
//     ruby_xmalloc when all are in use), and ruby_xfree puts a slot back
//     on the free list (see patchJmpBufAlloc and SlotReserve).
//   - the GC scan buffer and the longjmp scratch buffer (never rewound) are
//     moved to a region of ReserveBytes appended to the initial memory, past
//     everything the image places there and below the first page the
//     allocator can grow into, and the scan covers only the part the unwind
//     filled.
//
// The addresses and function indices are specific to one image; SjljLayout
// records them and PatchSjlj checks the code it rewrites matches before
// changing anything.

// SjljLayout locates ruby.wasm's setjmp machinery in one image. Function
// indices count imports; addresses are linear-memory byte offsets.
type SjljLayout struct {
	ImageSHA256 string // the image these figures were read from

	Setjmp      uint32 // _rb_wasm_setjmp (wasm/setjmp_core.S)
	StartUnwind uint32 // Asyncify's asyncify_start_unwind
	StopUnwind  uint32 // asyncify_stop_unwind
	StartRewind uint32 // asyncify_start_rewind

	StackPointer  uint32 // global: __stack_pointer
	AsyncifyState uint32 // global: Asyncify state (0 normal, 1 unwinding, 2 rewinding)
	AsyncifyData  uint32 // global: address of the current {top, end} buffer

	ActiveJmpBuf uint32 // static rb_wasm_jmp_buf *_rb_wasm_active_jmpbuf
	UnwindBuf    uint32 // static void *rb_asyncify_unwind_buf (wasm/asyncify.h)
	JmpBufState  uint32 // offset of rb_wasm_jmp_buf.state
	JmpBufDstTop uint32 // offset of rb_wasm_jmp_buf.dst_buf_top
	JmpBufOwner  uint32 // offset of 12 spare bytes at the end of setjmp_buf.buffer

	// rb_wasm_try_catch_loop_run(try_catch, target) (wasm/setjmp.c), the
	// way vm_exec catches a longjmp: it marks target captured (state 2)
	// without a setjmp, and catches the longjmp to it at its own level
	// (recognised by its body: it stores state 2 into its second argument
	// first, then compares _rb_wasm_active_jmpbuf with it while
	// rb_asyncify_unwind_buf is set).
	// target is the tag's jmp_buf, which ruby.wasm mallocs per tag
	// (rb_vm_tag_jmpbuf_init), so it can hold an owner tag a wrapper wrote
	// when a setjmp captured an earlier jmp_buf at the same address.
	TryCatchRun uint32

	Longjmp       uint32    // _rb_wasm_longjmp
	LongjmpBuf    [2]uint32 // its static scratch buffer: address of {top,end}, initial top
	LongjmpBufEnd uint32    // initial end

	ScanLocals     uint32    // rb_wasm_scan_locals (wasm/machine.c)
	ScanBuf        [2]uint32 // its static buffer: address of {top,end}, initial top
	ScanBufEnd     uint32    // initial end
	ScanUnwind     uint32    // rb_wasm_handle_scan_unwind
	ActiveScanBuf  uint32    // static _rb_wasm_active_scan_buf
	ScanUnwindBody []byte    // the body rb_wasm_handle_scan_unwind must have

	// Ruby's own C-stack check (rb_ec_stack_check) compares the shadow
	// stack in use with ec->machine.stack_maxsize, which WASI builds leave
	// at 0 (check disabled); the engine sets it at boot (see
	// internal/engine) and the wrappers run the same check, since the
	// recursions in core methods (inspect, hash, ==) reach no call site
	// that checks.
	// Every EC_PUSH_TAG mallocs its jmp_buf (rb_vm_tag_jmpbuf_init:
	// ruby_xmalloc(sizeof(rb_jmpbuf_t)), an i32.const of JmpBufSize
	// right before the call) and EC_POP_TAG frees it with ruby_xfree; the
	// rewrite serves these from a cache of slots (see JmpBufSlots).
	Xmalloc      uint32 // ruby_xmalloc
	Xfree        uint32 // ruby_xfree
	XfreeBody    []byte // the body ruby_xfree must start with
	JmpBufSize   uint32 // sizeof(rb_jmpbuf_t)
	JmpBufAllocs int    // how many call sites allocate a tag's jmp_buf

	CurrentEC        uint32 // static rb_execution_context_t *ruby_current_ec
	ECStackStart     uint32 // offset of ec->machine.stack_start
	ECStackMaxSize   uint32 // offset of ec->machine.stack_maxsize
	ECRaisedFlag     uint32 // offset of ec->raised_flag (one byte)
	RaisedStackOver  uint32 // RAISED_STACKOVERFLOW
	StackOverflow    uint32 // rb_ec_stack_overflow(ec, crit): raises SystemStackError
	StackOverflowMsg uint32 // address of its "system stack overflow during GC" message
}

// RubyWasm4010 is the layout of ruby+stdlib.wasm in the npm package
// @ruby/4.0-wasm-wasi 2.10.1, read from its disassembly (binaryen's
// wasm-dis) next to the package's ruby.debug+stdlib.wasm, whose names
// identify the same functions.
var RubyWasm4010 = SjljLayout{
	ImageSHA256: "9fe3c749730a16da9b0d1a973bb77bec164f8d958efcb7f5b81e4275ea8c5439",

	Setjmp:      10096,
	StartUnwind: 18205,
	StopUnwind:  18206,
	StartRewind: 18207,

	StackPointer:  0,
	AsyncifyState: 1,
	AsyncifyData:  2,

	ActiveJmpBuf: 21148148,
	UnwindBuf:    21148152,
	JmpBufState:  24596,
	JmpBufDstTop: 24588,
	JmpBufOwner:  24572,

	TryCatchRun: 10092,

	Longjmp:       10090,
	LongjmpBuf:    [2]uint32{21148156, 21148164},
	LongjmpBufEnd: 21172740,

	ScanLocals:    10085,
	ScanBuf:       [2]uint32{21123552, 21123560},
	ScanBufEnd:    21148136,
	ScanUnwind:    10088,
	ActiveScanBuf: 21148140,
	// (func (result i32) (i32.load (i32.const 21148140)))
	ScanUnwindBody: []byte{0x00, 0x41, 0xec, 0xe3, 0x8a, 0x0a, 0x28, 0x02, 0x00, 0x0b},

	Xmalloc: 4106,
	Xfree:   4109,
	// (if (local.get 0) (then (if (local.tee 1 (i32.load (i32.const 21122156)))
	//   (then (call 4108 (i32.load offset=440 (local.get 1)) (local.get 0) (i32.const 0)) return))
	//   (call 17618 (local.get 0))))
	XfreeBody:    []byte{0x01, 0x01, 0x7f, 0x20, 0x00, 0x04, 0x40, 0x41, 0xec, 0x98, 0x89, 0x0a, 0x28, 0x02, 0x00, 0x22, 0x01, 0x04, 0x40, 0x20, 0x01, 0x28, 0x02, 0xb8, 0x03, 0x20, 0x00, 0x41, 0x00, 0x10, 0x8c, 0x20, 0x0f, 0x0b, 0x20, 0x00, 0x10, 0xd2, 0x89, 0x01, 0x0b, 0x0b},
	JmpBufSize:   24600,
	JmpBufAllocs: 29,

	CurrentEC:        21122160,
	ECStackStart:     100,
	ECStackMaxSize:   108,
	ECRaisedFlag:     84,
	RaisedStackOver:  2,
	StackOverflow:    8638,
	StackOverflowMsg: 17050159,
}

// ReserveBytes is the size of the region PatchSjlj adds: ScanReserve
// bytes for the GC scan and longjmp buffers, then the tag jmp_buf slots
// (SlotReserve).
const ReserveBytes = ScanReserve + SlotReserve

// ScanReserve is the part of the region for the GC scan and longjmp
// buffers: the Asyncify-saved locals of the whole wasm stack must fit, and
// Asyncify checks no bound while it saves. 16 MiB held a GC scan with the
// 6 MiB wasm stack nearly full (Marshal.dump of 12,000 nested arrays
// under GC.stress, 12,663 being the most the stack allows); the zero
// pages cost nothing until a deep stack is scanned.
const ScanReserve = 16 << 20

// SlotReserve is the part of the region for the tag jmp_buf cache: two
// words (the free list's head and how many slots were ever handed out),
// padding to 16 bytes, then slots of the layout's JmpBufSize rounded up to
// 16 bytes (42 slots of 24,608 bytes for RubyWasm4010). A tag pushed
// while all slots are in use gets its jmp_buf from ruby_xmalloc as
// before. Ruby code nests tags once per C frame that runs Ruby code
// (a block yielded from C, rb_protect, rb_ensure, catch, the recursion
// guard of inspect and <=>), so 42 covers all but deep recursion.
const SlotReserve = 1 << 20

// slotHeader is the bytes before the first slot.
const slotHeader = 16

// JmpBufSlots is how many jmp_bufs of size bytes the slot cache holds.
func JmpBufSlots(size uint32) uint32 { return (SlotReserve - slotHeader) / jmpBufStride(size) }

func jmpBufStride(size uint32) uint32 { return (size + 15) &^ 15 }

// sjljMagic mixes the owner tag's check word, so stale bytes in a jmp_buf
// that was never captured cannot pass for a tag.
const sjljMagic = 0x5e7a3b1d

// ErrSjljLayout is returned when the module does not match the layout.
var ErrSjljLayout = errors.New("wasmbin: the image does not match the setjmp layout")

// SjljHeader returns a copy of m with only the memory and global changes
// PatchSjlj makes (the reserved region, the wrapper-depth global). It is
// cheap, and enough for what needs the module's memory and globals but not
// its code, such as the initial memory image and the list of globals a
// snapshot saves.
func (m *Module) SjljHeader() (*Module, error) {
	out, _, _, err := m.sjljHeader()
	return out, err
}

func (m *Module) sjljHeader() (*Module, uint32, uint64, error) {
	out := m.clone()
	mem, err := out.Memory()
	if err != nil {
		return nil, 0, 0, err
	}
	region := uint64(mem.Min) * PageSize
	if region+ReserveBytes > 1<<31 {
		return nil, 0, 0, fmt.Errorf("%w: no room for the reserved region", ErrSjljLayout)
	}
	if err := out.setMemoryMin(mem.Min + ReserveBytes/PageSize); err != nil {
		return nil, 0, 0, err
	}
	depth, err := out.addGlobal(ValI32, true, []byte{0x41, 0})
	if err != nil {
		return nil, 0, 0, err
	}
	return out, depth, region, nil
}

// PatchSjlj returns a copy of m rewritten as described above, and the
// number of functions it wrapped. m must be the image l describes, not yet
// patched.
func (m *Module) PatchSjlj(l SjljLayout) (*Module, int, error) {
	out := m.clone()
	types, err := out.Types()
	if err != nil {
		return nil, 0, err
	}
	ftypes, err := out.FuncTypes()
	if err != nil {
		return nil, 0, err
	}
	bodies, err := out.Bodies()
	if err != nil {
		return nil, 0, err
	}
	nimp, err := out.importCount(KindFunc)
	if err != nil {
		return nil, 0, err
	}
	if len(ftypes) != len(bodies) {
		return nil, 0, fmt.Errorf("%w: %d function types, %d bodies", ErrMalformed, len(ftypes), len(bodies))
	}
	body := func(idx uint32) ([]byte, error) {
		if idx < uint32(nimp) || int(idx)-nimp >= len(bodies) {
			return nil, fmt.Errorf("%w: function %d is not defined by the module", ErrSjljLayout, idx)
		}
		return bodies[int(idx)-nimp], nil
	}
	// The Asyncify entry points and the setjmp wrapper must be what the
	// layout says: check the instructions the rewrite relies on.
	for _, c := range []struct {
		fn   uint32
		want []byte
	}{
		{l.StartUnwind, ins(0x41, 1, 0x24, l.AsyncifyState, 0x20, 0, 0x24, l.AsyncifyData)},
		{l.StartRewind, ins(0x41, 2, 0x24, l.AsyncifyState, 0x20, 0, 0x24, l.AsyncifyData)},
		{l.StopUnwind, ins(0x41, 0, 0x24, l.AsyncifyState)},
		{l.Setjmp, ins(0x23, l.StackPointer)},
		{l.StackOverflow, ins(0x41, l.StackOverflowMsg)},
	} {
		b, err := body(c.fn)
		if err != nil {
			return nil, 0, err
		}
		if !bytes.Contains(b, c.want) {
			return nil, 0, fmt.Errorf("%w: function %d lacks % x", ErrSjljLayout, c.fn, c.want)
		}
	}

	hdr, depth, region, err := m.sjljHeader()
	if err != nil {
		return nil, 0, err
	}
	out.Sections = hdr.Sections
	start, end := int32(region), int32(region+ScanReserve)
	// Point the longjmp scratch buffer and the scan buffer at the region
	// (they are never in use at the same time: the scan runs inside the
	// GC, a longjmp's unwind only in the frames it leaves).
	retarget := func(fn uint32, buf [2]uint32, oldEnd uint32) error {
		b, err := body(fn)
		if err != nil {
			return err
		}
		endField, topField := int32(buf[0]+4), int32(buf[0])
		b, err = replaceOnce(b, ins(0x41, endField, 0x41, int32(oldEnd)), ins(0x41, endField, 0x41, end))
		if err != nil {
			return fmt.Errorf("%w: function %d: %v", ErrSjljLayout, fn, err)
		}
		b, err = replaceOnce(b, ins(0x41, topField, 0x41, int32(buf[1])), ins(0x41, topField, 0x41, start))
		if err != nil {
			return fmt.Errorf("%w: function %d: %v", ErrSjljLayout, fn, err)
		}
		bodies[int(fn)-nimp] = b
		return nil
	}
	if err := retarget(l.Longjmp, l.LongjmpBuf, l.LongjmpBufEnd); err != nil {
		return nil, 0, err
	}
	if err := retarget(l.ScanLocals, l.ScanBuf, l.ScanBufEnd); err != nil {
		return nil, 0, err
	}
	// rb_wasm_handle_scan_unwind runs at the root between the scan's
	// unwind and its rewind: make the buffer end where the unwind stopped,
	// so the scan reads the saved locals and not the whole region.
	b, err := body(l.ScanUnwind)
	if err != nil {
		return nil, 0, err
	}
	if !bytes.Equal(b, l.ScanUnwindBody) {
		return nil, 0, fmt.Errorf("%w: function %d is not rb_wasm_handle_scan_unwind", ErrSjljLayout, l.ScanUnwind)
	}
	bodies[int(l.ScanUnwind)-nimp] = scanUnwindBody(l)

	// rb_wasm_try_catch_loop_run starts with target->state = CAPTURED.
	// Clear target's owner tag there: a longjmp to target belongs to the
	// try-catch loop, but a tag left in the reused allocation by an earlier
	// capture at the same address would let the wrapper that captured it
	// (same shadow-stack pointer and depth: the same call site, again)
	// claim the longjmp and rewind from that earlier capture's stale
	// buffer (the Asyncify rewind traps on its freed-chunk pointers, or
	// resumes the wrong frame).
	b, err = body(l.TryCatchRun)
	if err != nil {
		return nil, 0, err
	}
	prologue := append([]byte{1, 2, ValI32}, ins(0x20, 1, 0x41, 2)...)
	prologue = AppendU32(append(prologue, 0x36, 2), l.JmpBufState)
	if !bytes.HasPrefix(b, prologue) {
		return nil, 0, fmt.Errorf("%w: function %d does not start as rb_wasm_try_catch_loop_run", ErrSjljLayout, l.TryCatchRun)
	}
	clear := (&asm{}).get(1).i32(0).store(l.JmpBufOwner).b
	bodies[int(l.TryCatchRun)-nimp] = append(append(append([]byte(nil), prologue...), clear...), b[len(prologue):]...)

	// Serve the tags' jmp_bufs from the slot cache.
	if bodies, ftypes, err = patchJmpBufAlloc(l, bodies, ftypes, nimp, uint32(region+ScanReserve)); err != nil {
		return nil, 0, err
	}

	// Wrap every caller of _rb_wasm_setjmp. A byte search for the call
	// instruction can only over-approximate (an immediate that happens to
	// hold the same bytes): wrapping a function that never calls setjmp is
	// harmless, it just passes every unwind through.
	call := ins(0x10, l.Setjmp)
	n := len(bodies)
	wrapped := 0
	for i := 0; i < n; i++ {
		idx := uint32(nimp + i)
		if idx == l.Setjmp || !bytes.Contains(bodies[i], call) {
			continue
		}
		ft := types[ftypes[i]]
		if len(ft.Results) > 1 {
			return nil, 0, fmt.Errorf("%w: function %d returns %d values", ErrSjljLayout, idx, len(ft.Results))
		}
		inner := uint32(nimp + len(bodies))
		ftypes = append(ftypes, ftypes[i])
		bodies = append(bodies, bodies[i])
		bodies[i] = wrapperBody(l, ft, inner, depth)
		wrapped++
	}
	if wrapped == 0 {
		return nil, 0, fmt.Errorf("%w: no function calls _rb_wasm_setjmp (%d)", ErrSjljLayout, l.Setjmp)
	}
	out.setFunctions(ftypes, bodies)
	return out, wrapped, nil
}

// ins encodes a short instruction sequence: each opcode byte followed by
// one immediate. Immediates of i32.const (0x41) are signed LEB128, others
// unsigned; memory instructions take (align, offset) pairs and are not
// handled here.
func ins(parts ...any) []byte {
	var b []byte
	for i := 0; i < len(parts); i += 2 {
		op := toU32(parts[i])
		b = append(b, byte(op))
		if i+1 < len(parts) {
			if op == 0x41 {
				b = AppendS32(b, int32(toU32(parts[i+1])))
			} else {
				b = AppendU32(b, toU32(parts[i+1]))
			}
		}
	}
	return b
}

func toU32(v any) uint32 {
	switch x := v.(type) {
	case int:
		return uint32(x)
	case int32:
		return uint32(x)
	case uint32:
		return x
	case byte:
		return uint32(x)
	}
	panic(fmt.Sprintf("wasmbin: immediate of type %T", v))
}

// asm builds a function body.
type asm struct{ b []byte }

func (a *asm) op(ops ...byte) *asm { a.b = append(a.b, ops...); return a }
func (a *asm) u(op byte, v uint32) *asm {
	a.b = AppendU32(append(a.b, op), v)
	return a
}
func (a *asm) u32(v uint32) *asm  { a.b = AppendU32(a.b, v); return a }
func (a *asm) i32(v int32) *asm   { a.b = AppendS32(append(a.b, 0x41), v); return a }
func (a *asm) get(l uint32) *asm  { return a.u(0x20, l) }
func (a *asm) set(l uint32) *asm  { return a.u(0x21, l) }
func (a *asm) tee(l uint32) *asm  { return a.u(0x22, l) }
func (a *asm) gget(g uint32) *asm { return a.u(0x23, g) }
func (a *asm) gset(g uint32) *asm { return a.u(0x24, g) }
func (a *asm) call(f uint32) *asm { return a.u(0x10, f) }
func (a *asm) load(off uint32) *asm {
	a.b = AppendU32(append(a.b, 0x28, 2), off)
	return a
}
func (a *asm) store(off uint32) *asm {
	a.b = AppendU32(append(a.b, 0x36, 2), off)
	return a
}

const (
	opIf      = 0x04
	opElse    = 0x05
	opEnd     = 0x0B
	opLoop    = 0x03
	opBr      = 0x0C
	opUnreach = 0x00
	opEmpty   = 0x40
	opI32Eq   = 0x46
	opI32GtU  = 0x4B
	opI32Add  = 0x6A
	opI32Sub  = 0x6B
	opI32And  = 0x71
	opI32Xor  = 0x73
	opI32Eqz  = 0x45
	opI32LtU  = 0x49
	opI32ShrU = 0x76
	opI32Mul  = 0x6C
)

func scanUnwindBody(l SjljLayout) []byte {
	a := &asm{}
	a.op(1, 1, ValI32) // one local of type i32
	a.i32(int32(l.ActiveScanBuf)).load(0).tee(0)
	a.op(opIf, opEmpty)
	a.get(0).get(0).load(0).store(4) // end = top
	a.op(opEnd)
	a.get(0)
	a.op(opEnd)
	return a.b
}

// zero pushes the zero value of a value type.
func (a *asm) zero(t byte) *asm {
	switch t {
	case ValI64:
		return a.op(0x42, 0)
	case ValF32:
		return a.op(0x43, 0, 0, 0, 0)
	case ValF64:
		return a.op(0x44, 0, 0, 0, 0, 0, 0, 0, 0)
	}
	return a.i32(0)
}

// wrapperBody is the function placed at a setjmp caller's index; inner is
// the caller's original body. See the comment at the top of this file.
//
// When an unwind it does not own passes through, the wrapper saves two
// words on the Asyncify stack, like an instrumented function: the shadow
// stack pointer it was entered with and where it is to resume (0: the call
// of inner, 1: the call of rb_ec_stack_overflow).
func wrapperBody(l SjljLayout, ft FuncType, inner, depthG uint32) []byte {
	np := uint32(len(ft.Params))
	sp0, d, env, point, ec, r := np, np+1, np+2, np+3, np+4, np+5
	a := &asm{}
	if len(ft.Results) == 1 {
		a.op(2, 5, ValI32, 1, ft.Results[0])
	} else {
		a.op(1, 5, ValI32)
	}
	st, data := l.AsyncifyState, l.AsyncifyData
	// Entered while rewinding: pop what the pass-through saved.
	a.gget(st).i32(2).op(opI32Eq, opIf, opEmpty)
	a.gget(data).gget(data).load(0).i32(8).op(opI32Sub).store(0)
	a.gget(data).load(0).load(0).set(sp0)
	a.gget(data).load(0).load(4).set(point)
	a.op(opElse)
	a.gget(l.StackPointer).set(sp0)
	// Ruby's rb_ec_stack_check, on entry: raise SystemStackError when the
	// shadow stack in use passes ec->machine.stack_maxsize less 8 KiB,
	// unless a stack overflow is being raised already.
	a.i32(int32(l.CurrentEC)).load(0).tee(ec).op(opIf, opEmpty)
	a.get(ec).op(0x2D, 0).u32(l.ECRaisedFlag).i32(int32(l.RaisedStackOver)).op(opI32And, opI32Eqz, opIf, opEmpty)
	a.get(ec).load(l.ECStackMaxSize).i32(2).op(opI32ShrU).i32(2048).op(opI32Sub)
	a.get(ec).load(l.ECStackStart).get(sp0).op(opI32Sub).i32(2).op(opI32ShrU)
	a.op(opI32LtU, opIf, opEmpty).i32(1).set(point).op(opEnd)
	a.op(opEnd) // not raising already
	a.op(opEnd) // ec != 0
	a.op(opEnd) // rewinding
	a.gget(depthG).i32(1).op(opI32Add).tee(d).gset(depthG)

	a.get(point).op(opIf, opEmpty)
	a.get(ec).i32(0).call(l.StackOverflow)
	a.gget(st).i32(1).op(opI32Eq, opIf, opEmpty)
	a.gget(data).load(0).get(sp0).store(0)
	a.gget(data).load(0).i32(1).store(4)
	a.gget(data).gget(data).load(0).i32(8).op(opI32Add).store(0)
	a.get(d).i32(1).op(opI32Sub).gset(depthG)
	if len(ft.Results) == 1 {
		a.zero(ft.Results[0])
	}
	a.op(0x0F) // return
	a.op(opEnd)
	a.op(opEnd)

	a.op(opLoop, opEmpty)
	for i := uint32(0); i < np; i++ {
		a.get(i)
	}
	a.call(inner)
	if len(ft.Results) == 1 {
		a.set(r)
	}
	a.gget(st).i32(1).op(opI32Eq, opIf, opEmpty) // unwinding
	a.i32(int32(l.ActiveJmpBuf)).load(0).tee(env).op(opIf, opEmpty)
	// A setjmp capture: the first wrapper above the setjmp owns it.
	a.get(env).load(l.JmpBufState).i32(1).op(opI32Eq, opIf, opEmpty)
	a.get(env).load(0).get(env).i32(int32(l.JmpBufOwner)).op(opI32Add, opI32GtU, opIf, opEmpty, opUnreach, opEnd)
	a.call(l.StopUnwind).i32(int32(l.UnwindBuf)).i32(0).store(0)
	a.get(env).get(env).load(0).store(l.JmpBufDstTop)
	a.get(env).get(sp0).store(l.JmpBufOwner)
	a.get(env).get(d).store(l.JmpBufOwner + 4)
	a.get(env).get(sp0).get(d).op(opI32Xor).get(env).op(opI32Xor).i32(sjljMagic).op(opI32Xor).store(l.JmpBufOwner + 8)
	a.get(env).call(l.StartRewind)
	a.u(opBr, 3)
	a.op(opEnd)
	// A longjmp to a jmp_buf this frame captured.
	a.get(env).load(l.JmpBufState).i32(3).op(opI32Eq)
	a.get(env).load(l.JmpBufOwner).get(sp0).op(opI32Eq, opI32And)
	a.get(env).load(l.JmpBufOwner+4).get(d).op(opI32Eq, opI32And)
	a.get(env).load(l.JmpBufOwner+8).get(sp0).get(d).op(opI32Xor).get(env).op(opI32Xor).i32(sjljMagic).op(opI32Xor, opI32Eq, opI32And)
	a.op(opIf, opEmpty)
	a.call(l.StopUnwind).i32(int32(l.UnwindBuf)).i32(0).store(0)
	a.get(env).get(env).load(l.JmpBufDstTop).store(0)
	a.get(env).call(l.StartRewind)
	a.u(opBr, 3)
	a.op(opEnd)
	a.op(opEnd) // env != 0
	// Pass the unwind on, saving (sp0, resume at the call of inner).
	a.gget(data).load(0).get(sp0).store(0)
	a.gget(data).load(0).i32(0).store(4)
	a.gget(data).gget(data).load(0).i32(8).op(opI32Add).store(0)
	a.op(opEnd) // unwinding
	a.op(opEnd) // loop
	a.get(d).i32(1).op(opI32Sub).gset(depthG)
	if len(ft.Results) == 1 {
		a.get(r)
	}
	a.op(opEnd)
	return a.b
}

// patchJmpBufAlloc makes every tag's jmp_buf allocation call a new
// function that hands out a slot of the cache at base (see SlotReserve),
// and makes ruby_xfree put a slot back on the cache's free list. The
// new function is appended to bodies and its type to ftypes, which are
// returned.
//
// Its fallback calls ruby_xmalloc, which can start an Asyncify unwind
// (the GC's scan of wasm locals). The new function is not instrumented:
// it returns whatever ruby_xmalloc left, which the instrumented caller
// ignores while unwinding, and when the caller is rewound it calls the
// new function again, which finds the cache as full as before (nothing
// runs between the scan's unwind and its rewind but the scan) and calls
// ruby_xmalloc again, which rewinds. So the function needs no state of
// its own on the Asyncify stack.
func patchJmpBufAlloc(l SjljLayout, bodies [][]byte, ftypes []uint32, nimp int, base uint32) ([][]byte, []uint32, error) {
	idx := func(fn uint32) (int, error) {
		if fn < uint32(nimp) || int(fn)-nimp >= len(bodies) {
			return 0, fmt.Errorf("%w: function %d is not defined by the module", ErrSjljLayout, fn)
		}
		return int(fn) - nimp, nil
	}
	xm, err := idx(l.Xmalloc)
	if err != nil {
		return nil, nil, err
	}
	xf, err := idx(l.Xfree)
	if err != nil {
		return nil, nil, err
	}
	if !bytes.Equal(bodies[xf], l.XfreeBody) {
		return nil, nil, fmt.Errorf("%w: function %d is not ruby_xfree", ErrSjljLayout, l.Xfree)
	}
	alloc := uint32(nimp + len(bodies))
	head, count, slot0 := base, base+4, base+slotHeader
	n, stride := JmpBufSlots(l.JmpBufSize), jmpBufStride(l.JmpBufSize)

	// Redirect `i32.const JmpBufSize; call ruby_xmalloc` (whole
	// instructions) to the allocator.
	sites := 0
	var in Instr
	for i, b := range bodies {
		if !bytes.Contains(b, ins(0x10, l.Xmalloc)) {
			continue
		}
		hdr, err := DecodeLocals(b)
		if err != nil {
			return nil, nil, err
		}
		var out []byte
		d := NewDecoder(b[hdr.Code:])
		prevSize := false
		last := 0
		for d.More() {
			if err := d.Next(&in); err != nil {
				return nil, nil, fmt.Errorf("function %d: %w", nimp+i, err)
			}
			if prevSize && in.Op == 0x10 && uint32(in.Imm[0]) == l.Xmalloc {
				if out == nil {
					out = append([]byte(nil), b[:hdr.Code]...)
				}
				out = append(out, b[hdr.Code+last:hdr.Code+in.Off]...)
				out = append(out, ins(0x10, alloc)...)
				last = in.End
				sites++
			}
			prevSize = in.Op == 0x41 && in.Imm[0] == int64(l.JmpBufSize)
		}
		if out != nil {
			bodies[i] = append(out, b[hdr.Code+last:]...)
		}
	}
	if sites != l.JmpBufAllocs {
		return nil, nil, fmt.Errorf("%w: %d jmp_buf allocations, want %d", ErrSjljLayout, sites, l.JmpBufAllocs)
	}

	// The allocator: pop the free list, else take the next slot never
	// handed out, else ruby_xmalloc.
	a := &asm{}
	a.op(1, 1, ValI32) // local 1: a slot
	a.i32(int32(head)).load(0).tee(1).op(opIf, opEmpty)
	a.i32(int32(head)).get(1).load(0).store(0)
	a.get(1).op(0x0F, opEnd)
	a.i32(int32(count)).load(0).tee(1).i32(int32(n)).op(opI32LtU, opIf, opEmpty)
	a.i32(int32(count)).get(1).i32(1).op(opI32Add).store(0)
	a.get(1).i32(int32(stride)).op(opI32Mul).i32(int32(slot0)).op(opI32Add, 0x0F, opEnd)
	a.get(0).call(l.Xmalloc).op(opEnd)
	ftypes = append(ftypes, ftypes[xm])
	bodies = append(bodies, a.b)

	// ruby_xfree: a pointer into the slots goes back on the free list.
	f := &asm{}
	f.b = append(f.b, l.XfreeBody[:3]...) // its locals
	f.get(0).i32(int32(slot0)).op(opI32Sub).i32(int32(n*stride)).op(opI32LtU, opIf, opEmpty)
	f.get(0).i32(int32(head)).load(0).store(0)
	f.i32(int32(head)).get(0).store(0)
	f.op(0x0F, opEnd)
	bodies[xf] = append(f.b, l.XfreeBody[3:]...)
	return bodies, ftypes, nil
}
