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

// TestShippedModuleUsed: with no compiled module in the cache, Open takes
// the one shipped beside the binary (its SHA-256 listed) instead of
// compiling, runs evals on it, caches nothing of it, and checks its hash
// once per file version.
func TestShippedModuleUsed(t *testing.T) {
	dir, name, sum := shipDir(t, testEngine)
	cache := cloneSnapshot(t)
	var logs logBuffer
	var steps []string
	cfg := Config{ImagePath: testImage, CacheDir: cache, Logger: logs.logger(),
		Shipped:  &Shipped{Dir: dir, Sums: map[string]string{name: sum}},
		Progress: func(s string) func() { steps = append(steps, s); return func() {} }}
	before := fullChecks.Load()
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
	if _, err := os.Stat(filepath.Join(cache, filepath.Base(testEngine.cacheDir), "module.cwasm")); err == nil {
		t.Error("the shipped module was copied into the cache")
	}
	if !strings.Contains(logs.String(), "using the compiled module shipped beside the binary") {
		t.Errorf("no log line says the shipped module was used:\n%s", logs.String())
	}
	if n := fullChecks.Load() - before; n < 1 {
		t.Errorf("%d full checks on the first start, want the shipped module's hash among them", n)
	}
	if _, err := os.Stat(filepath.Join(cache, filepath.Base(testEngine.cacheDir), "shipped-"+name+".ok")); err != nil {
		t.Errorf("no stamp of the shipped module's check in the cache: %v", err)
	}
	// A second start: the stamp in the cache says the file was checked.
	before = fullChecks.Load()
	e, err = Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.Close()
	if n := fullChecks.Load() - before; n != 0 {
		t.Errorf("%d full checks on the second start, want 0", n)
	}
}

// TestShippedModuleRefused: a shipped module that is not the one the
// binary lists (a changed byte), one wasmtime refuses, one missing and
// one not listed are not used; each but the last says why on the log.
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
			if m := e.loadShipped(t.TempDir()); m != nil {
				m.Close()
				t.Fatal("a module was loaded")
			}
			if !strings.Contains(logs.String(), c.want) {
				t.Errorf("log lacks %q:\n%s", c.want, logs.String())
			}
		})
	}
}

// TestShippedFileRecheckedWhenReplaced: a shipped file replaced after its
// check (a new inode) is checked again, not trusted on its stamp.
func TestShippedFileRecheckedWhenReplaced(t *testing.T) {
	e, err := newEngine(Config{ImagePath: testImage, CacheDir: testCacheDir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer e.release()
	dir, name, sum := shipDir(t, testEngine)
	e.cfg.Shipped = &Shipped{Dir: dir, Sums: map[string]string{name: sum}}
	stamps := t.TempDir()
	m := e.loadShipped(stamps)
	if m == nil {
		t.Fatal("the shipped module was not loaded")
	}
	m.Close()
	path := filepath.Join(dir, name)
	b, _ := os.ReadFile(path)
	b[len(b)/3] ^= 0x01
	tmp := path + ".new"
	os.WriteFile(tmp, b, 0o644)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	if m := e.loadShipped(stamps); m != nil {
		m.Close()
		t.Fatal("a replaced, changed module was loaded on the strength of the old file's stamp")
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
