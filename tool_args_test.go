// Tool arguments and answers: exact integers, keywords, inline fast paths, the JSON they match.

package glovebox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox"
)

// TestFlatArgumentsMatchJSON checks that scalar arguments, which the
// prelude sends in the flat form, reach a tool exactly as they do in the
// JSON form (forced here by a keyword argument): integers at and past
// the int64 edges, floats, strings in every encoding, symbols, nil and
// booleans.
func TestFlatArgumentsMatchJSON(t *testing.T) {
	var mu sync.Mutex
	var seen [][]any
	var ts glovebox.Toolset
	ts.Add("echo", func(_ context.Context, a glovebox.Args) (any, error) {
		mu.Lock()
		seen = append(seen, a.Positional)
		mu.Unlock()
		return a.Positional, nil
	})
	r := newRuntime(t, glovebox.Config{Tools: &ts})
	values := []string{
		`0`, `-1`, `2**63 - 1`, `-2**63`, `2**63`, `-2**63 - 1`, `2**80`,
		`1.5`, `1e20`, `-0.0`, `1e-7`, `Float::INFINITY`, `-Float::INFINITY`,
		`nil`, `true`, `false`,
		`"héllo"`, `"a\0b;s3:"`, `""`, `"abc".b`, `"\xff\xfeA".b`, `"\xffA".force_encoding("UTF-8")`,
		`"ok".encode("US-ASCII")`, `"é".encode("ISO-8859-1")`, `:sym`, `:"é"`,
	}
	for _, v := range values {
		mu.Lock()
		seen = nil
		mu.Unlock()
		res := eval(t, r, "x = ["+v+"]\n[echo(*x), echo(*x, z: 1), Glovebox.call(:echo, *x)]")
		wantStatus(t, res, glovebox.StatusOK)
		mu.Lock()
		got := seen
		mu.Unlock()
		if len(got) != 3 || !sameArgs(got[0], got[1]) || !sameArgs(got[2], got[1]) {
			t.Errorf("%s: the tool saw %#v (flat) and %#v (JSON)", v, got[0], got[1])
			continue
		}
		out := res.Value.([]any)
		if !sameArgs(out[0].([]any), out[1].([]any)) {
			t.Errorf("%s: the guest got back %#v and %#v", v, out[0], out[1])
		}
	}
	// The edges: int64 stays int64, one past it is a *big.Int, exactly.
	res := eval(t, r, "echo(2**63 - 1, -2**63, 2**63, -2**63 - 1)")
	wantStatus(t, res, glovebox.StatusOK)
	want := []any{int64(math.MaxInt64), int64(math.MinInt64), new(big.Int).Lsh(big.NewInt(1), 63), new(big.Int).Neg(new(big.Int).Add(new(big.Int).Lsh(big.NewInt(1), 63), big.NewInt(1)))}
	if !sameArgs(res.ToolCalls[0].Args.Positional, want) {
		t.Fatalf("transcript has %#v", res.ToolCalls[0].Args.Positional)
	}
}

// Integers reach tools exactly, at any depth and through every parameter
// shape: never rounded through float64, never turned into 5.0.
func TestToolArgsExactIntegers(t *testing.T) {
	var ts glovebox.Toolset
	var rows []map[string]any
	var rec record
	var list []any
	ts.Func("rows", func(r []map[string]any) int { rows = r; return len(r) })
	ts.Func("rec", func(r *record) bool { rec = *r; return true })
	ts.Func("list", func(xs ...any) int { list = xs; return len(xs) })
	ts.Func("wide", func(n int64, u uint64) []any { return []any{n, u} })
	r := newRuntime(t, glovebox.Config{Tools: &ts})

	res := eval(t, r, `[rows([{"n" => 2**53+1, "m" => 5, "deep" => [[{"x" => 2**70}]]}]),
		rec({"a" => 2**53+1, "m" => {"k" => [5]}, "s" => [2**63-1, -2**63], "p" => 2**62+1, "u" => 255, "big" => 2**100+1,
		     "kids" => [{"a" => 7, "byid" => {"9007199254740993" => "x"}}],
		     "num" => 2**64+1, "when" => "2026-12-01T01:02:03Z", "raw" => {"n" => 2**53+1}, "blob" => ["hi"].pack("m0")}),
		list(2**53+1, [2**64], {"k" => 5})]`)
	wantStatus(t, res, glovebox.StatusOK)
	n53 := int64(1<<53 + 1)
	b70 := new(big.Int).Lsh(big.NewInt(1), 70)
	if len(rows) != 1 || rows[0]["n"] != n53 || rows[0]["m"] != int64(5) {
		t.Fatalf("rows %#v", rows)
	}
	if x := rows[0]["deep"].([]any)[0].([]any)[0].(map[string]any)["x"]; x.(*big.Int).Cmp(b70) != 0 {
		t.Fatalf("deep %#v", x)
	}
	b100 := new(big.Int).Add(new(big.Int).Lsh(big.NewInt(1), 100), big.NewInt(1))
	if rec.A != n53 || !reflect.DeepEqual(rec.M, map[string]any{"k": []any{int64(5)}}) ||
		!reflect.DeepEqual(rec.S, []any{int64(1<<63 - 1), int64(-1 << 63)}) || *rec.P != 1<<62+1 || rec.U != 255 ||
		rec.Big.Cmp(b100) != 0 || len(rec.Kids) != 1 || rec.Kids[0].A != int64(7) || rec.Kids[0].Byid[n53] != "x" {
		t.Fatalf("rec %#v", rec)
	}
	if rec.Num != "18446744073709551617" || rec.When.Unix() != 1796086923 || string(rec.Raw) != `{"n":9007199254740993}` || string(rec.Blob) != "hi" {
		t.Fatalf("rec num %q when %v raw %s blob %q", rec.Num, rec.When, rec.Raw, rec.Blob)
	}
	if list[0] != n53 || list[1].([]any)[0].(*big.Int).Cmp(new(big.Int).Lsh(big.NewInt(1), 64)) != 0 ||
		!reflect.DeepEqual(list[2], map[string]any{"k": int64(5)}) {
		t.Fatalf("list %#v", list)
	}

	// Typed fields refuse what does not fit, with a rescuable ArgumentError
	// that says where.
	for code, wantMsg := range map[string]string{
		`rec({"u" => 256})`:               `256 overflows uint8 at ["u"]`,
		`rec({"u" => -1})`:                `-1 is negative; uint8 is unsigned at ["u"]`,
		`rec({"p" => 2**64})`:             `18446744073709551616 overflows int64 at ["p"]`,
		`rec({"kids" => [{"u" => 1.5}]})`: `cannot use a Float as uint8 at ["kids"][0]["u"]`,
		`rec({"big" => 1.0})`:             `cannot use a Float as *big.Int at ["big"]`,
		`rec({"byid" => {"x" => "y"}})`:   `key "x" at ["byid"]: not a int64`,
		`wide(2**63, 0)`:                  `9223372036854775808 overflows int64`,
		`wide(0, 2**64)`:                  `18446744073709551616 overflows uint64`,
		`rows([{"n" => 1}, 5])`:           `cannot use an Integer as map[string]interface {} at [1]`,
	} {
		res := eval(t, r, `begin; `+code+`; :no_error; rescue ArgumentError => e; e.message; end`)
		wantStatus(t, res, glovebox.StatusOK)
		if s, _ := res.Value.(string); !strings.Contains(s, wantMsg) {
			t.Errorf("%s: got %#v, want a message containing %q", code, res.Value, wantMsg)
		}
	}
	res = eval(t, r, `wide(2**63-1, 2**64-1)`)
	wantStatus(t, res, glovebox.StatusOK)
	if v := res.Value.([]any); v[0] != int64(1<<63-1) || v[1].(*big.Int).String() != "18446744073709551615" {
		t.Fatalf("wide %#v", res.Value)
	}
}

// Keyword names match exactly; an unknown one is refused by name with
// the accepted ones, so a hook that inspects Args.Keyword sees exactly
// what the tool receives.
func TestToolKeywordsExact(t *testing.T) {
	var ts glovebox.Toolset
	var got statOpts
	ts.Func("st", func(o statOpts) string { got = o; return o.Path })
	ts.Func("opt", func(o struct {
		ID int `json:"id"`
	}) int {
		return o.ID
	})
	ts.Func("untagged", func(o struct{ Path string }) string { return o.Path })
	ts.Func("bag", func(m map[string]int64) map[string]int64 { return m })
	ts.Func("add", func(a, b int) int { return a + b })
	if err := ts.Object(finder{}); err != nil {
		t.Fatal(err)
	}
	hooks := glovebox.Hooks{BeforeCall: func(_ context.Context, tool string, a glovebox.Args) error {
		if p, _ := a.Keyword["path"].(string); strings.HasPrefix(p, "/etc") {
			return errors.New("no /etc")
		}
		return nil
	}}
	r := newRuntime(t, glovebox.Config{Tools: &ts, Hooks: hooks})

	for code, wantMsg := range map[string]string{
		`st(PATH: "/etc/passwd")`:    "unknown keyword: PATH (accepted: path, limit)",
		`st(Path: "/etc/passwd")`:    "unknown keyword: Path (accepted: path, limit)",
		`st(path: "/etc/passwd")`:    "ToolError: no /etc",
		`opt(id: 1, dry_run: true)`:  "unknown keyword: dry_run (accepted: id)",
		`opt({"id" => 1, "x" => 2})`: `unknown key "x" (accepted: id)`,
		`untagged(path: "a")`:        "unknown keyword: path (accepted: Path)",
		`add(1, 2, x: 1)`:            "unknown keyword: x (this tool takes no keywords)",
		`add(1, 2, 3)`:               "wrong number of arguments (given 3, expected 2)",
		`add(1, "2")`:                "argument 2: cannot use a String as int",
		`st(limit: "9")`:             "cannot use a String as int at limit:",
		`find(ID: 1)`:                "unknown keyword: ID (accepted: id, deep)",
		`find(deep: {on: true})`:     "missing keyword: id",
		`find(id: 1, deep: {On: 1})`: `unknown key "On" at deep: (accepted: on)`,
	} {
		res := eval(t, r, `begin; `+code+`; :no_error; rescue ArgumentError, Glovebox::ToolError => e; "#{e.class.name.split("::").last}: #{e.message}"; end`)
		wantStatus(t, res, glovebox.StatusOK)
		if s, _ := res.Value.(string); !strings.Contains(s, wantMsg) {
			t.Errorf("%s: got %#v, want a message containing %q", code, res.Value, wantMsg)
		}
	}
	res := eval(t, r, `[st(path: "/tmp", limit: 3), untagged(Path: "b"), bag(Any_Key: 2**62), find(id: 2**40, deep: {on: true}), st]`)
	wantStatus(t, res, glovebox.StatusOK)
	want := []any{"/tmp", "b", map[string]any{"Any_Key": int64(1 << 62)}, int64(1 << 40), ""}
	if !reflect.DeepEqual(res.Value, want) {
		t.Fatalf("got %#v, want %#v", res.Value, want)
	}
	if got != (statOpts{}) {
		t.Fatalf("an omitted options bag arrived as %+v", got)
	}
}

// The generated tool methods (prelude.rb's __prepare) encode one or two
// Integers, or one valid UTF-8 or US-ASCII String, inline; whatever they
// send must reach the tool exactly as the general encoder's message does,
// at the int64 edges and beyond them, with invalid or other encodings, and
// mixed with other types.
func TestToolInlineIntegerArgs(t *testing.T) {
	var ts glovebox.Toolset
	var got [][]any
	ts.Func("take", func(xs ...any) int { got = append(got, xs); return len(xs) })
	r := newRuntime(t, glovebox.Config{Tools: &ts})
	cases := []string{
		`0`, `-1`, `2**62`, `2**63-1`, `-2**63`, `2**63`, `-2**63-1`, `2**100`,
		`1, 2`, `-5, 2**63-1`, `2**63-1, -2**63`, `2**63, 1`, `1, 2**63`, `1, "x"`, `"x", 1`,
		`1, nil`, `1.5, 2`, `1, 2, 3`, `:sym, 7`,
		`"x"`, `""`, `"é;i1;"`, `"a\xff"`, `"abc".b`, `"\u00e9".encode("UTF-16LE")`, `:sym`, `"x" * 70_000`,
	}
	for _, args := range cases {
		got = nil
		res := eval(t, r, `[take(`+args+`), Glovebox.call("take", `+args+`)]`)
		wantStatus(t, res, glovebox.StatusOK)
		if len(got) != 2 {
			t.Fatalf("%s: %d calls", args, len(got))
		}
		if !reflect.DeepEqual(fmtArgs(got[0]), fmtArgs(got[1])) {
			t.Errorf("%s: method sent %#v, Glovebox.call %#v", args, got[0], got[1])
		}
	}
	got = nil
	res := eval(t, r, `take(2**63-1, -2**63)`)
	wantStatus(t, res, glovebox.StatusOK)
	if len(got) != 1 || !reflect.DeepEqual(got[0], []any{int64(1<<63 - 1), int64(-1 << 63)}) {
		t.Fatalf("edges %#v", got)
	}
}

// The generated methods read integer and string answers inline too.
func TestToolInlineAnswers(t *testing.T) {
	var ts glovebox.Toolset
	ts.Func("echo", func(x any) any { return x })
	r := newRuntime(t, glovebox.Config{Tools: &ts})
	res := eval(t, r, `[echo(""), echo("s"), echo("é"), echo(-7), echo(2**63-1), echo(nil), echo(true), echo(1.5), echo([1, "i"]), echo("42i"),
		(echo("") << "x"), echo("ab").frozen?]`)
	wantStatus(t, res, glovebox.StatusOK)
	want := []any{"", "s", "é", int64(-7), int64(1<<63 - 1), nil, true, 1.5, []any{int64(1), "i"}, "42i", "x", false}
	if !reflect.DeepEqual(res.Value, want) {
		t.Fatalf("got %#v\nwant %#v", res.Value, want)
	}
}

// An answer too big for the guest's memory ends the eval with
// StatusMemoryLimit and says so (js-value-to-string allocates the answer
// in the guest, then checks it and the result address with one look at
// memory), and the Runtime goes on working.
func TestToolAnswerOverMemoryLimit(t *testing.T) {
	var ts glovebox.Toolset
	big := strings.Repeat("x", 600<<20)
	ts.Func("huge", func() string { return big })
	ts.Func("small", func() string { return "ok" })
	r := newRuntime(t, glovebox.Config{Tools: &ts, Limits: glovebox.Limits{Memory: 512 << 20, ToolPayload: 700 << 20}})
	res := eval(t, r, `huge.size`)
	wantStatus(t, res, glovebox.StatusMemoryLimit)
	if res.Error == nil || !strings.Contains(res.Error.Message, "receiving an answer from the host") {
		t.Fatalf("error %+v", res.Error)
	}
	res = eval(t, r, `small`)
	wantStatus(t, res, glovebox.StatusOK)
	if res.Value != "ok" {
		t.Fatalf("value %#v", res.Value)
	}
}

// record is a tool argument with every shape that can hold an integer.
type record struct {
	A    any              `json:"a"`
	M    map[string]any   `json:"m"`
	S    []any            `json:"s"`
	P    *int64           `json:"p,omitempty"`
	U    uint8            `json:"u,omitempty"`
	Big  *big.Int         `json:"big,omitempty"`
	Kids []record         `json:"kids,omitempty"`
	Byid map[int64]string `json:"byid,omitempty"`
	Num  json.Number      `json:"num,omitempty"`
	When time.Time        `json:"when,omitzero"`
	Raw  json.RawMessage  `json:"raw,omitempty"`
	Blob []byte           `json:"blob,omitempty"`
}

type statOpts struct {
	Path  string `json:"path"`
	Limit int    `json:"limit,omitempty"`
}

type finder struct{}

func (finder) Find(q struct {
	ID   int64 `json:"id" jsonschema:"required"`
	Deep struct {
		On bool `json:"on"`
	} `json:"deep"`
}) int64 {
	return q.ID
}

// fmtArgs prints each argument with its Go type, so a *big.Int compares
// by value.
func fmtArgs(xs []any) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = fmt.Sprintf("%T %v", x, x)
	}
	return out
}
