package glovebox_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/gloveboxhq/glovebox"
)

// The spellings of issue 33's data-flow items: numbers (a card or phone
// number as an Integer, a Float, four Integers), a value split over a
// call's strings where the parts do not start them or sit in Hash keys
// and keywords' names, and look-alike characters (full-width,
// mathematical, Cyrillic, Greek, other scripts' digits), alone and
// combined with the other spellings.

const (
	spEmail = "samantha.lee@example.net"
	spPhone = "+1 (555) 014-2778"
	spCard  = "4111 1111 1111 1111"
	spName  = "Ada Byron"
)

// spellTools has "profile" (the four values above, labelled), "ticket",
// which accepts no kind and records what it got, and "charge", which
// accepts cards.
type spellTools struct {
	ts  glovebox.Toolset
	got []string
}

func newSpellTools(t *testing.T) (*spellTools, *glovebox.Runtime) {
	t.Helper()
	s := &spellTools{}
	must(t, s.ts.Func("profile", func() map[string]string {
		return map[string]string{"name": spName, "email": spEmail, "phone": spPhone, "card": spCard}
	}))
	record := func(_ context.Context, a glovebox.Args) (any, error) {
		b, _ := json.Marshal([]any{a.Positional, a.Keyword})
		s.got = append(s.got, string(b))
		return "opened", nil
	}
	must(t, s.ts.Add("ticket", record))
	must(t, s.ts.Add("charge", record))
	must(t, s.ts.Label("profile",
		glovebox.Label{Kind: glovebox.KindEmail, Path: "email"},
		glovebox.Label{Kind: glovebox.KindPhone, Path: "phone"},
		glovebox.Label{Kind: glovebox.KindCard, Path: "card"},
		glovebox.Label{Kind: glovebox.KindName, Path: "name"}))
	must(t, s.ts.Sink("charge", glovebox.SinkPolicy{Accepts: []glovebox.Kind{glovebox.KindCard}}))
	return s, newRuntime(t, glovebox.Config{Tools: &s.ts})
}

const spPrelude = `p = profile; e = p["email"]; ph = p["phone"]; cd = p["card"]; nm = p["name"]; `

// shownClear fails when what res shows (as JSON, the way code mode and
// the MCP server pass it on) holds one of the values in a form a model
// reads: as is, its digits, or a number group of the card.
func shownClear(t *testing.T, res *glovebox.Result) {
	t.Helper()
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	shown := strings.ToLower(string(b))
	for _, s := range []string{"samantha", "lee@", "example.net", "15550142778", "550142778", "4111111111111111", "4111,1111", "ｓａｍ", "𝐬𝐚𝐦", "byron", "ｂｙｒｏｎ"} {
		if strings.Contains(shown, s) {
			t.Errorf("the result shows %q: %s", s, b)
		}
	}
}

// refusedAll runs each program as a call of ticket and wants it refused,
// ticket not run, and nothing shown in clear.
func refusedAll(t *testing.T, cases map[string]string) {
	t.Helper()
	s, r := newSpellTools(t)
	for name, code := range cases {
		t.Run(name, func(t *testing.T) {
			res := eval(t, r, spPrelude+`begin; `+code+`; :sent; rescue Glovebox::ToolDenied => x; x.message; end`)
			wantStatus(t, res, glovebox.StatusOK)
			if msg, _ := res.Value.(string); !strings.Contains(msg, "ticket may not receive ") {
				t.Errorf("%s gave %v, want Glovebox::ToolDenied", code, res.Value)
			}
			shownClear(t, res)
		})
	}
	if len(s.got) != 0 {
		t.Errorf("ticket ran with %q", s.got)
	}
}

// Issue 33, item 10: numbers reach no sink.
func TestDataflowNumbersRefusedAtSink(t *testing.T) {
	refusedAll(t, map[string]string{
		"card as an Integer":           `ticket(cd.delete("^0-9").to_i)`,
		"phone as an Integer":          `ticket(ph.delete("^0-9").to_i)`,
		"phone without country code":   `ticket(ph.delete("^0-9")[1..].to_i)`,
		"card as a Float":              `ticket(cd.delete("^0-9").to_f)`,
		"card as four Integers":        `ticket(cd.scan(/\d{4}/).map(&:to_i))`,
		"card as four arguments":       `ticket(*cd.scan(/\d{4}/).map(&:to_i))`,
		"card groups in a Hash":        `ticket(cd.scan(/\d{4}/).each_with_index.to_h { |g, i| ["k#{i}", g.to_i] })`,
		"card in a keyword's Hash":     `ticket(note: {"amount" => cd.delete("^0-9").to_i})`,
		"card Integer and a String":    `ticket("total", cd.delete("^0-9").to_i, "due")`,
		"email's codes as a bignum":    `ticket(e.bytes.join.to_i)`,
		"card times a thousand, Float": `ticket(cd.delete("^0-9").to_f * 1000)`,
	})
}

// Numbers that spell a value show as its token in the Result's value,
// its transcript (arguments and results) and its output.
func TestDataflowNumbersTokenizedInResult(t *testing.T) {
	s, r := newSpellTools(t)
	res := eval(t, r, spPrelude+`n = cd.delete("^0-9").to_i
		charge(n, [n.to_f])
		puts ph.delete("^0-9").to_i
		[n, ph.delete("^0-9").to_i, n.to_f, cd.scan(/\d{4}/).map(&:to_i), {"amount" => n}, 42, [1, 2]]`)
	wantStatus(t, res, glovebox.StatusOK)
	shownClear(t, res)
	v := res.Value.([]any)
	for i := range 5 {
		b, _ := json.Marshal(v[i])
		if !tokenLike(string(b)) {
			t.Errorf("value %d shows %s, want a token", i, b)
		}
	}
	if v[5] != int64(42) || len(v[6].([]any)) != 2 {
		t.Errorf("numbers that spell nothing changed: %v", v[5:])
	}
	if !tokenLike(res.Stdout) {
		t.Errorf("stdout %q, want a token", res.Stdout)
	}
	if len(s.got) != 1 || !strings.Contains(s.got[0], "4111111111111111") {
		t.Errorf("charge, which accepts cards, got %q", s.got)
	}
	if b, _ := json.Marshal(res.ToolCalls[1].Args); !tokenLike(string(b)) {
		t.Errorf("the transcript shows charge's arguments as %s", b)
	}
	// A list whose long strings hold a value across two of them becomes
	// their text, with the token where the value was.
	res = eval(t, r, spPrelude+`[("x" * 3000) + e[0, 9], e[9..] + ("y" * 3000), 7]`)
	shownClear(t, res)
	if v, _ := res.Value.(string); !strings.Contains(v, "x[[email:") || !strings.Contains(v, "]]yyy") || !strings.HasSuffix(v, "y7") {
		t.Errorf("value %.80q…", res.Value)
	}
}

func tokenLike(s string) bool {
	return strings.Contains(s, "[[card:") || strings.Contains(s, "[[phone:") || strings.Contains(s, "[[email:")
}

// Issue 33, item 11: a value split over a call's strings, wherever the
// parts are: not at a string's start, in Hash keys, in a keyword's name.
func TestDataflowSplitsRefusedAtSink(t *testing.T) {
	refusedAll(t, map[string]string{
		"parts inside two strings":   `l, d = e.split("@"); ticket("User: #{l}", "Domain: #{d}")`,
		"parts inside, reversed":     `l, d = e.split("@"); ticket("Domain: #{d} (x)", "User: #{l} (y)")`,
		"a Hash key and its value":   `ticket({e[0, 9] => e[9..]})`,
		"two Hash keys":              `ticket({e[0, 9] => 1, e[9..] => 2})`,
		"a keyword and its value":    `ticket(**{e[0, 9].to_sym => e[9..]})`,
		"positional and a Hash key":  `ticket(e[0, 9], {e[9..] => 1})`,
		"three parts, shuffled":      `ticket(e[16..], "and", e[0, 8], {"k" => e[8, 8]})`,
		"in one string, apart":       `ticket("name #{e[0, 12]} ... host #{e[12..]}")`,
		"phone in two Integers":      `ticket(ph.delete("^0-9")[0, 5].to_i, "x", ph.delete("^0-9")[5..].to_i)`,
		"halves reversed":            `ticket(e[0, 9].reverse, e[9..].reverse)`,
		"halves ROT13":               `r = ->(s) { s.tr("A-Za-z", "N-ZA-Mn-za-m") }; ticket(r.(e[0, 9]), r.(e[9..]))`,
		"halves in hex":              `ticket(e[0, 9].unpack1("H*"), {"b" => e[9..].unpack1("H*")})`,
		"halves URL-encoded, inside": `require "uri"; ticket("a=" + URI.encode_www_form_component(e[0, 5]), "b=" + URI.encode_www_form_component(e[5..]))`,
		"halves full-width":          `w = ->(s) { s.tr("!-~", "\uFF01-\uFF5E") }; ticket("u #{w.(e[0, 9])}", "d #{w.(e[9..])}")`,
	})
}

// What is not a split: parts of a value that text holds by chance are
// shorter than partLen, and a call holding one part only goes through.
func TestDataflowSplitLeavesOtherTextAlone(t *testing.T) {
	s, r := newSpellTools(t)
	for _, code := range []string{
		`ticket("Write to the team at example.net", {"user" => "lee"})`,
		`ticket("Samantha called", "about order 4111")`,
		`ticket("#{e[0, 9]} asked a question")`,
		`ticket("My order arrived with a cracked base; can you send a replacement? " * 20, (1..200).to_a)`,
	} {
		res := eval(t, r, spPrelude+code)
		if res.Status != glovebox.StatusOK || res.Value != "opened" {
			t.Errorf("%s: %s %v %+v", code, res.Status, res.Value, res.Error)
		}
	}
	if len(s.got) != 4 {
		t.Errorf("ticket ran %d times, want 4", len(s.got))
	}
}

// Issue 33, item 12: look-alike characters, and spellings combined.
func TestDataflowLookalikesRefusedAtSink(t *testing.T) {
	refusedAll(t, map[string]string{
		"full-width":              `ticket(e.tr("!-~", "\uFF01-\uFF5E"))`,
		"mathematical bold":       `ticket(e.each_char.map { |c| c =~ /[a-z]/ ? [0x1D41A + c.ord - 97].pack("U") : c }.join)`,
		"mathematical monospace":  `ticket(e.each_char.map { |c| c =~ /[a-z]/ ? [0x1D68A + c.ord - 97].pack("U") : c }.join)`,
		"circled":                 `ticket(e.each_char.map { |c| c =~ /[a-z]/ ? [0x24D0 + c.ord - 97].pack("U") : c }.join)`,
		"Cyrillic homoglyphs":     `ticket(e.tr("aeopcx", "\u0430\u0435\u043E\u0440\u0441\u0445"))`,
		"Greek homoglyphs, upper": `ticket(e.upcase.tr("AEHIKMNOPTX", "\u0391\u0395\u0397\u0399\u039A\u039C\u039D\u039F\u03A1\u03A4\u03A7"))`,
		"accents added":           `ticket(e.tr("aeo", "\u00E1\u00E9\u00F6"))`,
		"full-width with accents": `ticket(e.tr("!-~", "\uFF01-\uFF5E").chars.join("\u0301"))`,
		"Arabic-Indic digits":     `ticket(ph.delete("^0-9").tr("0-9", "\u0660-\u0669"))`,
		"full-width digits":       `ticket(cd.tr("0-9", "\uFF10-\uFF19"))`,
		"uuencoded":               `ticket([e].pack("u"))`,
		"uuencoded inside":        `ticket("attachment: " + ["x" + e + "yz"].pack("u").chomp + " end")`,
		"Cyrillic, reversed":      `ticket(e.tr("aeo", "\u0430\u0435\u043E").reverse)`,
		"full-width, ROT13 first": `ticket(e.tr("A-Za-z", "N-ZA-Mn-za-m").tr("!-~", "\uFF01-\uFF5E"))`,
		"Cyrillic name":           `ticket("Dear " + nm.tr("Ayo", "\u0410\u0443\u043E"))`,
	})
}

// Look-alike spellings in what the model reads become tokens: the value,
// output and errors.
func TestDataflowLookalikesTokenizedInResult(t *testing.T) {
	_, r := newSpellTools(t)
	for _, code := range []string{
		`e.tr("!-~", "\uFF01-\uFF5E")`,
		`e.tr("aeopcx", "\u0430\u0435\u043E\u0440\u0441\u0445")`,
		`nm.tr("!-~", "\uFF01-\uFF5E")`,
		`nm.tr("Ayo", "\u0410\u0443\u043E")`,
		`e.each_char.map { |c| c =~ /[a-z]/ ? [0x1D41A + c.ord - 97].pack("U") : c }.join`,
		`puts "to " + e.tr("!-~", "\uFF01-\uFF5E"); 1`,
		`raise "bad " + e.tr("aeo", "\u0430\u0435\u043E")`,
		`["x", e.tr("aeo", "\u0430\u0435\u043E"), "y"].join(" ")`,
	} {
		res := eval(t, r, spPrelude+code)
		shownClear(t, res)
		b, _ := json.Marshal(res)
		if !strings.Contains(string(b), "[[email:") && !strings.Contains(string(b), "[[name:") {
			t.Errorf("%s: no token in %s", code, b)
		}
	}
	// The token stands for the value; the text around it stays.
	res := eval(t, r, spPrelude+`"to: " + e.tr("!-~", "\uFF01-\uFF5E") + " (ok)"`)
	if v, _ := res.Value.(string); !strings.HasPrefix(v, "to: [[email:") || !strings.HasSuffix(v, "]] (ok)") {
		t.Errorf("value %q", v)
	}
}

// What stays out of reach (docs/dataflow.md, "What it stops, and what it
// cannot"), asserted as it is: ASCII look-alikes ("rn" for "m"), halves
// each in base64, and a value split over a Hash's values in the Result.
func TestDataflowLookalikeAndSplitLimits(t *testing.T) {
	s, r := newSpellTools(t)
	res := eval(t, r, spPrelude+`[ticket(e.gsub("m", "rn")), ticket([e[0, 10]].pack("m0"), [e[10..]].pack("m0"))]`)
	if res.Status != glovebox.StatusOK || len(s.got) != 2 {
		t.Errorf("%s %+v: want both calls to run (a limit)", res.Status, res.Error)
	}
	res = eval(t, r, spPrelude+`{"a" => e[0, 12], "b" => e[12..]}`)
	if b, _ := json.Marshal(res.Value); !strings.Contains(string(b), "samantha.lee") {
		t.Errorf("the Result shows %s: the limit moved, update docs/dataflow.md", b)
	}
}
