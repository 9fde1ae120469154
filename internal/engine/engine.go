// Package engine runs the Ruby guest under wasmtime: it compiles and caches
// the image, builds the boot snapshot every VM starts from, keeps a pool of
// prepared VMs and runs evals in them.
package engine

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gloveboxhq/glovebox/internal/wasmbin"
	"github.com/gloveboxhq/glovebox/internal/wt"
)

//go:embed prelude.rb
var prelude string

// Version identifies the glovebox guest interface (prelude protocol, boot
// procedure, snapshot layout). It keys the snapshot in the cache.
const Version = "glovebox-abi-3"

// moduleVersion identifies how the compiled module is derived from the
// image (wasmbin.Split). It keys the compiled module in the cache, so a
// change to the guest interface alone does not cost a recompile.
const moduleVersion = "split-1"

// WasmtimeVersion is the wasmtime release linked in (wasmtime-go v39.0.1).
const WasmtimeVersion = "39.0.1"

// engineSettings describes the compilation settings baked into compiled
// code; a change must change the cache key.
const engineSettings = "cranelift;fuel;epoch;host-memory;stack=default"

// Config configures Open.
type Config struct {
	ImagePath string // the guest image, ruby+stdlib.wasm
	CacheDir  string // root of the on-disk cache
	Logger    *slog.Logger
	// Progress, if set, is told about slow steps (compiling, booting) as
	// they start; done is called when each ends.
	Progress func(step string) (done func())
	// NoFuel compiles the guest without fuel metering, for measuring what
	// metering costs. Fuel limits are then ignored and FuelUsed is 0.
	NoFuel bool
	// WasmtimeFuel meters with wasmtime's own fuel (consume_fuel) instead
	// of glovebox's rewrite of the guest (meter.go), for measuring one
	// against the other. Ignored with NoFuel.
	WasmtimeFuel bool
	// Shipped names compiled modules shipped with the binary (shipped.go);
	// nil means the release build's own: the running executable's
	// directory and the hashes the build stamped into it (none in a
	// build from source, which so never uses shipped modules).
	Shipped *Shipped
}

// Engine owns the compiled guest and its snapshot. It is safe for
// concurrent use.
type Engine struct {
	cfg      Config
	wt       *wt.Engine
	module   *wt.Module
	linker   *wt.Linker
	pre      *wt.InstancePre
	wasm     *wasmbin.Module // the original image, parsed; its bytes are mapped
	src      *wasmbin.Module // the unpatched image when wasm is sjljImage's header; see compileSource
	meter    bool            // the guest is metered by glovebox's rewrite (meter.go)
	unmeter  *wasmbin.Module // with meter, the module before the rewrite's header was added
	unmap    func()
	wasi     *wt.Linker // WASI alone: the originals of the shadowed calls
	tramp    *wt.Module // see trampolineModule
	scratch  *scratchDirs
	boot     *wt.Image // initial memory, for booting from scratch; see bootImage
	bootPath string
	bootOnce sync.Once
	bootErr  error
	key      string    // the compiled module's cache key (cacheKey's hex)
	cacheDir string    // this image's cache directory
	base     *snapshot // the snapshot for VMs without mounts
	snapMu   sync.Mutex
	snaps    map[string]*snapshot // by layoutKey
	ticker   *ticker
	log      *slog.Logger

	// Whole-VM reuse (rewind.go): rewound VMs for Eval, and counts of
	// VMs rewound and taken again.
	idle            *idleVMs
	rewinds, reuses atomic.Uint64
	stateOnce       sync.Once // stateWriter's scan
	stateOp         string

	// mu is held for reading by every running eval and for writing by
	// Close, which so waits for them before freeing the engine.
	mu        sync.RWMutex
	poolsMu   sync.Mutex
	pools     map[*Pool]bool
	sessions  map[*Session]bool
	running   sync.WaitGroup // VM goroutines, abandoned ones included
	closing   chan struct{}
	closed    atomic.Bool
	closeOnce sync.Once
}

// snapshot is booted memory and globals for one mount layout: wasi-libc
// records the preopened directories' guest paths while Ruby boots, so a
// VM must be restored from a snapshot booted with its guest paths.
type snapshot struct {
	img     *wt.Image
	globals []globalValue
	mono    uint64 // the guest's monotonic clock when it was taken
	dir     string // where it is cached
	guests  []string
	// rewindable is set when the guest's code writes no table and drops
	// no segment, so that a VM can be rewound for reuse (rewind.go).
	rewindable bool
}

// layoutKey names a mount layout: the guest paths in order (access and
// host paths do not matter to the snapshot).
func layoutKey(mounts []Mount) string {
	var b strings.Builder
	for _, m := range mounts {
		b.WriteString(m.Guest)
		b.WriteByte(0)
	}
	return b.String()
}

type globalValue struct {
	name string
	bits uint64
}

// ErrClosed is returned by calls on a closed Engine.
var ErrClosed = errors.New("glovebox: runtime is closed")

// Open loads (or builds and caches) the compiled module and the boot
// snapshot for cfg.ImagePath. The compiled module comes from the cache,
// else from the modules shipped beside the binary (cfg.Shipped), else it
// is compiled (minutes on 2 cores) and cached.
func Open(ctx context.Context, cfg Config) (*Engine, error) {
	e, err := newEngine(cfg)
	if err != nil {
		return nil, err
	}
	e.ticker = newTicker(e.wt, epochTick)
	if err := e.load(ctx, filepath.Join(e.cfg.CacheDir, e.key[:24])); err != nil {
		// A boot during load started the ticker: stop it before the
		// wasmtime engine it ticks is freed.
		e.ticker.close()
		e.release()
		return nil, err
	}
	return e, nil
}

// newEngine maps and prepares cfg's image, computes the cache key of
// its compiled module and makes the wasmtime engine: everything Open
// does before it loads or compiles.
func newEngine(cfg Config) (*Engine, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Progress == nil {
		cfg.Progress = func(string) func() { return func() {} }
	}
	// The cache root and its engine directory, before anything is read
	// from them or written (the per-image directory: load).
	for _, d := range []string{filepath.Dir(cfg.CacheDir), cfg.CacheDir} {
		if err := checkCacheDir(d); err != nil {
			return nil, err
		}
	}
	raw, unmap, err := mapFile(cfg.ImagePath)
	if err != nil {
		return nil, fmt.Errorf("glovebox: reading the guest image: %w", err)
	}
	parsed, err := wasmbin.Parse(raw)
	if err != nil {
		unmap()
		return nil, fmt.Errorf("glovebox: %s is not a usable guest image: %w", cfg.ImagePath, err)
	}
	sum, err := imageHash(cfg.CacheDir, cfg.ImagePath, raw)
	if err != nil {
		unmap()
		return nil, err
	}
	settings := engineSettings
	if cfg.NoFuel || !cfg.WasmtimeFuel {
		settings += ";nofuel"
	}
	wasm, sjljKey, err := sjljImage(parsed, sum)
	if err != nil {
		unmap()
		return nil, err
	}
	meter := !cfg.NoFuel && !cfg.WasmtimeFuel
	preMeter := wasm
	if meter {
		if wasm, err = meterImage(wasm); err != nil {
			unmap()
			return nil, err
		}
		sjljKey += "+" + meterVersion
	}
	// The target is part of the key: code for one architecture (or one
	// set of CPU features) is no use on another, so a cache shared by an
	// x86-64 and an arm64 machine keeps a module for each.
	target := codegenTarget()
	key := cacheKey(sum, WasmtimeVersion, settings, moduleVersion+sjljKey, target.key())
	e := &Engine{
		key:      key,
		cfg:      cfg,
		wasm:     wasm,
		unmap:    unmap,
		log:      cfg.Logger,
		closing:  make(chan struct{}),
		pools:    map[*Pool]bool{},
		sessions: map[*Session]bool{},
		snaps:    map[string]*snapshot{},
		scratch:  newScratchDirs(""),
		idle:     &idleVMs{},
	}
	if preMeter != parsed {
		e.src = parsed
	}
	if meter {
		e.meter, e.unmeter = true, preMeter
	}
	e.wt, err = wt.NewEngine(wt.EngineConfig{HostMemory: true, NoFuel: cfg.NoFuel || meter,
		MaxWasmStack: wasmStackFor(wt.DefaultThreadStack()), Target: target.triple})
	if err != nil {
		e.scratch.close()
		unmap()
		return nil, fmt.Errorf("glovebox: %w", err)
	}
	return e, nil
}

// epochTick is the epoch period: the granularity of wall-clock limits and
// cancellation. 10 ms keeps the cost of the tick callback negligible.
const epochTick = 10 * time.Millisecond

func cacheKey(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:%s;", len(p), p)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// recycle frees a used VM. Freeing is cheap (its linear memory is kept
// for reuse and reset when next taken), so it happens right away, on the
// eval's thread: handing VMs to a closer goroutine cost more in thread
// wake-ups than it saved (3,100 against 4,200 evals/s on one worker,
// 4,200 against 6,100 on two, measured with a 2,000-eval loop; measured
// again with the memory reset moved into freeing, on the shared 2-core
// machine: 471 against 314 µs p50 back-to-back).
//
// A VM whose eval ended cleanly is rewound and kept for the next eval
// with the same tools instead (see rewind.go).
func (e *Engine) recycle(v *VM) {
	if h := v.home; h != nil && v.rewindable() {
		if h.lazy {
			v.dirty = true // rewound by the pool's filler or its next taker
			if h.put(v) {
				return
			}
		} else if v.rewind() == nil && h.put(v) {
			return
		}
	}
	v.close()
}

// Eval runs req in a fresh VM.
//
// A VM stops by itself at the deadline or when ctx ends: epoch
// interruption and every blocking host call watch both. Only a tool that
// ignores its context can hold it, inside the host call; so when req has
// tools, the VM runs on its own goroutine, and if it has not stopped
// abandonGrace after the deadline (or ctx's end), Eval returns the status
// the VM would have had and the VM is discarded whenever the tool
// returns. Without tools the VM runs on the caller's goroutine, which
// saves a goroutine hand-off (measured: about 0.6 ms of a 1 ms pooled
// eval when the process was otherwise idle).
func (e *Engine) Eval(ctx context.Context, req *Request) (*Outcome, error) {
	return e.eval(ctx, req, func() (*VM, error) { return e.prepared(e.base, nil, req.Tools, nil, e.idle) }, nil)
}

// prepared returns a VM from snap with mounts, prepared with tools: a
// rewound one from home if it holds one (see rewind.go), else a new one,
// with the warm-up run (see prepare). Its scratch directory comes from
// scr (nil: the engine's). A VM made
// with a home goes back to it after a clean eval; home must be used with
// one snap, mounts and scr only.
func (e *Engine) prepared(snap *snapshot, mounts []Mount, tools []string, scr *scratchDirs, home *idleVMs) (*VM, error) {
	if v, err := e.reused(home, tools, false); v != nil || err != nil {
		return v, err
	}
	return e.made(snap, mounts, tools, scr, home)
}

// reused returns a VM from home prepared with tools, rewound if it was
// not yet and renewed, or nil if home holds none; lend is take's (the
// filler's: the VM it returns, and only that one, is out until it calls
// home.gave). A MountError from renewing is returned.
func (e *Engine) reused(home *idleVMs, tools []string, lend bool) (*VM, error) {
	key := toolsKey(tools)
	for {
		v := home.take(key, lend)
		if v == nil {
			return nil, nil
		}
		err := errNotRewindable
		if !v.dirty || v.rewind() == nil {
			err = v.renew()
		}
		if err != nil {
			v.close()
			if lend {
				home.gave(nil)
			}
			var me *MountError
			if errors.As(err, &me) {
				return nil, err
			}
			continue
		}
		e.reuses.Add(1)
		return v, nil
	}
}

// made returns a new VM from snap with mounts, prepared with tools (see
// prepared).
func (e *Engine) made(snap *snapshot, mounts []Mount, tools []string, scr *scratchDirs, home *idleVMs) (*VM, error) {
	key := toolsKey(tools)
	v, err := e.newVM(snap, mounts, scr, home.memGroup())
	if err != nil {
		return nil, err
	}
	// Always warm: a VM that will be rewound is checkpointed warm, so
	// every eval it runs after a rewind starts with the driver's caches
	// filled, and every VM runs an eval in the same state, so the eval's
	// fuel does not depend on whether its VM was made, pooled or rewound.
	if err := v.prepare(tools, true); err != nil {
		v.close()
		return nil, err
	}
	if home.open() {
		v.home, v.toolsKey = home, key
		v.takeCheckpoint(snap)
	}
	return v, nil
}

// keep, if set, decides after an eval whether its VM lives on (a
// session's) instead of being freed.
func (e *Engine) eval(ctx context.Context, req *Request, get func() (*VM, error), keep func(*VM, *Outcome) bool) (*Outcome, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.closed.Load() {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return &Outcome{Status: StatusCanceled, Error: &ErrorInfo{Class: stopClass[StatusCanceled], Message: "the caller's context ended before the eval started: " + context.Cause(ctx).Error()}}, nil
	}
	v, err := get()
	if err != nil {
		var me *MountError
		if errors.As(err, &me) {
			return &Outcome{Status: StatusSandboxError, Error: &ErrorInfo{Class: stopClass[StatusSandboxError], Message: me.Msg}}, nil
		}
		return nil, fmt.Errorf("glovebox: %w", err)
	}
	finish := func(out *Outcome) {
		if keep == nil || v.abandoned.Load() || !keep(v, out) {
			e.recycle(v)
		}
	}
	if req.Call == nil {
		out := v.run(ctx, req)
		finish(out)
		return out, nil
	}
	start := time.Now()
	done := make(chan *Outcome, 1)
	v.settled.Store(false)
	e.running.Add(1)
	go func() {
		defer e.running.Done()
		out := v.run(ctx, req)
		if !v.settled.CompareAndSwap(false, true) {
			v.close() // Eval gave up on it and has returned: never rewound
			return
		}
		if testHookSettled != nil {
			testHookSettled()
		}
		done <- out
	}()
	// received keeps or frees the VM once its outcome has arrived, on
	// Eval's goroutine: before Eval returns (a session's next eval must
	// not start while this one's scratch directory is wiped), and only
	// after Eval has stopped looking at the VM (a VM rewound by its own
	// goroutine could be taken by another eval while Eval, its deadline
	// passed, still watched it, and gave that eval's VM up as its own).
	received := func(out *Outcome) *Outcome {
		finish(out)
		return out
	}
	giveUp := func(s Status, msg string) *Outcome {
		if v.settled.CompareAndSwap(false, true) {
			return v.abandon(s, msg, start)
		}
		return received(<-done) // the VM returned just now
	}
	timer := time.NewTimer(req.Limits.Timeout + abandonGrace)
	defer timer.Stop()
	// wait waits for the VM after its deadline or its context's end. It
	// gives up on a VM held inside a tool call; a VM running guest code
	// stops by itself within an epoch tick, so only a starved machine
	// makes it late, and then it is waited for (up to stuckLimit).
	wait := func(s Status, msg string) *Outcome {
		tick := time.NewTicker(abandonGrace)
		defer tick.Stop()
		for waited := time.Duration(0); ; waited += abandonGrace {
			select {
			case out := <-done:
				return received(out)
			case <-tick.C:
				if v.inTool.Load() || waited >= stuckLimit {
					return giveUp(s, msg)
				}
			}
		}
	}
	for {
		select {
		case out := <-done:
			return received(out), nil
		case <-ctx.Done():
			return wait(StatusCanceled, "the caller's context ended: "+context.Cause(ctx).Error()), nil
		case <-timer.C:
		}
		if left := v.untilDue(start, req.Limits.Timeout+abandonGrace); left > 0 {
			timer.Reset(left) // a tool call held the clock (see hold.go)
			continue
		}
		select {
		case out := <-done:
			return received(out), nil
		default:
		}
		if !v.inTool.Load() {
			return wait(StatusTimeout, fmt.Sprintf("the eval ran past its %v wall-clock limit", req.Limits.Timeout)), nil
		}
		return giveUp(StatusTimeout, fmt.Sprintf("the eval ran past its %v wall-clock limit", req.Limits.Timeout)), nil
	}
}

// testHookSettled, if set, runs on a tool-using eval's VM goroutine once
// the VM has returned and settled, just before it reports to Eval (see
// TestAttackRewoundVMStillWatchedByItsLastEval).
var testHookSettled func()

// stuckLimit is how long past its deadline Eval waits for a VM that is
// not in a tool call before abandoning it anyway.
const stuckLimit = 5 * time.Second

// abandonGrace is how long past its deadline (or its context's end) Eval
// waits for a VM before giving up on it. A VM stops within an epoch tick
// (10 ms) unless a host call holds it.
const abandonGrace = 100 * time.Millisecond

// EvalBooted runs req in a VM booted from scratch instead of restored from
// the snapshot: the baseline the snapshot is measured and checked against.
// It is slow (Ruby's boot dominates) and meant for tests and benchmarks.
func (e *Engine) EvalBooted(ctx context.Context, req *Request) (*Outcome, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.closed.Load() {
		return nil, ErrClosed
	}
	v, err := e.bootVM(nil)
	if err != nil {
		return nil, err
	}
	defer v.close()
	if err := v.prepare(req.Tools, true); err != nil {
		return nil, err
	}
	return v.run(ctx, req), nil
}

// HoldIdle makes n VMs as a pool holds them between evals — prepared,
// checkpointed, then rewound after one eval of 1+1 — and keeps them until
// release is called: for measuring what an idle VM costs.
func (e *Engine) HoldIdle(n int) (release func(), err error) {
	var vms []*VM
	release = func() {
		for _, v := range vms {
			v.close()
		}
	}
	home := &idleVMs{} // gives the VMs checkpoints; they never go back to it
	defer home.close()
	req := &Request{Code: "1+1", Limits: warmRequest.Limits}
	for range n {
		v, err := e.prepared(e.base, nil, nil, nil, home)
		if err == nil {
			vms = append(vms, v)
			if out := v.run(context.Background(), req); out.Status != StatusOK {
				err = fmt.Errorf("glovebox: 1+1 in an idle VM ended %s", out.Status)
			} else {
				err = v.rewind()
			}
		}
		if err != nil {
			release()
			return nil, err
		}
	}
	return release, nil
}

// MemoryFloor is the size in bytes of the booted guest's linear memory:
// the least memory limit under which a VM can start.
func (e *Engine) MemoryFloor() uint64 { return uint64(e.base.img.Len()) }

// MemoryStats reports how the snapshots' linear memories were obtained:
// mapped afresh, reused after a reset, or unmapped instead of kept.
func (e *Engine) MemoryStats() wt.ImageStats {
	e.snapMu.Lock()
	defer e.snapMu.Unlock()
	var t wt.ImageStats
	for _, s := range e.snaps {
		st := s.img.Stats()
		t.Made += st.Made
		t.Reused += st.Reused
		t.Dropped += st.Dropped
		t.Restored += st.Restored
		t.Rewound += st.Rewound
		t.Tracked += st.Tracked
		t.Live += st.Live
	}
	return t
}

// Close closes the engine's pools, waits for running evals and frees
// everything. Calls after Close return ErrClosed.
func (e *Engine) Close() {
	e.closeOnce.Do(func() {
		e.closed.Store(true)
		close(e.closing)
		e.poolsMu.Lock()
		pools := make([]*Pool, 0, len(e.pools))
		for p := range e.pools {
			pools = append(pools, p)
		}
		var sessions []*Session
		for s := range e.sessions {
			sessions = append(sessions, s)
		}
		e.poolsMu.Unlock()
		for _, s := range sessions {
			s.Close()
		}
		for _, p := range pools {
			p.Close()
		}
		e.idle.close()
		e.mu.Lock()
		// VMs abandoned inside a tool that ignores its context are still
		// running: wait for them.
		e.running.Wait()
		e.ticker.close()
		e.release()
		e.mu.Unlock()
	})
}

func (e *Engine) release() {
	for _, c := range []interface{ Close() }{e.pre, e.linker, e.wasi, e.tramp, e.module, e.boot} {
		if c != nil {
			c.Close()
		}
	}
	for _, s := range e.snaps {
		s.img.Close()
	}
	e.scratch.close()
	e.wt.Close()
	e.unmap()
}

// imageHash returns the SHA-256 of the image at path (mapped as raw). The
// hash is remembered in the cache keyed by the file's path, size and
// modification time, so a warm start does not hash 32 MB again.
func imageHash(cacheDir, path string, raw []byte) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	abs, _ := filepath.Abs(path)
	stamp := filepath.Join(cacheDir, "hashes", cacheKey(abs)[:24])
	id := fmt.Sprintf("%d %d ", st.Size(), st.ModTime().UnixNano())
	if b, err := os.ReadFile(stamp); err == nil && strings.HasPrefix(string(b), id) && len(b) == len(id)+64 {
		return string(b[len(id):]), nil
	}
	sum := sha256.Sum256(raw)
	h := hex.EncodeToString(sum[:])
	if err := os.MkdirAll(filepath.Dir(stamp), 0o755); err == nil {
		writeAtomic(stamp, []byte(id+h)) // best effort: without it the next start hashes again
	}
	return h, nil
}

// ticker advances the engine epoch every period while evals run. It keeps
// ticking for a second after the last one ends, so back-to-back evals do
// not pay a goroutine wake-up each, and sleeps when the runtime is idle.
type ticker struct {
	eng      *wt.Engine
	period   time.Duration
	active   atomic.Int64
	sleeping atomic.Bool
	wake     chan struct{}
	done     chan struct{}
	exited   chan struct{} // closed when loop returns
}

// idleAfter is how long the ticker runs on with no eval before sleeping.
const idleAfter = time.Second

func newTicker(eng *wt.Engine, period time.Duration) *ticker {
	t := &ticker{eng: eng, period: period, wake: make(chan struct{}, 1), done: make(chan struct{}), exited: make(chan struct{})}
	t.sleeping.Store(true)
	go func() {
		defer close(t.exited)
		t.loop()
	}()
	return t
}

func (t *ticker) start() {
	t.active.Add(1)
	if t.sleeping.Load() && t.sleeping.CompareAndSwap(true, false) {
		select {
		case t.wake <- struct{}{}:
		default:
		}
	}
}

func (t *ticker) stop() { t.active.Add(-1) }

func (t *ticker) loop() {
	tk := time.NewTicker(t.period)
	defer tk.Stop()
	lastBusy := time.Now()
	for {
		if t.sleeping.Load() {
			select {
			case <-t.wake:
			case <-t.done:
				return
			}
			tk.Reset(t.period)
			lastBusy = time.Now()
		}
		select {
		case now := <-tk.C:
			t.eng.IncrementEpoch()
			if t.active.Load() > 0 {
				lastBusy = now
			} else if now.Sub(lastBusy) > idleAfter {
				t.sleeping.Store(true)
				// An eval that started after the check above must not be
				// left without ticks.
				if t.active.Load() > 0 && t.sleeping.CompareAndSwap(true, false) {
					lastBusy = now
				}
			}
		case <-t.done:
			return
		}
	}
}

// close stops the ticker and waits for it, so the engine can be freed.
func (t *ticker) close() {
	select {
	case <-t.done:
	default:
		close(t.done)
	}
	<-t.exited
}
