package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
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
// the cache is taken from there instead of being compiled: its name
// carries the cache key (image hash, wasmtime version, engine settings,
// module derivation, target), its SHA-256 must be the one stamped into
// the binary (checked once per file version, the stamp kept in the
// cache), and wasmtime checks on deserializing that it was compiled by
// the same wasmtime with compatible settings for this CPU. A module that
// fails any check is compiled locally instead, with a log line saying
// why. See RATIONALE.md, "Why ship the compiled modules?".

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

// loadShipped returns the shipped module for this engine, or nil when
// none may be used, saying why on the log when there was one to use (or
// the binary is a release build, which should have one). stampDir holds
// the stamp of the hash check (the directory beside the binary may be
// read-only).
func (e *Engine) loadShipped(stampDir string) *wt.Module {
	sh := e.cfg.Shipped
	if sh == nil {
		sh = releaseShipped()
	}
	if sh == nil || len(sh.Sums) == 0 {
		return nil
	}
	name := e.shippedName()
	path := filepath.Join(sh.Dir, name)
	want, listed := sh.Sums[name]
	if !listed {
		// A release binary with modules for another image, another
		// wasmtime or other settings ($GLOVEBOX_IMAGE, a test's engine).
		e.log.Info("glovebox: no compiled module shipped for this image and configuration; compiling it here",
			"want", name, "dir", sh.Dir)
		return nil
	}
	m, err := openShipped(e.wt, path, want, filepath.Join(stampDir, "shipped-"+name+".ok"))
	if err != nil {
		e.log.Warn("glovebox: the compiled module shipped beside the binary cannot be used; compiling it here instead",
			"path", path, "reason", err.Error())
		return nil
	}
	e.log.Debug("glovebox: using the compiled module shipped beside the binary", "path", path)
	return m
}

// errShippedSum is openShipped's error for a file whose SHA-256 is not
// the one stamped into the binary.
var errShippedSum = errors.New("its SHA-256 is not the one this glovebox binary was released with")

// openShipped checks the file at path against want (its hex SHA-256),
// once per version of the file: stamp records the identity (device,
// inode, size, times) of the file that passed. It then has wasmtime
// deserialize the very file it checked (through /proc/self/fd), so a
// file renamed over it meanwhile is not the one loaded.
func openShipped(eng *wt.Engine, path, want, stamp string) (*wt.Module, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	id, err := fileIdentity(f)
	if err != nil {
		return nil, err
	}
	if !hasStampAt(stamp, id, want) {
		fullChecks.Add(1)
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			return nil, err
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != want {
			return nil, fmt.Errorf("%w (%s, want %s)", errShippedSum, got, want)
		}
		// Read whole: drop it from the page cache, so that the process
		// maps only the code it runs (dropPageCache).
		dropPageCache(f)
		if err := os.MkdirAll(filepath.Dir(stamp), 0o755); err == nil {
			writeStampAt(stamp, id, want)
		}
	}
	m, err := wt.DeserializeFile(eng, fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
	if err != nil {
		return nil, fmt.Errorf("wasmtime refused it: %w", err)
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
