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

// The JSON the model reads carries tokens for a labelled number sent as
// an Integer and for look-alike spellings (issue 33), and a value split
// over a call's Hash key and value is refused.
func TestLabelledNumbersLookalikesSplits(t *testing.T) {
	var ts glovebox.Toolset
	ts.Func("contact", func() map[string]string {
		return map[string]string{"email": "kim.novak@example.com", "phone": "+44 20 7946 0958"}
	})
	ts.Func("post", func(v any) string { return "posted" })
	ts.Label("contact", glovebox.Label{Kind: glovebox.KindEmail, Path: "email"}, glovebox.Label{Kind: glovebox.KindPhone, Path: "phone"})
	rt := codemodetest.Runtime(t, &ts, glovebox.Limits{})
	tool, err := codemode.New(codemode.Config{Runtime: rt})
	if err != nil {
		t.Fatal(err)
	}
	for _, code := range []string{
		`c = contact; [c["phone"].delete("^0-9").to_i, c["email"].tr("!-~", "\uFF01-\uFF5E"), c["email"].tr("aeo", "\u0430\u0435\u043E")]`,
		`c = contact; post({c["email"][0, 8] => c["email"][8..]})`,
	} {
		out, err := tool.Run(t.Context(), code)
		if err != nil {
			t.Fatal(err)
		}
		s := strings.ToLower(string(out.Output))
		for _, clear := range []string{"2079460958", "ｋｉｍ", "kim", "novak", "example"} {
			if strings.Contains(s, clear) {
				t.Errorf("%s: the model reads %q: %s", code, clear, out.Output)
			}
		}
		if !strings.Contains(s, "[[phone:") && !strings.Contains(s, "may not receive email") {
			t.Errorf("%s: the model reads %s", code, out.Output)
		}
	}
}
