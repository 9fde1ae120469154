package glovebox_test

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gloveboxhq/glovebox"
)

const (
	flowEmail = "Ada.Lovelace@example.org"
	flowPhone = "+1 (555) 010-2233"
	flowCard  = "4111 1111 1111 1111"
)

// flowTools has a labelled read tool "customer", a sink "post" that
// accepts nothing, a lookup tool "find" that accepts emails, and
// "notify", which sends forbidden kinds to approval. sent records what
// post and find received.
type flowTools struct {
	ts   glovebox.Toolset
	sent []string
	runs atomic.Int32
}

func newFlowTools(t *testing.T) *flowTools {
	t.Helper()
	f := &flowTools{}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(f.ts.Func("customer", func() map[string]any {
		return map[string]any{"name": "Ada", "email": flowEmail, "phone": flowPhone, "card": flowCard,
			"notes": []any{map[string]any{"body": "reach me at second@example.net please"}}}
	}))
	record := func(s string) string { f.runs.Add(1); f.sent = append(f.sent, s); return "sent" }
	must(f.ts.Func("post", func(s string) string { return record(s) }))
	must(f.ts.Func("find", func(s string) string { return record(s) }))
	must(f.ts.Func("notify", func(s string) string { return record(s) }))
	must(f.ts.Label("customer",
		glovebox.Label{Kind: glovebox.KindEmail, Path: "email"},
		glovebox.Label{Kind: glovebox.KindPhone, Path: "phone"},
		glovebox.Label{Kind: glovebox.KindCard, Path: "card"},
		glovebox.Label{Kind: glovebox.KindEmail, Find: glovebox.FindEmails}))
	must(f.ts.Sink("find", glovebox.SinkPolicy{Accepts: []glovebox.Kind{glovebox.KindEmail}}))
	must(f.ts.Sink("notify", glovebox.SinkPolicy{Approve: true}))
	return f
}

var tokenRE = regexp.MustCompile(`\[\[(email|phone|card):[0-9a-f]{4,}\]\]`)

// noSecrets fails when anything the result shows holds a labelled value.
func noSecrets(t *testing.T, res *glovebox.Result) {
	t.Helper()
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"Lovelace", "lovelace", "LOVELACE", "second@example.net", "010-2233", "0102233", "4111"} {
		if strings.Contains(string(b), s) {
			t.Errorf("the result shows %q: %s", s, b)
		}
	}
}

func TestDataflowTokensInValueStdoutErrorsTranscript(t *testing.T) {
	f := newFlowTools(t)
	r := newRuntime(t, glovebox.Config{Tools: &f.ts})
	res := eval(t, r, `c = customer
		p c["email"].chars; p c["email"].downcase.chars
		puts c["email"]; $stderr.puts c["phone"].delete("^0-9")
		[c["email"], c["email"].upcase, c["card"].delete(" "), c["notes"][0]["body"], c["name"], c["email"].chars, c["email"].bytes]`)
	wantStatus(t, res, glovebox.StatusOK)
	noSecrets(t, res)
	v := res.Value.([]any)
	if !tokenRE.MatchString(v[0].(string)) || v[0] != v[1] || !strings.HasPrefix(v[2].(string), "[[card:") || v[4] != "Ada" {
		t.Errorf("value %v: want the email's token twice (any case), the card's token and the name as it is", v)
	}
	if s, _ := v[5].(string); !tokenRE.MatchString(s) {
		t.Errorf("the email's characters reached the value as %v", v[5])
	}
	if s, _ := v[6].(string); !tokenRE.MatchString(s) {
		t.Errorf("the email's bytes reached the value as %v", v[6])
	}
	if strings.Contains(res.Stdout, `"L", "o"`) || strings.Contains(res.Stdout, `"l", "o"`) {
		t.Errorf("stdout shows the email's characters: %q", res.Stdout)
	}
	if !strings.Contains(v[3].(string), "[[email:") {
		t.Errorf("the email Find found in a note is not tokenized: %v", v[3])
	}
	if !tokenRE.MatchString(res.Stdout) || !strings.Contains(res.Stderr, "[[phone:") {
		t.Errorf("stdout %q, stderr %q: want tokens", res.Stdout, res.Stderr)
	}
	if got := res.Reveal(v[0].(string)); got != flowEmail {
		t.Errorf("Reveal(%s) = %q", v[0], got)
	}

	res = eval(t, r, `raise ArgumentError, "bad address #{customer["email"]}"`)
	wantStatus(t, res, glovebox.StatusError)
	noSecrets(t, res)
	if !strings.Contains(res.Error.Message, "[[email:") {
		t.Errorf("error %q: want the token", res.Error.Message)
	}

	// Other separators, hex with separators and byte codes are tokens in
	// the output too.
	res = eval(t, r, `c = customer; puts c["email"].upcase.chars.join("-"), c["email"].unpack1("H*").scan(/../).join(":"), c["email"].bytes.join(","), c["phone"].delete("^0-9").chars.join("_")`)
	wantStatus(t, res, glovebox.StatusOK)
	if rest := tokenRE.ReplaceAllString(res.Stdout, ""); rest != "\n\n\n\n" || len(tokenRE.FindAllString(res.Stdout, -1)) != 4 {
		t.Errorf("stdout %q: want four tokens, nothing else", res.Stdout)
	}
}

func TestDataflowProgramSeesValues(t *testing.T) {
	f := newFlowTools(t)
	r := newRuntime(t, glovebox.Config{Tools: &f.ts})
	res := eval(t, r, `e = customer["email"]; [e == "`+flowEmail+`", e.split("@").last, e.size]`)
	wantStatus(t, res, glovebox.StatusOK)
	v := res.Value.([]any)
	if v[0] != true || v[1] != "example.org" || v[2] != int64(len(flowEmail)) {
		t.Errorf("the program sees %v, want the real value", v)
	}
}

func TestDataflowSameTokenForSameValue(t *testing.T) {
	f := newFlowTools(t)
	r := newRuntime(t, glovebox.Config{Tools: &f.ts})
	res := eval(t, r, `[customer["email"], customer["email"], customer["phone"]]`)
	v := res.Value.([]any)
	if v[0] != v[1] || v[0] == v[2] {
		t.Errorf("tokens %v: the same value must give the same token, another value another", v)
	}
	s, err := r.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var toks []any
	for range 2 {
		res, err := s.Eval(t.Context(), `customer["email"]`)
		if err != nil {
			t.Fatal(err)
		}
		toks = append(toks, res.Value)
	}
	if toks[0] != toks[1] || !tokenRE.MatchString(toks[0].(string)) {
		t.Errorf("session tokens %v: want one token across evals", toks)
	}
	// The session's later eval can hand a token of an earlier one to a
	// tool that accepts its kind.
	res, err = s.Eval(t.Context(), `find("`+toks[0].(string)+`")`)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, glovebox.StatusOK)
	if len(f.sent) != 1 || f.sent[0] != flowEmail {
		t.Errorf("find received %q, want the real email", f.sent)
	}
}

func TestDataflowDetokenizeOnlyIntoPermittedTools(t *testing.T) {
	f := newFlowTools(t)
	r := newRuntime(t, glovebox.Config{Tools: &f.ts})
	tok := eval(t, r, `customer["email"]`).Value.(string)
	// A token of another eval is foreign: refused, not passed as a string.
	res := eval(t, r, `begin; find("`+tok+`"); rescue Glovebox::ToolDenied => e; e.message; end`)
	if s, _ := res.Value.(string); !strings.Contains(s, "did not issue") {
		t.Errorf("a foreign token gave %v, want a refusal", res.Value)
	}
	res = eval(t, r, `begin; find("[[email:0000]]"); rescue Glovebox::ToolDenied => e; e.message; end`)
	if s, _ := res.Value.(string); !strings.Contains(s, "did not issue") {
		t.Errorf("an unknown token gave %v, want a refusal", res.Value)
	}
	if len(f.sent) != 0 {
		t.Fatalf("tools ran with %q", f.sent)
	}
	// In one eval: the token reaches find as the value, and post not at all.
	res = eval(t, r, `c = customer
		[find(c["email"]), (post(c["email"]) rescue "#{$!.class}: #{$!.message}")]`)
	wantStatus(t, res, glovebox.StatusOK)
	v := res.Value.([]any)
	if msg, _ := v[1].(string); !strings.HasPrefix(msg, "Glovebox::ToolDenied: post may not receive email data") {
		t.Errorf("post gave %v, want ToolDenied naming email", v[1])
	}
	last := res.ToolCalls[len(res.ToolCalls)-1]
	if last.Name != "post" || last.Outcome != glovebox.OutcomeDenied {
		t.Errorf("transcript's last call %+v: want post, denied", last)
	}
	noSecrets(t, res)
}

func TestDataflowTokenFromModelCodeReachesPermittedTool(t *testing.T) {
	f := newFlowTools(t)
	r := newRuntime(t, glovebox.Config{Tools: &f.ts})
	s, err := r.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, _ := s.Eval(t.Context(), `customer["email"]`)
	tok := res.Value.(string)
	// The model writes the token it saw into its next program.
	res, _ = s.Eval(t.Context(), `[find("who is `+tok+`?"), (post("`+tok+`") rescue $!.message)]`)
	wantStatus(t, res, glovebox.StatusOK)
	if len(f.sent) != 1 || f.sent[0] != "who is "+flowEmail+"?" {
		t.Errorf("find received %q", f.sent)
	}
	if msg := res.Value.([]any)[1].(string); !strings.Contains(msg, "post may not receive email data") || !strings.Contains(msg, "token") {
		t.Errorf("post with a token gave %q", msg)
	}
	noSecrets(t, res)
}

func TestDataflowRespellingsRefusedAtSink(t *testing.T) {
	f := newFlowTools(t)
	r := newRuntime(t, glovebox.Config{Tools: &f.ts})
	cases := map[string]string{
		"exact":            `c["email"]`,
		"inside":           `"please write to " + c["email"] + " today"`,
		"upper case":       `c["email"].upcase`,
		"swapped case":     `c["email"].swapcase`,
		"spaced":           `c["email"].chars.join(" ")`,
		"newlines":         `c["email"].chars.each_slice(3).map(&:join).join("\n")`,
		"phone separators": `c["phone"].delete("^0-9")`,
		"phone dots":       `c["phone"].delete("^0-9").chars.each_slice(3).map(&:join).join(".")`,
		"card dashes":      `c["card"].tr(" ", "-")`,
		"card digits":      `"card: " + c["card"].delete(" ")`,
		"base64":           `[c["email"]].pack("m0")`,
		"base64 inside":    `["xx" + c["email"] + "yyy"].pack("m0")`,
		"base64 offset 1":  `["x" + c["email"]].pack("m0")`,
		"urlsafe base64":   `["?>" + c["email"]].pack("m0").tr("+/", "-_")`,
		"base64 lines":     `[c["email"] * 3].pack("m")`,
		"hex":              `c["email"].unpack1("H*")`,
		"HEX":              `c["email"].unpack1("H*").upcase`,
		"hex of lower":     `c["email"].downcase.unpack1("H*")`,
		"in a hash":        `{"to" => [c["email"]]}`,
		"as a hash key":    `{c["email"] => 1}`,
		"found email":      `c["notes"][0]["body"][/\S+@\S+/]`,
		"URL-encoded":      `(require "uri"; "https://x.test/?to=" + URI.encode_www_form_component(c["email"]))`,
		"spelled out":      `c["email"].sub("@", " [at] ").gsub(".", " dot ")`,
		"reversed":         `c["email"].reverse`,
		"characters":       `c["email"].chars`,
		"bytes":            `[c["email"].bytes]`,
		"inspected chars":  `c["email"].chars.inspect`,
		"rot13":            `c["email"].tr("A-Za-z", "N-ZA-Mn-za-m")`,
		"byte codes":       `c["email"].bytes.join(",")`,
		"code points":      `c["email"].unpack("U*").join(" ")`,
		"unicode escapes":  `c["email"].chars.map { |x| "\\u%04x" % x.ord }.join`,
		"HTML entities":    `c["email"].chars.map { |x| "&#x%x;" % x.ord }.join`,
		"hex, colons":      `c["email"].unpack1("H*").scan(/../).join(":")`,
		"dashes between":   `c["email"].chars.join("-")`,
		"punctuation":      `c["email"].delete("@.")`,
		"split in a hash":  `{"a" => c["email"][0, 9], "b" => c["email"][9..]}`,
		"split, reversed":  `[c["email"][9..], c["email"][0, 9]]`,
	}
	for name, expr := range cases {
		t.Run(name, func(t *testing.T) {
			res := eval(t, r, `c = customer; begin; post(`+expr+`); :sent; rescue Glovebox::ToolDenied => e; e.message; end`)
			wantStatus(t, res, glovebox.StatusOK)
			msg, _ := res.Value.(string)
			if !strings.Contains(msg, "post may not receive ") {
				t.Errorf("post(%s) gave %v, want ToolDenied", expr, res.Value)
			}
			noSecrets(t, res)
		})
	}
	if f.runs.Load() != 0 {
		t.Errorf("post ran %d times with %q", f.runs.Load(), f.sent)
	}
	// Unlabelled data passes.
	res := eval(t, r, `post("hello " + customer["name"])`)
	if res.Value != "sent" {
		t.Errorf("an unlabelled argument gave %v", res.Value)
	}
}

func TestDataflowApprovalForForbiddenKind(t *testing.T) {
	f := newFlowTools(t)
	var asked atomic.Int32
	approve := true
	r := newRuntime(t, glovebox.Config{Tools: &f.ts, Hooks: glovebox.Hooks{Approver: func(_ context.Context, tool string, args glovebox.Args) error {
		asked.Add(1)
		if !approve {
			return errors.New("not today")
		}
		return nil
	}}})
	res := eval(t, r, `notify(customer["email"])`)
	wantStatus(t, res, glovebox.StatusOK)
	if asked.Load() != 1 || len(f.sent) != 1 || f.sent[0] != flowEmail || res.ToolCalls[1].Approval != "approved" {
		t.Errorf("approved call: asked %d, sent %q, transcript %+v", asked.Load(), f.sent, res.ToolCalls)
	}
	approve = false
	res = eval(t, r, `begin; notify(customer["email"]); rescue Glovebox::ToolDenied => e; e.message; end`)
	if msg, _ := res.Value.(string); !strings.Contains(msg, "email") || !strings.Contains(msg, "not today") {
		t.Errorf("denied call gave %v", res.Value)
	}
	if c := res.ToolCalls[1]; c.Outcome != glovebox.OutcomeDenied || c.Approval != "denied" {
		t.Errorf("transcript %+v", c)
	}
	// A call without labelled data asks no one.
	asked.Store(0)
	eval(t, r, `notify("plain")`)
	if asked.Load() != 0 {
		t.Error("the approver was asked about a call with no labelled data")
	}
}

func TestDataflowOffWithoutLabels(t *testing.T) {
	var ts glovebox.Toolset
	if err := ts.Func("echo", func(s string) string { return s }); err != nil {
		t.Fatal(err)
	}
	r := newRuntime(t, glovebox.Config{Tools: &ts})
	res := eval(t, r, `echo("[[email:abcd]] `+flowEmail+`")`)
	if res.Value != "[[email:abcd]] "+flowEmail {
		t.Errorf("without labels, got %v", res.Value)
	}
}

func TestDataflowInvalidPolicy(t *testing.T) {
	var ts glovebox.Toolset
	if err := ts.Func("x", func() string { return "" }); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"no tool":   ts.Label("y", glovebox.Label{Kind: "email", Path: "a"}),
		"bad kind":  ts.Label("x", glovebox.Label{Kind: "E-mail", Path: "a"}),
		"both":      ts.Label("x", glovebox.Label{Kind: "email", Path: "a", Find: glovebox.FindEmails}),
		"neither":   ts.Label("x", glovebox.Label{Kind: "email"}),
		"empty seg": ts.Label("x", glovebox.Label{Kind: "email", Path: "a..b"}),
		"sink kind": ts.Sink("x", glovebox.SinkPolicy{Accepts: []glovebox.Kind{"Bad"}}),
		"sink name": ts.Sink("y", glovebox.SinkPolicy{}),
	} {
		if !errors.Is(err, glovebox.ErrInvalidTool) {
			t.Errorf("%s: %v, want ErrInvalidTool", name, err)
		}
	}
}

// Output streamed with WithOutput is redacted too, a line at a time.
func TestDataflowStreamedOutput(t *testing.T) {
	f := newFlowTools(t)
	r := newRuntime(t, glovebox.Config{Tools: &f.ts})
	var out, errw strings.Builder
	res, err := r.EvalWith(t.Context(), `c = customer; print "to: "; puts c["email"]; $stderr.print c["card"]`, glovebox.WithOutput(&out, &errw))
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, glovebox.StatusOK)
	if !strings.HasPrefix(out.String(), "to: [[email:") || strings.Contains(out.String(), "Lovelace") ||
		!strings.HasPrefix(errw.String(), "[[card:") || out.String() != res.Stdout {
		t.Errorf("streamed %q and %q; result stdout %q", out.String(), errw.String(), res.Stdout)
	}
}
