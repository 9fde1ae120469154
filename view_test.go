package glovebox_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox"
)

// Closing a view (the README's `defer quick.Close()`) closes that view
// only: the Runtime it came from and its other views go on.
func TestClosingAViewLeavesTheRuntimeOpen(t *testing.T) {
	r := newRuntime(t, glovebox.Config{PoolSize: -1})
	quick, err := r.WithLimits(glovebox.Limits{Timeout: 5 * time.Second})
	must(t, err)
	other, err := r.WithLimits(glovebox.Limits{Stdout: 100})
	must(t, err)
	inner, err := quick.WithLimits(glovebox.Limits{Stderr: 100})
	must(t, err)
	wantStatus(t, eval(t, quick, `1`), glovebox.StatusOK)
	must(t, quick.Close())
	must(t, quick.Close()) // idempotent

	wantStatus(t, eval(t, r, `1 + 1`), glovebox.StatusOK)
	wantStatus(t, eval(t, other, `1 + 1`), glovebox.StatusOK)
	s, err := r.NewSession()
	must(t, err)
	defer s.Close()
	wantStatus(t, sessionEval(t, s, `1`), glovebox.StatusOK)

	if quick.Stats() != (glovebox.Stats{}) {
		t.Errorf("Stats of a closed view: %+v, want zero", quick.Stats())
	}
	// The closed view, and views derived from it, refuse.
	for name, v := range map[string]*glovebox.Runtime{"closed view": quick, "view of it": inner} {
		if _, err := v.Eval(context.Background(), `1`); !errors.Is(err, glovebox.ErrClosed) {
			t.Errorf("%s: Eval = %v, want ErrClosed", name, err)
		}
		if _, err := v.NewSession(); !errors.Is(err, glovebox.ErrClosed) {
			t.Errorf("%s: NewSession = %v, want ErrClosed", name, err)
		}
		if _, err := v.WithLimits(glovebox.Limits{}); !errors.Is(err, glovebox.ErrClosed) {
			t.Errorf("%s: WithLimits = %v, want ErrClosed", name, err)
		}
	}

	// Closing the Runtime closes its views.
	must(t, r.Close())
	if _, err := other.Eval(context.Background(), `1`); !errors.Is(err, glovebox.ErrClosed) {
		t.Errorf("view of a closed Runtime: Eval = %v, want ErrClosed", err)
	}
}

// A per-call payload over Limits.ToolPayload (a 200,000-item result,
// the size of a large MCP answer, or arguments as large) is that call's
// error, Glovebox::ToolPayloadError, rescuable in the guest.
func TestOversizedPayloadIsRescuable(t *testing.T) {
	var ts glovebox.Toolset
	ts.Func("items", func(n int) []int {
		s := make([]int, n)
		for i := range s {
			s[i] = 1_000_000 + i // 8 bytes each, encoded: 1.6 MB for 200,000
		}
		return s
	})
	ts.Func("size", func(s string) int { return len(s) })
	r := newRuntime(t, glovebox.Config{Tools: &ts})
	res := eval(t, r, `
		out = []
		begin
		  items(200_000)
		rescue Glovebox::ToolError => e
		  out << [e.class.name, e.message, e.is_a?(Glovebox::ToolError)]
		end
		begin
		  size("x" * 1_100_000)
		rescue Glovebox::ToolPayloadError => e
		  out << [e.class.name, e.message]
		end
		out << items(3).size << size("abc")
		out`)
	wantStatus(t, res, glovebox.StatusOK)
	got := res.Value.([]any)
	if len(got) != 4 || got[2] != int64(3) || got[3] != int64(3) {
		t.Fatalf("value %v", res.Value)
	}
	first, second := got[0].([]any), got[1].([]any)
	if first[0] != "Glovebox::ToolPayloadError" || first[2] != true || !strings.Contains(first[1].(string), "over the 1048576-byte limit per call (Limits.ToolPayload)") {
		t.Errorf("oversized result: %v", first)
	}
	if second[0] != "Glovebox::ToolPayloadError" || !strings.Contains(second[1].(string), "size was passed 1100") {
		t.Errorf("oversized arguments: %v", second)
	}
	if len(res.ToolCalls) != 4 || res.ToolCalls[0].Outcome != glovebox.OutcomeOversized || res.ToolCalls[1].Outcome != glovebox.OutcomeOversized ||
		!res.ToolCalls[1].Elided || res.ToolCalls[2].Outcome != glovebox.OutcomeOK {
		t.Errorf("transcript %+v", res.ToolCalls)
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

// Through a ToolSession (a command in an OS box calling tools), an
// oversized call is an error frame for that call alone, not the abort
// that ends every later call.
func TestToolSessionOversizedArguments(t *testing.T) {
	var ts glovebox.Toolset
	ts.Func("size", func(s string) int { return len(s) })
	r := newRuntime(t, glovebox.Config{Tools: &ts, PoolSize: -1, Limits: glovebox.Limits{ToolPayload: 100}})
	s := r.ToolSession(0)
	big := `[["` + strings.Repeat("x", 200) + `"],{}]`
	if got := string(s.Call(context.Background(), "size", []byte(big))); !strings.HasPrefix(got, "err\nToolPayloadError\nsize was passed 209 bytes") {
		t.Errorf("oversized: %q", got)
	}
	if got := string(s.Call(context.Background(), "size", []byte(`[["abc"],{}]`))); got != "i\n3" {
		t.Errorf("next call: %q", got)
	}
	if c := s.Calls(); len(c) != 2 || c[0].Outcome != glovebox.OutcomeOversized || !c[0].Elided || c[1].Outcome != glovebox.OutcomeOK {
		t.Errorf("transcript %+v", c)
	}
}
