package glovebox_test

import (
	"context"
	"strings"
	"testing"

	"github.com/gloveboxhq/glovebox"
)

// TestToolSession: calls from outside the VM go through the eval's call
// path: hooks, budgets (a spent budget answers every later call with the
// same abort), argument errors and the transcript.
func TestToolSession(t *testing.T) {
	ts := &glovebox.Toolset{}
	ts.Add("add", func(ctx context.Context, a glovebox.Args) (any, error) {
		return a.Positional[0].(int64) + a.Positional[1].(int64), nil
	})
	var before []string
	rt := newRuntime(t, glovebox.Config{Tools: ts, Limits: glovebox.Limits{ToolCalls: 3}, Hooks: glovebox.Hooks{
		BeforeCall: func(ctx context.Context, name string, a glovebox.Args) error {
			before = append(before, name)
			return nil
		}}})
	s := rt.ToolSession(0)
	ctx := context.Background()
	for _, tc := range []struct{ name, args, want string }{
		{"add", "[[2,3],{}]", "i\n5"},
		{"nope", "", "err\nUnknownToolError\nno tool named \"nope\" (tools: add)"},
		{"add", "[1", "err\nArgumentError\nmalformed call to \"add\""},
		{"add", "[[1,1],{}]", "abort\ntool_budget_exceeded\nthe eval made more than 3 tool calls"},
		{"add", "[[1,1],{}]", "abort\ntool_budget_exceeded\nthe eval made more than 3 tool calls"},
	} {
		got := string(s.Call(ctx, tc.name, []byte(tc.args)))
		if !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s %s: got %q, want %q…", tc.name, tc.args, got, tc.want)
		}
	}
	calls := s.Calls()
	if len(calls) != 4 || calls[0].Name != "add" || calls[0].Result != int64(5) {
		t.Errorf("transcript %+v", calls)
	}
	if strings.Join(before, ",") != "add" {
		t.Errorf("BeforeCall saw %v", before)
	}
	if !strings.HasPrefix(string(s.Transcript()), `[{"name":"add"`) {
		t.Errorf("transcript JSON %s", s.Transcript())
	}
	if newRuntime(t, glovebox.Config{}).ToolSession(0) != nil {
		t.Error("a session from a Runtime without tools")
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
