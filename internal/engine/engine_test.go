package engine

import (
	"context"
	"fmt"
	"io"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox/internal/image"
	"github.com/gloveboxhq/glovebox/internal/wt"
)

var (
	testImage    string
	testCacheDir string // the shared engine cache (module, snapshot)
	testEngine   *Engine
)

func TestMain(m *testing.M) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	root := os.Getenv("GLOVEBOX_CACHE_DIR")
	if root == "" {
		d, err := os.UserCacheDir()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		root = filepath.Join(d, "glovebox")
	}
	var err error
	if testImage, err = image.Path(ctx, root); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testCacheDir = filepath.Join(root, "engine")
	testEngine, err = Open(ctx, Config{ImagePath: testImage, CacheDir: testCacheDir})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	testEngine.Close()
	os.Exit(code)
}

var testLimits = Limits{Timeout: 10 * time.Second, Memory: 1 << 30, Stdout: 1 << 20, Stderr: 1 << 16, Value: 1 << 20}

// corpus is run both in snapshot-restored VMs and in VMs booted from
// scratch; the results must be identical.
var corpus = []string{
	`1 + 1`,
	`puts "out"; $stderr.puts "err"; [1, 2.5, nil, true, "é", :s, 2**90]`,
	`{a: {b: [1, {c: 2}]}, "d" => 1..3}`,
	`raise KeyError, "missing"`,
	`def (`,
	`[RUBY_VERSION, RUBY_PLATFORM, Encoding.default_external.name, $LOAD_PATH.size, $LOADED_FEATURES.size]`,
	`[Object.constants.size, Kernel.private_instance_methods.size, defined?(JSON), Glovebox.singleton_methods.sort.first(3)]`,
	`require "set"; Set[1, 2].include?(2)`,
	`ObjectSpace.count_objects[:T_STRING] > 0`,
	`GC.start; GC.count >= 0`,
	`x = 3; 5.times { x *= x }; x.bit_length`,
	`"%05.1f|%-4s|%x" % [3.14159, "ab", 255]`,
	`Comparable.instance_method(:clamp).owner.name`,
	`exit 2`,
	`a = []; a << a; a`,
	`JSON.generate({"k" => [1, nil]})`,
	`ENV.to_h`,
}

func TestSnapshotMatchesBoot(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: boots Ruby once per corpus entry")
	}
	for _, code := range corpus {
		snap, err := testEngine.Eval(context.Background(), &Request{Code: code, Limits: testLimits})
		if err != nil {
			t.Fatal(err)
		}
		boot, err := testEngine.EvalBooted(context.Background(), &Request{Code: code, Limits: testLimits})
		if err != nil {
			t.Fatal(err)
		}
		if !sameOutcome(snap, boot) {
			t.Errorf("%s:\nsnapshot %+v value %#v error %+v\nbooted   %+v value %#v error %+v",
				code, snap, snap.Value, snap.Error, boot, boot.Value, boot.Error)
		}
	}
}

func sameOutcome(a, b *Outcome) bool {
	if a.Status != b.Status || string(a.Stdout) != string(b.Stdout) || string(a.Stderr) != string(b.Stderr) ||
		!reflect.DeepEqual(a.Error, b.Error) {
		return false
	}
	return fmt.Sprintf("%#v", normal(a.Value)) == fmt.Sprintf("%#v", normal(b.Value))
}

func normal(v any) any {
	if b, ok := v.(*big.Int); ok {
		return b.String()
	}
	if s, ok := v.([]any); ok {
		out := make([]any, len(s))
		for i := range s {
			out[i] = normal(s[i])
		}
		return out
	}
	return v
}

// cloneCache copies the shared cache's compiled module into a fresh
// directory, so a test can damage or change the rest without the cost of
// compiling again.
func cloneCache(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	entries, _ := filepath.Glob(filepath.Join(testCacheDir, "*", "module.cwasm"))
	if len(entries) == 0 {
		t.Fatal("no compiled module in the shared cache")
	}
	for _, src := range entries {
		dir := filepath.Join(dst, filepath.Base(filepath.Dir(src)))
		os.MkdirAll(dir, 0o755)
		for _, name := range []string{"module.cwasm", "module.cwasm.sum", "boot.mem"} {
			copyFile(t, filepath.Join(filepath.Dir(src), name), filepath.Join(dir, name))
		}
	}
	return dst
}

func copyFile(t *testing.T, src, dst string) {
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	out.Close()
}

func openAt(t *testing.T, dir string) *Engine {
	t.Helper()
	e, err := Open(context.Background(), Config{ImagePath: testImage, CacheDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func evalValue(t *testing.T, e *Engine, code string) any {
	t.Helper()
	out, err := e.Eval(context.Background(), &Request{Code: code, Limits: testLimits})
	if err != nil {
		t.Fatal(err)
	}
	if out.Status != StatusOK {
		t.Fatalf("%s: %s %+v", code, out.Status, out.Error)
	}
	return out.Value
}

func snapshotFiles(t *testing.T, dir string) []string {
	m, _ := filepath.Glob(filepath.Join(dir, "*", "snap-*", "memory.mem"))
	return m
}

func TestSnapshotCacheSurvivesCorruption(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: rebuilds the snapshot")
	}
	dir := cloneCache(t)
	e := openAt(t, dir) // builds the snapshot in dir
	e.Close()
	snaps := snapshotFiles(t, dir)
	if len(snaps) != 1 {
		t.Fatalf("snapshots %v", snaps)
	}
	damage := map[string]func(path string){
		"flipped byte": func(p string) {
			b, _ := os.ReadFile(p)
			b[len(b)/2] ^= 0xFF
			os.WriteFile(p, b, 0o644)
		},
		"truncated": func(p string) {
			b, _ := os.ReadFile(p)
			os.WriteFile(p, b[:len(b)/3], 0o644)
		},
		"bad state": func(p string) {
			os.WriteFile(filepath.Join(filepath.Dir(p), "state.json"), []byte("{not json"), 0o644)
		},
	}
	for name, f := range damage {
		t.Run(name, func(t *testing.T) {
			f(snaps[0])
			e := openAt(t, dir)
			defer e.Close()
			if v := evalValue(t, e, "6 * 7"); v != int64(42) {
				t.Fatalf("got %v", v)
			}
		})
	}
	// A damaged compiled module is detected before wasmtime sees it.
	mods, _ := filepath.Glob(filepath.Join(dir, "*", "module.cwasm"))
	b, _ := os.ReadFile(mods[0])
	b[len(b)/2] ^= 0xFF
	os.WriteFile(mods[0], b, 0o644)
	if _, err := loadModule(testEngine.wt, mods[0]); err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("damaged module loaded: %v", err)
	}
}

func TestPreludeChangeInvalidatesSnapshot(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: rebuilds the snapshot")
	}
	dir := cloneCache(t)
	saved := prelude
	t.Cleanup(func() { prelude = saved })
	prelude = saved + "\nGLOVEBOX_TEST_MARK = 1\n"
	e := openAt(t, dir)
	v := evalValue(t, e, "defined?(GLOVEBOX_TEST_MARK)")
	e.Close()
	if v != "constant" {
		t.Fatalf("changed prelude not in effect: %v", v)
	}
	prelude = saved
	e = openAt(t, dir)
	v = evalValue(t, e, "defined?(GLOVEBOX_TEST_MARK)")
	e.Close()
	if v != nil {
		t.Fatalf("old prelude's snapshot still used: %v", v)
	}
	if n := len(snapshotFiles(t, dir)); n != 2 {
		t.Fatalf("%d snapshots, want one per prelude", n)
	}
}

func TestMemImageRejectsDamage(t *testing.T) {
	mem := make([]byte, 3*65536)
	copy(mem[70000:], "hello")
	mem[196000] = 7
	b := encodeMemImage(mem)
	size, ranges, data, err := decodeMemImage(b)
	if err != nil || size != uint64(len(mem)) || len(ranges) != 2 || string(data[:5]) != "hello" {
		t.Fatalf("round trip: %v %d %v", err, size, ranges)
	}
	for i := range b {
		c := append([]byte(nil), b...)
		c[i] ^= 0x01
		if _, _, _, err := decodeMemImage(c); err == nil {
			t.Fatalf("damage at byte %d not detected", i)
		}
	}
	for n := range len(b) {
		if _, _, _, err := decodeMemImage(b[:n]); err == nil {
			t.Fatalf("truncation to %d bytes not detected", n)
		}
	}
}

func TestPerVMDeadlines(t *testing.T) {
	// A short deadline in one VM does not cut another VM short.
	done := make(chan *Outcome, 1)
	go func() {
		out, _ := testEngine.Eval(context.Background(), &Request{Code: "sleep 0.5; :long", Limits: testLimits})
		done <- out
	}()
	short := testLimits
	short.Timeout = 100 * time.Millisecond
	out, _ := testEngine.Eval(context.Background(), &Request{Code: "loop {}", Limits: short})
	if out.Status != StatusTimeout {
		t.Fatalf("short eval: %s", out.Status)
	}
	if long := <-done; long.Status != StatusOK || long.Value != "long" {
		t.Fatalf("long eval: %s %v %+v", long.Status, long.Value, long.Error)
	}
}

// snapshotBytes reconstructs the test engine's snapshot memory.
func snapshotBytes(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testEngine.base.dir, "memory.mem"))
	if err != nil {
		t.Fatal(err)
	}
	size, ranges, data, err := decodeMemImage(b)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, size)
	for _, r := range ranges {
		copy(want[r.off:], data[:r.len])
		data = data[r.len:]
	}
	return want
}

// A linear memory reused for a new VM is byte-for-byte the snapshot,
// whatever the previous guest wrote or grew.
func TestReusedMemoryIsClean(t *testing.T) {
	t.Run("PAGEMAP_SCAN", testReusedMemoryIsClean)
	// Last: once disabled, the ioctl stays off for the process.
	t.Run("pagemap entries", func(t *testing.T) {
		wt.DisablePagemapScan()
		testReusedMemoryIsClean(t)
	})
}

func testReusedMemoryIsClean(t *testing.T) {
	want := snapshotBytes(t)
	// The guest's evals run in a pool that frees each VM after its eval
	// (its idle list closed) rather than keeping it to rewind, in the
	// default memory group: so a freed VM's memory is reset and reused,
	// whatever other tests of the process left in the engine's idle
	// list (run alone, the engine's own list kept the VM, and no memory
	// was reused).
	p, err := testEngine.NewPool(context.Background(), 0, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.idle.close()
	for round := range 3 {
		v, err := testEngine.newVM(testEngine.base, nil, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		c := v.store.Context()
		got := v.mem.Data(c)
		if len(got) != len(want) {
			t.Fatalf("round %d: memory is %d bytes, snapshot %d", round, len(got), len(want))
		}
		if !bytesEqual(got, want) {
			var diffs []int
			for off := 0; off < len(got); off += 4096 {
				if string(got[off:off+4096]) != string(want[off:off+4096]) {
					diffs = append(diffs, off/4096)
				}
			}
			t.Fatalf("round %d: a new VM's memory differs from the snapshot in %d pages, first %v", round, len(diffs), diffs[:min(len(diffs), 10)])
		}
		// Dirty it thoroughly: the host writes a pattern over every page,
		// then the guest grows memory and fills it.
		for off := 0; off < len(got); off += 4096 {
			got[off] ^= 0x5A
			got[off+4095] = 0xA5
		}
		v.close()
		// A guest that grows memory and writes secrets everywhere.
		out, err := p.Eval(context.Background(), &Request{Code: `$s = "SECRET-" * 4_000_000; a = Array.new(100_000) { |i| "secret#{i}" }; $s.size`, Limits: testLimits})
		if err != nil || out.Status != StatusOK {
			t.Fatalf("round %d: %v %+v", round, err, out)
		}
		// An ordinary eval leaves its memory to be reset and reused (the
		// two above are dropped: one wrote too many pages, one grew), so
		// the next round's VM takes a reused memory.
		if out, err := p.Eval(context.Background(), &Request{Code: `$g = "SECRET"; 1 + 1`, Limits: testLimits}); err != nil || out.Status != StatusOK {
			t.Fatalf("round %d: %v %+v", round, err, out)
		}
	}
	if st := testEngine.MemoryStats(); st.Reused == 0 {
		t.Fatalf("no memory was reused: %+v", st)
	}
	// After all that, a fresh VM still starts from the snapshot exactly.
	time.Sleep(100 * time.Millisecond) // let the closers free the last VMs
	for range 4 {
		v, err := testEngine.newVM(testEngine.base, nil, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		if !bytesEqual(v.mem.Data(v.store.Context()), want) {
			t.Fatal("a VM made after dirty guests differs from the snapshot")
		}
		v.close()
	}
}

func bytesEqual(a, b []byte) bool { return len(a) == len(b) && string(a) == string(b) }

// TestCacheChecksOnce: a start whose cache files are unchanged since they
// were checked does not read them again (the stamps); a file changed in
// place or replaced since is checked, and a damaged one rebuilt, not run.
func TestCacheChecksOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: rebuilds the snapshot")
	}
	dir := cloneCache(t)
	openAt(t, dir).Close() // checks the module, builds and expands the snapshot
	before := fullChecks.Load()
	e := openAt(t, dir)
	if v := evalValue(t, e, "6 * 7"); v != int64(42) {
		t.Fatalf("got %v", v)
	}
	e.Close()
	if n := fullChecks.Load() - before; n != 0 {
		t.Fatalf("an unchanged cache was checked %d times on the second start", n)
	}
	raws, _ := filepath.Glob(filepath.Join(dir, "*", "snap-*", "memory.raw"))
	if len(raws) != 1 {
		t.Fatalf("expanded images %v", raws)
	}
	// The expanded image overwritten in place with other bytes of the same
	// size: its stamp no longer matches, so it is expanded again.
	b, err := os.ReadFile(raws[0])
	if err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = 0x5A
	}
	if err := os.WriteFile(raws[0], b, 0o644); err != nil {
		t.Fatal(err)
	}
	before = fullChecks.Load()
	e = openAt(t, dir)
	if v := evalValue(t, e, `"ok " + (6 * 7).to_s`); v != "ok 42" {
		t.Fatalf("got %v", v)
	}
	e.Close()
	if fullChecks.Load() == before {
		t.Fatal("a changed expanded image was used without a check")
	}
	// A damaged module that was stamped before is caught: its times changed.
	mods, _ := filepath.Glob(filepath.Join(dir, "*", "module.cwasm"))
	mb, _ := os.ReadFile(mods[0])
	mb[len(mb)/3] ^= 0xFF
	os.WriteFile(mods[0], mb, 0o644)
	if _, err := loadModule(testEngine.wt, mods[0]); err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("damaged module loaded: %v", err)
	}
}

// TestSnapshotWithoutExpansion: when the expanded memory image cannot be
// written (here a directory stands in its place, so the rename fails),
// the engine still opens, copying the image into memory, and evals are
// right.
func TestSnapshotWithoutExpansion(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds a snapshot")
	}
	dir := cloneCache(t)
	openAt(t, dir).Close()
	raws, _ := filepath.Glob(filepath.Join(dir, "*", "snap-*", "memory.raw"))
	if len(raws) != 1 {
		t.Fatalf("expanded images %v", raws)
	}
	os.Remove(raws[0])
	os.Remove(raws[0] + ".ok")
	if err := os.MkdirAll(filepath.Join(raws[0], "in-the-way"), 0o755); err != nil {
		t.Fatal(err)
	}
	e := openAt(t, dir)
	defer e.Close()
	if v := evalValue(t, e, "6 * 7"); v != int64(42) {
		t.Fatalf("got %v", v)
	}
}

// TestFailedOpenStopsTicker: an Open that fails after booting Ruby (here
// the snapshot cannot be written: a directory stands where it goes)
// returns an error and leaves no goroutine behind. Its epoch ticker used
// to run on, ticking the freed wasmtime engine: a crash (seen once, a
// nil engine in wasmtime_engine_increment_epoch) or a goroutine leaked.
func TestFailedOpenStopsTicker(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: boots Ruby")
	}
	dir := cloneCache(t)
	snap := filepath.Join(dir, filepath.Base(testEngine.cacheDir), "snap-"+cacheKey(Version, bootVersion, prelude, layoutKey(nil))[:16])
	if err := os.MkdirAll(filepath.Join(snap, "memory.mem", "in-the-way"), 0o755); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()
	e, err := Open(context.Background(), Config{ImagePath: testImage, CacheDir: dir})
	if err == nil {
		e.Close()
		t.Fatal("Open succeeded without a place for the snapshot")
	}
	time.Sleep(3 * epochTick)
	if after := runtime.NumGoroutine(); after > before {
		t.Fatalf("%d goroutines before the failed Open, %d after", before, after)
	}
}

// TestNoDescriptorLeaksToChildren: a process this one starts (a sandboxed
// command, an eval worker) inherits no descriptor of the engine's: the
// snapshot's memory image, compiled code or pagemap.
func TestNoDescriptorLeaksToChildren(t *testing.T) {
	evalOK(t, &Request{Code: "1+1", Limits: testLimits}) // the engine has its images open
	out, err := exec.Command("/bin/sh", "-c", "ls -l /proc/self/fd/").CombinedOutput()
	if err != nil {
		t.Fatal(err, string(out))
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "memory.raw") || strings.Contains(l, "memory-image") || strings.Contains(l, ".cwasm") || strings.Contains(l, "pagemap") {
			t.Errorf("a child inherits: %s", l)
		}
	}
}
