package wire

import (
	"math"
	"math/big"
	"reflect"
	"testing"
)

// TestPlainMatchesReflect: Encode's path without reflection writes,
// byte for byte, what the reflecting encoder writes for the values
// Decode makes, and leaves what it does not know (or nesting past the
// limit, or a cycle) to it.
func TestPlainMatchesReflect(t *testing.T) {
	huge, _ := new(big.Int).SetString("-123456789012345678901234567890", 10)
	cyclic := []any{1}
	cyclic[0] = cyclic
	deep := any("x")
	for range 10 {
		deep = []any{deep}
	}
	for _, v := range []any{
		nil, true, false, int64(-7), 42, 1.5, math.NaN(), math.Inf(1), math.Inf(-1), 1e21, 0.1, -0.0,
		"", "h\u00e9 \"q\" \\ \n\t\x01 \u2028", huge, []byte{0, 255, 'a'}, []byte(nil),
		[]any{}, []any{int64(1), "two", []any{3.0}, map[string]any{}},
		map[string]any{"b": int64(2), "a": []any{nil, true}, "\u00e9": map[string]any{"z": "y", "y": 1.25}},
		[]any(nil), map[string]any(nil), (*big.Int)(nil),
		deep, cyclic, struct{ A int }{1}, []int{1, 2}, map[int]any{1: "x"},
	} {
		want, werr := refEncode(v, 4)
		got, gerr := Encode([]byte("prefix:"), v, 4)
		if (werr == nil) != (gerr == nil) || werr == nil && string(got) != "prefix:"+string(want) {
			t.Errorf("%#v: got %q, %v; the reflecting encoder %q, %v", v, got, gerr, want, werr)
		}
	}
}

func refEncode(v any, maxDepth int) ([]byte, error) {
	e := encoder{maxDepth: maxDepth, seen: map[uintptr]bool{}}
	err := e.value(reflect.ValueOf(v), 0)
	return e.out, err
}

// BenchmarkEncodeArgs: a tool call's arguments, [positional, keyword].
func BenchmarkEncodeArgs(b *testing.B) {
	v := []any{[]any{int64(20), int64(22)}, map[string]any{"status": "shipped"}}
	for b.Loop() {
		Encode(nil, v, MaxDepth)
	}
}
