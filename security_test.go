package glovebox_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox"
)

// Each case is an escape or exhaustion attempt a guest might make. It must
// end with the given status (and, for StatusError, the given exception
// class) and leave the host untouched.
func TestEscapeAttempts(t *testing.T) {
	// A host file the guest must not see, and a canary it must not create.
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret.txt")
	os.WriteFile(secret, []byte("s3cret"), 0o600)
	canary := filepath.Join(dir, "canary")
	t.Setenv("GLOVEBOX_TEST_SECRET", "s3cret")

	cases := []struct {
		name, code string
		status     glovebox.Status
		class      string // for StatusError; "" accepts any
		value      any    // for StatusOK
	}{
		{"read /etc/passwd", `File.read("/etc/passwd")`, glovebox.StatusError, "Errno::ENOENT", nil},
		{"read a host file", `File.read(` + q(secret) + `)`, glovebox.StatusError, "Errno::ENOENT", nil},
		{"dot-dot", `File.read("../../../../etc/passwd")`, glovebox.StatusError, "Errno::ENOENT", nil},
		{"list root", `Dir.entries("/")`, glovebox.StatusError, "Errno::ENOENT", nil},
		{"write a file", `File.write(` + q(canary) + `, "x")`, glovebox.StatusError, "", nil},
		{"proc self", `File.read("/proc/self/environ")`, glovebox.StatusError, "Errno::ENOENT", nil},
		{"system", `system("touch ` + canary + `")`, glovebox.StatusError, "NotImplementedError", nil},
		{"backticks", "`touch " + canary + "`", glovebox.StatusError, "NotImplementedError", nil},
		{"%x", "%x(touch " + canary + ")", glovebox.StatusError, "NotImplementedError", nil},
		{"exec", `exec("touch", ` + q(canary) + `)`, glovebox.StatusError, "NotImplementedError", nil},
		{"spawn", `spawn("touch", ` + q(canary) + `)`, glovebox.StatusError, "NotImplementedError", nil},
		{"Process.spawn", `Process.spawn("true")`, glovebox.StatusError, "NotImplementedError", nil},
		{"IO.popen", `IO.popen("true").read`, glovebox.StatusError, "NotImplementedError", nil},
		{"open pipe", `open("|touch ` + canary + `")`, glovebox.StatusError, "Errno::ENOENT", nil},
		{"fork", `fork { }`, glovebox.StatusError, "NotImplementedError", nil},
		{"ENV contents", `ENV.to_h`, glovebox.StatusOK, "", map[string]any{}},
		{"ENV secret", `ENV["GLOVEBOX_TEST_SECRET"]`, glovebox.StatusOK, "", nil},
		{"fiddle", `require "fiddle"`, glovebox.StatusError, "LoadError", nil},
		{"socket", `require "socket"; TCPSocket.new("127.0.0.1", 22)`, glovebox.StatusError, "", nil},
		{"Thread.new", `Thread.new { 1 }.join`, glovebox.StatusError, "NotImplementedError", nil},
		{"exit", `exit 3`, glovebox.StatusError, "SystemExit", nil},
		{"exit!", `exit!(3)`, glovebox.StatusError, "SystemExit", nil},
		{"abort", `abort "bye"`, glovebox.StatusError, "SystemExit", nil},
		{"at_exit loop", `at_exit { loop {} }; :ok`, glovebox.StatusOK, "", "ok"},
		{"deep recursion", `def f(n) = f(n + 1); f(0)`, glovebox.StatusError, "SystemStackError", nil},
		{"deep block recursion", `pr = proc { |n| pr.(n + 1) }; pr.(0)`, glovebox.StatusError, "SystemStackError", nil},
		{"huge bignum", `2**(2**40)`, glovebox.StatusError, "ArgumentError", nil},
		{"bignum growth", `x = 3; loop { x *= x }`, glovebox.StatusMemoryLimit, "or timeout", nil},
		{"argv", `[ARGV, $0]`, glovebox.StatusOK, "", []any{[]any{}, "-e"}},
		{"JS bridge removed", `defined?(JS)`, glovebox.StatusOK, "", nil},
		// The JavaScript bridge's module is gone from the namespace but its
		// objects can be dug up; whatever they send is checked like any
		// other message.
		{"dug-up bridge: junk", `js = ObjectSpace.each_object(Module).find { _1.name == "JS" }; js.eval("junk")`, glovebox.StatusSandboxError, "", nil},
		{"dug-up bridge: global", `js = ObjectSpace.each_object(Module).find { _1.name == "JS" }; js.global`, glovebox.StatusSandboxError, "", nil},
		{"dug-up bridge: huge", `js = ObjectSpace.each_object(Module).find { _1.name == "JS" }; js.eval("call\n" + "x" * 50_000_000)`, glovebox.StatusToolBudgetExceeded, "", nil},
		{"dug-up bridge: bad call", `js = ObjectSpace.each_object(Module).find { _1.name == "JS" }; js.eval("call\nx\n[1,2").to_s.lines.first`, glovebox.StatusOK, "", "UnknownToolError\n"},
		{"syscall", `syscall(39)`, glovebox.StatusError, "NotImplementedError", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := rt
			if c.class == "or timeout" {
				r = withLimits(t, glovebox.Limits{Timeout: 2 * time.Second})
			}
			res := eval(t, r, c.code)
			if res.Status != c.status && !(c.class == "or timeout" && res.Status == glovebox.StatusTimeout) {
				t.Fatalf("status %s, want %s: %+v value %v", res.Status, c.status, res.Error, res.Value)
			}
			if c.status == glovebox.StatusError && c.class != "" && res.Error.Class != c.class {
				t.Fatalf("class %s (%s), want %s", res.Error.Class, res.Error.Message, c.class)
			}
			if c.status == glovebox.StatusOK && !equalValue(res.Value, c.value) {
				t.Fatalf("value %#v, want %#v", res.Value, c.value)
			}
			if _, err := os.Stat(canary); err == nil {
				t.Fatal("the guest created a file on the host")
			}
		})
	}
}

func q(s string) string { return "'" + strings.ReplaceAll(s, "'", `\'`) + "'" }

func equalValue(a, b any) bool {
	switch b := b.(type) {
	case map[string]any:
		m, ok := a.(map[string]any)
		return ok && len(m) == len(b)
	case []any:
		s, ok := a.([]any)
		if !ok || len(s) != len(b) {
			return false
		}
		for i := range s {
			if !equalValue(s[i], b[i]) {
				return false
			}
		}
		return true
	}
	return a == b
}

// Two evals never see each other's globals, constants, methods, monkey
// patches, files or random sequence.
func TestEvalsShareNoState(t *testing.T) {
	set := `$leak = 1; LEAK = 2; def leaked = 3; class String; def shout = upcase; end
		@ivar = 4; srand(42); File.write("/tmp/x", "y") rescue nil; Glovebox::MAX_DEPTH.then { }; :set`
	wantStatus(t, eval(t, rt, set), glovebox.StatusOK)
	res := eval(t, rt, `[$leak, defined?(LEAK), respond_to?(:leaked, true), "a".respond_to?(:shout), @ivar, File.exist?("/tmp/x")]`)
	wantStatus(t, res, glovebox.StatusOK)
	if !equalValue(res.Value, []any{nil, nil, false, false, nil, false}) {
		t.Fatalf("state leaked between evals: %v", res.Value)
	}
	// Each VM has its own random seed.
	seen := map[string]bool{}
	for range 5 {
		res := eval(t, rt, `require "securerandom"; [rand(2**62), Random.new_seed % 2**62, SecureRandom.hex(8)].inspect`)
		wantStatus(t, res, glovebox.StatusOK)
		s := res.Value.(string)
		if seen[s] {
			t.Fatalf("two VMs produced the same random values %s", s)
		}
		seen[s] = true
	}
}

// 200 consecutive evals that each trap leave the process healthy: no
// leaked goroutines, memory back near its baseline.
func TestTrappingEvalsLeakNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: slow")
	}
	r := withLimits(t, glovebox.Limits{Fuel: 2_000_000})
	codes := []string{"loop {}", "exit!(1)", "def f = f; f", `Glovebox.send(:__send, "x", "")`}
	runOnce := func(n int) {
		for i := range n {
			res := eval(t, r, codes[i%len(codes)])
			if res.Status == glovebox.StatusOK {
				t.Fatalf("%s ended ok", codes[i%len(codes)])
			}
		}
	}
	runOnce(20) // warm up pools and caches
	time.Sleep(200 * time.Millisecond)
	g0, rss0 := runtime.NumGoroutine(), rssBytes(t)
	runOnce(200)
	time.Sleep(500 * time.Millisecond) // let the closer free the VMs
	g1, rss1 := runtime.NumGoroutine(), rssBytes(t)
	if g1 > g0+2 {
		t.Errorf("goroutines grew from %d to %d", g0, g1)
	}
	if rss1 > rss0+64<<20 {
		t.Errorf("RSS grew from %d MiB to %d MiB over 200 trapping evals", rss0>>20, rss1>>20)
	}
	t.Logf("goroutines %d -> %d, RSS %d -> %d MiB", g0, g1, rss0>>20, rss1>>20)
}

func rssBytes(t testing.TB) int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		t.Skip("no /proc/self/statm")
	}
	var size, rss int64
	if _, err := fmtSscan(string(b), &size, &rss); err != nil {
		t.Fatal(err)
	}
	return rss * int64(os.Getpagesize())
}

// Many goroutines evaluating at once get correct, independent results.
func TestConcurrentEvals(t *testing.T) {
	var wg sync.WaitGroup
	errs := make(chan string, 100)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 6 {
				want := int64(g*100 + i)
				res, err := rt.Eval(context.Background(), "$x = "+itoa(want)+"; sleep 0.001; $x")
				if err != nil || res.Status != glovebox.StatusOK || res.Value != want {
					errs <- itoa(want)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Errorf("eval %s went wrong", e)
	}
}
