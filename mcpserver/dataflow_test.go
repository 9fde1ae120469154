package mcpserver_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/mcpserver"
)

// The MCP server's results, text and structured content alike, carry
// tokens for labelled values; a session's token stays the same across
// calls, and a token the client writes back reaches a tool that accepts
// its kind as the value.
func TestLabelledResultsCarryTokens(t *testing.T) {
	const phone = "+1 (555) 010-7788"
	var got []string
	var ts glovebox.Toolset
	ts.Func("caller_id", func() string { return phone })
	ts.Func("dial", func(n string) string { got = append(got, n); return "ringing" })
	ts.Label("caller_id", glovebox.Label{Kind: glovebox.KindPhone, Path: "."})
	ts.Sink("dial", glovebox.SinkPolicy{Accepts: []glovebox.Kind{glovebox.KindPhone}})
	rt, err := glovebox.New(context.Background(), glovebox.Config{Tools: &ts, PoolSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	s, err := mcpserver.New(mcpserver.Options{Runtime: rt})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cs := connect(t, s, nil)
	var toks []string
	for range 2 {
		res := call(t, cs, mcpserver.ToolSession, `n = caller_id; puts n.delete("^0-9"); n`)
		b, _ := json.Marshal(res)
		if strings.Contains(string(b), "010-7788") || strings.Contains(string(b), "0107788") {
			t.Fatalf("the client read the number: %s", b)
		}
		v, _ := structured(t, res)["value"].(string)
		if !strings.HasPrefix(v, "[[phone:") {
			t.Fatalf("value %q, want a token", v)
		}
		toks = append(toks, v)
	}
	if toks[0] != toks[1] {
		t.Errorf("tokens %v: want one per value across the session's calls", toks)
	}
	res := call(t, cs, mcpserver.ToolSession, `dial("`+toks[0]+`")`)
	if len(got) != 1 || got[0] != phone || !strings.Contains(text(res), "ringing") {
		t.Errorf("dial received %q (result %s)", got, text(res))
	}
}
