package codemode_test

import (
	"strings"
	"testing"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/codemode"
	"github.com/gloveboxhq/glovebox/codemode/internal/codemodetest"
)

// With labelled tools, the description explains tokens and says which
// functions return and accept labelled kinds, and the JSON the model
// reads carries tokens only, in the value, stdout and errors alike.
func TestLabelledToolsGiveTokens(t *testing.T) {
	const email = "kim@example.com"
	var ts glovebox.Toolset
	ts.Func("contact", func() map[string]string { return map[string]string{"email": email} })
	ts.Func("lookup", func(e string) bool { return e == email })
	ts.Label("contact", glovebox.Label{Kind: glovebox.KindEmail, Path: "email"})
	ts.Sink("lookup", glovebox.SinkPolicy{Accepts: []glovebox.Kind{glovebox.KindEmail}})
	rt := codemodetest.Runtime(t, &ts, glovebox.Limits{})
	tool, err := codemode.New(codemode.Config{Runtime: rt})
	if err != nil {
		t.Fatal(err)
	}
	desc := tool.Description()
	for _, want := range []string{"[[email:7f3a]]", "Its results carry sensitive values (email)", "Accepts sensitive values (email)", "Glovebox::ToolDenied"} {
		if !strings.Contains(desc, want) {
			t.Errorf("the description lacks %q", want)
		}
	}
	out, err := tool.Run(t.Context(), `e = contact["email"]; puts e; warn e.upcase; [e, lookup(e)]`)
	if err != nil {
		t.Fatal(err)
	}
	if s := string(out.Output); strings.Contains(strings.ToLower(s), email) || !strings.Contains(s, "[[email:") || !strings.Contains(s, "true") {
		t.Errorf("the model reads %s", s)
	}
	out, err = tool.Run(t.Context(), `raise "cannot reach #{contact["email"]}"`)
	if err != nil {
		t.Fatal(err)
	}
	if s := string(out.Output); strings.Contains(s, email) || !strings.Contains(s, "cannot reach [[email:") {
		t.Errorf("the model reads %s", s)
	}
}
