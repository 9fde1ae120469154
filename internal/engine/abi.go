package engine

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gloveboxhq/glovebox/internal/wasmbin"
	"github.com/gloveboxhq/glovebox/internal/wire"
	"github.com/gloveboxhq/glovebox/internal/wt"
)

// The guest image's host interface. ruby.wasm's js extension imports
// rb-js-abi-host (a JavaScript bridge); glovebox implements the two calls
// behind JS.eval(s).to_s as a message channel and refuses the rest. The
// canonical_abi imports manage handles: rb-abi-value handles are the raw
// guest pointers themselves, so no host table exists for them.
const (
	modHost      = "rb-js-abi-host"
	modCanonical = "canonical_abi"
	modWASI      = "wasi_snapshot_preview1"

	importEvalJS   = "eval-js: func(code: string) -> variant { success(handle<js-abi-value>), failure(handle<js-abi-value>) }"
	importToString = "js-value-to-string: func(value: handle<js-abi-value>) -> string"
	importRewind   = "rb_wasm_throw_prohibit_rewind_exception"

	exportRealloc    = "cabi_realloc"
	exportInitialize = "_initialize"
	exportInit       = "ruby-init: func(args: list<string>) -> ()"
	exportLoadPath   = "ruby-init-loadpath: func() -> ()"
	exportEval       = "rb-eval-string-protect: func(str: string) -> tuple<handle<rb-abi-value>, s32>"
	exportRString    = "rstring-ptr: func(value: handle<rb-abi-value>) -> string"
	exportPostString = "cabi_post_rstring-ptr"
	exportMemory     = "memory"

	globalPrefix = "glovebox:global:"
)

// abortError stops the guest: a host function returns it (becoming a
// trap) after recording why on the VM.
var abortError = errors.New("glovebox: eval stopped by the host")

func kinds(b []byte) []wt.ValKind {
	out := make([]wt.ValKind, len(b))
	for i, c := range b {
		switch c {
		case wasmbin.ValI32:
			out[i] = wt.I32
		case wasmbin.ValI64:
			out[i] = wt.I64
		case wasmbin.ValF32:
			out[i] = wt.F32
		case wasmbin.ValF64:
			out[i] = wt.F64
		}
	}
	return out
}

// defineHost defines every non-WASI import of m on l, plus glovebox's own
// versions of the WASI calls that block or draw randomness.
func defineHost(l *wt.Linker, m *wasmbin.Module) error {
	imps, err := m.Imports()
	if err != nil {
		return err
	}
	types, err := m.Types()
	if err != nil {
		return err
	}
	for _, im := range imps {
		if im.Kind != wasmbin.KindFunc {
			return fmt.Errorf("unexpected non-function import %s::%s", im.Module, im.Name)
		}
		if int(im.TypeIndex) >= len(types) {
			return fmt.Errorf("import %s::%s has a bad type index", im.Module, im.Name)
		}
		ft := types[im.TypeIndex]
		var fn wt.HostFunc
		switch im.Module + "::" + im.Name {
		case modHost + "::" + importEvalJS:
			fn = hostEvalJS
		case modHost + "::" + importToString:
			fn = hostToString
		case modHost + "::" + importRewind:
			fn = hostRewind
		case modCanonical + "::resource_new_rb-abi-value", modCanonical + "::resource_get_rb-abi-value":
			fn = func(_ *wt.Caller, v wt.Vals) error { return nil } // identity: result = argument
		case modCanonical + "::resource_drop_js-abi-value":
			fn = hostDropJS
		case modWASI + "::poll_oneoff":
			fn = hostPollOneoff
		case modWASI + "::random_get":
			fn = hostRandomGet
		case modWASI + "::clock_time_get":
			fn = hostClockTimeGet
		default:
			if im.Module == modWASI {
				if fn = fsHostFuncs[im.Name]; fn == nil {
					continue // wasmtime's WASI implementation
				}
				break
			}
			name := im.Module + "::" + im.Name
			if i := strings.IndexByte(name, ':'); i >= 0 && strings.Contains(name[i+2:], ":") {
				name = name[:i+2+strings.IndexByte(name[i+2:], ':')]
			}
			fn = func(c *wt.Caller, _ wt.Vals) error {
				return vmOf(c).stop(StatusSandboxError, "the guest called "+name+", which glovebox does not provide")
			}
		}
		if err := l.Define(im.Module, im.Name, kinds(ft.Params), kinds(ft.Results), fn); err != nil {
			return fmt.Errorf("defining %s::%s: %w", im.Module, im.Name, err)
		}
	}
	return nil
}

func vmOf(c *wt.Caller) *VM { return c.Data().(*VM) }

func vmOfContext(c wt.Context) *VM { return c.Data().(*VM) }

// guest reads n bytes at ptr from linear memory, checking bounds against
// the memory's current size before anything is allocated on the host.
func (v *VM) guest(c wt.Context, ptr, n uint32) ([]byte, bool) {
	d := v.mem.Data(c)
	if uint64(ptr)+uint64(n) > uint64(len(d)) {
		return nil, false
	}
	return d[ptr : ptr+n], true
}

// alloc reserves n bytes in the guest with cabi_realloc.
func (v *VM) alloc(c wt.Context, align, n uint32) (uint32, error) {
	vals := []uint64{0, 0, uint64(align), uint64(n)}
	if err := v.realloc.Call(c, vals); err != nil {
		return 0, err
	}
	p := uint32(vals[0])
	if p == 0 && n > 0 {
		return 0, errors.New("guest allocation failed")
	}
	if _, ok := v.guest(c, p, n); !ok {
		return 0, errors.New("guest allocation out of bounds")
	}
	return p, nil
}

// putString copies s into fresh guest memory, NUL-terminated, and returns
// its address.
func (v *VM) putString(c wt.Context, s []byte) (uint32, error) {
	p, err := v.alloc(c, 1, uint32(len(s)+1))
	if err != nil {
		return 0, err
	}
	d, _ := v.guest(c, p, uint32(len(s)+1))
	copy(d, s)
	d[len(s)] = 0
	return p, nil
}

func hostEvalJS(c *wt.Caller, vals wt.Vals) error {
	ctx := c.Context()
	v := vmOf(c)
	ptr, n, ret := vals.U32(0), vals.U32(1), vals.U32(2)
	// Memory moves only while wasm runs: one look serves the whole call
	// (a tool runs Go code only).
	mem := v.mem.Data(ctx)
	msg, ok := within(mem, ptr, n)
	if !ok {
		return v.stop(StatusSandboxError, "the guest sent a message that lies outside its memory")
	}
	if _, ok := within(mem, ret, 8); !ok {
		return v.stop(StatusSandboxError, "the guest gave a result address outside its memory")
	}
	var resp []byte
	var err error
	if v.limits.Message > 0 && int64(n) > int64(v.limits.Message) {
		resp, err = v.oversized(msg)
	} else {
		resp, err = v.handle(msg)
	}
	if err != nil {
		return err
	}
	if len(v.jsvals) >= maxLiveValues {
		return v.stop(StatusSandboxError, "the guest holds too many host values")
	}
	v.nextJS++
	h := v.nextJS
	v.jsvals[h] = resp
	binary.LittleEndian.PutUint32(mem[ret:], 0) // variant case 0: success
	binary.LittleEndian.PutUint32(mem[ret+4:], h)
	return nil
}

// within returns mem[ptr:ptr+n] if it lies inside mem.
func within(mem []byte, ptr, n uint32) ([]byte, bool) {
	if uint64(ptr)+uint64(n) > uint64(len(mem)) {
		return nil, false
	}
	return mem[ptr : ptr+n], true
}

// maxLiveValues bounds the host values a guest may hold at once. The
// prelude holds one at a time (each answer is read once, then released).
const maxLiveValues = 64

func hostToString(c *wt.Caller, vals wt.Vals) error {
	ctx := c.Context()
	v := vmOf(c)
	h, ret := vals.U32(0), vals.U32(1)
	s := v.jsvals[h]
	delete(v.jsvals, h) // each answer is read once
	// One look at memory, after the allocation (which may have grown it),
	// checks both addresses: memory never shrinks, so a result address
	// outside it now was outside it before. A refused one stops the VM,
	// so the allocation is not leaked into anything that runs on.
	vals4 := [4]uint64{0, 0, 1, uint64(len(s) + 1)}
	if err := v.realloc.Call(ctx, vals4[:]); err != nil {
		return v.allocFailed(err)
	}
	p := uint32(vals4[0])
	mem := v.mem.Data(ctx)
	if _, ok := within(mem, ret, 8); !ok {
		return v.stop(StatusSandboxError, "the guest gave a result address outside its memory")
	}
	if _, ok := within(mem, p, uint32(len(s)+1)); !ok || p == 0 {
		return v.allocFailed(errors.New("guest allocation failed or out of bounds"))
	}
	copy(mem[p:], s)
	mem[p+uint32(len(s))] = 0
	binary.LittleEndian.PutUint32(mem[ret:], p)
	binary.LittleEndian.PutUint32(mem[ret+4:], uint32(len(s)))
	return nil
}

func hostDropJS(c *wt.Caller, vals wt.Vals) error {
	delete(vmOf(c).jsvals, vals.U32(0))
	return nil
}

func hostRewind(c *wt.Caller, vals wt.Vals) error {
	v := vmOf(c)
	msg := "the guest runtime tried to rewind its stack where that is not allowed"
	if b, ok := v.guest(c.Context(), vals.U32(0), min(vals.U32(1), 1024)); ok {
		msg += ": " + string(b)
	}
	return v.stop(StatusSandboxError, msg)
}

// allocFailed stops the guest after an allocation for a host answer
// failed: out of memory when growth was refused, else a broken guest.
func (v *VM) allocFailed(err error) error {
	if v.store.GrowRefused() {
		return v.stop(StatusMemoryLimit, fmt.Sprintf("the guest ran out of memory (limit %s) receiving an answer from the host", mib(v.limits.Memory)))
	}
	var we *wt.Error
	msg := err.Error()
	if errors.As(err, &we) {
		msg = trapReason(we)
	}
	return v.stop(StatusSandboxError, "cannot pass an answer to the guest: "+msg)
}

// handle answers one channel message. msg aliases guest memory: nothing
// may keep it past the call. Its error, if any, stops the guest.
func (v *VM) handle(msg []byte) ([]byte, error) {
	op, payload, _ := bytes.Cut(msg, newline)
	if v.flushing {
		return nil, v.stop(StatusSandboxError, "the guest sent a message while its output was flushed after a trap")
	}
	switch string(op) {
	case "call":
		return v.call(payload)
	case "req":
		if v.req == nil {
			return nil, v.stop(StatusSandboxError, "the guest asked for a request outside an eval")
		}
		b := []byte(`{"code":`)
		b = wire.AppendString(b, v.req.Code)
		b = append(b, `,"tools":[`...)
		for i, t := range v.req.Tools {
			if i > 0 {
				b = append(b, ',')
			}
			b = wire.AppendString(b, t)
		}
		b = append(b, `],"max_value":`...)
		b = fmt.Appendf(b, "%d", v.limits.Value)
		if len(v.req.Stdin) > 0 {
			b = append(b, `,"stdin":"`...)
			b = base64.StdEncoding.AppendEncode(b, v.req.Stdin)
			b = append(b, '"')
		}
		if len(v.req.Args) > 0 {
			b = append(b, `,"argv":[`...)
			for i, a := range v.req.Args {
				if i > 0 {
					b = append(b, ',')
				}
				b = wire.AppendString(b, a)
			}
			b = append(b, ']')
		}
		if v.req.Env != nil {
			b = append(b, `,"env":{`...)
			for i, kv := range v.req.Env {
				if i > 0 {
					b = append(b, ',')
				}
				k, val, _ := strings.Cut(kv, "=")
				b = wire.AppendString(b, k)
				b = append(b, ':')
				b = wire.AppendString(b, val)
			}
			b = append(b, '}')
		}
		b = append(b, '}')
		return b, nil
	}
	return nil, v.stop(StatusSandboxError, fmt.Sprintf("the guest sent an unknown message %.40q", op))
}

var newline = []byte{'\n'}

// toolName returns the name of the tool a call names: the request's own
// string when it is one of its tools (no copy), else a cleaned copy.
func (v *VM) toolName(b []byte) string {
	if v.req != nil {
		for _, t := range v.req.Tools {
			if t == string(b) {
				return t
			}
		}
	}
	// A copy, as valid UTF-8 without control characters: hooks and logs
	// see it.
	return strings.Clone(CleanToolName(string(b)))
}

// oversized answers a message over Limits.Message without reading past
// its head: a tool call's arguments over the limit are not decoded, and
// the call reaches the CallFunc with Err a *PayloadError, which counts
// and records it and answers with the guest error it returns. Any other
// message that large stops the guest.
func (v *VM) oversized(msg []byte) ([]byte, error) {
	op, rest, _ := bytes.Cut(msg[:min(len(msg), len("call\n")+maxToolName+1)], newline)
	nameB, _, named := bytes.Cut(rest, newline)
	if string(op) != "call" || !named || v.flushing {
		// Not a call the prelude makes: a name of at most maxToolName
		// bytes, a newline, the arguments.
		return nil, v.stop(StatusToolBudgetExceeded, fmt.Sprintf("a message to the host of %d bytes exceeds the %d-byte limit per call", len(msg), v.limits.Message))
	}
	size := len(msg) - len("call\n") - len(nameB) - 1
	if size <= v.limits.Message { // the limit counts the arguments, not the name
		return v.handle(msg)
	}
	return v.callWith(nameB, nil, &PayloadError{Size: size, Limit: v.limits.Message})
}

// call runs one tool call: payload is the tool name, a newline, and
// (unless there are no arguments) the wire form of [args, kwargs].
// Malformed arguments still reach the CallFunc, which counts and records
// the attempt and answers with ArgumentError.
//
// The arguments come in the flat form (scalars only, see wire.DecodeFlat)
// or the JSON form; payload aliases guest memory, and the Call holds
// copies only.
func (v *VM) call(payload []byte) ([]byte, error) {
	nameB, argData, _ := bytes.Cut(payload, newline)
	return v.callWith(nameB, argData, nil)
}

// callWith runs the call of tool nameB with the encoded arguments
// argData, or, when tooBig is set, with arguments too large to read.
func (v *VM) callWith(nameB, argData []byte, tooBig *PayloadError) ([]byte, error) {
	name := v.toolName(nameB)
	if v.req == nil || v.req.Call == nil {
		return guestErr("UnknownToolError", fmt.Sprintf("no tool named %q: this sandbox has no tools", name)), nil
	}
	if v.hold == nil {
		v.hold = v.holdClock // one closure per VM, not one per call
	}
	var digest uint64
	if j := v.req.journal(); j != nil {
		digest = Digest(name, argData)
		given, ok, err := v.jGive(jCall)
		if err != nil {
			return nil, err
		}
		if ok {
			if len(given) < 8 || binary.LittleEndian.Uint64(given) != digest {
				j.Diverged = fmt.Sprintf("the program called %q with other arguments than when it was recorded", name)
				return nil, v.stop(StatusSandboxError, "the paused eval did not replay the same way: "+j.Diverged)
			}
			return given[8:], nil
		}
	}
	c := &v.cur
	*c = Call{Name: name, Args: []any{}, Size: len(argData), Deadline: v.deadline, Hold: v.hold, Digest: digest}
	if tooBig != nil {
		c.Args, c.Size, c.Err = nil, tooBig.Size, tooBig
	} else if len(argData) > 0 {
		c.DecodeArgs(argData)
	}
	v.inTool.Store(true)
	res, err := v.req.Call(v.ctx, c)
	v.inTool.Store(false)
	*c = Call{} // the VM keeps nothing of the call
	// The eval's own limits win over whatever the tool made of them.
	if v.ctx.Err() != nil {
		return nil, v.stop(StatusCanceled, "the caller's context ended: "+context.Cause(v.ctx).Error())
	}
	if time.Until(v.deadline) <= 0 { // the monotonic clock alone: one read, not two
		return nil, v.stop(StatusTimeout, v.timeoutMessage())
	}
	var ans []byte
	if err != nil {
		var ge *GuestError
		var ab *Abort
		switch {
		case errors.As(err, &ab):
			return nil, v.stop(ab.Status, ab.Message)
		case errors.As(err, &ge):
			ans = guestErr(ge.Class, ge.Message)
		default:
			ans = guestErr("ToolError", err.Error())
		}
	} else {
		ans = guestAnswer(res)
	}
	if v.req.journal() != nil {
		var d [8]byte
		binary.LittleEndian.PutUint64(d[:], digest)
		v.jRecord(jCall, d[:], ans)
	}
	return ans, nil
}

// guestAnswer rewrites an answer from Answer's form ("i\n42") into the
// form the prelude reads (see Glovebox.__answer): the value, then its tag
// as the last byte ("42i"), so the guest reads an integer with one
// String#to_i and a string by dropping one byte, without a slice.
// Anything else Answer never makes is passed on as a ToolError.
func guestAnswer(a []byte) []byte {
	switch {
	case len(a) == 1 && (a[0] == 'n' || a[0] == 't' || a[0] == 'f'):
		return a
	case len(a) >= 2 && a[1] == '\n' && (a[0] == 'i' || a[0] == 's' || a[0] == 'j'):
		tag := a[0]
		copy(a, a[2:])
		a = a[:len(a)-2]
		return append(a, tag)
	}
	return guestErr("ToolError", "the host made a malformed answer")
}

// maxToolName bounds the tool name kept from a message; real names are
// Ruby method names, far shorter.
const maxToolName = 256

// guestErr is the answer that raises class with msg in the guest:
// "<class>\n<msg>e".
func guestErr(class, msg string) []byte {
	b := make([]byte, 0, len(class)+len(msg)+2)
	return append(append(append(append(b, class...), '\n'), msg...), 'e')
}

// Answer encodes a tool's result for the guest: a type tag on the first
// line, then the value. Scalars and strings travel bare, which saves the
// guest a JSON parse; everything else is the wire form ("j"). It returns
// the same errors as wire.Encode.
func Answer(dst []byte, v any, maxDepth int) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(dst, 'n'), nil
	case bool:
		if x {
			return append(dst, 't'), nil
		}
		return append(dst, 'f'), nil
	case string:
		if utf8.ValidString(x) {
			return append(append(dst, "s\n"...), x...), nil
		}
	case int:
		return strconv.AppendInt(append(dst, "i\n"...), int64(x), 10), nil
	case int64:
		return strconv.AppendInt(append(dst, "i\n"...), x, 10), nil
	}
	return wire.Encode(append(dst, "j\n"...), v, maxDepth)
}

// GuestError is an error a tool call raises in the guest. Class is
// TypeError, ArgumentError, or the name of a class in the Glovebox module:
// ToolError, UnknownToolError, or any other constant name, which the
// guest makes a subclass of Glovebox::ToolError on first use.
type GuestError struct {
	Class   string
	Message string
}

func (e *GuestError) Error() string { return e.Class + ": " + e.Message }

// PayloadError is Call.Err for a call whose encoded arguments, Size
// bytes, are over Limit (Limits.Message): they were not decoded.
type PayloadError struct{ Size, Limit int }

func (e *PayloadError) Error() string {
	return fmt.Sprintf("%d bytes of arguments, over the %d-byte limit per call", e.Size, e.Limit)
}

// Abort ends the eval with Status; the guest cannot rescue it.
type Abort struct {
	Status  Status
	Message string
}

func (e *Abort) Error() string { return string(e.Status) + ": " + e.Message }

// WASI errno values (preview 1).
const (
	errnoSuccess = 0
	errnoFault   = 21
	errnoInval   = 28
	errnoNotSup  = 58
)

// The guest's monotonic clock is virtual: it carries on from the value it
// had when the snapshot was captured, as if the VM had been running since.
// Values boot left in memory (wasi-libc records the clock at start-up to
// compute CPU time) stay consistent, and the guest learns nothing of how
// long the host process has run. The CPU-time clocks read the same.
func (v *VM) monotonic(now time.Time) uint64 {
	if v.born.IsZero() { // stopped: prepared, waiting for its eval
		return v.monoBase
	}
	return v.monoBase + uint64(max(now.Sub(v.born), 0))
}

func hostClockTimeGet(c *wt.Caller, vals wt.Vals) error {
	v := vmOf(c)
	id, ret := vals.U32(0), vals.U32(2)
	var t uint64
	switch id {
	case 0: // realtime
		t = uint64(time.Now().UnixNano())
	case 1, 2, 3: // monotonic, process and thread CPU time
		t = v.monotonic(time.Now())
	default:
		vals.SetI32(0, errnoInval)
		return nil
	}
	d, ok := v.guest(c.Context(), ret, 8)
	if !ok {
		vals.SetI32(0, errnoFault)
		return nil
	}
	if v.req.journal() != nil {
		var err error
		if t, err = v.jClock(id, t); err != nil {
			return err
		}
	}
	binary.LittleEndian.PutUint64(d, t)
	vals.SetI32(0, errnoSuccess)
	return nil
}

// maxRandom bounds one random_get so a guest cannot make the host allocate
// without limit; wasi-libc asks for at most a few hundred bytes.
const maxRandom = 1 << 20

func hostRandomGet(c *wt.Caller, vals wt.Vals) error {
	v := vmOf(c)
	ptr, n := vals.U32(0), vals.U32(1)
	if n > maxRandom {
		vals.SetI32(0, errnoInval)
		return nil
	}
	d, ok := v.guest(c.Context(), ptr, n)
	if !ok {
		vals.SetI32(0, errnoFault)
		return nil
	}
	if v.req.journal() != nil {
		if err := v.jRandom(d); err != nil {
			return err
		}
		vals.SetI32(0, errnoSuccess)
		return nil
	}
	rand.Read(d) // crypto/rand never fails on Linux
	vals.SetI32(0, errnoSuccess)
	return nil
}

// hostPollOneoff implements WASI poll_oneoff so that a sleeping guest
// honours its deadline and its caller's context: epoch interruption only
// reaches wasm code, not a host call blocked in a sleep.
//
// Clock subscriptions fire at their timeout; fd subscriptions are ready at
// once (the guest has no stdin, and its stdout and stderr never block).
func hostPollOneoff(c *wt.Caller, vals wt.Vals) error {
	v := vmOf(c)
	ctx := c.Context()
	in, out, n, neventsPtr := vals.U32(0), vals.U32(1), vals.U32(2), vals.U32(3)
	const subSize, evSize = 48, 32
	if n == 0 || n > 4096 {
		vals.SetI32(0, errnoInval)
		return nil
	}
	subs, ok1 := v.guest(ctx, in, n*subSize)
	_, ok2 := v.guest(ctx, out, n*evSize)
	_, ok3 := v.guest(ctx, neventsPtr, 4)
	if !ok1 || !ok2 || !ok3 {
		vals.SetI32(0, errnoFault)
		return nil
	}
	if v.req.journal() != nil {
		if given, ok, err := v.jGive(jPoll); err != nil {
			return err
		} else if ok {
			return v.pollGiven(ctx, vals, given, out, n, neventsPtr)
		}
		defer v.pollRecord(ctx, vals, out, neventsPtr)
	}
	subs = append([]byte(nil), subs...)
	start := time.Now()
	due := make([]time.Time, n) // zero for fd subscriptions
	var first time.Time
	fdReady := false
	for i := range n {
		s := subs[i*subSize:]
		switch s[8] {
		case 0: // clock
			id := binary.LittleEndian.Uint32(s[16:])
			timeout := binary.LittleEndian.Uint64(s[24:])
			if binary.LittleEndian.Uint16(s[40:])&1 != 0 { // absolute time on clock id
				base := v.monotonic(start)
				if id == 0 {
					base = uint64(start.UnixNano())
				}
				timeout = max(timeout, base) - base
			}
			due[i] = start.Add(time.Duration(min(timeout, 1<<62)))
			if first.IsZero() || due[i].Before(first) {
				first = due[i]
			}
		case 1, 2: // fd_read, fd_write
			fdReady = true
		default:
			vals.SetI32(0, errnoInval)
			return nil
		}
	}
	if !fdReady {
		if err := v.sleep(time.Until(first)); err != nil {
			return err
		}
	}
	now := time.Now()
	evs, _ := v.guest(ctx, out, n*evSize)
	count := uint32(0)
	for i := range n {
		s := subs[i*subSize:]
		if s[8] == 0 && due[i].After(now) && !(count == 0 && !fdReady && due[i].Equal(first)) {
			continue
		}
		e := evs[count*evSize : (count+1)*evSize]
		clear(e)
		copy(e[0:8], s[0:8]) // userdata
		e[10] = s[8]         // event type
		count++
	}
	d, _ := v.guest(ctx, neventsPtr, 4)
	binary.LittleEndian.PutUint32(d, count)
	vals.SetI32(0, errnoSuccess)
	return nil
}

// sleep blocks for d, or until the eval's deadline or context ends, in
// which case it stops the guest.
func (v *VM) sleep(d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	var deadline <-chan time.Time
	if !v.deadline.IsZero() {
		dt := time.NewTimer(time.Until(v.deadline))
		defer dt.Stop()
		deadline = dt.C
	}
	done := context.Background().Done()
	if v.ctx != nil {
		done = v.ctx.Done()
	}
	select {
	case <-t.C:
		return nil
	case <-deadline:
		return v.stop(StatusTimeout, v.timeoutMessage())
	case <-done:
		return v.stop(StatusCanceled, "the caller's context ended: "+context.Cause(v.ctx).Error())
	}
}

// CleanToolName returns a tool name the guest sent as hooks and logs see
// it: at most maxToolName (256) bytes, valid UTF-8, control characters
// replaced by '?'.
func CleanToolName(name string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, strings.ToValidUTF8(name[:min(len(name), maxToolName)], "\uFFFD"))
}

// DecodeArgs fills c.Args and c.Kwargs from a call's encoded
// [args, kwargs] pair (the wire format), or from positional arguments in
// the flat form (wire.DecodeFlat; Kwargs stays as it was). A payload that
// does not decode to that shape leaves both nil and sets c.Err.
func (c *Call) DecodeArgs(data []byte) {
	if wire.IsFlat(data) {
		args, err := wire.DecodeFlat(data)
		if err != nil {
			c.Args, c.Kwargs, c.Err = nil, nil, err
			return
		}
		c.Args = args
		return
	}
	// [args, kwargs] adds two levels around each argument.
	val, err := wire.DecodeDepth(data, MaxValueDepth+2)
	parts, _ := val.([]any)
	ok := err == nil && len(parts) == 2
	if ok {
		var ok1, ok2 bool
		c.Args, ok1 = parts[0].([]any)
		c.Kwargs, ok2 = parts[1].(map[string]any)
		ok = ok1 && ok2
	}
	if !ok {
		c.Args, c.Kwargs = nil, nil
		if c.Err = err; err == nil {
			c.Err = errors.New("arguments are not [args, kwargs]")
		}
	}
}
