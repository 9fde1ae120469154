package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
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

// Numbers and look-alike spellings of labelled values reach the client
// as tokens (issue 33: a card number as an Integer, a list of its
// groups, a full-width or Cyrillic email), in the text and the
// structured content alike, and a sink still refuses them.
func TestLabelledNumbersAndLookalikesCarryTokens(t *testing.T) {
	var sent []string
	var ts glovebox.Toolset
	ts.Func("account", func() map[string]string {
		return map[string]string{"card": "4111 1111 1111 1111", "email": "kim.novak@example.com"}
	})
	ts.Func("note", func(v any) string { sent = append(sent, fmt.Sprint(v)); return "noted" })
	ts.Label("account", glovebox.Label{Kind: glovebox.KindCard, Path: "card"}, glovebox.Label{Kind: glovebox.KindEmail, Path: "email"})
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
	for _, code := range []string{
		`a = account; a["card"].delete("^0-9").to_i`,
		`a = account; a["card"].scan(/\d{4}/).map(&:to_i)`,
		`a = account; puts a["card"].delete("^0-9").to_f; 1`,
		`a = account; a["email"].tr("!-~", "\uFF01-\uFF5E")`,
		`a = account; {"to" => a["email"].tr("aeo", "\u0430\u0435\u043E")}`,
		`a = account; note(a["card"].delete("^0-9").to_i) rescue $!.message`,
	} {
		res := call(t, cs, mcpserver.ToolRun, code)
		b, _ := json.Marshal(res)
		shown := strings.ToLower(string(b))
		for _, clear := range []string{"4111111111111111", "4111,1111", "kim", "ｋｉｍ", "novak", "example"} {
			if strings.Contains(shown, clear) {
				t.Errorf("%s: the client read %q: %s", code, clear, b)
			}
		}
		if !strings.Contains(shown, "[[card:") && !strings.Contains(shown, "[[email:") && !strings.Contains(shown, "may not receive card") {
			t.Errorf("%s: no token: %s", code, b)
		}
	}
	if len(sent) != 0 {
		t.Errorf("note received %q", sent)
	}
}
