package engine

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gloveboxhq/glovebox/internal/wasmbin"
	"github.com/gloveboxhq/glovebox/internal/wt"
)

// Cache layout, under Config.CacheDir/<key>/ where key hashes the image,
// the wasmtime version, the engine settings and moduleVersion:
//
//	module.cwasm, module.cwasm.sum  compiled code and its CRC-32C
//	trampoline-<v>.cwasm (+ .sum)   the compiled WASI trampoline
//	boot.mem                        initial linear memory (memory image file)
//	snap-<key of Version and the prelude>/memory.mem   booted linear memory
//	snap-<prelude key>/memory.raw   the same, expanded: a sparse file of the
//	                                memory's size, mapped by every VM
//	snap-<prelude key>/state.json   captured globals and the hot page list
//	*.ok                            stamps of files checked (stamp_linux.go)
//
// Every file is written to a temporary name and renamed into place, so
// readers never see a partial file; a lock file serialises builders so
// parallel processes build once. A file that fails its checksum or does not
// parse is rebuilt.

// ruby-init arguments: no RubyGems (the guest has no gems to load), UTF-8
// as the default external encoding (as ruby.wasm's own JavaScript wrapper
// passes), and an empty -e script so ruby does not read a program from
// stdin.
var rubyArgs = []string{"ruby", "--disable-gems", "-EUTF-8", "-e_=0"}

func (e *Engine) load(ctx context.Context, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("glovebox: creating the cache directory: %w", err)
	}
	if err := checkCacheDir(dir); err != nil {
		return err
	}
	unlock, err := lockDir(ctx, dir)
	if err != nil {
		return err
	}
	defer unlock()

	var bootMem []byte
	modPath := filepath.Join(dir, "module.cwasm")
	e.module, err = loadModule(e.wt, modPath)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			e.log.Warn("glovebox: rebuilding the compiled module", "path", modPath, "reason", err)
		}
		// Not in the cache: the module shipped beside the binary (a
		// platform gem, a release archive), copied into the cache, else
		// a compile, cached.
		if e.module = e.installShipped(modPath); e.module == nil {
			done := e.cfg.Progress(e.compileStep())
			e.module, bootMem, err = e.compile()
			done()
			if err != nil {
				return err
			}
			if err := saveModule(e.module, modPath); err != nil {
				e.log.Warn("glovebox: cannot cache the compiled module", "err", err)
			}
		}
	}
	e.linker, err = wt.NewLinker(e.wt)
	if err != nil {
		return err
	}
	if e.wasi, err = wt.NewLinker(e.wt); err != nil {
		return err
	}
	// The trampoline is tiny, but compiling it still costs Cranelift's
	// start-up (5-12 ms here): it is cached like the guest.
	trampPath := filepath.Join(dir, "trampoline-"+trampolineVersion+".cwasm")
	if e.tramp, err = loadModule(e.wt, trampPath); err != nil {
		tramp, err := trampolineModule(e.wasm)
		if err != nil {
			return fmt.Errorf("glovebox: %w", err)
		}
		if e.tramp, err = wt.Compile(e.wt, tramp); err != nil {
			return fmt.Errorf("glovebox: compiling the WASI trampoline: %w", err)
		}
		if err := saveModule(e.tramp, trampPath); err != nil {
			e.log.Warn("glovebox: cannot cache the WASI trampoline", "err", err)
		}
	}
	if err := defineHost(e.linker, e.wasm); err != nil {
		return fmt.Errorf("glovebox: %w", err)
	}
	if e.pre, err = e.linker.Prepare(e.module); err != nil {
		return fmt.Errorf("glovebox: linking the guest image: %w", err)
	}

	e.bootPath = filepath.Join(dir, "boot.mem")
	if _, err := os.Stat(e.bootPath); err != nil && bootMem != nil {
		if err := writeAtomic(e.bootPath, encodeMemImage(bootMem)); err != nil {
			return fmt.Errorf("glovebox: caching the boot image: %w", err)
		}
	}

	e.cacheDir = dir
	e.base, err = e.snapshotLocked(nil)
	return err
}

// compile derives the module to compile from the image (compileSource,
// then the snapshot's memory split off) and compiles it; bootMem is the
// initial memory split off (boot.mem).
func (e *Engine) compile() (m *wt.Module, bootMem []byte, err error) {
	src, err := e.compileSource()
	if err != nil {
		return nil, nil, err
	}
	derived, bootMem, err := src.Split(globalPrefix)
	if err != nil {
		return nil, nil, fmt.Errorf("glovebox: preparing the guest image: %w", err)
	}
	if m, err = wt.Compile(e.wt, derived.Encode()); err != nil {
		return nil, nil, fmt.Errorf("glovebox: compiling the guest image: %w", err)
	}
	return m, bootMem, nil
}

// compileStep is the progress step of compiling the guest.
func (e *Engine) compileStep() string {
	return "compiling the " + e.variant() + "Ruby image (first run only)"
}

// variant names the engine's copy of the guest in progress steps: "" for
// the plain one, "fuel-metered " for the one evals with a fuel budget run.
func (e *Engine) variant() string {
	if e.cfg.NoFuel {
		return ""
	}
	return "fuel-metered "
}

// snapshotFor returns the snapshot for mounts' layout, loading it from
// the cache or building it (booting Ruby: about a second) on first use.
func (e *Engine) snapshotFor(ctx context.Context, mounts []Mount) (*snapshot, error) {
	e.snapMu.Lock()
	s := e.snaps[layoutKey(mounts)]
	e.snapMu.Unlock()
	if s != nil {
		return s, nil
	}
	unlock, err := lockDir(ctx, e.cacheDir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return e.snapshotLocked(mounts)
}

// snapshotLocked is snapshotFor with the cache directory locked.
func (e *Engine) snapshotLocked(mounts []Mount) (*snapshot, error) {
	key := layoutKey(mounts)
	e.snapMu.Lock()
	s := e.snaps[key]
	e.snapMu.Unlock()
	if s != nil {
		return s, nil
	}
	snapDir := filepath.Join(e.cacheDir, "snap-"+cacheKey(Version, bootVersion, prelude, key)[:16])
	s, err := e.loadSnapshot(snapDir, mounts)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			e.log.Warn("glovebox: rebuilding a boot snapshot", "dir", snapDir, "reason", err)
		}
		if err := e.buildSnapshot(snapDir, mounts); err != nil {
			return nil, err
		}
		if s, err = e.loadSnapshot(snapDir, mounts); err != nil {
			return nil, fmt.Errorf("glovebox: loading the snapshot just built: %w", err)
		}
	}
	e.snapMu.Lock()
	e.snaps[key] = s
	e.snapMu.Unlock()
	return s, nil
}

// lockDir takes an exclusive lock on dir's lock file, waiting for another
// process that holds it (it may be compiling) unless ctx ends first.
func lockDir(ctx context.Context, dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if errors.Is(err, unix.EROFS) {
		// A cache mounted read-only (an executor's eval worker): no one
		// writes it here, so there is nothing to exclude; what would need
		// building fails when written, with its own error.
		return func() {}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("glovebox: opening the cache lock: %w", err)
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { unix.Flock(int(f.Fd()), unix.LOCK_UN); f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			f.Close()
			return nil, fmt.Errorf("glovebox: locking the cache: %w", err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("glovebox: waiting for another process to fill the cache: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// writeAtomic writes data to path through a temporary file and a rename.
func writeAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		os.Remove(f.Name())
		return err
	}
	return nil
}

// checkCacheDir refuses a cache directory another user could write: it
// holds compiled machine code (module.cwasm) that this process maps and
// runs, checked only against a CRC-32C for damage, so whoever can write
// it runs code as this user. The directory (followed if a link) must be
// owned by this user or root and not writable by every user. A missing
// one passes (it is made 0755, ours). Group-writable directories pass:
// a group sharing a cache is a choice.
func checkCacheDir(dir string) error {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return nil
	}
	switch {
	case st.Mode&0o002 != 0:
		return fmt.Errorf("glovebox: the cache directory %s is writable by every user (mode %#o): anyone on this host could "+
			"put compiled code there that glovebox would run; use a directory only this user can write (chmod o-w), "+
			"or set GLOVEBOX_CACHE_DIR", dir, st.Mode&0o7777)
	case int(st.Uid) != os.Geteuid() && st.Uid != 0:
		return fmt.Errorf("glovebox: the cache directory %s belongs to uid %d, not to this user (uid %d) or root: "+
			"its owner could put compiled code there that glovebox would run; set GLOVEBOX_CACHE_DIR to a directory of this user's",
			dir, st.Uid, os.Geteuid())
	}
	return nil
}

// loadModule checks a compiled module against its checksum file before
// handing it to wasmtime, which would otherwise run whatever machine code
// the file holds.
func loadModule(eng *wt.Engine, path string) (*wt.Module, error) {
	sum, err := os.ReadFile(path + ".sum")
	if err != nil {
		return nil, err
	}
	want := strings.TrimSpace(string(sum))
	err = checkOnce(path, want, func() error {
		b, unmap, err := mapFile(path)
		if err != nil {
			return err
		}
		got := fmt.Sprintf("%08x %d", crc32.Checksum(b, castagnoli), len(b))
		unmap()
		if got != want {
			return fmt.Errorf("%w: compiled module checksum mismatch", errCorrupt)
		}
		// Read whole, the file sits in large folios: drop them so this
		// process maps only the code it runs (dropPageCache).
		dropPageCachePath(path)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return wt.DeserializeFile(eng, path)
}

func saveModule(m *wt.Module, path string) error {
	b, err := m.Serialize()
	if err != nil {
		return err
	}
	if err := writeAtomic(path, b); err != nil {
		return err
	}
	dropPageCachePath(path) // see dropPageCache: written whole, mapped in part
	sum := fmt.Sprintf("%08x %d", crc32.Checksum(b, castagnoli), len(b))
	if err := writeAtomic(path+".sum", []byte(sum+"\n")); err != nil {
		return err
	}
	// Written just now from b: the next start need not read it back.
	if id, err := identity(path); err == nil {
		writeStamp(path, id, sum)
	}
	return nil
}

// snapshotState is state.json.
type snapshotState struct {
	Version string            `json:"version"`
	Clock   uint64            `json:"monotonic_ns"` // the guest's monotonic clock at capture
	Globals map[string]string `json:"globals"`      // export name -> raw bits, decimal
	Hot     [][3]uint64       `json:"hot"`          // offset, length, 1 if written
	// StateWriter names an instruction of the guest's code that writes a
	// table or drops a segment ("" if none, "?" if the code could not be
	// read): VMs are rewound for reuse only without one (rewind.go).
	StateWriter string `json:"state_writer"`
}

func (e *Engine) loadSnapshot(dir string, mounts []Mount) (*snapshot, error) {
	b, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		return nil, err
	}
	var st snapshotState
	if err := json.Unmarshal(b, &st); err != nil || st.Version != Version {
		return nil, fmt.Errorf("%w: state.json", errCorrupt)
	}
	f, err := openRawImage(filepath.Join(dir, "memory.mem"), filepath.Join(dir, "memory.raw"))
	if err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, errCorrupt) {
		// The expansion could not be written (a full disk, say): copy the
		// image into memory as before instead.
		e.log.Warn("glovebox: mapping the snapshot from memory instead", "reason", err)
		f, _, err = loadMemImage(filepath.Join(dir, "memory.mem"))
	}
	if err != nil {
		return nil, err
	}
	size, _ := f.Stat()
	// The globals in the module's order, not the map's: a session's
	// state carries their values by position and hashes them in order
	// (baseHash), so every load must list them alike.
	var globals []globalValue
	gs, _ := e.wasm.Globals()
	for _, g := range gs {
		if !g.Mutable {
			continue
		}
		name := fmt.Sprintf("%s%d", globalPrefix, g.Index)
		bits, found := st.Globals[name]
		v, err := strconv.ParseUint(bits, 10, 64)
		if !found || err != nil {
			f.Close()
			return nil, fmt.Errorf("%w: global %q", errCorrupt, name)
		}
		globals = append(globals, globalValue{name, v})
	}
	if len(globals) != len(st.Globals) {
		f.Close()
		return nil, fmt.Errorf("%w: %d globals, want %d", errCorrupt, len(st.Globals), len(globals))
	}
	var hot []wt.Range
	for _, h := range st.Hot {
		if h[0]+h[1] > uint64(size.Size()) || h[0]+h[1] < h[0] {
			f.Close()
			return nil, fmt.Errorf("%w: hot range", errCorrupt)
		}
		hot = append(hot, wt.Range{Off: h[0], Len: h[1], Write: h[2] == 1})
	}
	img, err := wt.OpenImage(f, hot, KeptMemories())
	if err != nil {
		return nil, err
	}
	guests := []string{ScratchGuest}
	for _, m := range mounts {
		guests = append(guests, m.Guest)
	}
	return &snapshot{img: img, globals: globals, mono: st.Clock, dir: dir, guests: guests, rewindable: st.StateWriter == ""}, nil
}

// buildSnapshot boots the guest, runs the prelude, captures linear memory
// and globals, and learns which pages a typical eval writes.
func (e *Engine) buildSnapshot(dir string, mounts []Mount) error {
	step := "booting the " + e.variant() + "Ruby image to build its snapshot (first run only)"
	if len(mounts) > 0 {
		var guests []string
		for _, m := range mounts {
			guests = append(guests, m.Guest)
		}
		step = "booting the " + e.variant() + "Ruby image to build a snapshot for the mount layout " +
			strings.Join(guests, ", ") + " (once per layout)"
	}
	done := e.cfg.Progress(step)
	defer done()
	// Boot with the layout's guest paths over empty host directories.
	var bootMounts []Mount
	for _, m := range mounts {
		d, err := os.MkdirTemp("", "glovebox-boot-")
		if err != nil {
			return err
		}
		defer os.Remove(d)
		bootMounts = append(bootMounts, Mount{Host: d, Guest: m.Guest})
	}
	v, err := e.bootVM(bootMounts)
	if err != nil {
		return err
	}
	defer v.close()
	// The only host-side state a guest accumulates is its table of
	// channel answers; the snapshot would not carry it, so it must be empty.
	// (rb-abi-value handles are raw guest pointers and WASI state is made
	// fresh per store: boot leaves no other host state behind.)
	if len(v.jsvals) != 0 {
		return fmt.Errorf("glovebox: boot left %d host values the snapshot cannot carry", len(v.jsvals))
	}
	c := v.store.Context()
	mem := append([]byte(nil), v.mem.Data(c)...)
	e.sjljBooted(mem)
	if len(mem)%wasmbin.PageSize != 0 {
		return errors.New("glovebox: booted memory is not a whole number of pages")
	}
	st := snapshotState{Version: Version, Globals: map[string]string{}, Clock: v.monotonic(time.Now()), StateWriter: e.stateWriter()}
	gs, _ := e.wasm.Globals()
	for _, g := range gs {
		if !g.Mutable {
			continue
		}
		name := fmt.Sprintf("%s%d", globalPrefix, g.Index)
		bits, ok := v.inst.GlobalBits(c, name)
		if !ok {
			return fmt.Errorf("glovebox: cannot read global %s", name)
		}
		st.Globals[name] = strconv.FormatUint(bits, 10)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := writeAtomic(filepath.Join(dir, "memory.mem"), encodeMemImage(mem)); err != nil {
		return fmt.Errorf("glovebox: caching the snapshot: %w", err)
	}
	// Load what was just written and learn the hot pages from it.
	stTmp := st
	b, _ := json.Marshal(stTmp)
	if err := writeAtomic(filepath.Join(dir, "state.json"), b); err != nil {
		return err
	}
	snap, err := e.loadSnapshot(dir, mounts)
	if err != nil {
		return err
	}
	hot, err := e.learnHot(snap, bootMounts, mem)
	if err == nil {
		err = e.checkUnseeded(snap, bootMounts)
	}
	snap.img.Close()
	if err != nil {
		return fmt.Errorf("glovebox: the new snapshot does not work: %w", err)
	}
	st.Hot = hot
	b, _ = json.Marshal(st)
	return writeAtomic(filepath.Join(dir, "state.json"), b)
}

// bootImage loads the boot image on first use: only snapshot builds and
// boot-per-eval measurements need it.
func (e *Engine) bootImage() (*wt.Image, error) {
	e.bootOnce.Do(func() {
		f, _, err := loadMemImage(e.bootPath)
		if err != nil {
			// Absent when the compiled module came from beside the binary
			// (nothing was split off here): made now, quietly.
			if !errors.Is(err, os.ErrNotExist) {
				e.log.Warn("glovebox: rebuilding the boot image", "path", e.bootPath, "reason", err)
			}
			_, mem, serr := e.wasm.Split(globalPrefix)
			if serr != nil {
				e.bootErr = serr
				return
			}
			if err := writeAtomic(e.bootPath, encodeMemImage(mem)); err != nil {
				e.bootErr = fmt.Errorf("glovebox: caching the boot image: %w", err)
				return
			}
			if f, _, err = loadMemImage(e.bootPath); err != nil {
				e.bootErr = fmt.Errorf("glovebox: loading the boot image: %w", err)
				return
			}
		}
		e.boot, e.bootErr = wt.OpenImage(f, nil, 0)
	})
	return e.boot, e.bootErr
}

// bootVM instantiates the image from scratch and boots Ruby with the
// prelude, the way the snapshot was made.
func (e *Engine) bootVM(mounts []Mount) (*VM, error) {
	img, err := e.bootImage()
	if err != nil {
		return nil, err
	}
	// The booted guest's clock starts at one second; a snapshot records
	// where it got to.
	v := &VM{e: e, jsvals: map[uint32][]byte{}, monoBase: uint64(time.Second), born: time.Now(), env: gcEnv()}
	if err := v.setup(mounts); err != nil {
		return nil, err
	}
	inst, err := e.pre.InstantiateImage(v.store, img, 0)
	if err != nil {
		v.close()
		return nil, fmt.Errorf("glovebox: instantiating the guest image: %w", err)
	}
	if err := v.bind(inst); err != nil {
		v.close()
		return nil, err
	}
	if err := v.boot(); err != nil {
		v.close()
		return nil, fmt.Errorf("glovebox: booting Ruby: %w", err)
	}
	return v, nil
}

func (v *VM) boot() error {
	c := v.store.Context()
	if err := v.setFuel(bootFuel); err != nil {
		return err
	}
	v.limits = Limits{Timeout: bootTimeout}
	v.deadline = time.Now().Add(bootTimeout)
	c.SetEpochDeadline(1)
	v.e.ticker.start()
	defer v.e.ticker.stop()
	initf, ok := v.inst.Func(c, exportInitialize)
	rinit, ok2 := v.inst.Func(c, exportInit)
	if !ok || !ok2 {
		return errors.New("the guest image lacks _initialize or ruby-init")
	}
	if err := initf.Call(c, nil); err != nil {
		return err
	}
	list, err := v.alloc(c, 4, uint32(8*len(rubyArgs)))
	if err != nil {
		return err
	}
	for i, a := range rubyArgs {
		p, err := v.putString(c, []byte(a))
		if err != nil {
			return err
		}
		d, _ := v.guest(c, list+uint32(8*i), 8)
		binary.LittleEndian.PutUint32(d, p)
		binary.LittleEndian.PutUint32(d[4:], uint32(len(a)))
	}
	if err := rinit.Call(c, []uint64{uint64(list), uint64(len(rubyArgs))}); err != nil {
		return err
	}
	if len(v.env) > 0 { // read by ruby-init; the guest's environment stays empty
		var del strings.Builder
		for _, kv := range v.env {
			k, _, _ := strings.Cut(kv, "=")
			fmt.Fprintf(&del, "ENV.delete(%q)\n", k)
		}
		if _, err := v.evalString(c, del.String()+"nil"); err != nil {
			return fmt.Errorf("clearing the boot environment: %w", err)
		}
	}
	if err := v.alignClock(c); err != nil {
		return err
	}
	code := "eval(<<'GLOVEBOX_PRELUDE', TOPLEVEL_BINDING, '<glovebox>', 1)\n" + prelude + "GLOVEBOX_PRELUDE\nnil\n"
	if _, err := v.evalString(c, code); err != nil {
		return fmt.Errorf("running the prelude: %w", err)
	}
	// Run the per-VM preparation and the driver once, as every VM will,
	// so their method caches and lazily built tables are in the snapshot,
	// then collect the garbage that left. (Without the preparation here,
	// every VM's first one ran cold: 165 µs against 79 µs run again.)
	v.req = &warmRequest
	_, err = v.evalString(c, "Glovebox.__prepare\nGlovebox.__run\nGC.start\nnil")
	v.req = nil
	if err != nil {
		return fmt.Errorf("warming the driver: %w", err)
	}
	// Leave malloc heapHeadroom bytes of free heap: allocated and freed
	// again, the block stays in malloc's top chunk (wasm memory cannot
	// shrink, so wasi-libc's malloc never trims). Evals that allocate less
	// than that never grow linear memory, which a VM rewound for reuse
	// must not have done (rewind.go). The block is never written: it
	// stays zero, a hole in the snapshot file, and costs no host memory
	// until an eval uses it.
	if _, err := v.evalString(c, fmt.Sprintf("String.new(capacity: %d)\nnil", heapHeadroom)); err != nil {
		return fmt.Errorf("reserving heap headroom: %w", err)
	}
	if _, err := v.evalString(c, "GC.start\nnil"); err != nil {
		return fmt.Errorf("reserving heap headroom: %w", err)
	}
	return nil
}

// KeptMemories is how many freed linear memories a snapshot keeps, reset,
// for later VMs (wt.OpenImage's keep): 2 per CPU, and 8.
func KeptMemories() int { return 2*runtime.NumCPU() + 8 }

// heapHeadroom is the free malloc heap a snapshot leaves (see boot). It
// counts in the memory floor, but the guest's data uses it first.
const heapHeadroom = 32 << 20

// alignClock moves the guest's monotonic clock forward, if need be, past
// the start time wasi-libc recorded for its CPU-time emulation. The image
// was pre-initialised where it was built, so that record holds the build
// machine's clock (17 s in the image glovebox pins); below it, CPU time
// (Process.times, CLOCK_PROCESS_CPUTIME_ID) would come out negative.
func (v *VM) alignClock(c wt.Context) error {
	h, err := v.evalString(c, "Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID, :nanosecond).to_s")
	if err != nil {
		return fmt.Errorf("reading the guest's CPU clock: %w", err)
	}
	b, err := v.readString(c, h, 64)
	if err != nil {
		return err
	}
	// The guest computes it in floating point from an unsigned difference,
	// so a clock behind the start shows as a little under 2^64.
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return fmt.Errorf("reading the guest's CPU clock: %q", b)
	}
	if f > 1<<63 { // start lies ahead of our clock by 2^64 - f
		v.monoBase += uint64(math.Exp2(64)-f) + uint64(time.Second)
	}
	return nil
}

// bootVersion names the boot procedure (what boot runs before the
// snapshot is taken); it keys the snapshot with Version and the prelude.
const bootVersion = "boot-7"

const (
	bootFuel    = 1 << 40
	bootTimeout = 5 * time.Minute // the first boot on a slow machine is slow
)

// warmCorpus is run, each in a fresh VM, to learn which snapshot pages a
// typical eval writes; those are copied up front when a VM is made.
var warmCorpus = []string{
	"1 + 1",
	`puts "hello"; [1, 2, 3].map { |x| x * 2 }.sum`,
	`h = { "a" => 1, b: [1.5, nil, true] }; h.to_a.flatten.compact.size`,
	`begin; raise ArgumentError, "x"; rescue => e; e.message; end`,
	`s = +""; 100.times { |i| s << i.to_s }; s.size`,
	`require "json"; JSON.generate({ "x" => [1, 2] })`,
	`def f(n) = n < 2 ? n : f(n - 1) + f(n - 2); f(15)`,
	`Struct.new(:a).new(1)`,
	`raise "boom"`,
}

// checkUnseeded makes sure Ruby's default random generator is not yet
// seeded in snapshot s, as prepared VMs start: Ruby seeds it from the
// host's entropy the first time a program uses it, so every VM, made or
// rewound (rewind.go), draws its own numbers. If the boot or the
// preparation had used it, every VM would draw the same sequence; two
// VMs drawing 62 bits each tell (by chance alike once in 2^62).
func (e *Engine) checkUnseeded(s *snapshot, mounts []Mount) error {
	var drawn [2]any
	for i := range drawn {
		v, err := e.prepared(s, mounts, nil, nil, nil)
		if err != nil {
			return err
		}
		out := v.run(context.Background(), &Request{Code: "rand(1 << 62)", Limits: warmRequest.Limits})
		v.close()
		if out.Status != StatusOK {
			return fmt.Errorf("rand ended %s: %v", out.Status, out.Error)
		}
		drawn[i] = out.Value
	}
	if drawn[0] == drawn[1] {
		return errors.New("Ruby's random generator is seeded in the snapshot: every VM would draw the same numbers")
	}
	return nil
}

func (e *Engine) learnHot(s *snapshot, mounts []Mount, snap []byte) ([][3]uint64, error) {
	dirty := map[uint64]bool{}
	for _, code := range warmCorpus {
		v, err := e.prepared(s, mounts, nil, nil, nil)
		if err != nil {
			return nil, err
		}
		out := v.run(context.Background(), &Request{Code: code, Limits: Limits{
			Timeout: 30 * time.Second, Memory: maxMemory, Stdout: 1 << 16, Stderr: 1 << 16, Value: 1 << 20,
		}})
		if out.Status != StatusOK && out.Status != StatusError {
			v.close()
			return nil, fmt.Errorf("warm-up eval %q ended %s: %v", code, out.Status, out.Error)
		}
		if code == "1 + 1" && (out.Status != StatusOK || fmt.Sprint(out.Value) != "2") {
			v.close()
			return nil, fmt.Errorf("1 + 1 gave %v %v", out.Status, out.Value)
		}
		d := v.mem.Data(v.store.Context())
		for off := 0; off+4096 <= len(snap) && off+4096 <= len(d); off += 4096 {
			if !dirty[uint64(off)] && string(d[off:off+4096]) != string(snap[off:off+4096]) {
				dirty[uint64(off)] = true
			}
		}
		v.close()
	}
	var out [][3]uint64
	for off := uint64(0); off < uint64(len(snap)); off += 4096 {
		if !dirty[off] {
			continue
		}
		if n := len(out); n > 0 && out[n-1][0]+out[n-1][1] == off {
			out[n-1][1] += 4096
		} else {
			out = append(out, [3]uint64{off, 4096, 1})
		}
	}
	return out, nil
}

// gcEnv is the environment Ruby boots with, read by ruby-init (CRuby's
// ruby_gc_set_params) and deleted from ENV right after, so the guest's
// environment stays empty. It lets the 24-byte heap (Floats: wasm32 has
// no flonums, so every Float is a heap object; also short Strings and
// Arrays) grow to 100,000 objects into new heap pages before it collects,
// where Ruby's default is 10,000: an eval that allocates fewer than about
// 90,000 small objects runs no GC, and a longer one collects a bigger
// heap, less often. The snapshot does not grow (Ruby allocates the pages
// when an eval needs them, 2.4 MB at most, from the free heap the snapshot
// leaves, heapHeadroom), but an eval that allocates that much writes those
// pages instead of reusing the few the GC would free, and the rewind must
// restore them. The measurements behind the figure are in RATIONALE.md,
// "Why does glovebox boot Ruby with a bigger GC allowance?".
func gcEnv() []string {
	return []string{"RUBY_GC_HEAP_0_INIT_SLOTS=100000"}
}
