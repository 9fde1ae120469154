package boxtest

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/box"
)

// runtimeWith is a Runtime holding ts, closed after t.
func runtimeWith(t *testing.T, ts *glovebox.Toolset, hooks glovebox.Hooks) *glovebox.Runtime {
	t.Helper()
	rt, err := glovebox.New(context.Background(), glovebox.Config{Tools: ts, PoolSize: -1, Hooks: hooks})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt
}

// pingRuntime is a Runtime with one tool, for runs with a tool socket.
func pingRuntime(t *testing.T) *glovebox.Runtime {
	ts := &glovebox.Toolset{}
	ts.Add("ping", func(ctx context.Context, a glovebox.Args) (any, error) { return "pong", nil })
	return runtimeWith(t, ts, glovebox.Hooks{})
}

// tools: the tool socket and its client libraries.
func (s *suite) tools(t *testing.T) {
	// ToolsFromPython: positional and keyword arguments, a tool's error
	// as ToolError with its class, the list of tools; the transcript in
	// the Result and the Runtime's hooks see each call.
	s.sub(t, "ToolsFromPython", needs(Exec, Tools), func(t *testing.T, b box.Box) {
		ts := &glovebox.Toolset{}
		ts.Add("orders", func(ctx context.Context, a glovebox.Args) (any, error) {
			return map[string]any{"id": a.Positional[0], "status": a.Keyword["status"]}, nil
		})
		ts.Add("refund", func(ctx context.Context, a glovebox.Args) (any, error) {
			return nil, &glovebox.ToolError{Class: "NotFound", Message: "no such order"}
		})
		var seen []string
		rt := runtimeWith(t, ts, glovebox.Hooks{BeforeCall: func(ctx context.Context, name string, a glovebox.Args) error {
			seen = append(seen, name)
			return nil
		}})
		res := run(t, b, box.Command{Tools: rt.ToolSession(0), Argv: []string{"python3", "-c", `
from glovebox_tools import orders, refund, ToolError
import glovebox_tools
print(orders(42, status="open"))
try:
    refund()
except ToolError as e:
    print(e.klass, e)
print(glovebox_tools.tools())
`}})
		want := "{'id': 42, 'status': 'open'}\nNotFound no such order\n['orders', 'refund']\n"
		if res.Stdout != want {
			t.Fatalf("got %q, stderr %q", res.Stdout, res.Stderr)
		}
		var calls []map[string]any
		if err := json.Unmarshal(res.ToolCalls, &calls); err != nil || len(calls) != 2 || calls[0]["name"] != "orders" || calls[1]["error"] != "no such order" {
			t.Errorf("transcript %s (%v)", res.ToolCalls, err)
		}
		if strings.Join(seen, ",") != "orders,refund" {
			t.Errorf("BeforeCall saw %v", seen)
		}
	})
	s.sub(t, "ToolsFromRuby", needs(Exec, Tools), func(t *testing.T, b box.Box) {
		if _, err := os.Stat("/usr/bin/ruby"); err != nil {
			t.Skip("no /usr/bin/ruby on this host to run the Ruby client inside the box")
		}
		ts := &glovebox.Toolset{}
		ts.Add("double", func(ctx context.Context, a glovebox.Args) (any, error) { return a.Positional[0].(int64) * 2, nil })
		rt := runtimeWith(t, ts, glovebox.Hooks{})
		res := run(t, b, box.Command{Tools: rt.ToolSession(0), Argv: []string{"ruby", "-rglovebox_tools", "-e", "p GloveboxTools.double(21)"}})
		if res.Stdout != "42\n" {
			t.Errorf("%+v", res)
		}
	})
}
