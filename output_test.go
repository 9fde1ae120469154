// Output: truncation, floods, UTF-8, buffered output at the end of an eval, streaming writers.

package glovebox_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gloveboxhq/glovebox"
)

func TestOutputIsValidUTF8(t *testing.T) {
	res := eval(t, rt, `$stdout.write("ok \xff\xfe\xc3"); $stderr.write("\xff"); 1`)
	wantStatus(t, res, glovebox.StatusOK)
	if !utf8.ValidString(res.Stdout) || !utf8.ValidString(res.Stderr) || !strings.HasPrefix(res.Stdout, "ok ") {
		t.Fatalf("stdout %q stderr %q", res.Stdout, res.Stderr)
	}
}

func TestOutputTruncation(t *testing.T) {
	r := withLimits(t, glovebox.Limits{Stdout: 1000, Stderr: 100})
	res := eval(t, r, `2000.times { print "é" }; $stderr.print "x" * 500; 1`)
	wantStatus(t, res, glovebox.StatusOK)
	if !res.StdoutTruncated || !res.StderrTruncated {
		t.Fatalf("truncation flags %v %v", res.StdoutTruncated, res.StderrTruncated)
	}
	if !utf8.ValidString(res.Stdout) {
		t.Fatal("stdout cut inside a character")
	}
	body, marker, ok := strings.Cut(res.Stdout, "\n[glovebox: stdout truncated at 1000 bytes]")
	if !ok || len(body) > 1000 || len(body) < 998 || strings.Trim(body, "é") != "" || marker != "\n" {
		t.Fatalf("stdout %d bytes: %q...", len(res.Stdout), res.Stdout[len(res.Stdout)-60:])
	}
	if !strings.HasPrefix(res.Stderr, strings.Repeat("x", 100)+"\n[glovebox: stderr truncated") {
		t.Fatalf("stderr %q", res.Stderr)
	}
}

func TestOutputFloodEndsByTimeout(t *testing.T) {
	r := withLimits(t, glovebox.Limits{Timeout: 500 * time.Millisecond, Stdout: 4096})
	res := eval(t, r, `loop { print "x" * 4096 }`)
	wantStatus(t, res, glovebox.StatusTimeout)
	if !res.StdoutTruncated || len(res.Stdout) > 4096+100 {
		t.Fatalf("stdout %d bytes, truncated %v", len(res.Stdout), res.StdoutTruncated)
	}
}

// TestEvalWithOutputStreams: the writers see output while the eval runs
// (a tool the guest calls after printing finds it there), exactly the
// bytes the Result keeps.
func TestEvalWithOutputStreams(t *testing.T) {
	var out, errw syncBuffer
	var seen string
	var ts glovebox.Toolset
	ts.Func("peek", func() string { seen = out.String() + "|" + errw.String(); return "ok" })
	r := newRuntime(t, glovebox.Config{Tools: &ts, Limits: glovebox.Limits{Stdout: 10}})
	res, err := r.EvalWith(context.Background(), `print "before"; $stderr.print "e1"; peek; print "after-and-more"; 1`, glovebox.WithOutput(&out, &errw))
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, glovebox.StatusOK)
	if seen != "before|e1" {
		t.Fatalf("during the eval the writers had %q", seen)
	}
	if out.String() != "beforeafte" || !res.StdoutTruncated || !strings.HasPrefix(res.Stdout, "beforeafte\n[glovebox:") || errw.String() != "e1" || res.Stderr != "e1" {
		t.Fatalf("writers %q %q; result %q %q", out.String(), errw.String(), res.Stdout, res.Stderr)
	}
	// Nil writers are allowed; output still lands in the Result.
	res, err = r.EvalWith(context.Background(), `print "x"; 1`, glovebox.WithOutput(nil, io.Discard))
	if err != nil || res.Stdout != "x" {
		t.Fatalf("%v %q", err, res.Stdout)
	}
}

// Output the guest buffered (sync off, IO objects it made on fd 1 and 2)
// belongs to the result of the eval that wrote it, whatever ended it.
func TestBufferedOutputReported(t *testing.T) {
	var ts glovebox.Toolset
	must(t, ts.Func("ping", func() string { return "pong" }))
	r := newRuntime(t, glovebox.Config{Tools: &ts, Limits: glovebox.Limits{
		Timeout: 2 * time.Second, Fuel: 200_000_000, ToolCalls: 2}})
	for _, c := range []struct {
		name, code     string
		status         glovebox.Status
		stdout, stderr string
	}{
		{"ok", `$stdout.sync = false; print "a"; :done`, glovebox.StatusOK, "a", ""},
		{"error", `$stdout.sync = false; print "a"; raise "boom"`, glovebox.StatusError, "a", ""},
		{"stderr", `$stderr.sync = false; $stderr.print "e"; 1`, glovebox.StatusOK, "", "e"},
		{"io_new", `io = IO.new(1); io.sync = false; io.print "n"; 1`, glovebox.StatusOK, "n", ""},
		{"for_fd_global", `$stdout = IO.for_fd(1); $stdout.sync = false; print "f"; 1`, glovebox.StatusOK, "f", ""},
		{"stderr_io_new", `e = IO.new(2); e.sync = false; e.print "x"; 1`, glovebox.StatusOK, "", "x"},
		{"timeout", `$stdout.sync = false; print "t"; sleep 5`, glovebox.StatusTimeout, "t", ""},
		{"fuel", `$stdout.sync = false; $stderr.sync = false; print "u"; $stderr.print "v"; loop { 1 + 1 }`, glovebox.StatusFuelExhausted, "u", "v"},
		{"tool_budget", `$stdout.sync = false; print "b"; 5.times { ping }`, glovebox.StatusToolBudgetExceeded, "b", ""},
		{"ensure_in_limit", `$stdout.sync = false; begin; sleep 5; ensure; print "z"; end`, glovebox.StatusTimeout, "", ""},
		{"stack_trap", `$stdout.sync = false; print "s"; ` + deepStackCode, glovebox.StatusError, "s", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := eval(t, r, c.code)
			wantStatus(t, res, c.status)
			if res.Stdout != c.stdout || res.Stderr != c.stderr {
				t.Fatalf("stdout %q stderr %q, want %q %q", res.Stdout, res.Stderr, c.stdout, c.stderr)
			}
		})
	}
}

// In a session no buffered byte surfaces in a later eval.
func TestSessionBufferedOutputStaysWithItsEval(t *testing.T) {
	s := newSession(t, rt)
	res := sessionEval(t, s, `$stdout.sync = false; $stderr.sync = false; print "one"; $stderr.print "e1"; 1`)
	if res.Stdout != "one" || res.Stderr != "e1" {
		t.Fatalf("first eval: stdout %q stderr %q", res.Stdout, res.Stderr)
	}
	res = sessionEval(t, s, `print "two"; 2`)
	if res.Stdout != "two" || res.Stderr != "" {
		t.Fatalf("second eval: stdout %q stderr %q", res.Stdout, res.Stderr)
	}
}

// A guest that replaces the flush cannot use the post-trap flush to call
// tools or to grow past its memory limit.
func TestFlushAfterTrapIsBounded(t *testing.T) {
	calls := 0
	var ts glovebox.Toolset
	must(t, ts.Func("ping", func() string { calls++; return "pong" }))
	r := newRuntime(t, glovebox.Config{Tools: &ts, Limits: glovebox.Limits{Fuel: 50_000_000, Memory: 512 << 20}})
	res := eval(t, r, `def Glovebox.__flush; ping; $big = "x" * (1 << 30); print "late"; end; loop {}`)
	wantStatus(t, res, glovebox.StatusFuelExhausted)
	if calls != 0 || strings.Contains(res.Stdout, "late") {
		t.Fatalf("the flush after the trap ran guest code unbounded: %d tool calls, stdout %q", calls, res.Stdout)
	}
	res = eval(t, r, `def Glovebox.__flush; $big = "x" * (1 << 30); print "late"; end; loop {}`)
	wantStatus(t, res, glovebox.StatusFuelExhausted)
	if strings.Contains(res.Stdout, "late") {
		t.Fatalf("the flush grew past the memory limit: stdout %q", res.Stdout)
	}
}
