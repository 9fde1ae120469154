package engine

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/gloveboxhq/glovebox/internal/wt"
)

// Whole-VM reuse. Making a VM from the snapshot costs a store, an
// instance and a WASI context, and its first run pays for cold caches and
// wasmtime's lazily filled function tables (BenchmarkVMPhases: about
// 100 µs to make, 70 µs to prepare, and its eval 15 µs slower than the
// same eval in a VM that already ran one). So a VM whose eval ended
// cleanly is not freed but rewound to the state it had right after
// prepare, and the next eval with the same tools takes it.
//
// What a rewind restores, and why that is everything the guest can see:
//
//   - Linear memory: every page written since the checkpoint gets the
//     bytes it had at the checkpoint (wt.Instance.Rewind). The pages are
//     found by write tracking where the kernel has it (Linux 6.7+: the
//     memory is write-protected through a userfaultfd in async mode, and
//     a write clears a page's protection; see "Write tracking" in
//     internal/wt/memory_linux.c), else by the page scan that resets
//     reused memories, which finds every page written since the memory
//     was mapped. A memory that grew is never rewound (wasm memories
//     cannot shrink, and its size is visible): the VM is freed.
//   - Globals: all of the module's mutable globals are exported (see
//     wasmbin.ExportGlobals) and set back to their values at the
//     checkpoint.
//   - Tables and segments: the guest's code has no instruction that
//     writes a table or drops a segment (checked when the snapshot is
//     built: see stateWriter), so they are the same in every instance.
//   - The WASI context (open files, directory cursors), the file-system
//     guard and the scratch directory are made anew, exactly as for a new
//     VM, when the VM is taken; except that a VM without mounts whose
//     guest left only the preopened directory open and the standard
//     streams its own keeps its context and guard, which then hold what
//     new ones would (see renew), and the scratch directory is wiped only
//     if the guest called one of the calls that make a name (see
//     fsGuard.named).
//   - Randomness: Ruby seeds its default generator from the host's
//     entropy (WASI random_get) the first time a program uses it, and in
//     the snapshot — so at every checkpoint — it is not seeded yet
//     (checked when the snapshot is built: see checkUnseeded). Each eval
//     in a rewound VM, as in a new one, so draws its own seed.
//   - The guest's monotonic clock restarts from its checkpoint value, so
//     an eval cannot tell how long the VM waited or how many evals it ran.
//   - Host-side state of the VM is zeroed except the handles to the store
//     and instance.
//
// Only a VM whose eval ended ok or with an exception that Ruby unwound is
// rewound (see kept): after a trap, a timeout, a host stop or an
// abandoned tool call it is freed, as before.

// idleVMs holds rewound VMs for reuse, most recently used last. One
// belongs to the engine (evals without a pool) and one to each pool; the
// snapshot, mounts and scratch directories are the holder's, so VMs are
// told apart by their tools alone.
//
// A pool's idleVMs is lazy: a VM goes into it unrewound ("dirty") and the
// pool's filler rewinds it once the pool is quiet (or the next eval that
// takes it does, first), so that with pauses between evals the rewind,
// whose copying is slow on caches gone cold, happens in the pause instead
// of on an eval's path. Putting a VM does not wake the filler (a wake-up
// per eval cost back-to-back evals more than the rewind): the filler
// looks when the pool turns quiet, and when an eval takes a ready VM.
// Until then a dirty VM keeps its last eval's scratch files and open
// descriptors (within that eval's quotas).
type idleVMs struct {
	mu     sync.Mutex
	vms    []*VM
	closed bool
	lazy   bool
	// group is the memory group of the holder's VMs (newVM's group; see
	// Pool.SetMemoryGroup); DisableReuse sets wt.GroupFresh.
	group uint64
	// cks holds, per tools key, the memory checkpoint of the last VM
	// prepared for h, for the next one to share if it is the same (VMs
	// prepared alike are, byte for byte): a pool's idle VMs and sessions
	// keep one copy of their checkpoint between them instead of one each
	// (74 pages, 0.30 MB, for the base snapshot without tools).
	cks map[string]*wt.CheckpointData
	// out counts the VMs the pool's filler has taken from h to rewind or
	// renew and not yet given back (to h, or to the pool's ready stack),
	// and backs how many it has given back; back is broadcast at each.
	// An eval that finds no VM in either place while out > 0 waits for
	// one (see Pool.get) instead of making its own: it used to make one,
	// and the VM the filler then gave back found h full and was freed,
	// so evals through the executor, whose evals pause for the store's
	// fsync often enough to wake the filler, made a VM every 40 evals
	// (105 made and 106 freed in 4,000 evals, counted with the pool's
	// filler and evals instrumented; in-process back-to-back, 2).
	out, backs int
	back       *sync.Cond
}

// like returns a reference to the checkpoint a VM prepared with tools
// key may share, or nil; the caller releases it.
func (h *idleVMs) like(key string) *wt.CheckpointData {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cks[key].Ref()
}

// keepLike makes d the checkpoint later VMs prepared with key share,
// releasing the one it replaces; once h is closed it releases d.
func (h *idleVMs) keepLike(key string, d *wt.CheckpointData) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		d.Release()
		return
	}
	if h.cks == nil {
		h.cks = map[string]*wt.CheckpointData{}
	}
	old := h.cks[key]
	h.cks[key] = d
	h.mu.Unlock()
	old.Release()
}

// maxIdleVMs bounds the VMs an idleVMs keeps: enough for every core to
// run back-to-back evals. Each pins its written pages (at most
// maxRewindPages) and a copy of those at its checkpoint.
var maxIdleVMs = max(runtime.GOMAXPROCS(0), 2)

// maxRewindPages is the most pages (4 KiB) a rewind may copy before the
// VM is freed instead: an eval that wrote this much (64 MiB) costs about
// as much to rewind as to replace, and an idle VM should not pin it.
const maxRewindPages = 16384

// DisableReuse makes the pool free every VM after its eval instead of
// rewinding it for the next (see rewind.go), and puts its VMs in memory
// group wt.GroupFresh (see SetMemoryGroup): each VM's linear memory is
// mapped anew, not reset from a freed VM's, and is left to be mapped anew
// for whichever VM takes it next. Call it before the pool's first eval;
// VMs the pool's filler made before are not used (see Pool.get).
func (p *Pool) DisableReuse() {
	p.SetMemoryGroup(wt.GroupFresh)
	p.idle.close()
}

// SetMemoryGroup puts the pool's VMs in memory group g (zero: the
// default, every pool's). A freed VM's linear memory is reset and kept
// for a later VM; a reset restores its bytes but leaves the pages the
// VM wrote resident, so an eval timing its first writes could tell how
// much memory earlier evals wrote. A memory is reset for a VM of the
// group that used it last, and mapped anew (faulting as one never used)
// for a VM of any other. Rewound VMs (rewind.go) never leave their pool.
// Call it before the pool's first eval; VMs the pool's filler made before
// are not used (see Pool.get).
func (p *Pool) SetMemoryGroup(g uint64) {
	p.idle.mu.Lock()
	p.idle.group = g
	p.idle.mu.Unlock()
	for v := p.ready.pop(); v != nil; v = p.ready.pop() {
		v.close()
	}
}

// memGroup is the memory group of VMs made for h (see
// Pool.SetMemoryGroup). A nil h's is the default, zero.
func (h *idleVMs) memGroup() uint64 {
	if h == nil {
		return 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.group
}

// open reports whether h takes VMs (it is not nil and not closed).
func (h *idleVMs) open() bool {
	if h == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.closed
}

// take returns an idle VM prepared with tools, or nil. With lend (the
// pool's filler), the VM counts as out until given back (see gave).
func (h *idleVMs) take(tools string, lend bool) *VM {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := len(h.vms) - 1; i >= 0; i-- {
		if v := h.vms[i]; v.toolsKey == tools {
			h.vms = append(h.vms[:i], h.vms[i+1:]...)
			if lend {
				h.out++
			}
			return v
		}
	}
	return nil
}

// gave records that the filler has given back a VM it took with lend:
// put it into h (v; nil if it freed it instead, or gave it to the pool's
// ready stack, which it did first). It wakes the evals waiting in
// awaitOut.
func (h *idleVMs) gave(v *VM) {
	if v != nil && !h.put(v) {
		v.close()
	}
	h.mu.Lock()
	h.out--
	h.backs++
	if h.back != nil {
		h.back.Broadcast()
	}
	h.mu.Unlock()
}

// backsSoFar is the count awaitOut compares with, read before looking
// for a VM.
func (h *idleVMs) backsSoFar() int {
	if h == nil {
		return 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.backs
}

// awaitOut reports whether a VM may have come back since backsSoFar
// returned since, waiting for the filler to give one back if it holds
// any. False means none is coming: the caller makes its VM.
func (h *idleVMs) awaitOut(since int) bool {
	if h == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.backs == since && h.out == 0 {
		return false
	}
	if h.back == nil {
		h.back = sync.NewCond(&h.mu)
	}
	for h.backs == since {
		h.back.Wait()
	}
	return true
}

// put keeps v, freeing the least recently used VM if h is full. It
// reports false (v is the caller's to free) once h is closed.
func (h *idleVMs) put(v *VM) bool {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return false
	}
	var evicted *VM
	if len(h.vms) >= maxIdleVMs {
		evicted = h.vms[0]
		h.vms = append(h.vms[:0], h.vms[1:]...)
	}
	h.vms = append(h.vms, v)
	h.mu.Unlock()
	if evicted != nil {
		evicted.close()
	}
	return true
}

// hasDirty reports whether h holds a VM not yet rewound.
func (h *idleVMs) hasDirty() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, v := range h.vms {
		if v.dirty {
			return true
		}
	}
	return false
}

// rewindDirty rewinds the VMs h holds unrewound, freeing those that
// cannot be. While it rewinds them they are out (see take's lend).
func (h *idleVMs) rewindDirty() {
	h.mu.Lock()
	var dirty []*VM
	keep := h.vms[:0]
	for _, v := range h.vms {
		if v.dirty {
			dirty = append(dirty, v)
		} else {
			keep = append(keep, v)
		}
	}
	clear(h.vms[len(keep):])
	h.vms = keep
	h.out += len(dirty)
	h.mu.Unlock()
	for _, v := range dirty {
		if v.rewind() != nil {
			v.close()
			v = nil
		}
		h.gave(v)
	}
}

// close frees the idle VMs; later puts are refused.
func (h *idleVMs) close() {
	h.mu.Lock()
	vms, cks := h.vms, h.cks
	h.vms, h.cks, h.closed = nil, nil, true
	h.mu.Unlock()
	for _, v := range vms {
		v.close()
	}
	for _, d := range cks {
		d.Release()
	}
}

// checkpoint is a VM's state right after prepare, the state a rewind
// returns it to (linear memory is kept by its wt.Instance).
type checkpoint struct {
	globals []wt.Global
	bits    []uint64 // the globals' values
	mono    uint64   // the guest's monotonic clock, stopped while it waits
	nextJS  uint32   // the next host-value handle
	hash    uint64   // identifies it for suspended states (suspend.go); 0: not computed yet
}

// takeCheckpoint records v's prepared state so that it can be rewound. A
// VM that cannot be checkpointed is used once and freed, as before.
func (v *VM) takeCheckpoint(snap *snapshot) {
	if !snap.rewindable || len(v.jsvals) != 0 {
		return
	}
	like := v.home.like(v.toolsKey)
	_, shared, err := v.inst.Checkpoint(like)
	like.Release()
	if err != nil {
		return
	}
	if !shared {
		if d := v.inst.CheckpointData(); d != nil {
			v.home.keepLike(v.toolsKey, d)
		}
	}
	c := v.store.Context()
	ck := &checkpoint{mono: v.monoBase, nextJS: v.nextJS}
	for _, g := range snap.globals {
		h, ok := v.inst.Global(c, g.name)
		if !ok {
			return
		}
		ck.globals, ck.bits = append(ck.globals, h), append(ck.bits, h.Bits(c))
	}
	v.ck = ck
}

// errNotRewindable reports a VM that must be freed rather than rewound.
var errNotRewindable = errors.New("the VM cannot be rewound")

// rewind returns v to its checkpoint and releases what its eval held (the
// WASI context's files, the guard's descriptors, the scratch directory's
// contents). renew must run before its next eval.
func (v *VM) rewind() error {
	if err := v.rewindMemory(); err != nil {
		return err
	}
	return v.rewindHost()
}

// rewindMemory is rewind's first part: linear memory back to the
// checkpoint.
func (v *VM) rewindMemory() error {
	if !v.rewindable() {
		return errNotRewindable
	}
	n, err := v.inst.Rewind()
	if err != nil {
		return err
	}
	if n > maxRewindPages {
		return fmt.Errorf("%w: %d pages written", errNotRewindable, n)
	}
	return nil
}

// rewindHost is rewind's second part: the globals, the WASI context, the
// guard and the scratch directory, and the VM's host-side state.
func (v *VM) rewindHost() error {
	c := v.store.Context()
	for i, g := range v.ck.globals {
		if err := g.SetBits(c, v.ck.bits[i]); err != nil {
			return err
		}
	}
	// A new WASI context replaces the old one when the VM is taken. If
	// the guest left files open, close them now rather than have an idle
	// VM hold them (a deleted scratch file's data stays while open).
	if !v.fs.onlyPreopens() {
		if err := v.store.SetWASI(wt.WASI{}); err != nil {
			return err
		}
	}
	orig := v.fs.orig
	if err := v.fs.wipeScratch(v.scratch); err != nil {
		return err
	}
	var keep *fsGuard
	if len(v.mounts) == 0 && v.fs.unchanged() {
		keep = v.fs // renew keeps it: see unchanged
		keep.reuse()
	} else {
		v.fs.close()
	}
	*v = VM{e: v.e, handles: v.handles, mounts: v.mounts, scratch: v.scratch, scr: v.scr, fs: keep,
		home: v.home, toolsKey: v.toolsKey, ck: v.ck, orig: orig, jsvals: v.jsvals, group: v.group}
	clear(v.jsvals)
	v.e.rewinds.Add(1)
	return nil
}

// rewindable reports whether v has a checkpoint and its last eval ended
// cleanly, so that rewind may return it to the checkpoint.
func (v *VM) rewindable() bool {
	return v.ck != nil && v.cleanEnd && !v.abandoned.Load() && v.store != nil
}

// renew gives a rewound VM a new file-system guard and WASI context,
// made now so that a mount's host directory replaced while the VM waited
// is the one it opens, as a new VM would; unless rewind kept them (a VM
// without mounts whose guest left only the preopened directories open
// and stdout and stderr its own: see fsGuard.unchanged). The WASI
// context then holds what a new one would: its descriptors are the
// standard streams (custom writers that keep nothing) and the preopened
// scratch directory, wiped if anything was named in it; the guest has no
// stdin through WASI (Request.Stdin goes through the driver), and
// glovebox answers clock_time_get, random_get and poll_oneoff itself.
func (v *VM) renew() error {
	if v.fs == nil {
		fs, err := newFSGuard(v.scratch, v.mounts)
		if err != nil {
			return err
		}
		fs.orig = v.orig
		v.fs = fs
		if err := v.store.SetWASI(v.wasiConfig()); err != nil {
			return err
		}
	}
	v.monoBase, v.born, v.nextJS = v.ck.mono, time.Time{}, v.ck.nextJS
	return nil
}

// unchanged reports whether, in a VM without mounts whose scratch
// directory was just wiped, the guest left the guard as newFSGuard made
// it but for what reuse resets: its descriptors are exactly the
// preopened directories (onlyPreopens) and stdout and stderr are its own.
func (g *fsGuard) unchanged() bool {
	return g.onlyPreopens() && g.stdioGone == [3]bool{}
}

// reuse readies an unchanged guard for another eval: its quotas, its
// preopened directories' listing positions and its record of links made
// (their names were in the scratch directory, wiped) start afresh.
func (g *fsGuard) reuse() {
	g.reset(FSLimits{})
	g.links = nil
	for _, f := range g.fds {
		f.dirPos = dirPos{}
	}
}

// onlyPreopens reports whether the guest's descriptors beyond stdio are
// exactly the preopened directories the guard started with.
func (g *fsGuard) onlyPreopens() bool {
	if len(g.fds) != len(g.domains) {
		return false
	}
	for i := range g.domains {
		if f := g.fds[uint32(3+i)]; f == nil || f.domain != i || f.mirror != -1 {
			return false
		}
	}
	return true
}

// stateWriter scans the code the engine compiles (compileSource, the
// setjmp rewrite included) for an instruction that writes a table or
// drops a segment: "" if there is none, its name if there is, "?" if the
// code could not be read. Rewriting and decoding every function takes
// about 0.3 s for ruby.wasm, so it runs when a snapshot is built (the
// answer is cached with it), at most once per engine.
func (e *Engine) stateWriter() string {
	e.stateOnce.Do(func() {
		e.stateOp = "?"
		if m, err := e.compileSource(); err == nil {
			if op, _, err := m.StateWriter(); err == nil {
				e.stateOp = op
			}
		}
	})
	return e.stateOp
}

// toolsKey names a tool list for idleVMs.
func toolsKey(tools []string) string { return strings.Join(tools, "\x00") }

// ReuseStats reports how many VMs were rewound after a clean eval and how
// many evals took a rewound VM, since the engine opened (pools included).
func (e *Engine) ReuseStats() (rewound, reused uint64) { return e.rewinds.Load(), e.reuses.Load() }
