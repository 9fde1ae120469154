package glovebox_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox"
)

// lateRuntime has one tool, "charge", that counts its runs and needs
// approval when gated is set; its AfterCall hook hands each finished
// transcript entry to the returned channel (every call ends in one, run
// or not), so a test can wait for a call that outlived its eval.
func lateRuntime(t *testing.T, limits glovebox.Limits, hooks glovebox.Hooks, gated bool) (*glovebox.Runtime, *atomic.Int32, chan glovebox.ToolCall) {
	t.Helper()
	var runs atomic.Int32
	var ts glovebox.Toolset
	if err := ts.Func("charge", func(amount int) int { runs.Add(1); return amount }); err != nil {
		t.Fatal(err)
	}
	if gated {
		if err := ts.RequireApproval("charge"); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan glovebox.ToolCall, 8)
	hooks.AfterCall = func(_ context.Context, c glovebox.ToolCall) { done <- c }
	return newRuntime(t, glovebox.Config{Tools: &ts, Limits: limits, Hooks: hooks}), &runs, done
}

// waitEntry waits for the call's transcript entry: the late path has
// played out (the VM's goroutine may outlive the eval it served).
func waitEntry(t *testing.T, done chan glovebox.ToolCall) glovebox.ToolCall {
	t.Helper()
	select {
	case c := <-done:
		return c
	case <-time.After(30 * time.Second):
		t.Fatal("the call never finished")
	}
	return glovebox.ToolCall{}
}

// TestToolNotRunAfterHookOutlivedEval: a BeforeCall hook that ignores
// its context holds the call past the eval's deadline; Eval gives up on
// the VM and returns timeout; when the hook returns at last, the tool
// must not run (it did: the call went on to the tool after the eval had
// been reported over).
func TestToolNotRunAfterHookOutlivedEval(t *testing.T) {
	r, runs, done := lateRuntime(t, glovebox.Limits{Timeout: 300 * time.Millisecond}, glovebox.Hooks{
		BeforeCall: func(context.Context, string, glovebox.Args) error {
			time.Sleep(time.Second) // ignores its context
			return nil
		},
	}, false)
	res := eval(t, r, "charge(5)")
	wantStatus(t, res, glovebox.StatusTimeout)
	c := waitEntry(t, done)
	if runs.Load() != 0 {
		t.Fatalf("the tool ran %d times after its eval ended", runs.Load())
	}
	if c.Outcome != glovebox.OutcomeTimeout || !strings.Contains(c.Error, "did not run") {
		t.Fatalf("transcript entry %+v; want outcome timeout saying the tool did not run", c)
	}
}

// TestToolSessionApprovalAfterDeadlineNotRun: a ToolSession's deadline
// (a box command's, an executor eval's) does not stand still while the
// Approver decides; an approval that comes after it never runs the tool
// (it did: the wait was bounded only by ApprovalTimeout).
func TestToolSessionApprovalAfterDeadlineNotRun(t *testing.T) {
	r, runs, done := lateRuntime(t, glovebox.Limits{}, glovebox.Hooks{
		Approver: func(context.Context, string, glovebox.Args) error {
			time.Sleep(600 * time.Millisecond) // slower than the session's 200 ms, and ignores its context
			return nil
		},
	}, true)
	ts := r.ToolSession(200 * time.Millisecond)
	reply := string(ts.Call(context.Background(), "charge", []byte(`[[5],{}]`)))
	c := waitEntry(t, done)
	if runs.Load() != 0 {
		t.Fatalf("the tool ran after the session's deadline; reply %q", reply)
	}
	if !strings.HasPrefix(reply, "abort\ntimeout\n") || c.Outcome != glovebox.OutcomeTimeout || c.Approval != "denied" {
		t.Fatalf("reply %q, entry %+v; want a timeout abort, the call not run", reply, c)
	}
	// A call's context deadline (an executor's time_left_ms) is its own.
	ts = r.ToolSession(time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	reply = string(ts.Call(ctx, "charge", []byte(`[[6],{}]`)))
	waitEntry(t, done)
	if runs.Load() != 0 || !strings.HasPrefix(reply, "abort\ntimeout\n") {
		t.Fatalf("runs %d, reply %q: the call's own deadline was not kept", runs.Load(), reply)
	}
}

// TestApprovalAfterEvalEndedNotRun: in-process, an Approver that ignores
// its context and approves after the caller's context ended, or after
// Limits.ApprovalTimeout, never runs the tool.
func TestApprovalAfterEvalEndedNotRun(t *testing.T) {
	slow := glovebox.Hooks{Approver: func(context.Context, string, glovebox.Args) error {
		time.Sleep(600 * time.Millisecond)
		return nil
	}}
	r, runs, done := lateRuntime(t, glovebox.Limits{}, slow, true)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	res, err := r.Eval(ctx, "charge(5)")
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, glovebox.StatusCanceled)
	if c := waitEntry(t, done); runs.Load() != 0 || c.Outcome != glovebox.OutcomeCanceled {
		t.Fatalf("runs %d, entry %+v", runs.Load(), c)
	}
	r, runs, done = lateRuntime(t, glovebox.Limits{ApprovalTimeout: 200 * time.Millisecond}, slow, true)
	res = eval(t, r, "begin; charge(5); rescue Glovebox::ToolDenied => e; e.message; end")
	if c := waitEntry(t, done); runs.Load() != 0 || res.Value != "no decision within 200ms" || c.Approval != "denied" {
		t.Fatalf("runs %d, value %v, entry %+v", runs.Load(), res.Value, c)
	}
}
