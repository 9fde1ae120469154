// Escapes: processes, native code, host details in errors and backtraces, forged or malformed messages through the guest channel.

package glovebox_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox"
)

// Configurations that run a different guest image are different settings:
// their fingerprints differ.
func TestAttackFingerprintImage(t *testing.T) {
	a := glovebox.Config{}
	b := glovebox.Config{ImagePath: "/opt/other-ruby.wasm"}
	if a.Fingerprint() == b.Fingerprint() {
		t.Fatal("a different guest image has the same fingerprint")
	}
}

// Malformed calls are counted against the budget and recorded.
func TestMalformedCallsCount(t *testing.T) {
	var ts glovebox.Toolset
	ts.Func("echo", func(x any) any { return x })
	r := newRuntime(t, glovebox.Config{Tools: &ts, Limits: glovebox.Limits{ToolCalls: 5}})
	res := eval(t, r, `10.times { Glovebox.__raw("call\necho\n[1,") rescue nil }; :x`)
	wantStatus(t, res, glovebox.StatusToolBudgetExceeded)
	if len(res.ToolCalls) != 6 || !strings.Contains(res.ToolCalls[0].Error, "malformed call") {
		t.Fatalf("transcript %+v", res.ToolCalls)
	}
}

// The guest can replace the prelude's code; the host still enforces the
// value limits.
func TestForgedResultsAreChecked(t *testing.T) {
	r := withLimits(t, glovebox.Limits{Value: 1000})
	res := eval(t, r, `class String; def bytesize = 0; end; "z" * 500_000`)
	if res.Status == glovebox.StatusOK {
		t.Fatalf("a 500 KB value crossed a 1000-byte limit")
	}
	res = eval(t, rt, `def Glovebox.__data(v, d, s) = v; a = 1; 100.times { a = [a] }; a`)
	if res.Status == glovebox.StatusOK {
		t.Fatal("a value nested 100 deep crossed")
	}
	res = eval(t, rt, `2**40_000`)
	wantStatus(t, res, glovebox.StatusError)
	if res.Error.Class != "Glovebox::ValueError" || !strings.Contains(res.Error.Message, "pass it as a String") {
		t.Fatalf("error %+v", res.Error)
	}
	// A forged million-digit integer is refused, not parsed (parsing one
	// takes the host about 2 s).
	res = eval(t, rt, `S = %q({"status":"ok","value":1) + "7" * 1_000_000 + "}"; JSON.singleton_class.define_method(:generate) { |*a, **k| S }; 1`)
	if res.Status == glovebox.StatusOK || !strings.Contains(res.Error.Message, "integer too long") {
		t.Fatalf("status %s, error %+v", res.Status, res.Error)
	}
}

func TestCrashSaysWhy(t *testing.T) {
	res := eval(t, rt, `a = []; 200_000.times { a = [a] }; a.inspect.size`)
	if res.Status == glovebox.StatusOK {
		t.Skip("this Ruby survived deep inspect")
	}
	if res.Status == glovebox.StatusSandboxError && !strings.Contains(res.Error.Message, "unreachable") {
		t.Fatalf("crash message %q does not say why", res.Error.Message)
	}
}

func TestProcessCallsFail(t *testing.T) {
	for _, code := range []string{`Process.kill(9, Process.pid)`, `Process.wait`, `Process.detach(1)`} {
		res := eval(t, rt, code)
		if res.Status != glovebox.StatusError || res.Error.Class != "NotImplementedError" {
			t.Errorf("%s: %s %+v", code, res.Status, res.Error)
		}
	}
}

// A forged error result is capped by the host too.
func TestForgedErrorIsCapped(t *testing.T) {
	res := eval(t, rt, `S = JSON.generate({"status" => "error", "error" => {"class" => "C" * 100_000, "message" => "m" * 100_000, "backtrace" => ["f"] * 3000}}); JSON.singleton_class.define_method(:generate) { |*a, **k| S }; 1`)
	wantStatus(t, res, glovebox.StatusError)
	if len(res.Error.Class) > 256 || len(res.Error.Message) > 16<<10 || len(res.Error.Backtrace) > 50 {
		t.Fatalf("class %d bytes, message %d, %d frames", len(res.Error.Class), len(res.Error.Message), len(res.Error.Backtrace))
	}
}

func TestBacktraceHasNoHostPaths(t *testing.T) {
	res := eval(t, rt, `require "json"; JSON.parse("{")`)
	wantStatus(t, res, glovebox.StatusError)
	for _, f := range res.Error.Backtrace {
		if !strings.HasPrefix(f, "sandbox:") && !strings.HasPrefix(f, "/usr/local/lib/ruby/") {
			t.Errorf("unexpected frame %q", f)
		}
		for _, bad := range []string{"/root", "/home", "/tmp", "<glovebox>", "eval:", "-e:"} {
			if strings.Contains(f, bad) {
				t.Errorf("frame %q contains %q", f, bad)
			}
		}
	}
}

func TestSandboxErrorOnMalformedChannelMessage(t *testing.T) {
	res := eval(t, rt, `Glovebox.send(:__send, "no-such-op", "")`)
	wantStatus(t, res, glovebox.StatusSandboxError)
	if !strings.Contains(res.Error.Message, "unknown message") {
		t.Fatalf("error %+v", res.Error)
	}
}

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

// A trap's message never carries wasmtime's host-side Rust backtrace (it is
// appended when RUST_BACKTRACE is set in the host's environment, and names
// host paths) or NUL bytes. The zlib deflate-with-block path of the image
// traps with "indirect call type mismatch" under any WASI host (the
// baseline too), which makes it a convenient real trap.
func TestTrapMessageHasNoHostBacktrace(t *testing.T) {
	t.Setenv("RUST_BACKTRACE", "1")
	rt := newRuntime(t, glovebox.Config{})
	res, err := rt.Eval(context.Background(), `require "zlib"; d = Zlib::Deflate.new; c = []
d.deflate(Random.new(1).bytes(40000)) { |ch| c << ch }; d.finish.size`)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != glovebox.StatusSandboxError {
		t.Skipf("the image no longer traps here (status %s); the test needs another trap", res.Status)
	}
	msg := res.Error.Message
	if strings.Contains(msg, "\x00") || strings.Contains(msg, ".go:") || strings.Contains(msg, ".rs:") || strings.Contains(msg, os.Getenv("HOME")) {
		t.Errorf("trap message leaks host text: %q", msg)
	}
	if !strings.Contains(msg, "indirect call type mismatch") {
		t.Errorf("trap message lost its cause: %q", msg)
	}
}
