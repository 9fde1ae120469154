// Package wt is glovebox's binding to the wasmtime C API: just the calls the
// engine needs, including the ones wasmtime-go does not wrap (epoch
// deadline callbacks, custom WASI output streams, a host memory creator,
// unchecked host functions that avoid per-call allocation).
//
// The wasmtime static library comes from github.com/bytecodealliance/wasmtime-go,
// imported only for its link flags; prototypes are declared in wt.h.
//
// Objects are freed explicitly with Close; nothing here uses finalizers, so
// the owner decides when native memory is returned.
package wt

// #cgo CFLAGS: -O2
// #include "wt.h"
// #include <stdlib.h>
import "C"

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/cgo"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	_ "github.com/bytecodealliance/wasmtime-go/v39" // links libwasmtime
)

// ValKind is a WebAssembly value type as the C API numbers them.
type ValKind uint8

// Value kinds.
const (
	I32 ValKind = 0
	I64 ValKind = 1
	F32 ValKind = 2
	F64 ValKind = 3
)

// Trap codes reported by wasmtime (wasmtime_trap_code_enum).
const (
	TrapStackOverflow     = 0
	TrapMemoryOutOfBounds = 1
	TrapUnreachable       = 9
	TrapInterrupt         = 10
	TrapOutOfFuel         = 12
)

// Error is a failure reported by wasmtime: a trap raised by wasm code or by
// a host function, or an error (including a WASI proc_exit).
type Error struct {
	Message    string
	Code       int  // trap code, or -1 when there is none
	ExitStatus int  // valid when Exited
	Exited     bool // the guest called proc_exit
}

func (e *Error) Error() string { return e.Message }

func takeError(err *C.wasmtime_error_t) error { return takeErrorMsg(err, true) }

// takeErrorMsg is takeError, with wasmtime's message only if msg is set
// (see Store.Stopping).
func takeErrorMsg(err *C.wasmtime_error_t, withMsg bool) error {
	if err == nil {
		return nil
	}
	defer C.wasmtime_error_delete(err)
	e := &Error{Code: -1, Message: stoppedMessage}
	var st C.int
	if C.wasmtime_error_exit_status(err, &st) {
		e.Exited, e.ExitStatus = true, int(st)
	}
	if withMsg {
		var msg C.wasm_byte_vec_t
		C.wasmtime_error_message(err, &msg)
		e.Message = C.GoStringN(msg.data, C.int(msg.size))
		C.wasm_byte_vec_delete(&msg)
	}
	return e
}

func takeTrap(t *C.wasm_trap_t) error { return takeTrapMsg(t, true) }

func takeTrapMsg(t *C.wasm_trap_t, withMsg bool) error {
	if t == nil {
		return nil
	}
	defer C.wasm_trap_delete(t)
	e := &Error{Code: -1, Message: stoppedMessage}
	var code C.uint8_t
	if C.wasmtime_trap_code(t, &code) {
		e.Code = int(code)
	}
	if withMsg {
		var msg C.wasm_byte_vec_t
		C.wasm_trap_message(t, &msg)
		e.Message = C.GoStringN(msg.data, C.int(msg.size))
		C.wasm_byte_vec_delete(&msg)
	}
	return e
}

// stoppedMessage is the Message of a call's Error after Store.Stopping.
const stoppedMessage = "wasm stopped by the host"

// EngineConfig selects engine features. Every engine glovebox makes has
// fuel and epoch interruption compiled in, so a compiled module is usable
// with or without a fuel budget.
type EngineConfig struct {
	MaxWasmStack int // bytes of native stack for wasm; 0 keeps wasmtime's default (512 KiB)
	// HostMemory makes glovebox allocate linear memories itself, so an
	// instance can start from a memory Image (see InstantiateImage).
	HostMemory bool
	// NoFuel leaves fuel metering out of compiled code.
	NoFuel bool
	// Target is the target triple code is compiled for, such as
	// "x86_64-unknown-linux-gnu". Empty: the host, with the CPU features
	// wasmtime detects on it (code that may not load on an older CPU of
	// the same architecture). Set, even to the host's own triple:
	// Cranelift's baseline features for that architecture only (SSE2 on
	// x86-64), so the code loads on every CPU of it. An engine for
	// another architecture than the host's can compile but not run.
	Target string
}

// Engine is a wasmtime engine. It is safe for concurrent use.
type Engine struct {
	ptr *C.wasm_engine_t
}

// NewEngine creates an engine with epoch interruption and (unless
// cfg.NoFuel) fuel metering enabled. It fails only for a Target this
// build of wasmtime cannot compile for (an unknown triple, or another
// architecture: the library wasmtime-go ships has the host's backend
// alone).
func NewEngine(cfg EngineConfig) (*Engine, error) {
	if cfg.Target != "" && !HostArch(cfg.Target) {
		// wasm_engine_new_with_config aborts the process for a target it
		// has no backend for: refuse it here.
		return nil, fmt.Errorf("wt: target %q: this wasmtime library compiles for %s only", cfg.Target, HostTriple())
	}
	c := C.wasm_config_new()
	if cfg.Target != "" {
		ct := C.CString(cfg.Target)
		err := takeError(C.wasmtime_config_target_set(c, ct))
		C.free(unsafe.Pointer(ct))
		if err != nil {
			C.wasm_config_delete(c)
			return nil, fmt.Errorf("wt: target %q: %w", cfg.Target, err)
		}
	}
	C.wasmtime_config_consume_fuel_set(c, C.bool(!cfg.NoFuel))
	C.wasmtime_config_epoch_interruption_set(c, true)
	C.wasmtime_config_wasm_threads_set(c, false)
	C.wasmtime_config_memory_init_cow_set(c, true)
	if cfg.MaxWasmStack > 0 {
		C.wasmtime_config_max_wasm_stack_set(c, C.size_t(cfg.MaxWasmStack))
	}
	if cfg.HostMemory {
		C.gb_use_host_memory(c)
	}
	e := C.wasm_engine_new_with_config(c)
	if e == nil {
		return nil, fmt.Errorf("wt: wasmtime could not make an engine (target %q)", cfg.Target)
	}
	return &Engine{ptr: e}, nil
}

// HostTriple is the target triple of the running architecture, the
// one wasmtime-go's library compiles for: "x86_64-unknown-linux-gnu" or
// "aarch64-unknown-linux-gnu" ("" on another).
func HostTriple() string {
	switch runtime.GOARCH {
	case "amd64":
		return "x86_64-unknown-linux-gnu"
	case "arm64":
		return "aarch64-unknown-linux-gnu"
	}
	return ""
}

// HostArch reports whether triple names the running architecture.
func HostArch(triple string) bool {
	arch, _, _ := strings.Cut(triple, "-")
	h, _, _ := strings.Cut(HostTriple(), "-")
	return arch != "" && arch == h
}

// IncrementEpoch advances the engine's epoch by one; safe from any thread.
func (e *Engine) IncrementEpoch() { C.wasmtime_engine_increment_epoch(e.ptr) }

// Close frees the engine. Modules and stores made from it must be closed first.
func (e *Engine) Close() {
	if e == nil {
		return
	}
	if e.ptr != nil {
		C.wasm_engine_delete(e.ptr)
		e.ptr = nil
	}
}

// Module is a compiled module. It is safe for concurrent use.
type Module struct {
	ptr *C.wasmtime_module_t
}

// Compile compiles a wasm binary with Cranelift.
func Compile(e *Engine, wasm []byte) (*Module, error) {
	if len(wasm) == 0 {
		return nil, errors.New("wt: empty module")
	}
	var m *C.wasmtime_module_t
	err := C.wasmtime_module_new(e.ptr, (*C.uint8_t)(unsafe.Pointer(&wasm[0])), C.size_t(len(wasm)), &m)
	runtime.KeepAlive(wasm)
	if err := takeError(err); err != nil {
		return nil, err
	}
	return &Module{ptr: m}, nil
}

// DeserializeFile loads a module that Serialize wrote, mapping the file
// rather than reading it. The file must come from a trusted writer: its
// machine code runs as is.
func DeserializeFile(e *Engine, path string) (*Module, error) {
	cs := C.CString(path)
	defer C.free(unsafe.Pointer(cs))
	var m *C.wasmtime_module_t
	if err := takeError(C.wasmtime_module_deserialize_file(e.ptr, cs, &m)); err != nil {
		return nil, err
	}
	return &Module{ptr: m}, nil
}

// Serialize returns the compiled form of m for DeserializeFile.
func (m *Module) Serialize() ([]byte, error) {
	var v C.wasm_byte_vec_t
	if err := takeError(C.wasmtime_module_serialize(m.ptr, &v)); err != nil {
		return nil, err
	}
	defer C.wasm_byte_vec_delete(&v)
	return C.GoBytes(unsafe.Pointer(v.data), C.int(v.size)), nil
}

// Close frees the module.
func (m *Module) Close() {
	if m == nil {
		return
	}
	if m.ptr != nil {
		C.wasmtime_module_delete(m.ptr)
		m.ptr = nil
	}
}

// Vals is the argument-and-result array of a host function call or an
// unchecked call: arguments first, then results written over them.
type Vals struct {
	p *C.wasmtime_val_raw_t
	n int
}

// Len is the number of slots.
func (v Vals) Len() int { return v.n }

func (v Vals) at(i int) *C.wasmtime_val_raw_t {
	if i < 0 || i >= v.n {
		panic(fmt.Sprintf("wt: value slot %d of %d", i, v.n))
	}
	return (*C.wasmtime_val_raw_t)(unsafe.Add(unsafe.Pointer(v.p), uintptr(i)*unsafe.Sizeof(*v.p)))
}

// I32 reads slot i as an i32.
func (v Vals) I32(i int) int32 { return *(*int32)(unsafe.Pointer(v.at(i))) }

// U32 reads slot i as an i32 reinterpreted unsigned (a guest pointer).
func (v Vals) U32(i int) uint32 { return *(*uint32)(unsafe.Pointer(v.at(i))) }

// I64 reads slot i as an i64.
func (v Vals) I64(i int) int64 { return *(*int64)(unsafe.Pointer(v.at(i))) }

// F64 reads slot i as an f64.
func (v Vals) F64(i int) float64 { return *(*float64)(unsafe.Pointer(v.at(i))) }

// SetI32 writes slot i as an i32.
func (v Vals) SetI32(i int, x int32) {
	p := v.at(i)
	*(*int64)(unsafe.Pointer(p)) = 0
	*(*int32)(unsafe.Pointer(p)) = x
}

// SetI64 writes slot i as an i64.
// Raw returns the first n values as raw 64-bit slots, to pass on to
// Func.Call.
func (v Vals) Raw(n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = *(*uint64)(unsafe.Pointer(v.at(i)))
	}
	return out
}

func (v Vals) SetI64(i int, x int64) { *(*int64)(unsafe.Pointer(v.at(i))) = x }

// Context is a store's context: the handle calls into wasm run against.
// It is valid while its store is open, on the goroutine using the store.
type Context struct {
	ptr *C.wasmtime_context_t
}

// Data returns the value given to NewStore.
func (c Context) Data() any {
	h := uintptr(C.gb_context_data(c.ptr))
	if h == 0 {
		return nil
	}
	return cgo.Handle(h).Value()
}

// Fuel returns the fuel left in the store.
func (c Context) Fuel() (uint64, error) {
	var f C.uint64_t
	if err := takeError(C.wasmtime_context_get_fuel(c.ptr, &f)); err != nil {
		return 0, err
	}
	return uint64(f), nil
}

// SetFuel sets the fuel left in the store.
func (c Context) SetFuel(f uint64) error {
	return takeError(C.wasmtime_context_set_fuel(c.ptr, C.uint64_t(f)))
}

// SetEpochDeadline makes wasm stop ticks epochs after the current one.
func (c Context) SetEpochDeadline(ticks uint64) {
	C.wasmtime_context_set_epoch_deadline(c.ptr, C.uint64_t(ticks))
}

// Store owns instances and everything they allocate. A store must be used
// by one goroutine at a time.
type Store struct {
	ptr     *C.wasmtime_store_t
	ctx     Context
	handle  cgo.Handle
	allocs  []unsafe.Pointer      // C memory freed with the store
	scratch *C.wasmtime_val_raw_t // maxDepth × maxVals call slots
	trap    **C.wasm_trap_t
	limits  *C.gb_limits
	depth   int
	// stopping: the host is stopping the guest (see Stopping).
	stopping atomic.Bool
}

// Stopping tells s that the host is stopping its guest and knows why (a
// host function or the epoch callback is about to return an error): the
// call that fails for it returns an *Error without wasmtime's message,
// whose backtrace wasmtime formats on request, which took 50 ms of CPU
// and up to 0.7 s of wall time under load the first time in a process
// (measured: every `glovebox resume` paid it once per pause). The mark
// lasts until the next outermost call starts.
func (s *Store) Stopping() { s.stopping.Store(true) }

func (s *Store) calloc(n C.size_t) unsafe.Pointer {
	p := C.calloc(1, n)
	s.allocs = append(s.allocs, p)
	return p
}

// StoreHooks receives a store's callbacks. Epoch is called each time the
// epoch deadline passes: it returns how many more ticks to run, or an error
// to stop the guest with a trap. Write receives guest output on fd 1 or 2
// and returns how many bytes it accepted.
type StoreHooks interface {
	Epoch() (ticks uint64, err error)
	Write(fd int, p []byte) int
}

// NewStore creates a store whose callbacks go to hooks; Context.Data
// returns hooks.
func NewStore(e *Engine, hooks StoreHooks) *Store {
	h := cgo.NewHandle(hooks)
	s := &Store{ptr: C.gb_store_new(e.ptr, C.uintptr_t(h)), handle: h}
	s.ctx = Context{ptr: C.wasmtime_store_context(s.ptr)}
	s.scratch = (*C.wasmtime_val_raw_t)(s.calloc(C.size_t(maxDepth * maxVals * int(unsafe.Sizeof(C.wasmtime_val_raw_t{})))))
	s.trap = (**C.wasm_trap_t)(s.calloc(C.size_t(unsafe.Sizeof(uintptr(0)))))
	s.limits = (*C.gb_limits)(s.calloc(C.size_t(unsafe.Sizeof(C.gb_limits{}))))
	s.limits.mem_limit = C.size_t(^uint(0) >> 1)
	return s
}

// Context returns the store's context.
func (s *Store) Context() Context { return s.ctx }

// Limit caps the store's linear memory at memBytes (negative: no cap).
// wasmtime enforces it; growth it refuses is not reported. See
// SetMemoryLimit for the cap glovebox enforces and observes.
func (s *Store) Limit(memBytes int64) {
	C.wasmtime_store_limiter(s.ptr, C.int64_t(memBytes), -1, -1, -1, -1)
}

// SetMemoryLimit caps growth of linear memories made by the engine's host
// memory creator at limit bytes, for calls made through Func.Call on this
// store, and clears the record of refused growth.
func (s *Store) SetMemoryLimit(limit uint64) {
	s.limits.mem_limit = C.size_t(limit)
	s.limits.grow_refused = 0
}

// GrowRefused reports whether linear memory growth was refused by
// SetMemoryLimit's cap since it was last set.
func (s *Store) GrowRefused() bool { return s.limits.grow_refused != 0 }

// Close frees the store and everything in it.
func (s *Store) Close() {
	if s == nil {
		return
	}
	if s.ptr != nil {
		C.wasmtime_store_delete(s.ptr)
		s.ptr = nil
		s.handle.Delete()
		for _, p := range s.allocs {
			C.free(p)
		}
		s.allocs = nil
	}
}

// WASI describes a guest's WASI context. It is consumed by SetWASI.
type WASI struct {
	Args []string
	// Env is the environment, as NAME=value strings (empty when nil).
	Env []string
	// Preopens are host directories the guest may open.
	Preopens []Preopen
}

// Preopen grants the guest a host directory.
type Preopen struct {
	Host, Guest string
	Write       bool
}

// SetWASI gives the store a WASI context: Args as argv, Env as the
// environment, no stdin, and stdout/stderr delivered to the store's hooks.
// It fails for a variable without a name and "=", or with a NUL byte.
func (s *Store) SetWASI(w WASI) error {
	c := C.wasi_config_new()
	if len(w.Args) > 0 {
		argv := make([]*C.char, len(w.Args))
		for i, a := range w.Args {
			argv[i] = C.CString(a)
		}
		ok := C.wasi_config_set_argv(c, C.size_t(len(argv)), (**C.char)(unsafe.Pointer(&argv[0])))
		for _, p := range argv {
			C.free(unsafe.Pointer(p))
		}
		if !ok {
			C.wasi_config_delete(c)
			return errors.New("wt: invalid argv")
		}
	}
	if len(w.Env) > 0 {
		for _, kv := range w.Env {
			if k, _, ok := strings.Cut(kv, "="); !ok || k == "" || strings.IndexByte(kv, 0) >= 0 {
				C.wasi_config_delete(c)
				return fmt.Errorf("wt: invalid environment variable %q", kv)
			}
		}
		names := make([]*C.char, len(w.Env))
		values := make([]*C.char, len(w.Env))
		for i, kv := range w.Env {
			k, v, _ := strings.Cut(kv, "=")
			names[i], values[i] = C.CString(k), C.CString(v)
		}
		ok := C.wasi_config_set_env(c, C.size_t(len(w.Env)), (**C.char)(unsafe.Pointer(&names[0])), (**C.char)(unsafe.Pointer(&values[0])))
		for i := range names {
			C.free(unsafe.Pointer(names[i]))
			C.free(unsafe.Pointer(values[i]))
		}
		if !ok {
			C.wasi_config_delete(c)
			return errors.New("wt: invalid environment")
		}
	}
	C.gb_wasi_output(c, C.uintptr_t(s.handle))
	for _, p := range w.Preopens {
		host, guest := C.CString(p.Host), C.CString(p.Guest)
		perms := C.size_t(1)
		if p.Write {
			perms = 3
		}
		ok := C.wasi_config_preopen_dir(c, host, guest, perms, perms)
		C.free(unsafe.Pointer(host))
		C.free(unsafe.Pointer(guest))
		if !ok {
			C.wasi_config_delete(c)
			return fmt.Errorf("wt: cannot preopen %s", p.Host)
		}
	}
	return takeError(C.wasmtime_context_set_wasi(s.ctx.ptr, c))
}

// HostFunc implements an imported function. It reads its arguments from
// vals and writes its results over them. A returned error becomes a trap
// carrying its message. Panics must not escape (the dispatcher recovers
// and traps, but the host function should decide what a panic means).
type HostFunc func(c *Caller, vals Vals) error

var (
	hostMu    sync.Mutex
	hostFuncs atomic.Pointer[[]HostFunc]
)

func registerHost(f HostFunc) uintptr {
	hostMu.Lock()
	defer hostMu.Unlock()
	var cur []HostFunc
	if p := hostFuncs.Load(); p != nil {
		cur = *p
	}
	next := append(append([]HostFunc(nil), cur...), f)
	hostFuncs.Store(&next)
	return uintptr(len(next) - 1)
}

// Caller is the view a host function has of the instance calling it.
type Caller struct {
	ptr  *C.wasmtime_caller_t
	ctx  *C.wasmtime_context_t // the caller's context, found by the trampoline
	data uintptr               // that context's data handle (0: none)
}

// Context returns the calling store's context.
func (c *Caller) Context() Context { return Context{ptr: c.ctx} }

// Data returns the value given to NewStore, as Context().Data() does,
// without a cgo call (the trampoline read it).
func (c *Caller) Data() any {
	if c.data == 0 {
		return nil
	}
	return cgo.Handle(c.data).Value()
}

// Linker resolves a module's imports.
type Linker struct {
	ptr *C.wasmtime_linker_t
}

// NewLinker creates a linker with WASI preview 1 defined.
func NewLinker(e *Engine) (*Linker, error) {
	l := &Linker{ptr: C.wasmtime_linker_new(e.ptr)}
	C.wasmtime_linker_allow_shadowing(l.ptr, true)
	if err := takeError(C.wasmtime_linker_define_wasi(l.ptr)); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// Define defines (or replaces) the import module.name as fn.
func (l *Linker) Define(module, name string, params, results []ValKind, fn HostFunc) error {
	var pp, rp *C.uint8_t
	if len(params) > 0 {
		pp = (*C.uint8_t)(unsafe.Pointer(&params[0]))
	}
	if len(results) > 0 {
		rp = (*C.uint8_t)(unsafe.Pointer(&results[0]))
	}
	ty := C.gb_functype(pp, C.size_t(len(params)), rp, C.size_t(len(results)))
	if ty == nil {
		return errors.New("wt: too many parameters")
	}
	defer C.wasm_functype_delete(ty)
	id := registerHost(fn)
	cm, cn := C.CString(module), C.CString(name)
	defer C.free(unsafe.Pointer(cm))
	defer C.free(unsafe.Pointer(cn))
	return takeError(C.gb_define_func(l.ptr, cm, C.size_t(len(module)), cn, C.size_t(len(name)), ty, C.uintptr_t(id)))
}

// Func returns module.name as l defines it, made in s: how a host
// function that shadows a definition reaches the original (keep a linker
// that has only the originals). The function lives as long as s.
func (l *Linker) Func(s *Store, module, name string) (Func, bool) {
	var ext C.wasmtime_extern_t
	cm, cn := C.CString(module), C.CString(name)
	defer C.free(unsafe.Pointer(cm))
	defer C.free(unsafe.Pointer(cn))
	if !C.wasmtime_linker_get(l.ptr, s.ctx.ptr, cm, C.size_t(len(module)), cn, C.size_t(len(name)), &ext) || ext.kind != externFunc {
		return Func{}, false
	}
	f := (*C.wasmtime_func_t)(s.calloc(C.size_t(unsafe.Sizeof(C.wasmtime_func_t{}))))
	*f = *(*C.wasmtime_func_t)(unsafe.Pointer(&ext.of))
	return Func{f: f, s: s}, true
}

// Close frees the linker.
func (l *Linker) Close() {
	if l == nil {
		return
	}
	if l.ptr != nil {
		C.wasmtime_linker_delete(l.ptr)
		l.ptr = nil
	}
}

// InstancePre is a module with its imports resolved, ready to instantiate
// quickly in any store of its engine.
type InstancePre struct {
	ptr *C.wasmtime_instance_pre_t
}

// Prepare resolves m's imports against l.
func (l *Linker) Prepare(m *Module) (*InstancePre, error) {
	var p *C.wasmtime_instance_pre_t
	if err := takeError(C.wasmtime_linker_instantiate_pre(l.ptr, m.ptr, &p)); err != nil {
		return nil, err
	}
	return &InstancePre{ptr: p}, nil
}

// Close frees the prepared instance.
func (p *InstancePre) Close() {
	if p == nil {
		return
	}
	if p.ptr != nil {
		C.wasmtime_instance_pre_delete(p.ptr)
		p.ptr = nil
	}
}

// Instance is an instantiated module.
type Instance struct {
	inst  *C.wasmtime_instance_t // in C memory owned by the store
	store *Store
	slot  *C.gb_slot // its linear memory, when made from an Image
}

// Image is a linear-memory image: a file whose bytes become the start of
// a new instance's memory through a private copy-on-write mapping. The
// file must not shrink while images made from it are in use (a mapping
// past the end of a file faults); glovebox maps cache files that are only
// ever replaced by a rename, never written in place, and sealed memfds.
type Image struct {
	c *C.gb_image
}

// Range is a byte range of a memory image to fault in when an instance is
// made: Write ranges are copied (the copy-on-write break taken up front),
// others only mapped.
type Range struct {
	Off, Len uint64
	Write    bool
}

// OpenImage opens the memory image at path. hot lists byte ranges that
// instances are expected to touch; faulting them in as one batch costs far
// less than a page fault for each (measured here: about 1 µs against
// 11–16 µs per 4 KiB page written). Up to keep linear memories made from
// the image are reset and reused when freed instead of being unmapped
// (0 disables reuse). The Image takes ownership of f.
func OpenImage(f *os.File, hot []Range, keep int) (*Image, error) {
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	var arr *C.uint64_t
	if len(hot) > 0 {
		arr = (*C.uint64_t)(C.calloc(C.size_t(2*len(hot)), 8))
		s := unsafe.Slice((*uint64)(unsafe.Pointer(arr)), 2*len(hot))
		for i, r := range hot {
			s[2*i], s[2*i+1] = r.Off, r.Len
			if r.Write {
				s[2*i+1] |= 1 << 63
			}
		}
	}
	// The C image owns a duplicate of the descriptor, closed when the last
	// memory made from the image is freed (resets read through it).
	// Close-on-exec like every descriptor Go opens: a plain dup would be
	// inherited by every process this one starts (sandboxed commands and
	// eval workers included).
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	f.Close()
	if err != nil {
		C.free(unsafe.Pointer(arr))
		return nil, fmt.Errorf("wt: dup: %w", err)
	}
	c := C.gb_image_new(C.int(fd), C.size_t(st.Size()), arr, C.size_t(len(hot)), C.size_t(max(keep, 0)))
	if c == nil {
		C.free(unsafe.Pointer(arr))
		syscall.Close(fd)
		return nil, errors.New("wt: out of memory")
	}
	return &Image{c: c}, nil
}

// DisablePagemapScan makes memory resets use the portable per-page scan
// of /proc/self/pagemap instead of the PAGEMAP_SCAN ioctl, as on kernels
// older than 6.7. For tests.
func DisablePagemapScan() { C.gb_disable_pagemap_scan() }

// SetWriteTracking turns write tracking on (the default) or off for the
// checkpoints taken from now on: with it, a rewind restores only the
// pages written since the checkpoint, found by userfaultfd
// write-protection (Linux 6.7+; see "Write tracking" in memory_linux.c);
// without it, every page written since the memory was mapped, as on
// kernels that lack it. Turned off, a tracked memory's next rewind
// restores every page written since it was mapped and stops tracking. For
// tests; GLOVEBOX_WRITE_TRACKING=off in the environment at the first
// checkpoint turns it off for the process.
func SetWriteTracking(on bool) {
	v := C.int(0)
	if on {
		v = 1
	}
	C.gb_set_write_tracking(v)
}

// WriteTracking reports whether checkpoints taken now are tracked: the
// kernel has what tracking needs, its self-test passed, and neither
// SetWriteTracking(false) nor GLOVEBOX_WRITE_TRACKING=off turned it off.
// The first call opens the process's userfaultfd and runs the self-test.
func WriteTracking() bool { return C.gb_write_tracking() != 0 }

// SetTrackRenewal sets how many rewinds a tracked memory keeps its hot
// set (the pages it leaves unprotected and restores at every rewind)
// before protecting them again to learn it anew (see "Write tracking" in
// memory_linux.c; 0 restores the default, 64), and returns the previous
// setting. For tests.
func SetTrackRenewal(n int) int { return int(C.gb_set_track_renewal(C.uint(max(n, 0)))) }

// Len is the image size in bytes.
func (img *Image) Len() int { return int(img.c.len) }

// ImageStats counts what became of the linear memories made from an image.
type ImageStats struct {
	Made, Reused, Dropped uint64
	Rewound               uint64 // memories returned to a checkpoint in place (Instance.Rewind)
	Tracked               uint64 // of the Rewound, those that restored only the pages write tracking found (SetWriteTracking)
	Restored              uint64 // 4 KiB pages copied back by resets and rewinds
	Live                  uint64 // memories made from the image and not yet freed
}

// Stats reports how many memories were mapped afresh, how many reused a
// reset slot, and how many were unmapped instead of kept.
func (img *Image) Stats() ImageStats {
	return ImageStats{Made: uint64(img.c.made), Reused: uint64(img.c.reused), Dropped: uint64(img.c.dropped), Restored: uint64(img.c.restored), Rewound: uint64(img.c.rewound), Tracked: uint64(img.c.tracked), Live: uint64(img.c.live)}
}

// Close releases the image's idle memories. Memories still in use keep the
// image (and its file) alive until they are freed.
func (img *Image) Close() {
	if img == nil || img.c == nil {
		return
	}
	C.gb_image_close(img.c)
	img.c = nil
}

// GroupFresh is the memory group whose instances never share a reset
// memory with another instance (see InstantiateImage).
const GroupFresh = ^uint64(0)

// InstantiateImage creates an instance in s whose linear memory starts as
// img. The engine must have been made with HostMemory.
//
// The memory may be a reset one an earlier instance used (see
// OpenImage's keep): its bytes are the image's, but the pages that
// instance wrote stay resident, so the guest's first writes to them take
// no page fault, and its timing can tell how much memory earlier
// instances wrote. A memory is reset only for an instance of the same
// group as the one that used it last; for another group it is mapped
// anew, faulting as one never used. Group GroupFresh matches no
// instance, itself included: its memory is always mapped anew, and left
// to be mapped anew for whichever instance takes it next. Mapping anew
// costs the page faults a reset saves (see OpenImage). Zero is the
// default group.
func (p *InstancePre) InstantiateImage(s *Store, img *Image, group uint64) (*Instance, error) {
	inst := &Instance{inst: (*C.wasmtime_instance_t)(s.calloc(C.size_t(unsafe.Sizeof(C.wasmtime_instance_t{})))), store: s}
	var trap *C.wasm_trap_t
	err := C.gb_instantiate(p.ptr, s.ctx.ptr, img.c, C.uint64_t(group), inst.inst, &trap, &inst.slot)
	runtime.KeepAlive(img)
	if err := takeError(err); err != nil {
		return nil, err
	}
	if err := takeTrap(trap); err != nil {
		return nil, err
	}
	return inst, nil
}

// MemoryRange is the address and length in bytes of the instance's
// linear memory image range (zero for an instance not made by
// InstantiateImage), for tests that read which of its pages are
// resident (/proc/self/pagemap).
func (i *Instance) MemoryRange() (base uintptr, n int) {
	if i.slot == nil {
		return 0, 0
	}
	var b C.uintptr_t
	var l C.size_t
	C.gb_slot_range(i.slot, &b, &l)
	return uintptr(b), int(l)
}

// ErrNoCheckpoint is returned by Rewind for an instance whose memory has
// no checkpoint, or cannot be returned to it.
var ErrNoCheckpoint = errors.New("wt: the linear memory cannot be rewound to a checkpoint")

// Checkpoint records the instance's linear memory as the state Rewind
// returns it to, and returns how many 4 KiB pages the checkpoint holds
// (the pages that differ from the image). If like (nil: none) holds the
// same pages with the same bytes — another instance's checkpoint, from
// CheckpointData — the instance shares it instead of keeping a copy, and
// shared is true: prepared VMs with the same tools have identical
// checkpoints, so a pool's idle VMs keep one copy between them. It fails
// with ErrNoCheckpoint for an instance not made by InstantiateImage, one
// whose image cannot be reset (see OpenImage's keep), or one whose
// memory grew past the image. The copy lives until the memory is freed
// or the next Checkpoint, and as long as a CheckpointData refers to it.
func (i *Instance) Checkpoint(like *CheckpointData) (pages int, shared bool, err error) {
	if i.slot == nil {
		return 0, false, ErrNoCheckpoint
	}
	var l *C.gb_ckdata
	if like != nil {
		l = like.c
	}
	var sh C.int
	n := C.gb_slot_checkpoint(i.slot, l, &sh)
	runtime.KeepAlive(like)
	if n < 0 {
		return 0, false, ErrNoCheckpoint
	}
	return int(n), sh != 0, nil
}

// CheckpointData is a reference to a checkpoint's copy of memory (see
// Instance.Checkpoint), kept so that later instances can share it. The
// zero value and nil refer to none. Release it when done; the copy is
// freed once no instance and no CheckpointData refers to it.
type CheckpointData struct{ c *C.gb_ckdata }

// CheckpointData returns a new reference to the instance's checkpoint,
// or nil if it has none.
func (i *Instance) CheckpointData() *CheckpointData {
	if i.slot == nil {
		return nil
	}
	c := C.gb_slot_ckdata(i.slot)
	if c == nil {
		return nil
	}
	return &CheckpointData{c: c}
}

// Same reports whether d and o refer to the same copy of memory (false
// if either refers to none).
func (d *CheckpointData) Same(o *CheckpointData) bool {
	return d != nil && o != nil && d.c != nil && d.c == o.c
}

// Ref returns a new reference to the same checkpoint (nil for nil).
func (d *CheckpointData) Ref() *CheckpointData {
	if d == nil || d.c == nil {
		return nil
	}
	return &CheckpointData{c: C.gb_ckdata_ref(d.c)}
}

// Release drops the reference. Calling it on nil, or twice, does nothing.
func (d *CheckpointData) Release() {
	if d == nil || d.c == nil {
		return
	}
	C.gb_ckdata_release(d.c)
	d.c = nil
}

// Rewind returns the instance's linear memory to its checkpoint, byte for
// byte: every page written since the memory was mapped is copied back
// from the checkpoint or the image. It returns the pages copied. It fails
// with ErrNoCheckpoint if there is no checkpoint or the memory grew since
// (wasm memories cannot shrink): the instance must then be discarded.
// Globals, tables and everything outside linear memory are the caller's.
func (i *Instance) Rewind() (int, error) {
	if i.slot == nil {
		return 0, ErrNoCheckpoint
	}
	n := C.gb_slot_rewind(i.slot)
	if n < 0 {
		return 0, ErrNoCheckpoint
	}
	return int(n), nil
}

// Instantiate instantiates m in s with explicit imports, which must be
// m's in order: mem if m imports a memory first, then funcs.
func Instantiate(s *Store, m *Module, mem *Memory, funcs []Func) (*Instance, error) {
	n := len(funcs)
	if mem != nil {
		n++
	}
	size := C.size_t(unsafe.Sizeof(C.wasmtime_extern_t{}))
	buf := C.calloc(C.size_t(max(n, 1)), size)
	defer C.free(buf)
	exts := unsafe.Slice((*C.wasmtime_extern_t)(buf), max(n, 1))
	i := 0
	if mem != nil {
		exts[0].kind = externMemory
		*(*C.wasmtime_memory_t)(unsafe.Pointer(&exts[0].of)) = *mem.m
		i++
	}
	for _, f := range funcs {
		exts[i].kind = externFunc
		*(*C.wasmtime_func_t)(unsafe.Pointer(&exts[i].of)) = *f.f
		i++
	}
	inst := &Instance{inst: (*C.wasmtime_instance_t)(s.calloc(C.size_t(unsafe.Sizeof(C.wasmtime_instance_t{})))), store: s}
	var trap *C.wasm_trap_t
	err := C.wasmtime_instance_new(s.ctx.ptr, m.ptr, (*C.wasmtime_extern_t)(buf), C.size_t(n), inst.inst, &trap)
	if err := takeError(err); err != nil {
		return nil, err
	}
	if err := takeTrap(trap); err != nil {
		return nil, err
	}
	return inst, nil
}

const (
	externFunc   = 0
	externGlobal = 1
	externMemory = 3
)

func (i *Instance) export(c Context, name string, kind uint8) (C.wasmtime_extern_t, bool) {
	var ext C.wasmtime_extern_t
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	ok := C.wasmtime_instance_export_get(c.ptr, i.inst, cs, C.size_t(len(name)), &ext)
	return ext, bool(ok) && ext.kind == C.uint8_t(kind)
}

// Func returns the exported function name.
func (i *Instance) Func(c Context, name string) (Func, bool) {
	ext, ok := i.export(c, name, externFunc)
	if !ok {
		return Func{}, false
	}
	f := (*C.wasmtime_func_t)(i.store.calloc(C.size_t(unsafe.Sizeof(C.wasmtime_func_t{}))))
	*f = *(*C.wasmtime_func_t)(unsafe.Pointer(&ext.of))
	return Func{f: f, s: i.store}, true
}

// Memory returns the exported memory name.
func (i *Instance) Memory(c Context, name string) (Memory, bool) {
	ext, ok := i.export(c, name, externMemory)
	if !ok {
		return Memory{}, false
	}
	m := (*C.wasmtime_memory_t)(i.store.calloc(C.size_t(unsafe.Sizeof(C.wasmtime_memory_t{}))))
	*m = *(*C.wasmtime_memory_t)(unsafe.Pointer(&ext.of))
	return Memory{m: m}, true
}

// Func is an exported function. It lives in C memory owned by its store,
// so calls pass no Go pointers and allocate nothing.
type Func struct {
	f *C.wasmtime_func_t
	s *Store
}

// maxVals is the most argument-and-result slots Call supports.
const maxVals = 10

// Call calls f with vals holding the arguments; results are written over
// them. vals must have max(params, results) slots and match f's signature.
// Calls may nest (a host function calling back into wasm) up to 16 deep.
func (f Func) Call(c Context, vals []uint64) error {
	if len(vals) > maxVals {
		return errors.New("wt: too many values")
	}
	s := f.s
	if s.depth >= maxDepth {
		return errors.New("wt: calls nested too deeply")
	}
	buf := unsafe.Slice((*C.wasmtime_val_raw_t)(unsafe.Add(unsafe.Pointer(s.scratch), s.depth*maxVals*int(unsafe.Sizeof(C.wasmtime_val_raw_t{})))), maxVals)
	if s.depth == 0 {
		s.stopping.Store(false)
	}
	s.depth++
	defer func() { s.depth-- }()
	for i, v := range vals {
		*(*uint64)(unsafe.Pointer(&buf[i])) = v
	}
	*s.trap = nil
	err := C.gb_call(c.ptr, f.f, &buf[0], C.size_t(len(vals)), s.trap, s.limits)
	trap := *s.trap
	*s.trap = nil
	withMsg := !s.stopping.Load()
	if err := takeErrorMsg(err, withMsg); err != nil {
		takeTrap(trap)
		return err
	}
	if err := takeTrapMsg(trap, withMsg); err != nil {
		return err
	}
	for i := range vals {
		vals[i] = *(*uint64)(unsafe.Pointer(&buf[i]))
	}
	return nil
}

const maxDepth = 16

// Memory is an exported linear memory.
type Memory struct {
	m *C.wasmtime_memory_t // in C memory owned by the store
}

// Data returns the memory's bytes. The slice aliases wasm memory: it is
// valid until the next call into wasm (which may grow and move it).
func (m Memory) Data(c Context) []byte {
	d := C.gb_memory_data(c.ptr, m.m) // one crossing for base and size
	if d.p == nil || d.n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(d.p)), int(d.n))
}

//export gbHostCall
func gbHostCall(env C.uintptr_t, caller *C.wasmtime_caller_t, ctx *C.wasmtime_context_t, data C.uintptr_t, args *C.wasmtime_val_raw_t, n C.size_t) (trap unsafe.Pointer) {
	defer func() {
		if r := recover(); r != nil {
			trap = newTrap(fmt.Sprintf("glovebox: host function panicked: %v", r))
		}
	}()
	fns := *hostFuncs.Load()
	c := Caller{ptr: caller, ctx: ctx, data: uintptr(data)}
	if err := fns[env](&c, Vals{p: args, n: int(n)}); err != nil {
		return newTrap(err.Error())
	}
	return nil
}

func newTrap(msg string) unsafe.Pointer {
	cs := C.CString(msg)
	defer C.free(unsafe.Pointer(cs))
	return unsafe.Pointer(C.wasmtime_trap_new(cs, C.size_t(len(msg))))
}

//export gbEpoch
func gbEpoch(data C.uintptr_t, delta *C.uint64_t) (errp unsafe.Pointer) {
	defer func() {
		if r := recover(); r != nil {
			cs := C.CString(fmt.Sprintf("glovebox: epoch callback panicked: %v", r))
			errp = unsafe.Pointer(C.wasmtime_error_new(cs))
			C.free(unsafe.Pointer(cs))
		}
	}()
	hooks := cgo.Handle(data).Value().(StoreHooks)
	ticks, err := hooks.Epoch()
	if err != nil {
		cs := C.CString(err.Error())
		defer C.free(unsafe.Pointer(cs))
		return unsafe.Pointer(C.wasmtime_error_new(cs))
	}
	*delta = C.uint64_t(max(ticks, 1))
	return nil
}

//export gbWrite
func gbWrite(data C.uintptr_t, fd C.int, buf *C.uchar, n C.size_t) (written C.ptrdiff_t) {
	defer func() {
		if r := recover(); r != nil {
			written = -5 // EIO
		}
	}()
	hooks := cgo.Handle(data).Value().(StoreHooks)
	p := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(n))
	return C.ptrdiff_t(hooks.Write(int(fd), p))
}
