// Values crossing the boundary: every Ruby type, exact integers, binary strings, depth and size limits.

package glovebox_test

import (
	"context"
	"encoding/json"
	"math"
	"math/big"
	"reflect"
	"strings"
	"testing"

	"github.com/gloveboxhq/glovebox"
)

// Binary Strings cross both ways exactly: a guest String in ASCII-8BIT
// with bytes above 0x7f is []byte in Go (tool arguments and the value),
// {"$base64": ...} in JSON, and []byte a tool returns is a binary String
// in the guest. (Such bytes were read as UTF-8: each invalid one became
// U+FFFD.)
func TestBinaryStringsExact(t *testing.T) {
	var ts glovebox.Toolset
	var gotAny any
	if err := ts.Add("keep", func(ctx context.Context, a glovebox.Args) (any, error) {
		gotAny = a.Positional[0]
		return a.Positional[0], nil
	}); err != nil {
		t.Fatal(err)
	}
	var gotStr string
	var gotBytes []byte
	if err := ts.Func("typed", func(s string, b []byte) int { gotStr, gotBytes = s, b; return len(b) }); err != nil {
		t.Fatal(err)
	}
	rt := newRuntime(t, glovebox.Config{Tools: &ts, PoolSize: -1})
	res, err := rt.Eval(context.Background(), `
		bin = "\x89PNG\r\n\x1a\n\xff\x00".b
		back = keep([bin, {"k" => bin}])
		typed(bin, bin)
		[back[0] == bin, back[0].encoding.to_s, back[1]["k"] == bin, "plain".b, bin]`)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != glovebox.StatusOK {
		t.Fatalf("%v: %+v", res.Status, res.Error)
	}
	want := "\x89PNG\r\n\x1a\n\xff\x00"
	v := res.Value.([]any)
	if v[0] != true || v[1] != "ASCII-8BIT" || v[2] != true || v[3] != "plain" {
		t.Fatalf("%#v", v)
	}
	if b, ok := v[4].([]byte); !ok || string(b) != want {
		t.Fatalf("value %#v", v[4])
	}
	if a, ok := gotAny.([]any); !ok || string(a[0].([]byte)) != want || string(a[1].(map[string]any)["k"].([]byte)) != want {
		t.Fatalf("argument %#v", gotAny)
	}
	if gotStr != want || string(gotBytes) != want {
		t.Fatalf("typed: %q %q", gotStr, gotBytes)
	}
	j, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(j), `{"$base64":"iVBORw0KGgr/AA=="}`) {
		t.Fatalf("JSON: %s", j)
	}
}

func TestValues(t *testing.T) {
	big70, _ := new(big.Int).SetString("1180591620717411303424", 10)
	cases := []struct {
		code string
		want any
	}{
		{"nil", nil},
		{"true", true},
		{"[false]", []any{false}},
		{"-12", int64(-12)},
		{"2**70", big70},
		{"-(2**70)", new(big.Int).Neg(big70)},
		{"1.5", 1.5},
		{"1e308 * 10", math.Inf(1)},
		{"-1e308 * 10", math.Inf(-1)},
		{`"héllo"`, "héllo"},
		{":sym", "sym"},
		{`{a: {b: [:c, "d"]}, "e" => 1}`, map[string]any{"a": map[string]any{"b": []any{"c", "d"}}, "e": int64(1)}},
		{`{1 => 2, nil => 3, [1] => 4}`, map[string]any{"1": int64(2), "nil": int64(3), "[1]": int64(4)}},
		{`"\xff\xfeok".b`, []byte("\xff\xfeok")}, // binary Strings are bytes, exactly
		{`"caf\xC3\xA9".force_encoding("ASCII-8BIT")`, []byte("café")},
		{`"plain".b`, "plain"},                  // all ASCII: the same as text
		{`{"$base64" => "aGk="}`, []byte("hi")}, // the one reserved shape
		{`"\xff".force_encoding("UTF-8")`, "\ufffd"},
		{`"héllo".encode("UTF-16LE")`, "héllo"},
		{"Struct.new(:a).new(1)", "#<struct a=1>"},
		{"1..3", "1..3"},
		{"Object.new.then { def _1.inspect = raise('no'); _1 }", "#<Object>"},
		{"a = [1]; a << a; a", []any{int64(1), "[...]"}},
		{"h = {}; h[:self] = h; h", map[string]any{"self": "{...}"}},
		{"x = [1]; [x, x]", []any{[]any{int64(1)}, []any{int64(1)}}},
	}
	for _, c := range cases {
		res := eval(t, rt, c.code)
		if res.Status != glovebox.StatusOK {
			t.Errorf("%s: status %s %+v", c.code, res.Status, res.Error)
			continue
		}
		if !reflect.DeepEqual(res.Value, c.want) && !bigEqual(res.Value, c.want) {
			t.Errorf("%s: got %#v, want %#v", c.code, res.Value, c.want)
		}
	}
	res := eval(t, rt, "Float::NAN")
	if f, ok := res.Value.(float64); !ok || !math.IsNaN(f) {
		t.Errorf("NaN: got %#v", res.Value)
	}
}

func TestValueTooDeep(t *testing.T) {
	res := eval(t, rt, "a = []; 100.times { a = [a] }; a")
	wantStatus(t, res, glovebox.StatusError)
	if res.Error.Class != "Glovebox::ValueError" || !strings.Contains(res.Error.Message, "64 levels") {
		t.Fatalf("error %+v", res.Error)
	}
	res = eval(t, rt, "a = []; 60.times { a = [a] }; a")
	wantStatus(t, res, glovebox.StatusOK)
}

func TestValueTooLarge(t *testing.T) {
	r := withLimits(t, glovebox.Limits{Value: 1000})
	res := eval(t, r, `"x" * 2000`)
	wantStatus(t, res, glovebox.StatusError)
	if res.Error.Class != "Glovebox::ValueError" || !strings.Contains(res.Error.Message, "1000-byte limit") {
		t.Fatalf("error %+v", res.Error)
	}
	res = eval(t, r, `puts "x" * 2000; :ok`)
	wantStatus(t, res, glovebox.StatusOK)
}

// The message for a value nested too deep must not advise inspect, which
// crashes the VM on such data.
func TestDeepValueMessageAdvice(t *testing.T) {
	res := eval(t, rt, `a = []; 70.times { a = [a] }; a`)
	wantStatus(t, res, glovebox.StatusError)
	if res.Error.Class != "Glovebox::ValueError" || strings.Contains(res.Error.Message, "return its inspect") {
		t.Fatalf("error %+v", res.Error)
	}
}
