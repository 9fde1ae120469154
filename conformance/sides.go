package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/bytecodealliance/wasmtime-go/v39"
	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/internal/engine"
	"github.com/gloveboxhq/glovebox/internal/image"
)

// Guest paths of the suite on both sides.
const (
	guestSpec  = "/spec"
	guestMSpec = "/mspec"
	guestTmp   = glovebox.ScratchPath // "/tmp", the scratch directory on both sides
)

// A side runs the bootstrap program once and returns its standard output
// and, when the run did not end normally, why (timeout, memory, trap).
type side interface {
	name() string
	run(ctx context.Context, code string, timeout time.Duration) (stdout []byte, abnormal string, err error)
	close()
}

// gloveboxSide runs the program as a glovebox eval with the suite mounted
// read-only, everything else as a user gets it by default (limits, file
// quotas, the prelude, the scratch directory), except a longer timeout and
// room for the records on stdout.
type gloveboxSide struct{ rt *glovebox.Runtime }

func newGloveboxSide(ctx context.Context, suite string, jobs int, progress func(string)) (*gloveboxSide, error) {
	rt, err := glovebox.New(ctx, glovebox.Config{
		Mounts: []glovebox.Mount{
			{HostPath: filepath.Join(suite, "spec"), GuestPath: guestSpec},
			{HostPath: filepath.Join(suite, "mspec"), GuestPath: guestMSpec},
		},
		PoolSize: jobs,
		Logger:   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		// A first run fetches and compiles the image and builds a snapshot
		// for this mount layout (minutes): say so.
		Progress: func(step string) func() {
			progress("glovebox: " + step)
			return func() {}
		},
	})
	if err != nil {
		return nil, err
	}
	return &gloveboxSide{rt: rt}, nil
}

func (g *gloveboxSide) name() string { return "glovebox" }
func (g *gloveboxSide) close()       { g.rt.Close() }

func (g *gloveboxSide) run(ctx context.Context, code string, timeout time.Duration) ([]byte, string, error) {
	view, err := g.rt.WithLimits(glovebox.Limits{Timeout: timeout, Stdout: outputLimit, Stderr: 1 << 20})
	if err != nil {
		return nil, "", err
	}
	res, err := view.Eval(ctx, code)
	if err != nil {
		return nil, "", err
	}
	abnormal := ""
	if res.Status != glovebox.StatusOK {
		abnormal = string(res.Status)
		if res.Error != nil {
			abnormal += ": " + res.Error.Class + ": " + firstLine(res.Error.Message)
		}
	}
	if res.StdoutTruncated {
		abnormal += " (stdout truncated)"
	}
	return []byte(res.Stdout), abnormal, nil
}

// outputLimit bounds one run's standard output: a record is about 100
// bytes, and one shard reports at most a few thousand examples.
const outputLimit = 64 << 20

// baselineSide runs the same image under wasmtime's own WASI: the
// image's own entry points (_initialize, ruby-init with the argv glovebox
// boots Ruby with, then rb-eval-string-protect with the program), an empty
// environment,
// no stdin, and the same preopened directories in the same order (a fresh
// scratch directory at /tmp, then the suite read-only). No prelude, no
// wrappers around WASI calls, no quotas; the only limit is a deadline
// (epoch interruption), so a hung file cannot hang the run.
type baselineSide struct {
	suite  string
	engine *wasmtime.Engine
	module *wasmtime.Module
	stop   chan struct{}
	once   sync.Once
}

// baselineArgs is the argv glovebox boots Ruby with: ruby-init parses it
// (its -e program is compiled, not run), and the bootstrap is then
// evaluated through the image's eval export, as any embedder of this
// image does.
var baselineArgs = engine.BootArgs()

// epochTick is how often the baseline's epoch advances: its deadline's
// granularity.
const epochTick = 100 * time.Millisecond

func newBaselineSide(ctx context.Context, suite string, progress func(string)) (*baselineSide, error) {
	cacheDir, err := glovebox.DefaultCacheDir()
	if err != nil {
		return nil, err
	}
	img, err := image.Path(ctx, cacheDir)
	if err != nil {
		return nil, err
	}
	cfg := wasmtime.NewConfig()
	cfg.SetEpochInterruption(true)
	eng := wasmtime.NewEngineWithConfig(cfg)
	mod, err := loadBaselineModule(eng, img, filepath.Join(cacheDir, "conformance"), progress)
	if err != nil {
		return nil, err
	}
	b := &baselineSide{suite: suite, engine: eng, module: mod, stop: make(chan struct{})}
	go func() {
		t := time.NewTicker(epochTick)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				eng.IncrementEpoch()
			case <-b.stop:
				return
			}
		}
	}()
	return b, nil
}

// loadBaselineModule compiles the image for the baseline engine once and
// keeps the compiled code in dir, keyed by the image's hash and the
// wasmtime version; a cached file whose checksum does not match is
// compiled again.
func loadBaselineModule(eng *wasmtime.Engine, img, dir string, progress func(string)) (*wasmtime.Module, error) {
	wasm, err := os.ReadFile(img)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(wasm)
	key := hex.EncodeToString(sum[:8])
	path := filepath.Join(dir, "baseline-"+key+"-wasmtime39-epoch.cwasm")
	if b, err := os.ReadFile(path); err == nil {
		want, _ := os.ReadFile(path + ".sha256")
		got := sha256.Sum256(b)
		if string(want) == hex.EncodeToString(got[:]) {
			if m, err := wasmtime.NewModuleDeserialize(eng, b); err == nil {
				return m, nil
			}
		}
	}
	progress("compiling the image for the baseline (once; about a minute on 2 cores)")
	m, err := wasmtime.NewModule(eng, wasm)
	if err != nil {
		return nil, fmt.Errorf("compiling %s: %w", img, err)
	}
	if b, err := m.Serialize(); err == nil && os.MkdirAll(dir, 0o755) == nil {
		got := sha256.Sum256(b)
		if writeFileAtomic(path, b) == nil {
			writeFileAtomic(path+".sha256", []byte(hex.EncodeToString(got[:])))
		}
	}
	return m, nil
}

func writeFileAtomic(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

func (b *baselineSide) name() string { return "baseline" }
func (b *baselineSide) close()       { b.once.Do(func() { close(b.stop) }) }

// hostCallGrace is how long past its deadline a baseline run may stay in
// one host call (epoch interruption only stops wasm code: a guest sleeping
// in WASI's poll_oneoff is not woken) before it is abandoned: its thread
// goes on until the call returns and then traps, and the shard goes on
// without it.
var hostCallGrace = 30 * time.Second

func (b *baselineSide) run(ctx context.Context, code string, timeout time.Duration) ([]byte, string, error) {
	work, err := os.MkdirTemp("", "glovebox-rubyspec-")
	if err != nil {
		return nil, "", err
	}
	type result struct {
		out      []byte
		abnormal string
		err      error
	}
	ch := make(chan result, 1)
	go func() {
		out, abnormal, err := b.runIn(work, code, timeout)
		ch <- result{out, abnormal, err}
		os.RemoveAll(work)
	}()
	t := time.NewTimer(timeout + hostCallGrace)
	defer t.Stop()
	select {
	case r := <-ch:
		return r.out, r.abnormal, r.err
	case <-t.C:
		out, _ := os.ReadFile(filepath.Join(work, "stdout"))
		return out, "timeout (blocked in a host call; abandoned)", nil
	case <-ctx.Done():
		return nil, "", ctx.Err()
	}
}

// runIn runs code in a fresh store with its scratch directory and output
// files in work.
func (b *baselineSide) runIn(work, code string, timeout time.Duration) ([]byte, string, error) {
	scratch := filepath.Join(work, "tmp")
	if err := os.Mkdir(scratch, 0o700); err != nil {
		return nil, "", err
	}
	stdout := filepath.Join(work, "stdout")
	// No WASI argv and no environment, as glovebox's VMs have: this image
	// takes its arguments through ruby-init.
	w := wasmtime.NewWasiConfig()
	if err := w.SetStdoutFile(stdout); err != nil {
		return nil, "", err
	}
	if err := w.SetStderrFile(filepath.Join(work, "stderr")); err != nil {
		return nil, "", err
	}
	if err := w.PreopenDir(scratch, guestTmp, wasmtime.DIR_READ|wasmtime.DIR_WRITE, wasmtime.FILE_READ|wasmtime.FILE_WRITE); err != nil {
		return nil, "", err
	}
	for _, p := range [][2]string{{"spec", guestSpec}, {"mspec", guestMSpec}} {
		if err := w.PreopenDir(filepath.Join(b.suite, p[0]), p[1], wasmtime.DIR_READ, wasmtime.FILE_READ); err != nil {
			return nil, "", fmt.Errorf("preopening %s: %w", p[1], err)
		}
	}
	store := wasmtime.NewStore(b.engine)
	defer store.Close()
	store.SetWasi(w)
	store.SetEpochDeadline(uint64(timeout/epochTick) + 1)
	linker := wasmtime.NewLinker(b.engine)
	if err := linker.DefineWasi(); err != nil {
		return nil, "", err
	}
	// The image also imports the JavaScript host interface (rb-js-abi-host)
	// for its "js" library; under plain WASI a call to one traps, as it
	// would for any embedder without a JavaScript host.
	for _, imp := range b.module.Imports() {
		ft := imp.Type().FuncType()
		if imp.Module() == "wasi_snapshot_preview1" || ft == nil || imp.Name() == nil {
			continue
		}
		name := imp.Module() + "::" + *imp.Name()
		err := linker.FuncNew(imp.Module(), *imp.Name(), ft, func(*wasmtime.Caller, []wasmtime.Val) ([]wasmtime.Val, *wasmtime.Trap) {
			return nil, wasmtime.NewTrap("no JavaScript host: " + name)
		})
		if err != nil {
			return nil, "", err
		}
	}
	inst, err := linker.Instantiate(store, b.module)
	if err != nil {
		return nil, "", err
	}
	runErr := b.boot(store, inst, code)
	out, err := os.ReadFile(stdout)
	if err != nil {
		return nil, "", err
	}
	abnormal := ""
	if runErr != nil {
		var werr *wasmtime.Error
		var trap *wasmtime.Trap
		switch {
		case errors.As(runErr, &werr):
			if st, ok := werr.ExitStatus(); ok {
				if st != 0 {
					abnormal = fmt.Sprintf("exit %d", st)
				}
				break
			}
			abnormal = "error: " + trapReason(werr.Error())
		case errors.As(runErr, &trap):
			if c := trap.Code(); c != nil && *c == wasmtime.Interrupt {
				abnormal = "timeout"
			} else {
				abnormal = "trap: " + trapReason(trap.Message())
			}
		default:
			abnormal = "error: " + firstLine(runErr.Error())
		}
	}
	return out, abnormal, nil
}

// The image's exports a host drives it with (the ruby.wasm guest ABI).
const (
	exportInitialize = "_initialize"
	exportRealloc    = "cabi_realloc"
	exportInit       = "ruby-init: func(args: list<string>) -> ()"
	exportEval       = "rb-eval-string-protect: func(str: string) -> tuple<handle<rb-abi-value>, s32>"
)

// boot initialises Ruby with baselineArgs and evaluates code.
func (b *baselineSide) boot(store *wasmtime.Store, inst *wasmtime.Instance, code string) error {
	fn := func(name string) (*wasmtime.Func, error) {
		f := inst.GetFunc(store, name)
		if f == nil {
			return nil, fmt.Errorf("the image lacks the export %q", name)
		}
		return f, nil
	}
	mem := inst.GetExport(store, "memory")
	if mem == nil || mem.Memory() == nil {
		return errors.New("the image exports no memory")
	}
	memory := mem.Memory()
	initf, err := fn(exportInitialize)
	if err != nil {
		return err
	}
	realloc, err := fn(exportRealloc)
	if err != nil {
		return err
	}
	rinit, err := fn(exportInit)
	if err != nil {
		return err
	}
	eval, err := fn(exportEval)
	if err != nil {
		return err
	}
	alloc := func(align, n int32) (int32, error) {
		v, err := realloc.Call(store, int32(0), int32(0), align, n)
		if err != nil {
			return 0, err
		}
		p := v.(int32)
		if p == 0 || int64(uint32(p))+int64(n) > int64(memory.DataSize(store)) {
			return 0, errors.New("guest allocation failed")
		}
		return p, nil
	}
	put := func(s string) (int32, error) {
		p, err := alloc(1, int32(len(s)+1))
		if err != nil {
			return 0, err
		}
		d := memory.UnsafeData(store)
		copy(d[uint32(p):], s)
		d[uint32(p)+uint32(len(s))] = 0
		return p, nil
	}
	if _, err := initf.Call(store); err != nil {
		return err
	}
	list, err := alloc(4, int32(8*len(baselineArgs)))
	if err != nil {
		return err
	}
	for i, a := range baselineArgs {
		p, err := put(a)
		if err != nil {
			return err
		}
		d := memory.UnsafeData(store)[uint32(list)+uint32(8*i):]
		binary.LittleEndian.PutUint32(d, uint32(p))
		binary.LittleEndian.PutUint32(d[4:], uint32(len(a)))
	}
	if _, err := rinit.Call(store, list, int32(len(baselineArgs))); err != nil {
		return err
	}
	p, err := put(code)
	if err != nil {
		return err
	}
	ret, err := eval.Call(store, p, int32(len(code)))
	if err != nil {
		return err
	}
	d := memory.UnsafeData(store)
	r := uint32(ret.(int32))
	if uint64(r)+8 > uint64(len(d)) {
		return errors.New("eval returned an address outside memory")
	}
	if state := int32(binary.LittleEndian.Uint32(d[r+4:])); state != 0 {
		return fmt.Errorf("an exception escaped the bootstrap (state %d)", state)
	}
	return nil
}

// trapReason shortens wasmtime's multi-line trap text (a first line, the
// wasm backtrace, then the cause) to its first and last lines.
func trapReason(msg string) string {
	// With RUST_BACKTRACE set, wasmtime appends the host's stack.
	msg, _, _ = strings.Cut(msg, "\nStack backtrace:")
	lines := strings.Split(strings.TrimSpace(msg), "\n")
	first, last := strings.TrimSpace(lines[0]), strings.TrimSpace(lines[len(lines)-1])
	if len(lines) == 1 || first == last {
		return firstLine(first)
	}
	return firstLine(first) + " … " + firstLine(last)
}
