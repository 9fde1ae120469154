package main

import (
	"math/big"
	"testing"

	"github.com/gloveboxhq/glovebox"
)

// The REPL's call lines show keyword arguments too, not only positional
// ones.
func TestCallArgs(t *testing.T) {
	b, _ := new(big.Int).SetString("18446744073709551616", 10)
	for _, c := range []struct {
		a    glovebox.Args
		want string
	}{
		{glovebox.Args{}, ""},
		{glovebox.Args{Positional: []any{int64(1), "x"}}, `1, "x"`},
		{glovebox.Args{Keyword: map[string]any{"path": "/tmp", "limit": int64(3)}}, `limit: 3, path: "/tmp"`},
		{glovebox.Args{Positional: []any{b}, Keyword: map[string]any{"a": []any{}}}, `18446744073709551616, a: []`},
	} {
		if got := callArgs(c.a); got != c.want {
			t.Errorf("callArgs(%+v) = %s, want %s", c.a, got, c.want)
		}
	}
}
