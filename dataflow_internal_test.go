package glovebox

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// A session's labels and tokens survive being saved and restored (what a
// suspended session needs): the same value keeps its token, a new value
// gets the token the original state would have given it, and Reveal and
// the sink checks work on the restored state.
func TestFlowSaveRestore(t *testing.T) {
	var ts Toolset
	ts.Func("t", func() string { return "" })
	ts.Func("sink", func(s string) string { return s })
	if err := ts.Label("t", Label{Kind: KindEmail, Path: "."}); err != nil {
		t.Fatal(err)
	}
	r := &Runtime{flow: ts.flow.clone()}
	f := r.newFlow()
	f.record([]found{{KindEmail, "ann@example.com"}, {KindPhone, "+1 555 010 9999"}})
	b, err := json.Marshal(f.save())
	if err != nil {
		t.Fatal(err)
	}
	var s flowSaved
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	g, err := r.restoreFlow(&s)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := f.redactString("to ann@example.com"), g.redactString("to ANN@example.com"); a != b || a == "to ann@example.com" {
		t.Errorf("before %q, after %q: want one token", a, b)
	}
	f.record([]found{{KindEmail, "bob@example.com"}})
	g.record([]found{{KindEmail, "bob@example.com"}})
	if a, b := f.redactString("bob@example.com"), g.redactString("bob@example.com"); a != b {
		t.Errorf("a new value got %q before and %q after", a, b)
	}
	if _, d := g.checkArgs("sink", Args{Positional: []any{"call 5550109999"}}); d == nil || d.kind != KindPhone {
		t.Errorf("the restored state let a phone number through: %+v", d)
	}
	if _, err := (&Runtime{}).restoreFlow(&s); err == nil {
		t.Error("a Runtime without labels restored labelled values")
	}
	s.Values[0].Token = "not a token"
	if _, err := r.restoreFlow(&s); err == nil {
		t.Error("a malformed token was restored")
	}
}

// covers finds a needle in parts of m bytes or more, in any order, and
// not in shorter ones.
func TestCovers(t *testing.T) {
	for _, c := range []struct {
		text, needle string
		m            int
		want         bool
	}{
		{"abcdefgh", "abcdefgh", 4, true},
		{"abcd\x00efgh", "abcdefgh", 4, true},
		{"efgh\x00xx abcd", "abcdefgh", 4, true},
		{"abcdefg\x00cdefgh", "abcdefgh", 4, true}, // overlapping parts
		{"abcde\x00fgh", "abcdefgh", 4, false},     // a part of 3
		{"abc\x00bcdefgh", "abcdefgh", 4, false},
		{"abcd\x00defg\x00fgh", "abcdefghij", 4, false},
		{"", "abcdefgh", 4, false},
		{"abcd", "abcd", 4, false}, // whole: find's, not a split
	} {
		if got := covers(&finder{text: c.text, budget: 100}, c.needle, c.m); got != c.want {
			t.Errorf("covers(%q, %q, %d) = %v", c.text, c.needle, c.m, got)
		}
		sa := &finder{text: c.text} // through the suffix array
		if got := covers(sa, c.needle, c.m); got != c.want || (sa.sa == nil && c.want) {
			t.Errorf("covers(%q, %q, %d) through a suffix array = %v", c.text, c.needle, c.m, got)
		}
	}
	for _, c := range []struct{ n, a, want int }{{0, 36, 4}, {1296, 36, 4}, {1297, 36, 5}, {100, 10, 4}, {101, 10, 5}, {10000, 10, 6}, {4096, 16, 5}} {
		if got := partLen(c.n, c.a); got != c.want {
			t.Errorf("partLen(%d, %d) = %d, want %d", c.n, c.a, got, c.want)
		}
	}
}

// Look-alike characters are matched through normalize, and the token
// replaces exactly the characters that spelled the value.
func TestNormalizeRedacts(t *testing.T) {
	var ts Toolset
	ts.Func("t", func() string { return "" })
	if err := ts.Label("t", Label{Kind: KindEmail, Path: "."}); err != nil {
		t.Fatal(err)
	}
	f := (&Runtime{flow: ts.flow.clone()}).newFlow()
	f.record([]found{{KindEmail, "ann.lee@example.com"}, {KindName, "Zoë Field"}})
	tok := f.all[0].token
	for in, want := range map[string]string{
		"to ａｎｎ．ｌｅｅ＠ｅｘａｍｐｌｅ．ｃｏｍ, ok":    "to " + tok + ", ok",
		"to аnn.lее@ехаmplе.cоm!":       "to " + tok + "!", // Cyrillic а, е, х, о
		"to 𝐚𝐧𝐧.𝐥𝐞𝐞@𝐞𝐱𝐚𝐦𝐩𝐥𝐞.𝐜𝐨𝐦 ":       "to " + tok + " ",
		"Ｚｏｅ Ｆｉｅｌｄ":                     f.all[1].token,
		"Zoe\u0308 Field and Zoe Field": f.all[1].token + " and " + f.all[1].token,
	} {
		if got := f.redactString(in); got != want {
			t.Errorf("redactString(%q) = %q, want %q", in, got, want)
		}
	}
	if n := normalize("plain ASCII text"); n != nil {
		t.Errorf("normalize changed ASCII text: %q", n.text)
	}
}

// uudecoded decodes what Ruby's pack("u") wrote, whatever precedes the
// value in the encoded data.
func TestUUDecoded(t *testing.T) {
	// ["ann.lee@example.com"].pack("u") and ["x" + it].pack("u").
	for _, enc := range []string{"386YN+FQE94!E>&%M<&QE+F-O;0``\n", "4>&%N;BYL965`97AA;7!L92YC;VT`\n"} {
		if d := uudecoded(enc); !strings.Contains(d, "ann.lee@example.com") {
			t.Errorf("uudecoded(%q) = %q", enc, d)
		}
	}
	if d := uudecoded("too short"); d != "" {
		t.Errorf("uudecoded of plain text: %q", d)
	}
}

// deskCall is the flow state and the call of the bench's sink row
// (cmd/glovebox bench, "sink check of a 1320-byte argument"): a
// customer's email and phone and the emails of their tickets recorded,
// and a call of a short subject and a 1,320-byte body.
func deskCall(b *testing.B) (*flowState, Args) {
	var ts Toolset
	ts.Func("t", func() string { return "" })
	ts.Func("create_ticket", func(s, t string) string { return "" })
	if err := ts.Label("t", Label{Kind: KindEmail, Path: "."}); err != nil {
		b.Fatal(err)
	}
	f := (&Runtime{flow: ts.flow.clone()}).newFlow()
	f.record([]found{{KindEmail, "ada.lovelace@example.org"}, {KindPhone, "+1 (555) 010-2233"},
		{KindEmail, "support@shop.example"}, {KindEmail, "b.smith@mail.example.com"}, {KindEmail, "orders@vendor.example"}})
	body := strings.Repeat("My order arrived with a cracked base; can you send a replacement? ", 20)
	return f, Args{Positional: []any{"x", body}}
}

// BenchmarkSinkCheck is the sink check of deskCall's call.
func BenchmarkSinkCheck(b *testing.B) {
	f, args := deskCall(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, d := f.checkArgs("create_ticket", args); d != nil {
			b.Fatal(d.msg)
		}
	}
}

// BenchmarkSinkCheckHostile is the sink check of a 1 MiB argument (the
// default tool payload limit) made to hold the first and last parts of
// every spelling of 20 labelled emails, so that the split check walks
// each of them: what a program could do to spend the host's time.
func BenchmarkSinkCheckHostile(b *testing.B) {
	var ts Toolset
	ts.Func("t", func() string { return "" })
	ts.Func("post", func(s string) string { return "" })
	if err := ts.Label("t", Label{Kind: KindEmail, Path: "."}); err != nil {
		b.Fatal(err)
	}
	f := (&Runtime{flow: ts.flow.clone()}).newFlow()
	var text strings.Builder
	for i := range 20 {
		f.record([]found{{KindEmail, fmt.Sprintf("customer.number%d@mail%d.example.com", i, i)}})
	}
	for _, e := range f.all {
		for _, n := range slices.Concat([]string{e.skel, e.codes}, e.hexes) {
			if len(n) > 8 {
				text.WriteString(n[:8] + " " + n[len(n)-8:] + " ")
			}
		}
	}
	for text.Len() < 1<<20 {
		text.WriteString("lorem ipsum dolor sit amet ")
	}
	args := Args{Positional: []any{text.String()}}
	b.ReportAllocs()
	for b.Loop() {
		if _, d := f.checkArgs("post", args); d != nil {
			b.Fatal(d.msg)
		}
	}
}

// BenchmarkArgsRedacted is the transcript's redaction of deskCall's
// call.
func BenchmarkArgsRedacted(b *testing.B) {
	f, args := deskCall(b)
	b.ReportAllocs()
	for b.Loop() {
		f.argsRedacted(args)
	}
}
