package wire

import (
	"errors"
	"math"
	"testing"
	"unicode/utf8"
)

func TestDecodeFlat(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []any // nil: an error
	}{
		{"~", []any{}},
		{"~ntf", []any{nil, true, false}},
		{"~i1;i-2;", []any{int64(1), int64(-2)}},
		{"~i9223372036854775807;i-9223372036854775808;", []any{int64(math.MaxInt64), int64(math.MinInt64)}},
		{"~d1.5;d1.0e+20;d-0.0;", []any{1.5, 1e20, math.Copysign(0, -1)}},
		{"~s5:hello", []any{"hello"}},
		{"~s0:s3:a;bi7;", []any{"", "a;b", int64(7)}},
		{"~s3:a\x00b", []any{"a\x00b"}},
		{"~s2:\xff\xfe", []any{"\uFFFD\uFFFD"}},
		{"~s4:\xe2\x82\xac!", []any{"€!"}},
		// Malformed: every one is refused, none panics.
		{"", nil},
		{"[1]", nil},
		{"~x", nil},
		{"~i1", nil},
		{"~i;", nil},
		{"~i+1;", nil},
		{"~i9223372036854775808;", nil},
		{"~i1e3;", nil},
		{"~d;", nil},
		{"~d0x1p3;", nil},
		{"~dinf;", nil},
		{"~d1e400;", nil},
		{"~s6:hello", nil},
		{"~s:", nil},
		{"~s-1:x", nil},
		{"~s99999999999:x", nil},
		{"~s5hello", nil},
	} {
		got, err := DecodeFlat([]byte(c.in))
		if c.want == nil {
			if err == nil || !errors.Is(err, ErrSyntax) {
				t.Errorf("DecodeFlat(%q) = %#v, %v; want an ErrSyntax error", c.in, got, err)
			}
			continue
		}
		if err != nil || len(got) != len(c.want) {
			t.Errorf("DecodeFlat(%q) = %#v, %v; want %#v", c.in, got, err, c.want)
			continue
		}
		for i := range got {
			if !sameValue(got[i], c.want[i]) || (c.want[i] != nil && math.Signbit(toF(got[i])) != math.Signbit(toF(c.want[i]))) {
				t.Errorf("DecodeFlat(%q)[%d] = %#v, want %#v", c.in, i, got[i], c.want[i])
			}
		}
	}
}

func toF(v any) float64 {
	f, _ := v.(float64)
	return f
}

// FuzzDecodeFlat feeds arbitrary bytes to the decoder of the flat call
// form, which arrives straight from the guest. It must never panic, and
// what it accepts is scalars only, strings valid UTF-8.
func FuzzDecodeFlat(f *testing.F) {
	for _, s := range []string{"~", "~ntf", "~i-12;d1.0e+20;s3:abc", "~s2:\xff\xfe", "~s10:x", "~i;"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		args, err := DecodeFlat(b)
		if err != nil {
			return
		}
		for _, a := range args {
			switch x := a.(type) {
			case nil, bool, int64, float64:
			case string:
				if !utf8.ValidString(x) {
					t.Fatalf("%q: string %q is not valid UTF-8", b, x)
				}
			default:
				t.Fatalf("%q: unexpected %T", b, a)
			}
		}
	})
}
