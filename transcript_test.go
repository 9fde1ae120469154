// The tool-call transcript: its bound, its JSON shape, every outcome.

package glovebox_test

import (
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox"
)

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

// A call without keyword arguments (or without positional ones) writes
// {} (or []) in the transcript, never null.
func TestTranscriptEmptyArgsShape(t *testing.T) {
	var ts glovebox.Toolset
	ts.Func("ping", func() string { return "pong" })
	ts.Func("kw", func(o map[string]any) int { return len(o) })
	r := newRuntime(t, glovebox.Config{Tools: &ts})
	res := eval(t, r, `[ping, kw(a: 1)]`)
	wantStatus(t, res, glovebox.StatusOK)
	var out struct {
		ToolCalls []map[string]json.RawMessage `json:"tool_calls"`
	}
	b, _ := json.Marshal(res)
	if err := json.Unmarshal(b, &out); err != nil || len(out.ToolCalls) != 2 {
		t.Fatalf("%s: %v", b, err)
	}
	if a, k := string(out.ToolCalls[0]["args"]), string(out.ToolCalls[0]["kwargs"]); a != "[]" || k != "{}" {
		t.Errorf("ping: args %s kwargs %s, want [] and {}", a, k)
	}
	if a, k := string(out.ToolCalls[1]["args"]), string(out.ToolCalls[1]["kwargs"]); a != "[]" || k != `{"a":1}` {
		t.Errorf("kw: args %s kwargs %s", a, k)
	}
}

func TestTranscriptJSON(t *testing.T) {
	var ts glovebox.Toolset
	ts.Func("double", func(n int) int { return n * 2 })
	r := newRuntime(t, glovebox.Config{Tools: &ts})
	res := eval(t, r, `double(21) + (double("x") rescue 0)`)
	wantStatus(t, res, glovebox.StatusOK)
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		ToolCalls []struct {
			Name       string         `json:"name"`
			Args       []any          `json:"args"`
			Kwargs     map[string]any `json:"kwargs"`
			Result     any            `json:"result"`
			Error      string         `json:"error"`
			DurationMS *float64       `json:"duration_ms"`
		} `json:"tool_calls"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	c := out.ToolCalls
	if len(c) != 2 || c[0].Name != "double" || c[0].Result != 42.0 || c[0].Args[0] != 21.0 || c[0].DurationMS == nil ||
		c[1].Error == "" || c[1].Result != nil {
		t.Fatalf("tool_calls %s", b)
	}
}

// Every way a tool call ends is told apart in the transcript: a call
// vetoed by a hook or refused by an approver included.
func TestTranscriptOutcomes(t *testing.T) {
	var ts glovebox.Toolset
	ts.Func("fine", func() int { return 1 })
	ts.Func("fails", func() (int, error) { return 0, errors.New("no") })
	ts.Func("typed", func() (int, error) { return 0, &glovebox.ToolError{Class: "NotFoundError", Message: "gone"} })
	ts.Func("panics", func() int { panic("boom") })
	ts.Func("vetoed", func() int { return 1 })
	ts.Func("guarded", func() int { return 1 })
	ts.Func("typedarg", func(n int) int { return n })
	ts.Func("blocks", func(ctx context.Context) int { <-ctx.Done(); return 0 })
	ts.Func("big", func() string { return strings.Repeat("x", 2000) })
	must(t, ts.RequireApproval("guarded"))
	hooks := glovebox.Hooks{
		BeforeCall: func(ctx context.Context, name string, args glovebox.Args) error {
			if name == "vetoed" {
				return errors.New("not today")
			}
			return nil
		},
		Approver: func(ctx context.Context, tool string, args glovebox.Args) error { return errors.New("no, thanks") },
	}
	r := newRuntime(t, glovebox.Config{Tools: &ts, Hooks: hooks, PoolSize: -1, Limits: glovebox.Limits{ToolPayload: 1000}})
	res := eval(t, r, `
		%w[fine fails typed panics vetoed guarded big].each { |m| send(m) rescue nil }
		(Glovebox.call("nosuch") rescue nil)
		(typedarg("x") rescue nil)
		1`)
	wantStatus(t, res, glovebox.StatusOK)
	want := []glovebox.CallOutcome{glovebox.OutcomeOK, glovebox.OutcomeError, glovebox.OutcomeError, glovebox.OutcomePanic,
		glovebox.OutcomeVetoed, glovebox.OutcomeDenied, glovebox.OutcomeOversized, glovebox.OutcomeUnknownTool, glovebox.OutcomeInvalid}
	if len(res.ToolCalls) != len(want) {
		t.Fatalf("transcript %+v", res.ToolCalls)
	}
	for i, c := range res.ToolCalls {
		if c.Outcome != want[i] {
			t.Errorf("call %d (%s): outcome %q, want %q (error %q)", i, c.Name, c.Outcome, want[i], c.Error)
		}
	}
	b, err := json.Marshal(res.ToolCalls[4])
	must(t, err)
	if !strings.Contains(string(b), `"outcome":"vetoed"`) {
		t.Errorf("JSON of a vetoed call: %s", b)
	}

	short, err := r.WithLimits(glovebox.Limits{Timeout: 200 * time.Millisecond})
	must(t, err)
	res = eval(t, short, `blocks`)
	wantStatus(t, res, glovebox.StatusTimeout)
	if n := len(res.ToolCalls); n != 1 || res.ToolCalls[0].Outcome != glovebox.OutcomeTimeout {
		t.Errorf("timeout: transcript %+v", res.ToolCalls)
	}
	few, err := r.WithLimits(glovebox.Limits{ToolCalls: 1})
	must(t, err)
	res = eval(t, few, `fine; fine`)
	wantStatus(t, res, glovebox.StatusToolBudgetExceeded)
	if n := len(res.ToolCalls); n != 2 || res.ToolCalls[1].Outcome != glovebox.OutcomeBudgetExceeded {
		t.Errorf("budget: transcript %+v", res.ToolCalls)
	}
}
