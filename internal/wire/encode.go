package wire

import (
	"encoding"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"reflect"
	"slices"
	"strconv"
	"unicode/utf8"
)

// UnsupportedError reports a Go value that has no wire form. Type names
// the Go type, as fmt's %T prints it.
type UnsupportedError struct {
	Type   string
	Reason string
}

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("cannot pass a Go %s to the guest: %s", e.Type, e.Reason)
}

// Encode appends the wire form of v to dst. It accepts nil, bool, every
// integer and float kind (NaN and ±Inf included), string, *big.Int,
// json.Number, []byte (as {"$base64": "..."}, see BinaryKey), slices and arrays, maps whose keys are strings, integers or
// encoding.TextMarshalers, pointers and interfaces to those, and anything
// else encoding/json can marshal (structs cross as their JSON encoding,
// honouring field tags and json.Marshaler). It fails with an
// *UnsupportedError for channels, functions, complex numbers, unsafe
// pointers, cyclic data and nesting deeper than maxDepth.
func Encode(dst []byte, v any, maxDepth int) ([]byte, error) {
	if out, ok := appendPlain(dst, v, 0, maxDepth); ok {
		return out, nil
	}
	e := encoder{out: dst, maxDepth: maxDepth, seen: map[uintptr]bool{}}
	if err := e.value(reflect.ValueOf(v), 0); err != nil {
		return dst, err
	}
	return e.out, nil
}

// EncodeJSON is Encode producing strict JSON: the non-finite floats are
// written as the strings "NaN", "Infinity" and "-Infinity".
func EncodeJSON(dst []byte, v any, maxDepth int) ([]byte, error) {
	e := encoder{out: dst, maxDepth: maxDepth, seen: map[uintptr]bool{}, strict: true}
	if err := e.value(reflect.ValueOf(v), 0); err != nil {
		return dst, err
	}
	return e.out, nil
}

// appendPlain is Encode's path without reflection for the values Decode
// makes (nil, bool, int64, float64, string, *big.Int, []byte, []any,
// map[string]any) and int: a tool call's arguments, an eval's value. It
// writes what the reflecting encoder writes for them, and returns false,
// leaving the rest to that encoder, for any other type and past
// maxDepth (where that encoder's error, or its check for cyclic data,
// applies).
func appendPlain(dst []byte, v any, depth, maxDepth int) ([]byte, bool) {
	if depth > maxDepth {
		return dst, false
	}
	switch x := v.(type) {
	case nil:
		return append(dst, "null"...), true
	case bool:
		return strconv.AppendBool(dst, x), true
	case int64:
		return strconv.AppendInt(dst, x, 10), true
	case int:
		return strconv.AppendInt(dst, int64(x), 10), true
	case float64:
		return appendFloat(dst, x, 64), true
	case string:
		return AppendString(dst, x), true
	case *big.Int:
		if x == nil {
			return append(dst, "null"...), true
		}
		return x.Append(dst, 10), true
	case []byte:
		if x == nil {
			return append(dst, "null"...), true
		}
		dst = append(dst, `{"`+BinaryKey+`":"`...)
		dst = base64.StdEncoding.AppendEncode(dst, x)
		return append(dst, `"}`...), true
	case []any:
		if x == nil {
			return append(dst, "null"...), true
		}
		dst = append(dst, '[')
		for i, el := range x {
			if i > 0 {
				dst = append(dst, ',')
			}
			var ok bool
			if dst, ok = appendPlain(dst, el, depth+1, maxDepth); !ok {
				return dst, false
			}
		}
		return append(dst, ']'), true
	case map[string]any:
		if x == nil {
			return append(dst, "null"...), true
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		dst = append(dst, '{')
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = AppendString(dst, k)
			dst = append(dst, ':')
			var ok bool
			if dst, ok = appendPlain(dst, x[k], depth+1, maxDepth); !ok {
				return dst, false
			}
		}
		return append(dst, '}'), true
	}
	return dst, false
}

type encoder struct {
	out      []byte
	maxDepth int
	seen     map[uintptr]bool
	strict   bool
}

var (
	bigIntType    = reflect.TypeFor[big.Int]()
	numberType    = reflect.TypeFor[json.Number]()
	marshalerType = reflect.TypeFor[json.Marshaler]()
	textType      = reflect.TypeFor[encoding.TextMarshaler]()
)

func (e *encoder) value(v reflect.Value, depth int) error {
	if !v.IsValid() {
		e.out = append(e.out, "null"...)
		return nil
	}
	if depth > e.maxDepth {
		return &UnsupportedError{Type: v.Type().String(), Reason: fmt.Sprintf("nested deeper than %d levels", e.maxDepth)}
	}
	t := v.Type()
	switch {
	case t == bigIntType:
		if v.CanAddr() {
			e.out = v.Addr().Interface().(*big.Int).Append(e.out, 10)
		} else {
			b := v.Interface().(big.Int)
			e.out = b.Append(e.out, 10)
		}
		return nil
	case t.Kind() == reflect.Pointer && t.Elem() == bigIntType:
		if v.IsNil() {
			e.out = append(e.out, "null"...)
			return nil
		}
		e.out = v.Interface().(*big.Int).Append(e.out, 10)
		return nil
	case t == numberType:
		n := v.String()
		if _, err := Decode([]byte(n)); err != nil || n == "" {
			return &UnsupportedError{Type: t.String(), Reason: fmt.Sprintf("%q is not a number", n)}
		}
		e.out = append(e.out, n...)
		return nil
	}
	if t.Kind() != reflect.Pointer && t.Kind() != reflect.Interface && t.Implements(marshalerType) {
		return e.viaJSON(v)
	}
	switch t.Kind() {
	case reflect.Bool:
		e.out = strconv.AppendBool(e.out, v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		e.out = strconv.AppendInt(e.out, v.Int(), 10)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		e.out = strconv.AppendUint(e.out, v.Uint(), 10)
	case reflect.Float32, reflect.Float64:
		f := v.Float()
		if e.strict && (math.IsNaN(f) || math.IsInf(f, 0)) {
			e.out = append(e.out, '"')
			e.out = appendFloat(e.out, f, t.Bits())
			e.out = append(e.out, '"')
			return nil
		}
		e.out = appendFloat(e.out, f, t.Bits())
	case reflect.String:
		e.out = AppendString(e.out, v.String())
	case reflect.Interface:
		if v.IsNil() {
			e.out = append(e.out, "null"...)
			return nil
		}
		return e.value(v.Elem(), depth)
	case reflect.Pointer:
		if v.IsNil() {
			e.out = append(e.out, "null"...)
			return nil
		}
		if t.Implements(marshalerType) {
			return e.viaJSON(v)
		}
		p := v.Pointer()
		if e.seen[p] {
			return &UnsupportedError{Type: t.String(), Reason: "cyclic data"}
		}
		e.seen[p] = true
		defer delete(e.seen, p)
		return e.value(v.Elem(), depth)
	case reflect.Slice:
		if v.IsNil() {
			e.out = append(e.out, "null"...)
			return nil
		}
		if t.Elem().Kind() == reflect.Uint8 {
			// Bytes: {"$base64": "..."}, which Decode and the guest read
			// back as bytes (a binary String in the guest).
			e.out = append(e.out, `{"`+BinaryKey+`":"`...)
			e.out = base64.StdEncoding.AppendEncode(e.out, v.Bytes())
			e.out = append(e.out, `"}`...)
			return nil
		}
		p := v.Pointer()
		if p != 0 && e.seen[p] {
			return &UnsupportedError{Type: t.String(), Reason: "cyclic data"}
		}
		if p != 0 {
			e.seen[p] = true
			defer delete(e.seen, p)
		}
		return e.list(v, depth)
	case reflect.Array:
		return e.list(v, depth)
	case reflect.Map:
		if v.IsNil() {
			e.out = append(e.out, "null"...)
			return nil
		}
		p := v.Pointer()
		if e.seen[p] {
			return &UnsupportedError{Type: t.String(), Reason: "cyclic data"}
		}
		e.seen[p] = true
		defer delete(e.seen, p)
		return e.object(v, depth)
	case reflect.Struct:
		return e.viaJSON(v)
	default:
		return &UnsupportedError{Type: t.String(), Reason: fmt.Sprintf("a %s has no data form", t.Kind())}
	}
	return nil
}

func (e *encoder) list(v reflect.Value, depth int) error {
	e.out = append(e.out, '[')
	for i := range v.Len() {
		if i > 0 {
			e.out = append(e.out, ',')
		}
		if err := e.value(v.Index(i), depth+1); err != nil {
			return err
		}
	}
	e.out = append(e.out, ']')
	return nil
}

func (e *encoder) object(v reflect.Value, depth int) error {
	type kv struct {
		k string
		v reflect.Value
	}
	kvs := make([]kv, 0, v.Len())
	it := v.MapRange()
	for it.Next() {
		k, err := mapKey(it.Key())
		if err != nil {
			return err
		}
		kvs = append(kvs, kv{k, it.Value()})
	}
	slices.SortFunc(kvs, func(a, b kv) int {
		switch {
		case a.k < b.k:
			return -1
		case a.k > b.k:
			return 1
		}
		return 0
	})
	e.out = append(e.out, '{')
	for i, p := range kvs {
		if i > 0 {
			e.out = append(e.out, ',')
		}
		e.out = AppendString(e.out, p.k)
		e.out = append(e.out, ':')
		if err := e.value(p.v, depth+1); err != nil {
			return err
		}
	}
	e.out = append(e.out, '}')
	return nil
}

func mapKey(k reflect.Value) (string, error) {
	if k.Kind() == reflect.Interface {
		if k.IsNil() {
			return "", &UnsupportedError{Type: k.Type().String(), Reason: "a nil map key"}
		}
		k = k.Elem()
	}
	if k.Type().Implements(textType) {
		b, err := k.Interface().(encoding.TextMarshaler).MarshalText()
		if err != nil {
			return "", &UnsupportedError{Type: k.Type().String(), Reason: err.Error()}
		}
		return string(b), nil
	}
	switch k.Kind() {
	case reflect.String:
		return k.String(), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(k.Int(), 10), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return strconv.FormatUint(k.Uint(), 10), nil
	}
	return "", &UnsupportedError{Type: k.Type().String(), Reason: "map keys must be strings, integers or text marshalers"}
}

func (e *encoder) viaJSON(v reflect.Value) error {
	b, err := json.Marshal(v.Interface())
	if err != nil {
		var ute *json.UnsupportedTypeError
		if ok := asErr(err, &ute); ok {
			return &UnsupportedError{Type: v.Type().String(), Reason: fmt.Sprintf("it holds a %s, which has no data form", ute.Type)}
		}
		return &UnsupportedError{Type: v.Type().String(), Reason: err.Error()}
	}
	e.out = append(e.out, b...)
	return nil
}

func asErr(err error, target **json.UnsupportedTypeError) bool {
	for err != nil {
		if t, ok := err.(*json.UnsupportedTypeError); ok {
			*target = t
			return true
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		err = u.Unwrap()
	}
	return false
}

func appendFloat(b []byte, f float64, bits int) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, "NaN"...)
	case math.IsInf(f, 1):
		return append(b, "Infinity"...)
	case math.IsInf(f, -1):
		return append(b, "-Infinity"...)
	}
	out := strconv.AppendFloat(b, f, 'g', -1, bits)
	// Keep floats floats on the guest side: 2.0 must not arrive as 2.
	for _, c := range out[len(b):] {
		if c == '.' || c == 'e' || c == 'E' || c == 'N' || c == 'I' {
			return out
		}
	}
	return append(out, ".0"...)
}

const hexDigits = "0123456789abcdef"

// AppendString appends s as a JSON string; invalid UTF-8 becomes U+FFFD.
func AppendString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c < 0x20 || c == 0x7f:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b = append(b, "\ufffd"...)
		} else if r == '\u2028' || r == '\u2029' {
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		} else {
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	return append(b, '"')
}

// TypeName names the Ruby type of decoded guest data, for messages: "a
// String", "an Integer", "a Hash"; other Go values by their Go type.
func TypeName(x any) string {
	switch x.(type) {
	case nil:
		return "nil"
	case string:
		return "a String"
	case []byte:
		return "a binary String"
	case bool:
		return "true/false"
	case int64, *big.Int:
		return "an Integer"
	case float64:
		return "a Float"
	case []any:
		return "an Array"
	case map[string]any:
		return "a Hash"
	}
	return fmt.Sprintf("%T", x)
}
