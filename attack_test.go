package glovebox_test

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gloveboxhq/glovebox"
)

// Regression tests for attacks found by trying to break the sandbox.

// A guest cannot make the host hold its tool-call arguments: the
// transcript keeps at most MaxTranscriptData bytes of data, and calls to
// unknown tools keep none.
func TestTranscriptIsBounded(t *testing.T) {
	var ts glovebox.Toolset
	ts.Func("take", func(s string) int { return len(s) })
	r := newRuntime(t, glovebox.Config{Tools: &ts, Limits: glovebox.Limits{Timeout: 30 * time.Second}})
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	res := eval(t, r, `s = "x" * 1_000_000; 300.times { take(s) }; 200.times { Glovebox.call("nope", s) rescue nil }; :done`)
	wantStatus(t, res, glovebox.StatusOK)
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	kept := 0
	for _, c := range res.ToolCalls {
		if !c.Elided {
			kept++
		}
		if c.Name == "nope" && (c.Args.Positional != nil || !c.Elided) {
			t.Fatalf("an unknown tool's arguments were kept: %+v", c.Args)
		}
	}
	if len(res.ToolCalls) != 500 || kept > 2 {
		t.Fatalf("%d calls recorded, %d with data", len(res.ToolCalls), kept)
	}
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 64<<20 {
		t.Fatalf("the host heap grew by %d MiB holding the transcript", grew>>20)
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

// A tool that ignores its context does not hold the eval past its limits.
func TestToolIgnoringContextIsAbandoned(t *testing.T) {
	var ts glovebox.Toolset
	ts.Func("stubborn", func(ms int) string { time.Sleep(time.Duration(ms) * time.Millisecond); return "late" })
	r := newRuntime(t, glovebox.Config{Tools: &ts, Limits: glovebox.Limits{Timeout: 300 * time.Millisecond}})
	start := time.Now()
	res := eval(t, r, `stubborn(3000)`)
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("the eval waited %v for a tool that ignored its context", d)
	}
	wantStatus(t, res, glovebox.StatusTimeout)
	if !strings.Contains(res.Error.Message, "abandoned") {
		t.Fatalf("error %+v", res.Error)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start = time.Now()
	res, _ = withLimits(t, glovebox.Limits{Timeout: 10 * time.Second}).Eval(ctx, `Glovebox.call("missing") rescue 0; 1`)
	_ = res
	r2 := newRuntime(t, glovebox.Config{Tools: &ts, Limits: glovebox.Limits{Timeout: 10 * time.Second}})
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(150*time.Millisecond, cancel)
	start = time.Now()
	res, _ = r2.Eval(ctx, `stubborn(100); stubborn(3000)`)
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("cancellation waited %v", d)
	}
	wantStatus(t, res, glovebox.StatusCanceled)
}

// Once the guest was refused memory the eval ends memory_limit, even if it
// rescued; a NoMemoryError it raised itself is an ordinary error.
func TestMemoryLimitIsSticky(t *testing.T) {
	res := eval(t, rt, `a = []; begin; loop { a << ("x" * 10_000_000) }; rescue NoMemoryError; a = nil; end; :survived`)
	wantStatus(t, res, glovebox.StatusMemoryLimit)
	res = eval(t, rt, `raise NoMemoryError, "fake"`)
	wantStatus(t, res, glovebox.StatusError)
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

func TestOutputIsValidUTF8(t *testing.T) {
	res := eval(t, rt, `$stdout.write("ok \xff\xfe\xc3"); $stderr.write("\xff"); 1`)
	wantStatus(t, res, glovebox.StatusOK)
	if !utf8.ValidString(res.Stdout) || !utf8.ValidString(res.Stderr) || !strings.HasPrefix(res.Stdout, "ok ") {
		t.Fatalf("stdout %q stderr %q", res.Stdout, res.Stderr)
	}
}

// The guest's clocks are consistent with the snapshot and reveal nothing
// of the host process's age.
func TestClocks(t *testing.T) {
	res := eval(t, rt, `[Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID), Process.times.utime, Process.clock_gettime(Process::CLOCK_MONOTONIC), Time.now.to_f]`)
	wantStatus(t, res, glovebox.StatusOK)
	v := res.Value.([]any)
	cpu, utime, mono, now := v[0].(float64), v[1].(float64), v[2].(float64), v[3].(float64)
	if cpu < 0 || cpu > 3600 || utime < 0 || utime > 3600 || mono <= 0 || mono > 3600 {
		t.Fatalf("clocks %v", v)
	}
	if d := now - float64(time.Now().UnixNano())/1e9; d > 5 || d < -5 {
		t.Fatalf("real-time clock off by %v s", d)
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

// A VM waiting in a pool does not tell its eval how long it waited.
func TestClockStandsStillInPool(t *testing.T) {
	r := newRuntime(t, glovebox.Config{PoolSize: 1})
	eval(t, r, "1")
	time.Sleep(1500 * time.Millisecond) // the pooled VM waits
	res := eval(t, r, `Process.clock_gettime(Process::CLOCK_MONOTONIC)`)
	a := res.Value.(float64)
	time.Sleep(1500 * time.Millisecond)
	res = eval(t, r, `Process.clock_gettime(Process::CLOCK_MONOTONIC)`)
	if b := res.Value.(float64); b-a > 0.5 || a-b > 0.5 {
		t.Fatalf("monotonic clock read %v then %v across 1.5 s of pool waiting", a, b)
	}
}

// Tool names arrive clean, however the guest spells them.
func TestToolNamesAreSanitized(t *testing.T) {
	var ts glovebox.Toolset
	ts.Func("echo", func(x any) any { return x })
	r := newRuntime(t, glovebox.Config{Tools: &ts})
	res := eval(t, r, "Glovebox.__raw(\"call\\n\\xff\\x01bad\\n\") rescue nil; 1")
	wantStatus(t, res, glovebox.StatusOK)
	if len(res.ToolCalls) != 1 || !utf8.ValidString(res.ToolCalls[0].Name) || strings.ContainsRune(res.ToolCalls[0].Name, 1) {
		t.Fatalf("calls %+v", res.ToolCalls)
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
