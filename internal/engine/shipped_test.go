package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/gloveboxhq/glovebox/internal/shipped"
	"github.com/gloveboxhq/glovebox/internal/wt"
)

// shipDir makes a directory holding the shared cache's compiled module
// for cfg's engine under its shipped name, as a release packs it beside
// the binary, and returns it with the module's SHA-256.
func shipDir(t *testing.T, e *Engine) (dir, name, sum string) {
	t.Helper()
	dir = t.TempDir()
	name = e.shippedName()
	copyFile(t, filepath.Join(testEngine.cacheDir, "module.cwasm"), filepath.Join(dir, name))
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return dir, name, hex.EncodeToString(s[:])
}

// logBuffer is a slog text logger into a buffer, safe for concurrent use.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// cloneSnapshot copies the test engine's cache directory without its
// compiled module into a new cache root: the boot snapshot (so Open
// boots nothing) and boot.mem, as a cache that never compiled has them
// after a first start from a shipped module.
func cloneSnapshot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	dst := filepath.Join(root, filepath.Base(testEngine.cacheDir))
	snap := "snap-" + cacheKey(Version, bootVersion, prelude, layoutKey(nil))[:16]
	for _, f := range []string{"boot.mem", filepath.Join(snap, "memory.mem"), filepath.Join(snap, "state.json")} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dst, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		copyFile(t, filepath.Join(testEngine.cacheDir, f), filepath.Join(dst, f))
	}
	return root
}

// TestShippedModuleUsed: with no compiled module in the cache, Open
// takes the one shipped beside the binary (its SHA-256 listed) instead of
// compiling: it copies the bytes it checked into the cache, where the
// next start (and any other process of the machine) finds it.
func TestShippedModuleUsed(t *testing.T) {
	dir, name, sum := shipDir(t, testEngine)
	cache := cloneSnapshot(t)
	var logs logBuffer
	var steps []string
	cfg := Config{ImagePath: testImage, CacheDir: cache, Logger: logs.logger(),
		Shipped:  &Shipped{Dir: dir, Sums: map[string]string{name: sum}},
		Progress: func(s string) func() { steps = append(steps, s); return func() {} }}
	e, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if v := evalValue(t, e, "6 * 7"); v != int64(42) {
		t.Errorf("6 * 7 = %v", v)
	}
	e.Close()
	for _, s := range steps {
		if strings.HasPrefix(s, "compiling") {
			t.Errorf("Open compiled (%q) with a shipped module beside it; log:\n%s", s, logs.String())
		}
	}
	if !strings.Contains(logs.String(), "using the compiled module shipped beside the binary") {
		t.Errorf("no log line says the shipped module was used:\n%s", logs.String())
	}
	cached := filepath.Join(cache, filepath.Base(testEngine.cacheDir), "module.cwasm")
	b, err := os.ReadFile(cached)
	if err != nil {
		t.Fatalf("the shipped module was not copied into the cache: %v", err)
	}
	if s := sha256.Sum256(b); hex.EncodeToString(s[:]) != sum {
		t.Error("the cache's copy differs from the shipped module")
	}
	// The next start loads the cache's copy, even with the shipped file
	// gone, without checking it in full again.
	os.Remove(filepath.Join(dir, name))
	logs = logBuffer{}
	cfg.Logger = logs.logger()
	before := fullChecks.Load()
	e, err = Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.Close()
	if n := fullChecks.Load() - before; n != 0 {
		t.Errorf("%d full checks on the second start, want 0", n)
	}
	if strings.Contains(logs.String(), "shipped") {
		t.Errorf("the second start looked at the shipped module:\n%s", logs.String())
	}
}

// TestShippedModuleRefused: a shipped module that is not the one the
// binary lists (a changed byte), one wasmtime refuses, one missing and
// one not listed are not used, and nothing is left in the cache; each but
// the last says why on the log.
func TestShippedModuleRefused(t *testing.T) {
	e, err := newEngine(Config{ImagePath: testImage, CacheDir: testCacheDir})
	if err != nil {
		t.Fatal(err)
	}
	defer e.release()
	dir, name, sum := shipDir(t, testEngine)
	path := filepath.Join(dir, name)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	truncated := good[:len(good)/2]
	ts := sha256.Sum256(truncated)
	cases := []struct {
		name  string
		setup func()
		sums  map[string]string
		want  string
	}{
		{"tampered", func() {
			b := bytes.Clone(good)
			b[len(b)/3] ^= 0x01
			os.WriteFile(path, b, 0o644)
		}, map[string]string{name: sum}, "SHA-256 is not the one this glovebox binary was released with"},
		{"wasmtime refuses", func() { os.WriteFile(path, truncated, 0o644) },
			map[string]string{name: hex.EncodeToString(ts[:])}, "wasmtime refused it"},
		{"missing", func() { os.Remove(path) }, map[string]string{name: sum}, "no such file"},
		{"not listed", func() { os.WriteFile(path, good, 0o644) },
			map[string]string{"ruby-plain-" + runtime.GOARCH + "-000000000000000000000000.cwasm": sum}, "no compiled module shipped for this image"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.setup()
			var logs logBuffer
			e.log = logs.logger()
			e.cfg.Shipped = &Shipped{Dir: dir, Sums: c.sums}
			cache := t.TempDir()
			if m := e.installShipped(filepath.Join(cache, "module.cwasm")); m != nil {
				m.Close()
				t.Fatal("a module was loaded")
			}
			if !strings.Contains(logs.String(), c.want) {
				t.Errorf("log lacks %q:\n%s", c.want, logs.String())
			}
			if left, _ := os.ReadDir(cache); len(left) != 0 {
				t.Errorf("left in the cache: %v", left)
			}
		})
	}
}

// TestTargetInCacheKey: the cache key and the shipped name depend on the
// architecture, so a cache shared by x86-64 and arm64 machines keeps a
// module for each instead of recompiling back and forth.
func TestTargetInCacheKey(t *testing.T) {
	x, a := target{"x86_64-unknown-linux-gnu"}, target{"aarch64-unknown-linux-gnu"}
	if x.key() == a.key() || cacheKey("img", x.key()) == cacheKey("img", a.key()) {
		t.Fatal("the two architectures share a cache key")
	}
	if !strings.Contains(codegenTarget().key(), strings.Split(wt.HostTriple(), "-")[0]) {
		t.Errorf("the host's target key %q does not name its architecture", codegenTarget().key())
	}
	if !strings.Contains(testEngine.shippedName(), "-"+runtime.GOARCH+"-") || !strings.Contains(testEngine.shippedName(), testEngine.key[:24]) {
		t.Errorf("shipped name %q lacks the architecture or the key", testEngine.shippedName())
	}
	// wasmtime's library here compiles for the host only; another
	// architecture is an error, not an abort.
	other := a
	if runtime.GOARCH == "arm64" {
		other = x
	}
	if eng, err := wt.NewEngine(wt.EngineConfig{Target: other.triple}); err == nil {
		eng.Close()
		t.Errorf("an engine for %s was made on %s", other.triple, runtime.GOARCH)
	}
}

// TestShippedSumsVar: the symbol the release stamps is this package's
// variable (a rename would leave release binaries trusting nothing).
func TestShippedSumsVar(t *testing.T) {
	type probe struct{}
	if got := reflect.TypeOf(probe{}).PkgPath() + ".shippedSums"; got != shipped.SumsVar {
		t.Errorf("the release stamps %s; the variable is %s", shipped.SumsVar, got)
	}
	_ = shippedSums
}
