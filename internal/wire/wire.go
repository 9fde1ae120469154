// Package wire encodes and decodes the values that cross between the guest
// and the host.
//
// The format is JSON (RFC 8259) with one extension: the bare tokens NaN,
// Infinity and -Infinity stand for the non-finite floats, as Ruby's JSON
// generator writes them with allow_nan. Decoded values use these Go types:
//
//	null            nil
//	true, false     bool
//	integer         int64, or *big.Int when it does not fit
//	other number    float64
//	string          string (invalid UTF-8 replaced by U+FFFD)
//	array           []any
//	object          map[string]any (a repeated key: the last one wins)
//	{"$base64": s}  []byte: an object whose only key is BinaryKey, with a
//	                string of standard base64 (padded) as its value, is
//	                bytes (a binary String of the guest; []byte from Go)
//
// Everything arriving from the guest is untrusted: Decode bounds nesting
// depth and never panics on malformed input.
package wire

import (
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// BinaryKey is the only key of the object that stands for bytes (see
// the package documentation).
const BinaryKey = "$base64"

// MaxDepth is the deepest nesting Decode accepts. The guest prelude refuses
// values deeper than 64 levels before they are encoded, so anything deeper
// than this did not come from the prelude.
const MaxDepth = 128

// Integer limits. Parsing a decimal integer into a big.Int takes time
// quadratic in its length (about 2 s for a million digits here), so one
// integer may have at most MaxIntDigits digits and one value at most
// MaxTotalDigits digits in integers beyond 64 bits. The guest prelude
// refuses integers wider than 33,000 bits (9,934 digits) before encoding.
const (
	MaxIntDigits   = 10_000
	MaxTotalDigits = 100_000
)

// ErrSyntax is wrapped by every Decode error.
var ErrSyntax = errors.New("wire: malformed value")

// Decode parses one value that fills all of b (surrounding whitespace
// allowed), nested at most MaxDepth deep.
func Decode(b []byte) (any, error) { return DecodeDepth(b, MaxDepth) }

// DecodeDepth is Decode with a nesting limit of maxDepth (at most
// MaxDepth).
func DecodeDepth(b []byte, maxDepth int) (any, error) {
	d := decoder{b: b, maxDepth: min(maxDepth, MaxDepth)}
	d.space()
	v, err := d.value(0)
	if err != nil {
		return nil, err
	}
	d.space()
	if d.i != len(d.b) {
		return nil, d.errf("trailing data")
	}
	return v, nil
}

type decoder struct {
	b        []byte
	i        int
	maxDepth int
	digits   int // digits parsed into big.Ints so far
}

func (d *decoder) errf(format string, args ...any) error {
	return fmt.Errorf("%w at byte %d: %s", ErrSyntax, d.i, fmt.Sprintf(format, args...))
}

func (d *decoder) space() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *decoder) lit(s string) bool {
	if len(d.b)-d.i >= len(s) && string(d.b[d.i:d.i+len(s)]) == s {
		d.i += len(s)
		return true
	}
	return false
}

func (d *decoder) value(depth int) (any, error) {
	if d.i >= len(d.b) {
		return nil, d.errf("unexpected end")
	}
	switch c := d.b[d.i]; {
	case c == '{':
		return d.object(depth)
	case c == '[':
		return d.array(depth)
	case c == '"':
		return d.str()
	case c == 'n' && d.lit("null"):
		return nil, nil
	case c == 't' && d.lit("true"):
		return true, nil
	case c == 'f' && d.lit("false"):
		return false, nil
	case c == 'N' && d.lit("NaN"):
		return math.NaN(), nil
	case c == 'I' && d.lit("Infinity"):
		return math.Inf(1), nil
	case c == '-' && d.lit("-Infinity"):
		return math.Inf(-1), nil
	case c == '-' || (c >= '0' && c <= '9'):
		return d.number()
	}
	return nil, d.errf("unexpected %q", d.b[d.i])
}

func (d *decoder) array(depth int) (any, error) {
	if depth >= d.maxDepth {
		return nil, d.errf("nested deeper than %d", d.maxDepth)
	}
	d.i++ // [
	out := []any{}
	d.space()
	if d.i < len(d.b) && d.b[d.i] == ']' {
		d.i++
		return out, nil
	}
	for {
		d.space()
		v, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
		d.space()
		if d.i >= len(d.b) {
			return nil, d.errf("unterminated array")
		}
		switch d.b[d.i] {
		case ',':
			d.i++
		case ']':
			d.i++
			return out, nil
		default:
			return nil, d.errf("expected , or ] in array")
		}
	}
}

func (d *decoder) object(depth int) (any, error) {
	if depth >= d.maxDepth {
		return nil, d.errf("nested deeper than %d", d.maxDepth)
	}
	d.i++ // {
	out := map[string]any{}
	d.space()
	if d.i < len(d.b) && d.b[d.i] == '}' {
		d.i++
		return out, nil
	}
	for {
		d.space()
		if d.i >= len(d.b) || d.b[d.i] != '"' {
			return nil, d.errf("expected a string key")
		}
		k, err := d.str()
		if err != nil {
			return nil, err
		}
		d.space()
		if d.i >= len(d.b) || d.b[d.i] != ':' {
			return nil, d.errf("expected :")
		}
		d.i++
		d.space()
		v, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		out[k] = v
		d.space()
		if d.i >= len(d.b) {
			return nil, d.errf("unterminated object")
		}
		switch d.b[d.i] {
		case ',':
			d.i++
		case '}':
			d.i++
			if len(out) == 1 {
				if s, ok := out[BinaryKey].(string); ok {
					if b, err := base64.StdEncoding.Strict().DecodeString(s); err == nil {
						return b, nil
					}
				}
			}
			return out, nil
		default:
			return nil, d.errf("expected , or } in object")
		}
	}
}

func (d *decoder) number() (any, error) {
	start := d.i
	if d.b[d.i] == '-' {
		d.i++
	}
	digits := func() int {
		n := 0
		for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
			d.i++
			n++
		}
		return n
	}
	intStart := d.i
	if digits() == 0 {
		return nil, d.errf("number without digits")
	}
	if d.b[intStart] == '0' && d.i-intStart > 1 {
		return nil, d.errf("number with a leading zero")
	}
	isFloat := false
	if d.i < len(d.b) && d.b[d.i] == '.' {
		d.i++
		isFloat = true
		if digits() == 0 {
			return nil, d.errf("no digits after the decimal point")
		}
	}
	if d.i < len(d.b) && (d.b[d.i] == 'e' || d.b[d.i] == 'E') {
		d.i++
		isFloat = true
		if d.i < len(d.b) && (d.b[d.i] == '+' || d.b[d.i] == '-') {
			d.i++
		}
		if digits() == 0 {
			return nil, d.errf("no digits in exponent")
		}
	}
	s := string(d.b[start:d.i])
	if isFloat {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return nil, d.errf("bad number %q", s)
		}
		return f, nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n, nil
	}
	nd := d.i - intStart
	if d.digits += nd; nd > MaxIntDigits || d.digits > MaxTotalDigits {
		return nil, d.errf("integer too long (%d digits; at most %d, and %d in all)", nd, MaxIntDigits, MaxTotalDigits)
	}
	n, ok := new(big.Int).SetString(s, 10)
	if !ok {
		return nil, d.errf("bad integer")
	}
	return n, nil
}

func (d *decoder) str() (string, error) {
	d.i++ // opening quote
	// Fast path: no escapes and valid UTF-8.
	start := d.i
	for d.i < len(d.b) {
		c := d.b[d.i]
		if c == '"' {
			s := d.b[start:d.i]
			d.i++
			if utf8.Valid(s) {
				return string(s), nil
			}
			return toValidUTF8(s), nil
		}
		if c == '\\' || c < 0x20 {
			break
		}
		d.i++
	}
	d.i = start
	var out []byte
	for {
		if d.i >= len(d.b) {
			return "", d.errf("unterminated string")
		}
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			return toValidUTF8(out), nil
		case c < 0x20:
			return "", d.errf("control character in string")
		case c != '\\':
			out = append(out, c)
			d.i++
			continue
		}
		d.i++ // backslash
		if d.i >= len(d.b) {
			return "", d.errf("unterminated escape")
		}
		e := d.b[d.i]
		d.i++
		switch e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := d.hex4()
			if !ok {
				return "", d.errf("bad \\u escape")
			}
			if utf16.IsSurrogate(r) {
				r2 := rune(-1)
				if d.i+1 < len(d.b) && d.b[d.i] == '\\' && d.b[d.i+1] == 'u' {
					save := d.i
					d.i += 2
					var ok2 bool
					if r2, ok2 = d.hex4(); !ok2 {
						return "", d.errf("bad \\u escape")
					}
					if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
						r = dec
					} else {
						d.i = save
						r = utf8.RuneError
					}
				} else {
					r = utf8.RuneError
				}
			}
			out = utf8.AppendRune(out, r)
		default:
			return "", d.errf("bad escape \\%c", e)
		}
	}
}

func (d *decoder) hex4() (rune, bool) {
	if len(d.b)-d.i < 4 {
		return 0, false
	}
	var r rune
	for _, c := range d.b[d.i : d.i+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	d.i += 4
	return r, true
}

func toValidUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	out := make([]byte, 0, len(b)+8)
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r == utf8.RuneError && n <= 1 {
			out = utf8.AppendRune(out, utf8.RuneError)
			b = b[1:]
			continue
		}
		out = append(out, b[:n]...)
		b = b[n:]
	}
	return string(out)
}
