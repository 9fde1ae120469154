package wire

import (
	"encoding/json"
	"math"
	"math/big"
	"reflect"
	"strings"
	"testing"
)

func TestDecode(t *testing.T) {
	b70, _ := new(big.Int).SetString("1180591620717411303424", 10)
	cases := []struct {
		in   string
		want any
	}{
		{`null`, nil},
		{` true `, true},
		{`[1,-2,1.5,1e3]`, []any{int64(1), int64(-2), 1.5, 1000.0}},
		{`1180591620717411303424`, b70},
		{`{"a":{"b":[]},"a":2}`, map[string]any{"a": int64(2)}},
		{`"\u00e9\n\ud83d\ude00\"\\"`, "é\n😀\"\\"},
		{`"\ud83d"`, "\ufffd"},
		{"\"\xff\"", "\ufffd"},
		{`[NaN,Infinity,-Infinity]`, nil},
		// bytes: only the marker object with valid base64
		{`[{"$base64":"/wBQ"},{"$base64":""}]`, []any{[]byte{0xff, 0, 'P'}, []byte{}}},
		{`{"$base64":"not base64!"}`, map[string]any{"$base64": "not base64!"}},
		{`{"$base64":"aGk=","x":1}`, map[string]any{"$base64": "aGk=", "x": int64(1)}},
		{`{"$base64":1}`, map[string]any{"$base64": int64(1)}},
	}
	for _, c := range cases {
		got, err := Decode([]byte(c.in))
		if err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		if c.in == `[NaN,Infinity,-Infinity]` {
			s := got.([]any)
			if !math.IsNaN(s[0].(float64)) || !math.IsInf(s[1].(float64), 1) || !math.IsInf(s[2].(float64), -1) {
				t.Errorf("non-finite: %v", s)
			}
			continue
		}
		if bg, ok := c.want.(*big.Int); ok {
			if g, ok := got.(*big.Int); !ok || g.Cmp(bg) != 0 {
				t.Errorf("%s: got %v", c.in, got)
			}
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %#v, want %#v", c.in, got, c.want)
		}
	}
	if _, err := Decode([]byte(strings.Repeat("7", MaxIntDigits+1))); err == nil {
		t.Error("an over-long integer decoded")
	}
	if _, err := Decode([]byte("[" + strings.Repeat(strings.Repeat("7", MaxIntDigits)+",", MaxTotalDigits/MaxIntDigits+1) + "1]")); err == nil {
		t.Error("too many digits in all decoded")
	}
	if _, err := DecodeDepth([]byte(`[[[1]]]`), 2); err == nil {
		t.Error("depth limit ignored")
	}
	for _, bad := range []string{``, `[`, `{"a"}`, `01`, `1.`, `-`, `"\x"`, "\"a\x01\"", `[1,]`, `{"a":1,}`, `nul`, `1 2`, `"\u12"`, strings.Repeat("[", MaxDepth+1)} {
		if _, err := Decode([]byte(bad)); err == nil {
			t.Errorf("%q decoded", bad)
		}
	}
}

func TestEncode(t *testing.T) {
	type S struct {
		A int    `json:"a"`
		B string `json:"b,omitempty"`
	}
	n := 5
	cases := []struct {
		in   any
		want string
	}{
		{nil, `null`},
		{[]any{1, int8(-2), uint64(3), 2.0, float32(0.5), "x\u2028"}, `[1,-2,3,2.0,0.5,"x\u2028"]`},
		{map[string]any{"b": 1, "a": []string{"x"}}, `{"a":["x"],"b":1}`},
		{map[int]bool{2: true}, `{"2":true}`},
		{S{A: 1}, `{"a":1}`},
		{&n, `5`},
		{big.NewInt(-7), `-7`},
		{[]float64{math.NaN(), math.Inf(1)}, `[NaN,Infinity]`},
		{json.Number("12.5"), `12.5`},
		{[]byte("hi"), `{"$base64":"aGk="}`},
		{[]byte{0xff, 0x00}, `{"$base64":"/wA="}`},
	}
	for _, c := range cases {
		got, err := Encode(nil, c.in, 10)
		if err != nil {
			t.Errorf("%#v: %v", c.in, err)
			continue
		}
		if string(got) != c.want {
			t.Errorf("%#v: got %s, want %s", c.in, got, c.want)
		}
	}
	cyc := map[string]any{}
	cyc["me"] = cyc
	for _, bad := range []any{make(chan int), func() {}, complex(1, 2), cyc, map[[2]int]int{{1, 2}: 3}, struct{ C chan int }{}} {
		_, err := Encode(nil, bad, 10)
		var ue *UnsupportedError
		if !asUnsupported(err, &ue) {
			t.Errorf("%T: err %v", bad, err)
		}
	}
	deep := []any{}
	for range 20 {
		deep = []any{deep}
	}
	if _, err := Encode(nil, deep, 10); err == nil {
		t.Error("deep value encoded")
	}
	if got, _ := EncodeJSON(nil, []float64{math.NaN(), math.Inf(-1)}, 10); string(got) != `["NaN","-Infinity"]` {
		t.Errorf("EncodeJSON: %s", got)
	}
}

func asUnsupported(err error, target **UnsupportedError) bool {
	u, ok := err.(*UnsupportedError)
	*target = u
	return ok
}

// FuzzDecode feeds arbitrary bytes to the decoder of guest payloads. It
// must never panic, and whatever it accepts must survive an encode and
// decode round trip unchanged.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{`null`, `[1,2.5,"x",{"a":[true,false,null]}]`, `1180591620717411303424`, `[NaN,-Infinity]`,
		`"\ud83d\ude00\u0000"`, `{"k":{"k":{"k":[]}}}`, `-0.0e-10`, "\"\xff\xfe\""} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := Decode(b)
		if err != nil {
			return
		}
		enc, err := Encode(nil, v, MaxDepth+1)
		if err != nil {
			t.Fatalf("re-encoding %q: %v", b, err)
		}
		v2, err := Decode(enc)
		if err != nil {
			t.Fatalf("decoding re-encoded %q (%q): %v", b, enc, err)
		}
		if !sameValue(v, v2) {
			t.Fatalf("round trip changed %q: %#v vs %#v", b, v, v2)
		}
	})
}

func sameValue(a, b any) bool {
	switch x := a.(type) {
	case float64:
		y, ok := b.(float64)
		return ok && (x == y || (math.IsNaN(x) && math.IsNaN(y)))
	case *big.Int:
		y, ok := b.(*big.Int)
		return ok && x.Cmp(y) == 0
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !sameValue(x[i], y[i]) {
				return false
			}
		}
		return true
	case []byte:
		y, ok := b.([]byte)
		return ok && string(x) == string(y)
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k := range x {
			if !sameValue(x[k], y[k]) {
				return false
			}
		}
		return true
	}
	return a == b
}
