package wire

import (
	"math"
	"strconv"
)

// The flat form carries a tool call's positional arguments when every one
// is a scalar, so the guest builds the message with a few string appends
// instead of the JSON generator (several microseconds a call in the guest,
// where its recursion guard goes through an emulated setjmp). It is "~"
// followed by one item per argument, with no separators:
//
//	n t f           nil, true, false
//	i<digits>;      an integer that fits an int64 ("-" allowed)
//	d<float>;       a float as Ruby's Float#to_s writes it (1.5, 1.0e+20, NaN, -Infinity)
//	s<n>:<n bytes>  a string of n bytes (decimal n); invalid UTF-8 becomes U+FFFD
//
// IsFlat tells the form from the JSON form, which starts with '['.

// FlatMark is the first byte of the flat form.
const FlatMark = '~'

// IsFlat reports whether b is in the flat form.
func IsFlat(b []byte) bool { return len(b) > 0 && b[0] == FlatMark }

// maxFlatArgs bounds the items of one flat message; the message's own
// size limit bounds it too, this only keeps one allocation small.
const maxFlatArgs = 1 << 16

// DecodeFlat decodes a message in the flat form into its positional
// arguments (int64, float64, string, bool or nil each). Malformed input is
// an error wrapping ErrSyntax; it never panics.
func DecodeFlat(b []byte) ([]any, error) {
	if !IsFlat(b) {
		return nil, &flatError{0, "not the flat form"}
	}
	n := 0 // a first pass counts the items, so the slice is made once
	for i := 1; i < len(b); n++ {
		if n >= maxFlatArgs {
			return nil, &flatError{i, "too many arguments"}
		}
		switch b[i] {
		case 'n', 't', 'f':
			i++
		case 'i', 'd':
			j := i + 1
			for j < len(b) && b[j] != ';' {
				j++
			}
			if j == len(b) {
				return nil, &flatError{i, "unterminated number"}
			}
			i = j + 1
		case 's':
			l, j, ok := flatLen(b, i+1)
			if !ok || l > len(b)-j {
				return nil, &flatError{i, "bad string length"}
			}
			i = j + l
		default:
			return nil, &flatError{i, "unknown item"}
		}
	}
	out := make([]any, 0, n)
	for i := 1; i < len(b); {
		switch b[i] {
		case 'n':
			out = append(out, nil)
			i++
		case 't':
			out = append(out, true)
			i++
		case 'f':
			out = append(out, false)
			i++
		case 'i', 'd':
			j := i + 1
			for b[j] != ';' {
				j++
			}
			tok := b[i+1 : j]
			if b[i] == 'i' {
				x, err := strconv.ParseInt(string(tok), 10, 64)
				if err != nil || len(tok) == 0 || tok[0] == '+' {
					return nil, &flatError{i, "bad integer"}
				}
				out = append(out, x)
			} else {
				x, ok := flatFloat(tok)
				if !ok {
					return nil, &flatError{i, "bad float"}
				}
				out = append(out, x)
			}
			i = j + 1
		case 's':
			l, j, _ := flatLen(b, i+1)
			out = append(out, toValidUTF8(b[j:j+l]))
			i = j + l
		}
	}
	return out, nil
}

// flatLen reads the decimal length and colon at b[i:], returning the
// length and the index after the colon.
func flatLen(b []byte, i int) (n, next int, ok bool) {
	start := i
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		if i-start >= 10 {
			return 0, 0, false
		}
		n = n*10 + int(b[i]-'0')
		i++
	}
	if i == start || i >= len(b) || b[i] != ':' {
		return 0, 0, false
	}
	return n, i + 1, true
}

// flatFloat parses a float as Ruby's Float#to_s writes it: decimal digits
// with a point and an optional exponent, or NaN, Infinity, -Infinity.
func flatFloat(tok []byte) (float64, bool) {
	switch string(tok) {
	case "NaN":
		return math.NaN(), true
	case "Infinity":
		return math.Inf(1), true
	case "-Infinity":
		return math.Inf(-1), true
	}
	for _, c := range tok {
		if !(c >= '0' && c <= '9' || c == '.' || c == 'e' || c == 'E' || c == '-' || c == '+') {
			return 0, false
		}
	}
	x, err := strconv.ParseFloat(string(tok), 64)
	return x, err == nil
}

type flatError struct {
	at  int
	msg string
}

func (e *flatError) Error() string {
	return ErrSyntax.Error() + " at byte " + strconv.Itoa(e.at) + ": " + e.msg
}

func (e *flatError) Unwrap() error { return ErrSyntax }
