// The scalar fast path for tool calls agrees with reflection.

package glovebox

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"reflect"
	"strings"
	"testing"
)

// TestScalarFastSameAsReflect: for every fast-path shape, the fast path
// gives the same result and error as the reflect path for good arguments,
// wrong types, wrong counts, keywords, big and fractional numbers, and a
// tool's own error.
func TestScalarFastSameAsReflect(t *testing.T) {
	big1 := new(big.Int).Lsh(big.NewInt(1), 70)
	argSets := [][]any{
		nil, {}, {int64(1)}, {int64(1), int64(2)}, {int64(-7), int64(math.MaxInt64)}, {int64(3), int64(3)},
		{"abc"}, {""}, {"odd"}, {true}, {false}, {1.5}, {1.5, int64(2)}, {int64(2), 2.5},
		{big1}, {int64(1), big1}, {nil}, {int64(1), int64(2), int64(3)}, {"a", "b"},
		{[]any{int64(1)}}, {map[string]any{"k": int64(1)}},
	}
	withCtx := func(ctx context.Context) string {
		v, _ := ctx.Value(ctxKeyTest{}).(string)
		return v
	}
	shapes := []struct {
		name        string
		fast, named any
	}{
		{"func() int", func() int { return 42 }, nInt(func() int { return 42 })},
		{"func() string", func() string { return "s" }, nString(func() string { return "s" })},
		{"func() (string, error)", func() (string, error) { return "x", errOdd }, nStringErr(func() (string, error) { return "x", errOdd })},
		{"func(int) int", func(a int) int { return a * 2 }, nIntInt(func(a int) int { return a * 2 })},
		{"func(int, int) int", func(a, b int) int { return a + b }, nAdd(func(a, b int) int { return a + b })},
		{"func(int, int) (int, error)", func(a, b int) (int, error) {
			if a == b {
				return 9, errOdd
			}
			return a - b, nil
		}, nAddErr(func(a, b int) (int, error) {
			if a == b {
				return 9, errOdd
			}
			return a - b, nil
		})},
		{"func(float64, float64) float64", func(a, b float64) float64 { return a * b }, nFloat(func(a, b float64) float64 { return a * b })},
		{"func(string) string", strings.ToUpper, nStrStr(strings.ToUpper)},
		{"func(string) bool", func(s string) bool { return s == "" }, nStrBool(func(s string) bool { return s == "" })},
		{"func(string) (string, error)", func(s string) (string, error) {
			if s == "odd" {
				return "", errOdd
			}
			return s + "!", nil
		}, nStrStrErr(func(s string) (string, error) {
			if s == "odd" {
				return "", errOdd
			}
			return s + "!", nil
		})},
		{"func(bool) bool", func(b bool) bool { return !b }, nBoolBool(func(b bool) bool { return !b })},
		{"func(context.Context, string) (string, error)", func(ctx context.Context, s string) (string, error) { return withCtx(ctx) + s, nil },
			nCtxStrErr(func(ctx context.Context, s string) (string, error) { return withCtx(ctx) + s, nil })},
		{"func(context.Context, int) (int, error)", func(ctx context.Context, n int) (int, error) {
			if n%2 != 0 {
				return 0, errOdd
			}
			return n + len(withCtx(ctx)), nil
		}, nCtxIntErr(func(ctx context.Context, n int) (int, error) {
			if n%2 != 0 {
				return 0, errOdd
			}
			return n + len(withCtx(ctx)), nil
		})},
	}
	ctx := context.WithValue(context.Background(), ctxKeyTest{}, "ctx:")
	for _, sh := range shapes {
		if scalarFast(sh.fast) == nil {
			t.Fatalf("%s: no fast path", sh.name)
		}
		if scalarFast(sh.named) != nil {
			t.Fatalf("%s: the named type took the fast path; the comparison would be void", sh.name)
		}
		fast, err := reflectTool(reflect.ValueOf(sh.fast))
		if err != nil {
			t.Fatal(sh.name, err)
		}
		slow, err := reflectTool(reflect.ValueOf(sh.named))
		if err != nil {
			t.Fatal(sh.name, err)
		}
		took := 0
		for _, pos := range argSets {
			for _, kw := range []map[string]any{nil, {"x": int64(1)}} {
				a := Args{Positional: pos, Keyword: kw}
				if _, _, ok := scalarFast(sh.fast)(ctx, pos); ok && kw == nil {
					took++
				}
				r1, e1 := fast(ctx, a)
				r2, e2 := slow(ctx, a)
				desc := fmt.Sprintf("%s with %#v %v", sh.name, pos, kw)
				if !reflect.DeepEqual(r1, r2) || fmt.Sprintf("%T", r1) != fmt.Sprintf("%T", r2) {
					t.Errorf("%s: result %#v (fast) vs %#v (reflect)", desc, r1, r2)
				}
				if (e1 == nil) != (e2 == nil) || (e1 != nil && (e1.Error() != e2.Error() || fmt.Sprintf("%T", e1) != fmt.Sprintf("%T", e2))) {
					t.Errorf("%s: error %v (fast) vs %v (reflect)", desc, e1, e2)
				}
				if e1 != nil && errors.Is(e2, errOdd) != errors.Is(e1, errOdd) {
					t.Errorf("%s: tool error not passed through alike: %v vs %v", desc, e1, e2)
				}
			}
		}
		if took == 0 {
			t.Errorf("%s: no argument set took the fast path", sh.name)
		}
	}
}

// TestNoCtxOnlyForContextFreeFuncs: a call skips making a context only for
// Func tools whose Go function takes none; tools that take one (Func with a
// context.Context first, Add, merged sets keep theirs) still get theirs.
func TestNoCtxOnlyForContextFreeFuncs(t *testing.T) {
	var ts, other Toolset
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(ts.Func("plain", func(a, b int) int { return a + b }))
	must(ts.Func("none", func() {}))
	must(ts.Func("with_ctx", func(ctx context.Context, s string) (string, error) { return s, nil }))
	must(ts.Add("raw", func(ctx context.Context, a Args) (any, error) { return nil, nil }))
	must(other.Func("merged_plain", func(s string) string { return s }))
	must(other.Func("merged_ctx", func(ctx context.Context) error { return nil }))
	must(ts.Merge(&other))
	want := map[string]bool{"plain": true, "none": true, "with_ctx": false, "raw": false, "merged_plain": true, "merged_ctx": false}
	got := ts.clone()
	for name, w := range want {
		if got[name].noCtx != w || got[name].fn == nil {
			t.Errorf("%s: noCtx %v, want %v", name, got[name].noCtx, w)
		}
	}
}

// Each shape scalarFast takes, beside the same function under a named
// type, which scalarFast does not match and so takes the reflect path.
type (
	nInt       func() int
	nString    func() string
	nStringErr func() (string, error)
	nIntInt    func(int) int
	nAdd       func(int, int) int
	nAddErr    func(int, int) (int, error)
	nFloat     func(float64, float64) float64
	nStrStr    func(string) string
	nStrBool   func(string) bool
	nStrStrErr func(string) (string, error)
	nBoolBool  func(bool) bool
	nCtxStrErr func(context.Context, string) (string, error)
	nCtxIntErr func(context.Context, int) (int, error)
	ctxKeyTest struct{}
)

var errOdd = errors.New("odd")
