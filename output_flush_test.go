package glovebox_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox"
)

// Output the guest buffered (sync off, IO objects it made on fd 1 and 2)
// belongs to the result of the eval that wrote it, whatever ended it.
func TestBufferedOutputReported(t *testing.T) {
	var ts glovebox.Toolset
	must(t, ts.Func("ping", func() string { return "pong" }))
	r := newRuntime(t, glovebox.Config{Tools: &ts, Limits: glovebox.Limits{
		Timeout: 500 * time.Millisecond, Fuel: 200_000_000, ToolCalls: 2}})
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

// The message for a value nested too deep must not advise inspect, which
// crashes the VM on such data.
func TestDeepValueMessageAdvice(t *testing.T) {
	res := eval(t, rt, `a = []; 70.times { a = [a] }; a`)
	wantStatus(t, res, glovebox.StatusError)
	if res.Error.Class != "Glovebox::ValueError" || strings.Contains(res.Error.Message, "return its inspect") {
		t.Fatalf("error %+v", res.Error)
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
