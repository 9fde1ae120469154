package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"runtime"

	"github.com/gloveboxhq/glovebox/internal/shipped"
	"github.com/gloveboxhq/glovebox/internal/wt"
)

// Compiled modules shipped with the binary. A release (internal/release,
// `make gem`) compiles the guest for each platform with the binary it
// ships (Precompile), puts the files beside the binary (a platform gem's
// lib/glovebox/native/, a release archive's directory) and stamps their
// SHA-256 into that binary (shippedSums). At Open, a module missing from
// the cache is copied from there into the cache instead of being
// compiled: its name must carry the engine's cache key (image hash,
// wasmtime version, engine settings, module derivation, target), the
// bytes copied must have the SHA-256 stamped into the binary, and
// wasmtime checks on loading the copy that it was compiled by the same
// wasmtime with compatible settings for this CPU. A module that fails any
// check is compiled locally instead, with a log line saying why. See
// RATIONALE.md, "Why ship the compiled modules?".

// shippedSums is set by the release build (-ldflags -X, shipped.SumsVar):
// the shipped modules in shipped.Format's form. Empty in a build from
// source.
var shippedSums string

// Shipped names compiled modules shipped with the binary.
type Shipped struct {
	// Dir is the directory holding them.
	Dir string
	// Sums maps a file name (ShippedName's form) to the hex SHA-256 its
	// file must have; a file not listed is never used.
	Sums map[string]string
}

// releaseShipped is the Shipped of the running binary: its directory
// and the sums its release build stamped; nil when it has none.
func releaseShipped() *Shipped {
	sums := shipped.Parse(shippedSums)
	if len(sums) == 0 {
		return nil
	}
	exe, err := os.Executable()
	if err != nil {
		return nil
	}
	if p, err := filepath.EvalSymlinks(exe); err == nil {
		exe = p
	}
	return &Shipped{Dir: filepath.Dir(exe), Sums: sums}
}

// target is what compiled code is generated for.
type target struct {
	triple string // wt.EngineConfig.Target ("" for the host with its CPU's features)
}

// codegenTarget is the target the engine compiles for: the host's
// architecture with Cranelift's baseline features (SSE2 on x86-64), not
// the host CPU's, so that a module compiled on one machine — the release
// build's — loads on any CPU of the architecture, and a cache on a
// network file system serves every machine of it. What that costs in
// speed is measured in RATIONALE.md, "Why ship the compiled modules?".
func codegenTarget() target {
	return target{triple: wt.HostTriple()}
}

// key is the target's part of the cache key.
func (t target) key() string {
	if t.triple == "" {
		return runtime.GOOS + "-" + runtime.GOARCH + ";native"
	}
	return t.triple + ";baseline"
}

// variantName names the compiled variant in shipped file names: "plain"
// (no fuel), "metered" (glovebox's fuel rewrite) or "wasmtime-fuel".
func (e *Engine) variantName() string {
	switch {
	case e.cfg.NoFuel:
		return "plain"
	case e.meter:
		return "metered"
	}
	return "wasmtime-fuel"
}

// ShippedName is the file name of a shipped module for this engine:
// its variant and architecture for people, its cache key for the engine.
func (e *Engine) shippedName() string {
	return "ruby-" + e.variantName() + "-" + runtime.GOARCH + "-" + e.key[:24] + ".cwasm"
}

// installShipped copies the shipped module for this engine into the
// cache as path (module.cwasm, with its checksum file) and returns it
// loaded; nil when none may be used, saying why on the log when there
// was one to use (or the binary is a release build, which should have
// one). The copy is what was hashed: its bytes are checked against the
// binary's list while they are written, and wasmtime checks the copy
// before it takes the cache's name. From then on the cache serves it as
// it serves a module compiled here: every process of the machine
// (an executor's eval workers, which see the cache but not the gem)
// loads it from there.
func (e *Engine) installShipped(path string) *wt.Module {
	sh := e.cfg.Shipped
	if sh == nil {
		sh = releaseShipped()
	}
	if sh == nil || len(sh.Sums) == 0 {
		return nil
	}
	name := e.shippedName()
	src := filepath.Join(sh.Dir, name)
	want, listed := sh.Sums[name]
	if !listed {
		// A release binary with modules for another image, another
		// wasmtime or other settings ($GLOVEBOX_IMAGE, a test's engine).
		e.log.Info("glovebox: no compiled module shipped for this image and configuration; compiling it here",
			"want", name, "dir", sh.Dir)
		return nil
	}
	m, err := copyShipped(e.wt, src, want, path)
	if err != nil {
		e.log.Warn("glovebox: the compiled module shipped beside the binary cannot be used; compiling it here instead",
			"path", src, "reason", err.Error())
		return nil
	}
	e.log.Info("glovebox: using the compiled module shipped beside the binary", "path", src)
	return m
}

// errShippedSum is copyShipped's error for a file whose SHA-256 is not
// the one stamped into the binary.
var errShippedSum = errors.New("its SHA-256 is not the one this glovebox binary was released with")

// copyShipped copies the file at src to dst through a temporary file,
// checking its SHA-256 against want (hex) as it goes and then having
// wasmtime load the copy (its own check of version, settings and CPU
// features), and only then renames it into place beside its checksum
// file (saveModule's format).
func copyShipped(eng *wt.Engine, src, want, dst string) (*wt.Module, error) {
	in, err := os.Open(src)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	fullChecks.Add(1)
	out, err := os.CreateTemp(filepath.Dir(dst), filepath.Base(dst)+".tmp-*")
	if err != nil {
		return nil, err
	}
	tmp := out.Name()
	defer os.Remove(tmp) // gone by then when renamed
	h, crc := sha256.New(), crc32.New(castagnoli)
	n, err := io.Copy(io.MultiWriter(out, h, crc), in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return nil, fmt.Errorf("%w (%s, want %s)", errShippedSum, got, want)
	}
	m, err := wt.DeserializeFile(eng, tmp)
	if err != nil {
		return nil, fmt.Errorf("wasmtime refused it: %w", err)
	}
	sum := fmt.Sprintf("%08x %d", crc.Sum32(), n)
	if err := writeAtomic(dst+".sum", []byte(sum+"\n")); err != nil {
		m.Close()
		return nil, err
	}
	if err := os.Rename(tmp, dst); err != nil {
		m.Close()
		return nil, err
	}
	// Written whole: dropped from the page cache so that the process
	// maps only the code it runs (dropPageCache); and checked just now,
	// so the next start need not read it back.
	dropPageCachePath(dst)
	if id, err := identity(dst); err == nil {
		writeStamp(dst, id, sum)
	}
	return m, nil
}

// PrecompiledName is the file name Precompile would write for cfg,
// found without compiling.
func PrecompiledName(cfg Config) (string, error) {
	e, err := newEngine(cfg)
	if err != nil {
		return "", err
	}
	defer e.release()
	return e.shippedName(), nil
}

// Precompile compiles the guest as Open would for cfg (the image, fuel
// settings and this machine's architecture; its baseline CPU features)
// and writes it into dir under the name Open looks for among shipped
// modules. It returns that name. The release build runs it, through
// `glovebox precompile`, with the binary it ships: for another
// architecture under qemu-user, since wasmtime's library compiles for
// its own architecture only.
func Precompile(ctx context.Context, cfg Config, dir string) (string, error) {
	e, err := newEngine(cfg)
	if err != nil {
		return "", err
	}
	defer e.release()
	done := e.cfg.Progress(e.compileStep())
	m, _, err := e.compile()
	done()
	if err != nil {
		return "", err
	}
	defer m.Close()
	b, err := m.Serialize()
	if err != nil {
		return "", fmt.Errorf("glovebox: serializing the compiled guest: %w", err)
	}
	name := e.shippedName()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if err := writeAtomic(filepath.Join(dir, name), b); err != nil {
		return "", err
	}
	return name, ctx.Err()
}
