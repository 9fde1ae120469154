package glovebox

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gloveboxhq/glovebox/internal/engine"
	"github.com/gloveboxhq/glovebox/internal/image"
	"github.com/gloveboxhq/glovebox/internal/wt"
)

// EnvCacheDir names the environment variable that overrides the cache
// directory (compiled module, boot snapshot, guest image).
const EnvCacheDir = "GLOVEBOX_CACHE_DIR"

// Config configures [New]. The zero value is valid: default limits, no
// tools, the pinned guest image, the user cache directory.
type Config struct {
	// Limits apply to every eval; zero fields take their defaults.
	Limits Limits
	// Tools are the host functions the guest may call; nil means none.
	// New copies the set.
	Tools *Toolset
	// Hooks observe and control tool calls.
	Hooks Hooks
	// Mounts are the host directories the guest may use, at most
	// MaxMounts; see Mount. New copies the list.
	Mounts []Mount
	// ScratchDir is the host directory under which each VM's scratch
	// directory (ScratchPath in the guest) is made. Zero means /dev/shm
	// when it is writable (tmpfs: directory operations take microseconds;
	// on the development machine's ext4 disk, creating and removing one
	// took a millisecond), else the host's temporary directory. Files the
	// guest writes there use that file system's space (memory, for
	// tmpfs), at most Limits.FileWrite bytes in use per eval. The directories go
	// in ScratchDir/glovebox-<uid>, made with mode 0700; when that exists
	// as a symbolic link, a non-directory, another user's directory or one
	// open to other users, New fails (or, with PoolSize -1, Eval does)
	// with an error naming it.
	ScratchDir string
	// CacheDir holds the guest image, the compiled module and the boot
	// snapshot. Zero means $GLOVEBOX_CACHE_DIR, else the user cache
	// directory's glovebox folder (~/.cache/glovebox on Linux).
	CacheDir string
	// ImagePath is a ruby.wasm image to use instead of the pinned one.
	// Zero means $GLOVEBOX_IMAGE; else a ruby+stdlib.wasm in the running
	// executable's directory (as a platform gem and a release archive ship
	// it), which must be the pinned image (its SHA-256 is checked once per
	// file version; a mismatch fails New naming the file); else the pinned
	// image, fetched once with npm into CacheDir.
	ImagePath string
	// PoolSize is how many prepared VMs (tools defined, warmed) the
	// Runtime keeps ready, so an eval does not wait for one to be made. Zero means GOMAXPROCS; negative means no pool. Runtimes in
	// one process that share an image and a cache directory share one
	// engine (compiled module and snapshot); each has its own pool.
	PoolSize int
	// DisableVMReuse makes every eval run in a VM made from the snapshot
	// and freed afterwards, in linear memory mapped anew. By default a VM
	// whose eval ended cleanly (ok, or an exception Ruby unwound) is
	// rewound — its linear memory copied back to the state it had before
	// the eval (Ruby's random generator unseeded again, to be seeded from
	// fresh entropy on first use), its globals reset, its files and WASI
	// context made anew — and the next eval runs in it: the eval sees
	// exactly what a new VM would show it, about 100 µs sooner (docs/performance.md). And a VM that is freed leaves its linear memory to be
	// reset (its bytes copied back) for the next VM made, by any Runtime
	// of the process (see ReuseGroup).
	//
	// Bytes are all a rewind or a reset restores. The pages an earlier
	// eval wrote stay resident, so an eval timing its first writes to
	// fresh heap can tell whether its VM or memory ran an eval before and
	// roughly how much memory that eval wrote (measured: a 28 MiB fill
	// took 11 ms in a rewound VM against 33–43 ms in a new one); caches
	// and wasmtime's lazily filled function tables differ likewise. Set
	// DisableVMReuse when no eval may learn even that of another: each
	// VM's memory is then mapped anew, so its pages fault as in a VM
	// never used, and the memory is mapped anew again for whichever VM
	// takes it next, so neither does any later eval learn of this
	// Runtime's. It costs the page faults reuse saves, about 230 per VM
	// (make, prepare and 1+1): on a quiet 2-core host 617 µs against
	// 278 µs for a VM in reset memory and 155 µs p50 for a rewound one,
	// and 0.5–0.8 ms more per eval under load (RATIONALE.md, "What do a
	// rewound VM and a reused memory still tell?"). The zero value
	// reuses.
	DisableVMReuse bool
	// ReuseGroup keeps this Runtime's VMs' memory apart from Runtimes of
	// other groups in the same process: a freed VM's linear memory is
	// reset for a later VM of the same group and mapped anew (faulting as
	// one never used) for one of another, so what residency tells (see
	// DisableVMReuse) never crosses groups. Rewound VMs never leave their
	// Runtime whatever the group. The executor gives each tenant its own
	// group. Zero ("") is the group of every Runtime that sets none;
	// DisableVMReuse overrides it.
	ReuseGroup string
	// Logger receives host-side reports: panicking tools and hooks (one
	// Error line with the value and where it happened; the stack at Debug
	// level), cache rebuilds, and, when Progress is nil, the slow
	// first-run steps at Info level. Zero means slog.Default().
	Logger *slog.Logger
	// Progress, if set, is told when a slow step starts (the first-run
	// fetch, compile and snapshot build, one to two minutes on 2 cores) and
	// returns a function called when it ends. Zero means each step is
	// logged through Logger at Info level as it starts and ends.
	Progress func(step string) (done func())
	// StateKeys seals the states of suspended sessions and evals and
	// opens them (see Session.Suspend, StatusSuspended). Nil means
	// nothing can be suspended or resumed: Session.Suspend fails with
	// ErrNotSuspendable, a suspend request raises Glovebox::ToolError in
	// the guest, and resuming fails with ErrStateKey.
	StateKeys *Keyring
	// StateStore, if set, is told the id of every state ResumeSession
	// restores (before anything runs) and every paused state Continue
	// answers (when the replay reaches the paused call, before the answer
	// goes in), and refuses one continued before (ErrStateUsed): each
	// state then continues at most once, and a continuation that never
	// reached its call can be retried. Nil means no record is kept, and a
	// state can be continued many times.
	StateStore StateStore
}

// Runtime runs evals. It is safe for concurrent use; every eval runs in a
// fresh VM that shares no state with any other, and evals run in parallel
// on all cores.
type Runtime struct {
	shared  *shared
	limits  Limits // in force, defaults filled in
	raw     Limits // as configured, for WithLimits
	tools   map[string]hostTool
	approve map[string]bool // tools whose calls need approval
	flow    *flowSpec       // data-flow policy (labels.go); nil when off
	names   []string
	docs    []ToolDoc // one per tool, sorted by name
	toolIDs string    // the docs as a state's manifest names them (toolsManifest)
	mounts  []Mount
	hooks   Hooks
	log     *slog.Logger
	keys    *Keyring   // Config.StateKeys
	store   StateStore // Config.StateStore
	// view is set on a Runtime WithLimits made: its own closed flag, and
	// the view it was derived from (nil for a view of the Runtime New
	// made). Closing a view sets its flag only; see Close.
	view *view
}

// view is the state a view has of its own.
type view struct {
	closed atomic.Bool
	parent *view
}

// viewClosed reports whether v or a view it was derived from is closed.
func (v *view) viewClosed() bool {
	for ; v != nil; v = v.parent {
		if v.closed.Load() {
			return true
		}
	}
	return false
}

// closed reports whether evals on r must fail with ErrClosed: the
// Runtime New made is closed, or r is a view closed itself (or derived
// from one that is).
func (r *Runtime) closed() bool {
	return r.shared.eng.Load() == nil || r.view.viewClosed()
}

// shared is what a Runtime and the views WithLimits derives from it have
// in common.
type shared struct {
	eng  atomic.Pointer[engine.Engine] // nil once closed
	pool *engine.Pool
	key  string
	once sync.Once
	// metered is set when eng's code counts fuel (see fuel.go); alt is
	// the metered engine an unmetered one's views with a fuel budget
	// use, made on first use.
	metered bool
	alt     altEngine
}

// DefaultCacheDir returns the cache directory used when Config.CacheDir is
// empty.
func DefaultCacheDir() (string, error) {
	if d := os.Getenv(EnvCacheDir); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("glovebox: no cache directory (set %s): %w", EnvCacheDir, err)
	}
	return filepath.Join(d, "glovebox"), nil
}

// New creates a Runtime. On first use it fetches the guest image with npm,
// compiles it and boots Ruby to build the snapshot (one to two minutes on a
// 2-core machine; Config.Progress hears about it, or else Config.Logger at
// Info level); later, from the on-disk cache, it takes tens of
// milliseconds. Calling New early is the way to pay that cost up front.
//
// It fails with [ErrInvalidLimits] for bad limits, [ErrInvalidMount] for
// a bad mount (a host path that is not a directory included), checked
// before any slow step, [ErrNoNPM] when the
// image cannot be fetched, and with a descriptive error when the cache
// cannot be written or the image is unusable.
func New(ctx context.Context, cfg Config) (*Runtime, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	if _, err := cfg.Limits.withDefaults(0); err != nil {
		return nil, err
	}
	if err := validateMounts(cfg.Mounts); err != nil {
		return nil, err
	}
	if err := checkHostDirs(cfg.Mounts); err != nil {
		return nil, err
	}
	cacheDir := cfg.CacheDir
	if cacheDir == "" {
		var err error
		if cacheDir, err = DefaultCacheDir(); err != nil {
			return nil, err
		}
	}
	progress := cfg.Progress
	if progress == nil {
		progress = logProgress(log)
	}
	imagePath := cfg.ImagePath
	if imagePath == "" {
		p, fetch, err := image.Find(cacheDir)
		if err == nil && fetch {
			done := progress("fetching " + image.Package + "@" + image.Version + " with npm (first run only)")
			p, err = image.Path(ctx, cacheDir)
			done()
		}
		if err != nil {
			return nil, err
		}
		imagePath = p
	}
	pool := cfg.PoolSize
	if pool == 0 {
		pool = runtime.GOMAXPROCS(0)
	}
	// Code compiled with fuel metering runs slower (see fuel.go): the
	// engine counts fuel only when the limits set a budget.
	ecfg := engine.Config{
		ImagePath: imagePath, CacheDir: filepath.Join(cacheDir, "engine"),
		Logger: log, Progress: progress, NoFuel: cfg.Limits.Fuel == 0,
	}
	sh, err := acquire(ctx, ecfg)
	if err != nil {
		return nil, err
	}
	r := &Runtime{shared: sh, hooks: cfg.Hooks, log: log, tools: map[string]hostTool{}, mounts: slices.Clone(cfg.Mounts),
		keys: cfg.StateKeys, store: cfg.StateStore}
	if cfg.Tools != nil {
		r.tools = cfg.Tools.clone()
		r.names = cfg.Tools.Names()
		r.docs = cfg.Tools.allDocs()
		r.approve = approvalSet(cfg.Tools, r.docs)
		r.flow = cfg.Tools.flow.clone()
		r.flow.annotate(r.docs)
	}
	r.toolIDs = toolsManifest(r.docs)
	r.raw = cfg.Limits
	if r.limits, err = cfg.Limits.withDefaults(int64(sh.eng.Load().MemoryFloor())); err != nil {
		r.Close()
		return nil, err
	}
	if sh.pool, err = sh.eng.Load().NewPool(ctx, max(pool, 0), r.names, engineMounts(r.mounts), cfg.ScratchDir); err != nil {
		r.Close()
		return nil, err
	}
	group := memoryGroup(cfg.ReuseGroup)
	if cfg.DisableVMReuse {
		sh.pool.DisableReuse()
	} else if group != 0 {
		sh.pool.SetMemoryGroup(group)
	}
	sh.alt.cfg, sh.alt.poolSize, sh.alt.names, sh.alt.mounts, sh.alt.scratch = ecfg, max(pool, 0), r.names, engineMounts(r.mounts), cfg.ScratchDir
	sh.alt.noReuse, sh.alt.group = cfg.DisableVMReuse, group
	return r, nil
}

// memoryGroup is the engine's memory group for Config.ReuseGroup g: zero
// for "", else a 64-bit hash of g that is neither zero nor
// wt.GroupFresh (two names share a group with odds of 2^-64).
func memoryGroup(g string) uint64 {
	if g == "" {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(g))
	if n := h.Sum64(); n != 0 && n != wt.GroupFresh {
		return n
	}
	return 1
}

// logProgress reports slow steps through log at Info level, for a
// Config without Progress: a first New takes minutes, and should not
// look hung.
func logProgress(log *slog.Logger) func(string) func() {
	return func(step string) func() {
		start := time.Now()
		log.Info("glovebox: " + step + "...")
		return func() {
			log.Info("glovebox: "+step+": done", "seconds", time.Since(start).Round(100*time.Millisecond).Seconds())
		}
	}
}

var (
	enginesMu sync.Mutex
	engines   = map[string]*sharedEngine{}
)

type sharedEngine struct {
	eng  *engine.Engine
	refs int
}

func acquire(ctx context.Context, cfg engine.Config) (*shared, error) {
	key := cfg.ImagePath + "\x00" + cfg.CacheDir + "\x00" + strconv.FormatBool(cfg.NoFuel)
	enginesMu.Lock()
	defer enginesMu.Unlock()
	if se, ok := engines[key]; ok {
		se.refs++
		sh := &shared{key: key, metered: !cfg.NoFuel}
		sh.eng.Store(se.eng)
		return sh, nil
	}
	eng, err := engine.Open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	engines[key] = &sharedEngine{eng: eng, refs: 1}
	sh := &shared{key: key, metered: !cfg.NoFuel}
	sh.eng.Store(eng)
	return sh, nil
}

// Close releases the Runtime; the engine is freed when the last Runtime
// using it closes, after its running evals finish. Closing the Runtime
// New made closes every view WithLimits derived from it (their evals
// then fail with ErrClosed).
//
// Closing a view closes that view only: later calls on it (and on views
// derived from it) fail with ErrClosed, while the Runtime it came from
// and its other views go on; evals already running on the view finish.
// So `defer view.Close()` is harmless, and neither needed: a view holds
// no resources of its own. Close is idempotent and returns nil.
func (r *Runtime) Close() error {
	if r.view != nil {
		r.view.closed.Store(true)
		return nil
	}
	r.shared.close()
	return nil
}

// close releases sh's pool and engine reference, and its alternative
// engine's.
func (sh *shared) close() {
	sh.once.Do(func() {
		sh.eng.Store(nil)
		if alt := sh.alt.close(); alt != nil {
			alt.close()
		}
		if sh.pool != nil {
			sh.pool.Close()
		}
		enginesMu.Lock()
		se := engines[sh.key]
		last := se != nil && se.refs == 1
		if se != nil {
			if se.refs--; last {
				delete(engines, sh.key)
			}
		}
		enginesMu.Unlock()
		if last {
			se.eng.Close() // waits for running evals, outside the lock
		}
	})
}

// WithLimits returns a view of r whose evals use l's non-zero fields in
// place of r's: a per-call override that changes only what it sets (zero
// fields keep r's configured values, and defaults apply as in New). r is
// unchanged. The view shares r's engine, pool and tools; closing it
// leaves r open (see Close). It fails with [ErrInvalidLimits] or
// ErrClosed.
func (r *Runtime) WithLimits(l Limits) (*Runtime, error) {
	eng := r.shared.eng.Load()
	if eng == nil || r.view.viewClosed() {
		return nil, ErrClosed
	}
	raw := l.over(r.raw)
	l, err := raw.withDefaults(int64(eng.MemoryFloor()))
	if err != nil {
		return nil, err
	}
	v := *r
	v.limits, v.raw = l, raw
	v.view = &view{parent: r.view}
	return &v, nil
}

// Limits returns the limits r applies, defaults filled in.
func (r *Runtime) Limits() Limits { return r.limits }

// MemoryFloor is the smallest Limits.Memory accepted: the linear memory
// the booted guest occupies, in bytes (about 370 MiB, 32 MiB of it free
// heap for the guest's data); 0 once the Runtime New made is closed.
func (r *Runtime) MemoryFloor() int64 {
	eng := r.shared.eng.Load()
	if eng == nil {
		return 0
	}
	return int64(eng.MemoryFloor())
}

// Stats is a snapshot of a Runtime's engine counters.
type Stats struct {
	// PoolHits and PoolMisses count this Runtime's evals that found a
	// prepared VM waiting, and those that did not (they took a VM rewound
	// after an earlier eval, see VMsRewound, or made one).
	PoolHits, PoolMisses uint64
	// MemoriesMade, MemoriesReused and MemoriesDropped count linear
	// memories mapped afresh, reused after a reset, and unmapped instead of
	// kept for reuse.
	MemoriesMade, MemoriesReused, MemoriesDropped uint64
	// VMsRewound counts VMs returned to their state before their eval
	// after it ended cleanly (ok, or an exception Ruby unwound), and kept
	// for the next eval instead of being freed; VMsReused counts evals
	// that ran in one. Every eval still sees a fresh VM's state.
	VMsRewound, VMsReused uint64
	// VMsLive is how many VMs of the engine exist now (running, idle in
	// pools, rewound and waiting, or held by sessions), every Runtime on
	// the engine included: the linear memories not yet freed.
	VMsLive uint64
	// PagesRestored counts the 4 KiB pages resets and rewinds copied
	// back: divided by MemoriesReused + VMsRewound, the pages a typical
	// eval writes.
	PagesRestored uint64
	// RewindsTracked counts the rewinds (of every Runtime on the engine)
	// that restored only the pages written since the VM's checkpoint,
	// found by write tracking (Linux 6.7+ with userfaultfd allowed; see
	// RATIONALE.md, "Why rewind VMs instead of making new ones?"); the
	// other rewinds restored every page written since the VM's memory
	// was mapped. Zero where the kernel lacks it.
	RewindsTracked uint64
}

// Stats reports the Runtime's pool counters and its engine's memory
// counters (shared by every Runtime on the same engine). After Close it
// returns the zero Stats.
func (r *Runtime) Stats() Stats {
	eng := r.shared.eng.Load()
	if eng == nil || r.view.viewClosed() {
		return Stats{}
	}
	h, m := r.shared.pool.Stats()
	ms := eng.MemoryStats()
	rw, ru := eng.ReuseStats()
	return Stats{PoolHits: h, PoolMisses: m, MemoriesMade: ms.Made, MemoriesReused: ms.Reused, MemoriesDropped: ms.Dropped,
		VMsRewound: rw, VMsReused: ru, PagesRestored: ms.Restored, VMsLive: ms.Live, RewindsTracked: ms.Tracked}
}

// Mounts returns the directories the guest may use, as configured.
func (r *Runtime) Mounts() []Mount { return slices.Clone(r.mounts) }

// Tools returns the names of the functions the guest can call, sorted.
func (r *Runtime) Tools() []string { return append([]string(nil), r.names...) }

// Eval runs code in a fresh VM and returns what it did. Every outcome of
// the guest's code — exceptions, limits, crashes — is a [Result] with a
// [Status]; the error is non-nil only for host-side failures: [ErrClosed],
// or a VM that could not be made.
//
// When ctx ends during the eval, the guest is stopped within about 10 ms
// and the result has StatusCanceled.
func (r *Runtime) Eval(ctx context.Context, code string) (*Result, error) {
	return r.EvalWith(ctx, code)
}

// EvalWith is Eval with options: they give the eval input ([WithStdin],
// [WithArgs]) or stream its output ([WithOutput]). Input they cannot give
// fails with [ErrInvalidInput] before anything runs.
func (r *Runtime) EvalWith(ctx context.Context, code string, opts ...EvalOption) (*Result, error) {
	if r.closed() {
		return nil, ErrClosed
	}
	req, st := r.request(code)
	if err := applyOptions(req, r.limits, opts); err != nil {
		return nil, err
	}
	sh, err := r.target(ctx)
	if w := (*altWait)(nil); errors.As(err, &w) {
		return w.result(), nil
	}
	if err != nil {
		return nil, err
	}
	st.journaled(req)
	flush := st.redactTees(req)
	out, err := sh.pool.Eval(ctx, req)
	flush()
	if err != nil {
		return nil, err
	}
	return st.finishEval(sh, out, req, statePaused), nil
}

// request makes the engine request for one eval of code.
func (r *Runtime) request(code string) (*engine.Request, *evalState) {
	st := &evalState{r: r, flow: r.newFlow()}
	req := &engine.Request{
		Code: code,
		Limits: engine.Limits{
			Timeout: r.limits.Timeout, Fuel: r.limits.Fuel, Memory: uint64(r.limits.Memory),
			Stdout: r.limits.Stdout, Stderr: r.limits.Stderr, Value: r.limits.Value,
			Message: r.limits.ToolPayload,
			FS:      engine.FSLimits{Write: r.limits.FileWrite, Creates: r.limits.FileCreates},
		},
	}
	if len(r.tools) > 0 {
		req.Tools, req.Call = r.names, st.call
	}
	return req, st
}

// result turns the engine's outcome into a Result.
func (st *evalState) result(out *engine.Outcome) *Result {
	res := &Result{
		Status: Status(out.Status), Value: out.Value,
		Stdout: string(out.Stdout), Stderr: string(out.Stderr),
		StdoutTruncated: out.StdoutTruncated, StderrTruncated: out.StderrTruncated,
		FuelUsed: out.FuelUsed, Duration: out.Duration,
	}
	st.mu.Lock()
	res.ToolCalls = slices.Clone(st.calls)
	st.mu.Unlock()
	if out.Error != nil {
		res.Error = &GuestError{Class: out.Error.Class, Message: out.Error.Message, Backtrace: out.Error.Backtrace}
		if res.Error.Backtrace == nil {
			res.Error.Backtrace = []string{}
		}
	}
	if st.flow != nil {
		st.flow.redactResult(res)
	}
	return res
}

func engineMounts(ms []Mount) []engine.Mount {
	var out []engine.Mount
	for _, m := range ms {
		out = append(out, engine.Mount{Host: m.HostPath, Guest: m.GuestPath, Write: m.Writable})
	}
	return out
}

// evalState is one eval's tool-call accounting.
type evalState struct {
	r        *Runtime
	mu       sync.Mutex // guards calls: an abandoned VM may still call tools
	calls    []ToolCall
	toolTime time.Duration
	kept     int // bytes of arguments and results kept in the transcript
	// flow is the eval's (or its session's) data-flow state; nil when
	// no tool is labelled.
	flow *flowState
	// Suspension (suspend_eval.go): the eval's journal and pause, if it
	// may suspend; the Approver's request to suspend the call it decides.
	sus             *pause
	approverSuspend error
}

const maxToolDepth = 64

// MaxTranscriptData is how many bytes of tool arguments and results, as
// encoded on the wire, one eval's transcript keeps (1 MiB). Later entries
// keep the tool name, error and duration but drop their data and are
// marked Elided, so a guest cannot make the host hold more than this
// (times the few-fold cost of decoded data) however it calls.
const MaxTranscriptData = 1 << 20

func (st *evalState) call(ctx context.Context, c *engine.Call) ([]byte, error) {
	r := st.r
	args := Args{Positional: c.Args}
	if len(c.Kwargs) > 0 {
		args.Keyword = c.Kwargs
	}
	entry := ToolCall{Name: c.Name, Args: args}
	if st.sus != nil && (st.sus.answer != nil || st.sus.ffwd) {
		return st.answerPending(ctx, c, &entry) // suspend_eval.go
	}
	var tooBig *engine.PayloadError
	if errors.As(c.Err, &tooBig) {
		entry.Elided = true // arguments too large to read are not kept, nor counted
	} else {
		st.keep(&entry, c.Size)
	}
	st.mu.Lock()
	n := len(st.calls)
	st.mu.Unlock()
	if n >= r.limits.ToolCalls {
		msg := fmt.Sprintf("the eval made more than %d tool calls", r.limits.ToolCalls)
		entry.Args, entry.Elided = Args{}, true
		st.finish(ctx, &entry, OutcomeBudgetExceeded, msg)
		return nil, &engine.Abort{Status: engine.StatusToolBudgetExceeded, Message: msg}
	}
	if c.Err != nil {
		if tooBig != nil {
			msg := fmt.Sprintf("%s was passed %d bytes of arguments, over the %d-byte limit per call (Limits.ToolPayload)", c.Name, tooBig.Size, tooBig.Limit)
			st.finish(ctx, &entry, OutcomeOversized, msg)
			return nil, &engine.GuestError{Class: PayloadErrorClass, Message: msg}
		}
		msg := fmt.Sprintf("malformed call to %q: %v", c.Name, c.Err)
		st.finish(ctx, &entry, OutcomeInvalid, msg)
		return nil, &engine.GuestError{Class: "ArgumentError", Message: msg}
	}
	fn, ok := r.tools[c.Name]
	if !ok {
		msg := fmt.Sprintf("no tool named %q", c.Name)
		if len(r.names) > 0 {
			msg += fmt.Sprintf(" (tools: %s)", joinNames(r.names))
		}
		entry.Args, entry.Elided = Args{}, c.Size > 0 // unknown tools' arguments are not kept
		st.finish(ctx, &entry, OutcomeUnknownTool, msg)
		return nil, &engine.GuestError{Class: "UnknownToolError", Message: msg}
	}
	approved := false
	if st.flow != nil {
		var err error
		if args, approved, err = st.flowCheck(ctx, c, &entry, args); err != nil {
			return nil, err
		}
	}
	if r.hooks.BeforeCall != nil {
		if err, panicked := safeHook(r, c.Name, func() error { return r.hooks.BeforeCall(ctx, c.Name, args) }); err != nil {
			if errors.Is(err, ErrSuspend) {
				return st.suspendCall(ctx, c, &entry, err, false)
			}
			outcome := OutcomeVetoed
			if panicked {
				outcome = OutcomePanic
			}
			st.finish(ctx, &entry, outcome, err.Error())
			return nil, &engine.GuestError{Class: "ToolError", Message: err.Error()}
		}
	}
	if r.approve[c.Name] && !approved {
		if out, err, over := st.over(ctx, c, &entry, time.Now(), "before the call was put to the approver"); over {
			return out, err
		}
		if reason, ok := st.approve(ctx, c, args); !ok {
			if ctx.Err() != nil || !time.Now().Before(c.Deadline) {
				entry.Approval = "denied" // no decision counts once the eval is over
				out, err, _ := st.over(ctx, c, &entry, time.Now(), "while the call waited for approval")
				return out, err
			}
			if st.approverSuspend != nil {
				err := st.approverSuspend
				st.approverSuspend = nil
				return st.suspendCall(ctx, c, &entry, err, true)
			}
			entry.Approval = "denied"
			st.finish(ctx, &entry, OutcomeDenied, reason)
			return nil, &engine.GuestError{Class: "ToolDenied", Message: reason}
		}
		entry.Approval = "approved"
	}
	return st.run(ctx, c, &entry, fn, args)
}

// run runs tool fn for call c, whose hooks and approval have had their
// say, within the eval's tool-time budget and deadline, and answers it.
func (st *evalState) run(ctx context.Context, c *engine.Call, entry *ToolCall, fn hostTool, args Args) ([]byte, error) {
	r := st.r
	left := r.limits.ToolTime - st.toolTime
	if left <= 0 {
		msg := fmt.Sprintf("the eval spent its %v tool-time budget", r.limits.ToolTime)
		st.finish(ctx, entry, OutcomeBudgetExceeded, msg)
		return nil, &engine.Abort{Status: engine.StatusToolBudgetExceeded, Message: msg}
	}
	start := time.Now()
	// Hooks and approval took their time: a call whose eval ended
	// meanwhile (deadline, cancel) does not start on the host. The
	// check reuses the call's one clock reading.
	if out, err, over := st.over(ctx, c, entry, start, "before the call could start"); over {
		return out, err
	}
	deadline := c.Deadline
	if budgetEnds := start.Add(left); budgetEnds.Before(deadline) {
		deadline = budgetEnds
	}
	// The tool's context ends at the deadline, when ctx ends, or when the
	// call returns; it makes no timer unless the tool asks for Done.
	// The tool runs on the VM's goroutine. One that ignores its context
	// holds the VM, but not the eval: Eval gives up on the VM shortly
	// after the deadline (see engine.Eval).
	var out toolOutcome
	if fn.noCtx {
		// A Func without a context parameter never sees one: the call
		// makes none (one allocation less per call).
		out.value, out.err, out.panic = runTool(ctx, fn.fn, args)
	} else {
		tctx := newToolContext(ctx, deadline)
		if st.flow != nil {
			tctx.flow = flowCall{st.flow, c.Name}
		}
		out.value, out.err, out.panic = runTool(tctx, fn.fn, args)
		tctx.end()
	}
	// One reading after the call, of the monotonic clock only (time.Since
	// with a monotonic start), serves the duration and the deadline check:
	// each clock read is tens of nanoseconds of a round trip.
	entry.Duration = time.Since(start)
	end := start.Add(entry.Duration)
	st.toolTime += entry.Duration
	if out.panic != nil {
		r.logPanic("tool", c.Name, out.panic)
		st.finish(ctx, entry, OutcomePanic, "tool call failed")
		return nil, &engine.GuestError{Class: "ToolError", Message: "tool call failed"}
	}
	if ctx.Err() != nil || !end.Before(c.Deadline) {
		// The eval's own limit ended the call; the engine reports it.
		msg, outcome := "the eval's time ran out during the call", OutcomeTimeout
		if ctx.Err() != nil && end.Before(c.Deadline) {
			msg, outcome = "the caller's context ended during the call", OutcomeCanceled
		}
		st.finish(ctx, entry, outcome, msg)
		return nil, &engine.Abort{Status: engine.StatusTimeout, Message: msg}
	}
	if st.toolTime > r.limits.ToolTime {
		msg := fmt.Sprintf("the eval spent %v in tools, over its %v tool-time budget", st.toolTime.Round(time.Millisecond), r.limits.ToolTime)
		st.finish(ctx, entry, OutcomeBudgetExceeded, msg)
		return nil, &engine.Abort{Status: engine.StatusToolBudgetExceeded, Message: msg}
	}
	if out.err != nil && errors.Is(out.err, ErrSuspend) {
		return st.suspendCall(ctx, c, entry, out.err, false)
	}
	return st.reply(ctx, c, entry, out.value, out.err)
}

// over ends call c unrun, recorded in entry with OutcomeTimeout or
// OutcomeCanceled and a message saying when, if its eval is over at now:
// its deadline has passed (Call.Deadline: the eval's wall clock, or a
// ToolSession's) or ctx has ended. Once an eval has ended no call of it
// starts on the host, however late its hooks or approver answered.
func (st *evalState) over(ctx context.Context, c *engine.Call, entry *ToolCall, now time.Time, when string) ([]byte, error, bool) {
	switch {
	case !now.Before(c.Deadline):
		msg := "the eval's time ran out " + when + "; the tool did not run"
		st.finish(ctx, entry, OutcomeTimeout, msg)
		return nil, &engine.Abort{Status: engine.StatusTimeout, Message: msg}, true
	case ctx.Err() != nil:
		msg := "the caller's context ended " + when + "; the tool did not run"
		st.finish(ctx, entry, OutcomeCanceled, msg)
		return nil, &engine.Abort{Status: engine.StatusCanceled, Message: msg}, true
	}
	return nil, nil, false
}

// reply answers call c with a tool's value or error, as the guest sees
// it, and records entry.
func (st *evalState) reply(ctx context.Context, c *engine.Call, entry *ToolCall, value any, err error) ([]byte, error) {
	r := st.r
	if err != nil {
		if ge, ab := passThrough(err); ge != nil || ab != nil { // forward.go: a remote toolset's answer
			if ge != nil {
				st.finish(ctx, entry, remoteOutcome(ge.Class), ge.Message)
				return nil, ge
			}
			outcome := OutcomeBudgetExceeded
			if ab.Status == engine.StatusTimeout {
				outcome = OutcomeTimeout
			}
			st.finish(ctx, entry, outcome, ab.Message)
			return nil, ab
		}
		var ae *argError
		if errors.As(err, &ae) {
			msg := fmt.Sprintf("%s: %s", c.Name, ae.msg)
			st.finish(ctx, entry, OutcomeInvalid, msg)
			return nil, &engine.GuestError{Class: "ArgumentError", Message: msg}
		}
		var te *ToolError
		if errors.As(err, &te) {
			class := te.Class
			if !validErrorClass(class) {
				class = "ToolError"
			}
			st.finish(ctx, entry, OutcomeError, te.Message)
			return nil, &engine.GuestError{Class: class, Message: te.Message}
		}
		msg := r.sanitize(c.Name, err)
		st.finish(ctx, entry, OutcomeError, msg)
		return nil, &engine.GuestError{Class: "ToolError", Message: msg}
	}
	b, err := engine.Answer(nil, value, maxToolDepth)
	if err != nil {
		msg := err.Error()
		st.finish(ctx, entry, OutcomeInvalid, msg)
		return nil, &engine.GuestError{Class: "TypeError", Message: fmt.Sprintf("%s: %s", c.Name, msg)}
	}
	if len(b)-2 > r.limits.ToolPayload {
		msg := fmt.Sprintf("%s returned %d bytes of data, over the %d-byte limit per call (Limits.ToolPayload)", c.Name, len(b)-2, r.limits.ToolPayload)
		st.finish(ctx, entry, OutcomeOversized, msg)
		return nil, &engine.GuestError{Class: PayloadErrorClass, Message: msg}
	}
	if st.flow != nil {
		st.flowRecord(c.Name, value)
	}
	entry.Result = value
	st.keep(entry, len(b))
	st.finish(ctx, entry, OutcomeOK, "")
	return b, nil
}

// keep counts n bytes of a call's data against MaxTranscriptData; past
// it, the entry drops its arguments and result.
func (st *evalState) keep(entry *ToolCall, n int) {
	if st.kept += n; st.kept > MaxTranscriptData {
		entry.Args, entry.Result, entry.Elided = Args{}, nil, true
	}
}

// finish records entry, with how it ended and the message the guest saw
// ("" on success), and runs the AfterCall hook.
func (st *evalState) finish(ctx context.Context, entry *ToolCall, outcome CallOutcome, errMsg string) {
	r := st.r
	entry.Outcome, entry.Error = outcome, errMsg
	st.mu.Lock()
	st.calls = append(st.calls, *entry)
	st.mu.Unlock()
	if r.hooks.AfterCall != nil {
		func() {
			defer func() {
				if p := recover(); p != nil {
					r.logPanic("AfterCall hook", entry.Name, recovered(p))
				}
			}()
			r.hooks.AfterCall(ctx, *entry)
		}()
	}
}

type toolOutcome struct {
	value any
	err   error
	panic *panicInfo
}

func joinNames(names []string) string {
	const max = 20
	s := ""
	for i, n := range names {
		if i == max {
			return s + fmt.Sprintf(", … %d more", len(names)-max)
		}
		if i > 0 {
			s += ", "
		}
		s += n
	}
	return s
}

type panicInfo struct {
	value any
	where string // file:line of the panic
	stack string
}

// recovered describes the panic v; call it from the deferred function
// that recovered it.
func recovered(v any) *panicInfo {
	pcs := make([]uintptr, 32)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	where, inPanic := "", false
	for {
		f, more := frames.Next()
		if inPanic && !strings.HasPrefix(f.Function, "runtime.") {
			where = fmt.Sprintf("%s (%s:%d)", f.Function, filepath.Base(f.File), f.Line)
			break
		}
		inPanic = inPanic || f.Function == "runtime.gopanic"
		if !more {
			break
		}
	}
	return &panicInfo{value: v, where: where, stack: string(debug.Stack())}
}

// logPanic reports a panic in host code (a tool or a hook): one line at
// Error level with the value and where it happened, the whole stack at
// Debug level.
func (r *Runtime) logPanic(what, tool string, p *panicInfo) {
	val := fmt.Sprint(p.value)
	if i := strings.IndexByte(val, '\n'); i >= 0 {
		val = val[:i] + " …"
	}
	if len(val) > 200 {
		val = strings.ToValidUTF8(val[:200], "") + "…"
	}
	r.log.Error("glovebox: "+what+" panicked", "tool", tool, "panic", val, "at", p.where)
	r.log.Debug("glovebox: "+what+" panic stack", "tool", tool, "stack", p.stack)
}

func runTool(ctx context.Context, fn ToolFunc, args Args) (res any, err error, p *panicInfo) {
	defer func() {
		if v := recover(); v != nil {
			p = recovered(v)
		}
	}()
	res, err = fn(ctx, args)
	return res, err, nil
}

// safeHook runs the BeforeCall hook f; panicked reports that it
// panicked (err is then a generic message).
func safeHook(r *Runtime, tool string, f func() error) (err error, panicked bool) {
	defer func() {
		if p := recover(); p != nil {
			r.logPanic("BeforeCall hook", tool, recovered(p))
			err, panicked = errors.New("tool call failed"), true
		}
	}()
	return f(), false
}

// sanitize returns the message the guest sees for a tool's own error.
func (r *Runtime) sanitize(tool string, err error) (msg string) {
	if r.hooks.SanitizeError == nil {
		return err.Error()
	}
	defer func() {
		if p := recover(); p != nil {
			r.logPanic("SanitizeError hook", tool, recovered(p))
			msg = "tool call failed"
		}
	}()
	if msg = r.hooks.SanitizeError(tool, err); msg == "" {
		msg = "tool call failed"
	}
	return msg
}

// validErrorClass reports whether name can be a ToolError class: a Ruby
// constant name of at most 64 characters, and not one of the classes the
// channel reserves for other meanings.
func validErrorClass(name string) bool {
	if len(name) == 0 || len(name) > 64 || name[0] < 'A' || name[0] > 'Z' {
		return false
	}
	for i := 1; i < len(name); i++ {
		c := name[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	switch name {
	case "TypeError", "ArgumentError", "UnknownToolError":
		return false
	}
	return true
}
