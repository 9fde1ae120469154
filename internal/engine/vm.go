package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/gloveboxhq/glovebox/internal/wire"
	"github.com/gloveboxhq/glovebox/internal/wt"
)

// Status is how an eval ended.
type Status string

// Statuses; the root package documents them for users.
const (
	StatusOK                 Status = "ok"
	StatusError              Status = "error"
	StatusTimeout            Status = "timeout"
	StatusFuelExhausted      Status = "fuel_exhausted"
	StatusMemoryLimit        Status = "memory_limit"
	StatusCanceled           Status = "canceled"
	StatusSandboxError       Status = "sandbox_error"
	StatusToolBudgetExceeded Status = "tool_budget_exceeded"
	StatusSuspended          Status = "suspended"
)

// Limits bound one eval. The root package validates and defaults them;
// here every field is taken as given.
type Limits struct {
	Timeout time.Duration // wall clock, > 0
	Fuel    uint64        // 0: no fuel budget
	Memory  uint64        // bytes of linear memory
	Stdout  int           // bytes kept of stdout
	Stderr  int           // bytes kept of stderr
	Value   int           // bytes of the encoded result value
	Message int           // bytes of one message from the guest; 0: no limit
	FS      FSLimits      // file writes and creations
}

// Call is one tool call from the guest.
type Call struct {
	Name   string
	Args   []any          // never nil unless Err is set
	Kwargs map[string]any // nil or empty when the guest passed no keywords
	Size   int            // bytes of the encoded arguments
	Err    error          // the arguments could not be decoded; Args and Kwargs are nil
	// Deadline is the eval's wall-clock limit; the tool's context should
	// end at it (the eval's own context ends with the caller's).
	Deadline time.Time
	// Digest identifies the call (its name and encoded arguments; see
	// Digest) on a journaled eval (Request.Journal), else 0.
	Digest uint64
	// Hold stops the eval's wall clock while the call waits for something
	// outside the eval's control (a person's approval); the function it
	// returns restarts the clock and returns the new deadline, later by
	// the time held. Call both on the goroutine running the call.
	Hold func() (resume func() time.Time)
}

// CallFunc runs a tool call. It returns the result encoded by Answer, a
// *GuestError to raise in the guest, an *Abort to end the eval, or any
// other error (raised as Glovebox::ToolError with its message). ctx is
// the eval's context.
type CallFunc func(ctx context.Context, c *Call) ([]byte, error)

// Request is one eval.
type Request struct {
	Code   string
	Limits Limits
	Tools  []string // names defined as top-level methods in the guest
	Call   CallFunc
	// Stdin is what the guest's $stdin and STDIN read; Args is its ARGV.
	// Both are taken as given (the root package bounds them).
	Stdin []byte
	Args  []string
	// Env, when not nil, replaces the guest's ENV at the start of the
	// eval: exactly these "NAME=value" entries (the root package checks
	// them). Nil leaves ENV as the VM has it (empty in a fresh VM).
	Env []string
	// StdoutTee and StderrTee, if set, receive the guest's output as it is
	// written: exactly the bytes kept in the Outcome (up to the limits, no
	// truncation marker), on the eval's goroutine, never after the eval
	// has reported.
	StdoutTee, StderrTee io.Writer
	// Journal, if set, records the host's inputs to the guest so that the
	// eval can be paused in a tool call and continued by replay (see
	// journal.go); a journal made by Replay gives back a recorded eval's
	// inputs first.
	Journal *Journal
}

// ErrorInfo describes a guest exception.
type ErrorInfo struct {
	Class     string
	Message   string
	Backtrace []string
}

// Outcome is everything an eval produced.
type Outcome struct {
	Status          Status
	Value           any // decoded wire value; nil unless Status is ok
	Error           *ErrorInfo
	Stdout, Stderr  []byte
	StdoutTruncated bool
	StderrTruncated bool
	FuelUsed        uint64
	Duration        time.Duration
	// StdoutBytes and StderrBytes count the bytes kept of each stream as
	// the guest wrote them (before a truncation marker or a repair of
	// invalid UTF-8).
	StdoutBytes, StderrBytes int
	// Trapped reports that wasm stopped by a trap (or a host abort): Ruby
	// did not unwind, so rescue and ensure clauses did not run and the
	// VM's state may be inconsistent. Such a VM is never kept.
	Trapped bool
}

// handles are a VM's store and what it looked up in its instance: all a
// rewind keeps of the VM's Go-side state (rewind.go), so a handle added
// here survives it and anything added to VM itself is reset.
type handles struct {
	store   *wt.Store
	inst    *wt.Instance
	mem     wt.Memory
	realloc wt.Func
	evalFn  wt.Func
	rstring wt.Func
	postStr wt.Func
	fuel    wt.Global // the fuel left, on an engine with meter (meter.go)
}

// VM is one instance of the guest. It runs one eval (a session's: many)
// and is then freed, or rewound for the next eval (rewind.go).
type VM struct {
	e *Engine
	handles
	prepared bool
	mounts   []Mount
	scratch  string // the host directory behind ScratchGuest
	scr      *scratchDirs
	fs       *fsGuard // the guest's file descriptors in scratch and mounts
	// abandoned is set when Eval gave up waiting for the VM: it must be
	// freed, never kept for a session.
	abandoned atomic.Bool
	// inTool is set while the VM is inside a tool call, the only place a
	// VM can be held past its deadline.
	inTool atomic.Bool
	// settled is claimed, once per eval, by whichever comes first: the
	// goroutine running a tool-using eval when the VM returns (it then
	// keeps or frees the VM before Eval returns), or Eval giving up on it
	// (the goroutine then frees it when the VM finally returns).
	settled atomic.Bool
	// held is set while a tool call holds the eval's clock (Call.Hold);
	// extended is the total time, in ns, this eval's calls were held.
	held     atomic.Bool
	extended atomic.Int64

	// Per-eval state, touched only by the goroutine running the eval (the
	// store's callbacks run on it too).
	ctx      context.Context
	req      *Request
	limits   Limits
	deadline time.Time
	started  time.Time
	stopped  Status // why the host stopped the guest, if it did
	stopMsg  string
	// stopAt is when it did: the eval's running time ends there.
	stopAt   time.Time
	flushing bool // flushAfterTrap runs: the guest may not message the host
	stdout   capBuffer
	stderr   capBuffer
	jsvals   map[uint32][]byte
	nextJS   uint32
	// cur is the tool call in progress (reused: a VM makes one call at a
	// time); hold is v.holdClock, made once.
	cur  Call
	hold func() (resume func() time.Time)

	// The virtual monotonic clock (see monotonic): its value at born.
	monoBase uint64
	born     time.Time

	// Reuse (rewind.go): where the VM goes when its eval ends cleanly
	// (nil: freed), the tools it was prepared with, its checkpoint (nil:
	// none), the trampoline's exports kept across guards, whether its
	// last eval ended cleanly.
	home     *idleVMs
	toolsKey string
	ck       *checkpoint
	orig     [numShadowed]wt.Func
	cleanEnd bool
	dirty    bool   // in an idleVMs, not yet rewound
	group    uint64 // its linear memory's group (see Pool.SetMemoryGroup)
}

var _ wt.StoreHooks = (*VM)(nil)

// stop records why the guest must end and returns the error that makes a
// host function trap.
func (v *VM) stop(s Status, msg string) error {
	if v.stopped == "" {
		v.stopped, v.stopMsg, v.stopAt = s, msg, time.Now()
	}
	v.store.Stopping() // the stop's status and message are v's
	return abortError
}

func (v *VM) timeoutMessage() string {
	return fmt.Sprintf("the eval ran past its %v wall-clock limit", v.limits.Timeout)
}

// Epoch implements wt.StoreHooks: it runs on the guest's thread once per
// epoch tick while wasm executes.
func (v *VM) Epoch() (uint64, error) {
	if v.ctx != nil && v.ctx.Err() != nil {
		return 0, v.stop(StatusCanceled, "the caller's context ended: "+context.Cause(v.ctx).Error())
	}
	if !v.deadline.IsZero() && !time.Now().Before(v.deadline) {
		return 0, v.stop(StatusTimeout, v.timeoutMessage())
	}
	return 1, nil
}

// Write implements wt.StoreHooks: guest output, kept up to the limit.
func (v *VM) Write(fd int, p []byte) int {
	switch fd {
	case 1:
		v.stdout.write(p)
	case 2:
		v.stderr.write(p)
	}
	return len(p)
}

// capBuffer keeps the first limit bytes written to it. Its lock matters
// only when an abandoned VM still writes while Eval reports.
type capBuffer struct {
	mu        sync.Mutex
	buf       []byte
	limit     int
	truncated bool
	tee       io.Writer // also receives the kept bytes until finish; may be nil
}

func (b *capBuffer) write(p []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	room := b.limit - len(b.buf)
	if len(p) > room {
		b.truncated = true
		p = p[:max(room, 0)]
	}
	b.buf = append(b.buf, p...)
	if b.tee != nil && len(p) > 0 {
		b.tee.Write(p) // the caller's writer; its errors are its own
	}
}

func (b *capBuffer) reset(limit int, tee io.Writer) {
	b.mu.Lock()
	b.buf, b.limit, b.truncated, b.tee = nil, limit, false, tee
	b.mu.Unlock()
}

// finish returns a copy of the kept bytes; when output was cut, the cut is moved
// back to a UTF-8 character boundary and a marker is appended.
func (b *capBuffer) finish(stream string) ([]byte, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tee = nil
	if !b.truncated {
		return validUTF8(append([]byte(nil), b.buf...)), false
	}
	out := append([]byte(nil), b.buf...)
	// Drop a partial multibyte character at the cut.
	for i := 1; i <= 3 && i <= len(out); i++ {
		c := out[len(out)-i]
		if c < utf8.RuneSelf {
			break
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(out[len(out)-i:]) {
				out = out[:len(out)-i]
			}
			break
		}
	}
	out = validUTF8(out)
	out = append(out, fmt.Sprintf("\n[glovebox: %s truncated at %d bytes]\n", stream, b.limit)...)
	return out, true
}

// validUTF8 replaces each invalid byte sequence in b with U+FFFD.
func validUTF8(b []byte) []byte {
	if utf8.Valid(b) {
		return b
	}
	return []byte(strings.ToValidUTF8(string(b), "\uFFFD"))
}

// newVM instantiates the snapshot. The VM is not yet prepared. Its
// linear memory is reset from an earlier VM's only if that VM was of the
// same memory group, else mapped anew (wt.InstancePre.InstantiateImage).
func (e *Engine) newVM(snap *snapshot, mounts []Mount, scr *scratchDirs, group uint64) (*VM, error) {
	v := &VM{e: e, jsvals: map[uint32][]byte{}, monoBase: snap.mono, born: time.Now(), mounts: mounts, scr: scr, group: group}
	if err := v.setup(mounts); err != nil {
		return nil, err
	}
	inst, err := e.pre.InstantiateImage(v.store, snap.img, group)
	if err != nil {
		v.close()
		return nil, fmt.Errorf("instantiating the snapshot: %w", err)
	}
	c := v.store.Context()
	for _, g := range snap.globals {
		if err := inst.SetGlobalBits(c, g.name, g.bits); err != nil {
			v.close()
			return nil, err
		}
	}
	if err := v.bind(inst); err != nil {
		v.close()
		return nil, err
	}
	return v, nil
}

// setup makes the VM's store, scratch directory and WASI context: the
// scratch directory at fd 3, then mounts in order.
func (v *VM) setup(mounts []Mount) error {
	v.mounts = mounts
	if v.scr == nil {
		v.scr = v.e.scratch
	}
	scratch, err := v.scr.get()
	if err != nil {
		return err
	}
	v.scratch = scratch
	if v.fs, err = newFSGuard(scratch, mounts); err != nil {
		v.scr.put(scratch)
		v.scratch = ""
		return err
	}
	v.store = wt.NewStore(v.e.wt, v)
	v.store.Limit(maxMemory)
	if err := v.store.SetWASI(v.wasiConfig()); err != nil {
		v.close()
		return err
	}
	return nil
}

// wasiConfig is the VM's WASI context: the scratch directory at fd 3,
// then the mounts in order.
func (v *VM) wasiConfig() wt.WASI {
	w := wt.WASI{Preopens: []wt.Preopen{{Host: v.scratch, Guest: ScratchGuest, Write: true}}}
	for _, m := range v.mounts {
		w.Preopens = append(w.Preopens, wt.Preopen{Host: m.Host, Guest: m.Guest, Write: m.Write})
	}
	return w
}

// maxMemory is the linear-memory cap a VM is created with, before an
// eval's own limit applies: the 4 GiB a wasm32 memory can address.
const maxMemory = 4 << 30

func (v *VM) bind(inst *wt.Instance) error {
	c := v.store.Context()
	v.inst = inst
	var ok [5]bool
	v.mem, ok[0] = inst.Memory(c, exportMemory)
	v.realloc, ok[1] = inst.Func(c, exportRealloc)
	v.evalFn, ok[2] = inst.Func(c, exportEval)
	v.rstring, ok[3] = inst.Func(c, exportRString)
	v.postStr, ok[4] = inst.Func(c, exportPostString)
	for i, o := range ok {
		if !o {
			return fmt.Errorf("the guest image lacks export %d of the expected interface", i)
		}
	}
	if err := v.bindMeter(c); err != nil {
		return err
	}
	return v.bindTrampoline()
}

// prepare runs the per-VM setup (defining the tools) under a fixed
// budget, before any untrusted code, then runs the eval driver once on the
// fixed program "nil". That warm-up takes the first-run costs of a fresh
// instance (cold caches, lazily initialised function tables) off the
// eval's path: with it, glovebox bench measured a pooled eval of 1+1 at
// 0.34 ms p50, without it 0.60 ms. It leaves no state an eval could
// observe beyond what the snapshot holds.
//
// Every VM an eval gets is warmed (warmUp; Engine.prepared): a VM made
// for an eval already waiting would gain nothing from it (the same
// first-run costs move from the eval to just before it, plus a run of the
// driver: see BenchmarkVMPhases), but an eval's fuel would then depend on
// whether its VM was made cold or taken warm from a pool or a rewind.
func (v *VM) prepare(tools []string, warmUp bool) error {
	c := v.store.Context()
	if err := v.setFuel(prepareFuel); err != nil {
		return err
	}
	warm := warmRequest
	warm.Tools = tools
	v.req = &warm
	v.limits = warm.Limits
	v.deadline = time.Now().Add(prepareTimeout)
	c.SetEpochDeadline(1)
	v.e.ticker.start()
	defer v.e.ticker.stop()
	code := "Glovebox.__prepare\nnil"
	if warmUp {
		code = "Glovebox.__prepare\nGlovebox.__run\nnil"
	}
	_, err := v.evalString(c, code)
	v.deadline, v.req = time.Time{}, nil
	// The guest's clock stands still while the VM waits in a pool, so an
	// eval cannot tell how long it waited (nor when others ran).
	v.monoBase, v.born = v.monotonic(time.Now()), time.Time{}
	if err != nil {
		return fmt.Errorf("preparing a VM: %w", err)
	}
	v.prepared = true
	return nil
}

const (
	prepareFuel    = 1 << 40
	prepareTimeout = 10 * time.Second
)

// warmRequest is the fixed program run while preparing a VM and before
// the snapshot is captured.
var warmRequest = Request{Code: "nil", Limits: Limits{
	Timeout: prepareTimeout, Memory: maxMemory, Stdout: 1 << 16, Stderr: 1 << 16, Value: 1 << 20,
}}

func (v *VM) setFuel(f uint64) error {
	if v.e.meter {
		return v.setMeterFuel(f)
	}
	if v.e.cfg.NoFuel {
		return nil
	}
	return v.store.Context().SetFuel(f)
}

// evalString evaluates code with rb-eval-string-protect and returns the
// result's handle; a non-zero state (an exception escaped) is an error.
func (v *VM) evalString(c wt.Context, code string) (uint32, error) {
	p, err := v.putString(c, []byte(code))
	if err != nil {
		return 0, err
	}
	vals := []uint64{uint64(p), uint64(len(code))}
	if err := v.evalFn.Call(c, vals); err != nil {
		return 0, err
	}
	d, ok := v.guest(c, uint32(vals[0]), 8)
	if !ok {
		return 0, errors.New("eval returned an address outside memory")
	}
	h, state := binary.LittleEndian.Uint32(d), int32(binary.LittleEndian.Uint32(d[4:]))
	if state != 0 {
		return 0, fmt.Errorf("an exception escaped the glovebox driver (state %d)", state)
	}
	return h, nil
}

// readString returns the bytes of the guest String behind handle h, at
// most limit of them.
func (v *VM) readString(c wt.Context, h uint32, limit int) ([]byte, error) {
	vals := []uint64{uint64(h)}
	if err := v.rstring.Call(c, vals); err != nil {
		return nil, err
	}
	ret := uint32(vals[0])
	d, ok := v.guest(c, ret, 8)
	if !ok {
		return nil, errors.New("string result outside memory")
	}
	p, n := binary.LittleEndian.Uint32(d), binary.LittleEndian.Uint32(d[4:])
	if int64(n) > int64(limit) {
		return nil, fmt.Errorf("result of %d bytes exceeds %d", n, limit)
	}
	s, ok := v.guest(c, p, n)
	if !ok {
		return nil, errors.New("string result outside memory")
	}
	out := append([]byte(nil), s...)
	v.postStr.Call(c, []uint64{uint64(ret)})
	return out, nil
}

// run executes req on a prepared VM.
func (v *VM) run(ctx context.Context, req *Request) *Outcome {
	c := v.store.Context()
	v.ctx, v.req, v.limits = ctx, req, req.Limits
	v.stdout.reset(req.Limits.Stdout, req.StdoutTee)
	v.stderr.reset(req.Limits.Stderr, req.StderrTee)
	v.fs.reset(req.Limits.FS)
	v.store.SetMemoryLimit(req.Limits.Memory)
	fuel := req.Limits.Fuel
	if fuel == 0 {
		fuel = unlimitedFuel
	}
	out := &Outcome{}
	if err := v.setFuel(fuel); err != nil {
		out.Status, out.Error = StatusSandboxError, &ErrorInfo{Class: "Glovebox::SandboxError", Message: err.Error()}
		return out
	}
	v.started = time.Now()
	v.born = v.started
	v.deadline = v.started.Add(req.Limits.Timeout)
	v.extended.Store(0)
	if j := req.Journal; j != nil && !j.Replayed {
		// A replay runs the paused eval's course again: it may take as
		// long again as the eval had run (see goLive).
		v.deadline = v.deadline.Add(j.Spent)
		v.extended.Store(int64(j.Spent))
	}
	c.SetEpochDeadline(1)
	v.e.ticker.start()
	h, err := v.evalString(c, "Glovebox.__run")
	var raw []byte
	if err == nil {
		// The prelude bounds the value; allow for the envelope around it.
		raw, err = v.readString(c, h, req.Limits.Value+resultOverhead)
	}
	v.e.ticker.stop()
	// A guest the host stopped (a suspended call, a limit) ran until
	// then: unwinding the trap is not its time.
	end := time.Now()
	if v.stopped != "" && v.stopAt.After(v.started) {
		end = v.stopAt
	}
	out.Duration = end.Sub(v.started)
	if j := req.Journal; j != nil && j.Spent > 0 && j.Replayed && !j.LiveAt.IsZero() {
		out.Duration = j.Spent + max(end.Sub(j.LiveAt), 0) // the replay is not the eval's time
	}
	memHit := v.store.GrowRefused()
	v.store.SetMemoryLimit(maxMemory)
	// An engine without fuel has none to read; asking is an error whose
	// message wasmtime builds with a symbolized backtrace (about 50 ms of
	// CPU the first time in a process, measured with perf).
	if v.e.meter {
		out.FuelUsed = v.meterFuelUsed(fuel)
	} else if !v.e.cfg.NoFuel {
		if left, ferr := c.Fuel(); ferr == nil && left <= fuel {
			out.FuelUsed = fuel - left
		}
	}
	if err != nil {
		out.Trapped = true
	}
	addrHit := !memHit && v.stopped == "" && err == nil && v.outOfAddressSpace(raw)
	switch {
	case (memHit || addrHit) && v.stopped == "":
		// Sticky: once the guest was refused memory, the eval ends as
		// memory_limit, even if it rescued NoMemoryError and went on.
		out.Status = StatusMemoryLimit
		limitMsg := fmt.Sprintf("the guest asked for more than its %s memory limit", mib(req.Limits.Memory))
		if addrHit {
			limitMsg = fmt.Sprintf("the guest ran out of the 4 GiB a wasm32 guest can address (its memory limit is %s)", mib(req.Limits.Memory))
		}
		out.Error = &ErrorInfo{Class: stopClass[StatusMemoryLimit], Message: limitMsg}
		if err == nil {
			if v.decodeResult(raw, out); out.Error != nil && out.Error.Class == "NoMemoryError" {
				out.Error.Message += " (" + limitMsg + ")"
			} else {
				out.Error = &ErrorInfo{Class: stopClass[StatusMemoryLimit], Message: limitMsg}
			}
			out.Status, out.Value = StatusMemoryLimit, nil
		}
	case err != nil:
		v.classify(err, out)
	default:
		v.decodeResult(raw, out)
	}
	if out.Trapped {
		v.flushAfterTrap(c)
	}
	out.StdoutBytes, out.StderrBytes = v.stdout.kept(), v.stderr.kept()
	out.Stdout, out.StdoutTruncated = v.stdout.finish("stdout")
	out.Stderr, out.StderrTruncated = v.stderr.finish("stderr")
	v.cleanEnd = kept(out) && v.stopped == ""
	return out
}

// Bounds on the flush after a trap: it only writes out buffers.
const (
	flushFuel    = 20_000_000
	flushTimeout = 250 * time.Millisecond
)

// flushAfterTrap asks the guest, once more and under small fixed bounds,
// to write out the output its IO objects still buffer: a trap stopped
// Ruby before the driver's own flush, and those bytes belong to this
// eval's result. The VM is discarded afterwards (see kept), so whatever
// state the trap left cannot reach a later eval; if the guest is too
// damaged to run the flush, what it wrote unbuffered is still reported.
func (v *VM) flushAfterTrap(c wt.Context) {
	if v.setFuel(flushFuel) != nil {
		return
	}
	// The guest may have replaced __flush: it runs under the eval's memory
	// limit, and tool calls and other messages are refused.
	ctx, stopped, msg := v.ctx, v.stopped, v.stopMsg
	v.ctx, v.deadline, v.flushing = context.Background(), time.Now().Add(flushTimeout), true
	v.store.SetMemoryLimit(v.limits.Memory)
	c.SetEpochDeadline(1)
	v.e.ticker.start()
	v.sjljBeforeFlush(c) // Ruby's stack check would refuse a flush from deep in the stack (sjlj.go)
	v.evalString(c, "Glovebox.__flush")
	v.e.ticker.stop()
	v.store.SetMemoryLimit(maxMemory)
	v.ctx, v.stopped, v.stopMsg, v.flushing = ctx, stopped, msg, false
}

const (
	unlimitedFuel = math.MaxUint64 / 2
	// resultOverhead covers the result envelope and an error's class,
	// message (at most 16 KiB in the prelude) and backtrace.
	resultOverhead = 1 << 20
)

// Caps on a guest error's parts, as the prelude applies them (the class
// and frame caps are the host's own).
const (
	maxClass   = 256
	maxMessage = 16 << 10
	maxFrames  = 50
	maxFrame   = 1024
)

// clip cuts s to at most n bytes, at a character boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// MaxValueDepth is the deepest a value may nest when it crosses to the
// host; the prelude enforces it with a clear message, and the host
// re-checks, since the guest can replace the prelude's code.
const MaxValueDepth = 64

// envelope is the most bytes the result envelope around a value takes:
// {"status":"ok","value":...}.
const envelope = 64

func (v *VM) decodeResult(raw []byte, out *Outcome) {
	// The envelope adds one level around the value.
	val, err := wire.DecodeDepth(raw, MaxValueDepth+2)
	m, _ := val.(map[string]any)
	if err != nil || m == nil {
		msg := "the guest driver returned a malformed result"
		if err != nil {
			msg += ": " + err.Error()
		}
		out.Status, out.Error = StatusSandboxError, &ErrorInfo{Class: "Glovebox::SandboxError", Message: msg}
		return
	}
	switch m["status"] {
	case "ok":
		if len(raw) > v.limits.Value+envelope {
			out.Status, out.Error = StatusError, &ErrorInfo{Class: "Glovebox::ValueError", Message: fmt.Sprintf(
				"the value of the last expression is about %d bytes as data, over the %d-byte limit; return a smaller value or print a summary",
				len(raw)-envelope/2, v.limits.Value)}
			return
		}
		out.Status, out.Value = StatusOK, m["value"]
	case "error":
		// The prelude caps these; the host caps them again, since the
		// guest can replace the prelude's code.
		em, _ := m["error"].(map[string]any)
		info := &ErrorInfo{}
		info.Class, _ = em["class"].(string)
		info.Message, _ = em["message"].(string)
		info.Class = clip(info.Class, maxClass)
		info.Message = clip(info.Message, maxMessage)
		bt, _ := em["backtrace"].([]any)
		for _, f := range bt[:min(len(bt), maxFrames)] {
			if s, ok := f.(string); ok {
				info.Backtrace = append(info.Backtrace, clip(s, maxFrame))
			}
		}
		out.Status, out.Error = StatusError, info
	default:
		out.Status, out.Error = StatusSandboxError, &ErrorInfo{Class: "Glovebox::SandboxError", Message: "the guest driver returned an unknown status"}
	}
}

// outOfAddressSpace reports whether an eval whose result is raw ended in
// a NoMemoryError that the 4 GiB address space, not the host's limit,
// caused. wasmtime refuses a memory.grow past a wasm32 memory's 4 GiB
// maximum before the host's memory creator sees it, so such a refusal
// leaves no record (GrowRefused stays false). One Ruby allocation is less
// than 2 GiB (its sizes are a 32-bit long), so the address space can have
// refused one only once linear memory is at least 2 GiB; below that a
// NoMemoryError is the guest's own doing and stays an error.
func (v *VM) outOfAddressSpace(raw []byte) bool {
	if !strings.HasPrefix(string(raw[:min(len(raw), 64)]), `{"status":"error","error":{"class":"NoMemoryError"`) {
		return false
	}
	return uint64(len(v.mem.Data(v.store.Context()))) >= maxMemory/2
}

// memorySlack is how close to its limit a guest's memory must be for a
// crash to count as running out of memory.
const memorySlack = 64 << 20

// classify maps a failed call into the guest onto a status.
func (v *VM) classify(err error, out *Outcome) {
	if v.stopped != "" {
		out.Status = v.stopped
		out.Error = &ErrorInfo{Class: stopClass[v.stopped], Message: v.stopMsg}
		return
	}
	var we *wt.Error
	if !errors.As(err, &we) {
		out.Status, out.Error = StatusSandboxError, &ErrorInfo{Class: "Glovebox::SandboxError", Message: err.Error()}
		return
	}
	switch {
	case we.Exited:
		out.Status = StatusError
		out.Error = &ErrorInfo{Class: "SystemExit", Message: fmt.Sprintf("the guest exited with status %d", we.ExitStatus)}
	case we.Code == wt.TrapOutOfFuel || v.meterExhausted(we):
		out.Status = StatusFuelExhausted
		out.Error = &ErrorInfo{Class: stopClass[StatusFuelExhausted], Message: fmt.Sprintf("the eval used its %d units of fuel", v.limits.Fuel)}
	case we.Code == wt.TrapStackOverflow:
		out.Status = StatusError
		out.Error = &ErrorInfo{Class: "SystemStackError", Message: "stack level too deep (the wasm stack is exhausted)"}
	case we.Code == wt.TrapInterrupt:
		out.Status = StatusTimeout
		out.Error = &ErrorInfo{Class: stopClass[StatusTimeout], Message: v.timeoutMessage()}
	default:
		size := uint64(len(v.mem.Data(v.store.Context())))
		if size+memorySlack >= min(v.limits.Memory, maxMemory) {
			out.Status = StatusMemoryLimit
			out.Error = &ErrorInfo{Class: stopClass[StatusMemoryLimit], Message: fmt.Sprintf("the guest crashed with its memory at %s of %s: %s", mib(size), mib(v.limits.Memory), trapReason(we))}
			return
		}
		out.Status = StatusSandboxError
		out.Error = &ErrorInfo{Class: "Glovebox::SandboxError", Message: "the Ruby VM crashed: " + trapReason(we)}
	}
}

// trapReason says why wasm stopped, without wasmtime's backtrace.
func trapReason(we *wt.Error) string {
	switch we.Code {
	case wt.TrapUnreachable:
		return "it reached an unreachable instruction (Ruby aborted; so does a Fiber switch, such as Enumerator#next, with more than " +
			"about 90 levels of C recursion, like nested inspect, below it: ruby.wasm saves a fiber's stack into a 24 KiB buffer)"
	case wt.TrapMemoryOutOfBounds:
		return "out-of-bounds memory access"
	}
	// wasmtime puts the cause after "Caused by:"; otherwise use the last line.
	msg := trapText(we.Message)
	if i := strings.LastIndex(msg, "Caused by:"); i >= 0 {
		msg = msg[i+len("Caused by:"):]
	}
	lines := strings.Split(strings.TrimSpace(msg), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" {
			return l
		}
	}
	return "unknown trap"
}

// stopClass names, for each status the host imposes, the class reported
// in Outcome.Error.
var stopClass = map[Status]string{
	StatusTimeout:            "Glovebox::Timeout",
	StatusCanceled:           "Glovebox::Canceled",
	StatusFuelExhausted:      "Glovebox::FuelExhausted",
	StatusMemoryLimit:        "Glovebox::MemoryLimit",
	StatusToolBudgetExceeded: "Glovebox::ToolBudgetExceeded",
	StatusSandboxError:       "Glovebox::SandboxError",
	StatusSuspended:          "Glovebox::Suspended",
}

func mib(n uint64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// abandon reports an eval whose VM did not stop: a host call (a tool that
// ignores its context) holds it. The VM finishes on its own goroutine.
func (v *VM) abandon(s Status, msg string, start time.Time) *Outcome {
	v.abandoned.Store(true)
	why := "; a tool call had not returned (it ignores its context), so the VM was abandoned"
	if !v.inTool.Load() {
		why = "; the VM did not stop in time (the host is overloaded), so it was abandoned"
	}
	out := &Outcome{Status: s, Trapped: true, Duration: time.Since(start), Error: &ErrorInfo{Class: stopClass[s], Message: msg + why}}
	out.Stdout, out.StdoutTruncated = v.stdout.finish("stdout")
	out.Stderr, out.StderrTruncated = v.stderr.finish("stderr")
	return out
}

func (v *VM) close() {
	if v.store != nil {
		v.store.Close()
		v.store = nil
	}
	if v.fs != nil {
		v.fs.close()
		v.fs = nil
	}
	if v.scratch != "" {
		v.scr.put(v.scratch)
		v.scratch = ""
	}
}
