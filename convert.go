package glovebox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/gloveboxhq/glovebox/internal/wire"
)

// convertArg converts guest data x (see Values in the package
// documentation) to type t, directly and exactly: integers stay integers
// at any depth (int64, or *big.Int beyond it, in an any), and a hash fills
// a struct only through its fields' exact JSON names. keywords is set when
// x is the call's keyword arguments, for the wording of errors.
func convertArg(x any, t reflect.Type, keywords bool) (reflect.Value, error) {
	d := decoder{keywords: keywords}
	return d.value(x, t, "")
}

type decoder struct{ keywords bool }

var numberType = reflect.TypeFor[json.Number]()

// at names the place of a nested value in an error message.
func at(path string) string {
	if path == "" {
		return ""
	}
	return " at " + path
}

func (d *decoder) value(x any, t reflect.Type, path string) (reflect.Value, error) {
	if t == anyType {
		if x == nil {
			return reflect.Zero(t), nil
		}
		return reflect.ValueOf(x), nil
	}
	if x == nil {
		switch t.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Interface:
			return reflect.Zero(t), nil
		}
		return reflect.Value{}, fmt.Errorf("nil cannot be a %s%s", t, at(path))
	}
	switch t {
	case bigIntPtr, bigIntPtr.Elem():
		var n *big.Int
		switch v := x.(type) {
		case int64:
			n = big.NewInt(v)
		case *big.Int:
			n = new(big.Int).Set(v)
		default:
			return reflect.Value{}, d.mismatch(x, t, path)
		}
		if t == bigIntPtr {
			return reflect.ValueOf(n), nil
		}
		return reflect.ValueOf(n).Elem(), nil
	case numberType:
		switch n := x.(type) {
		case int64:
			return reflect.ValueOf(json.Number(strconv.FormatInt(n, 10))), nil
		case *big.Int:
			return reflect.ValueOf(json.Number(n.String())), nil
		case float64:
			if !math.IsInf(n, 0) && !math.IsNaN(n) {
				return reflect.ValueOf(json.Number(strconv.FormatFloat(n, 'g', -1, 64))), nil
			}
		}
		return reflect.Value{}, d.mismatch(x, t, path)
	case rawMessageType:
		b, err := wire.EncodeJSON(nil, x, wire.MaxDepth)
		if err != nil {
			return reflect.Value{}, err
		}
		return reflect.ValueOf(json.RawMessage(b)), nil
	}
	if b, ok := x.([]byte); ok { // a binary String: bytes as they are
		switch {
		case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8:
			return reflect.ValueOf(bytes.Clone(b)).Convert(t), nil
		case t.Kind() == reflect.String:
			return reflect.ValueOf(string(b)).Convert(t), nil
		}
	}
	if ownDecoding(t) || (t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8) {
		return d.viaJSON(x, t, path) // time.Time, []byte (base64) and the like
	}
	switch t.Kind() {
	case reflect.Bool:
		if b, ok := x.(bool); ok {
			return reflect.ValueOf(b).Convert(t), nil
		}
	case reflect.String:
		if s, ok := x.(string); ok {
			return reflect.ValueOf(s).Convert(t), nil
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		switch n := x.(type) {
		case int64:
			v := reflect.New(t).Elem()
			if v.OverflowInt(n) {
				return reflect.Value{}, fmt.Errorf("%d overflows %s%s", n, t, at(path))
			}
			v.SetInt(n)
			return v, nil
		case *big.Int:
			return reflect.Value{}, fmt.Errorf("%v overflows %s%s", n, t, at(path))
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		var u uint64
		switch n := x.(type) {
		case int64:
			if n < 0 {
				return reflect.Value{}, fmt.Errorf("%d is negative; %s is unsigned%s", n, t, at(path))
			}
			u = uint64(n)
		case *big.Int:
			if !n.IsUint64() {
				return reflect.Value{}, fmt.Errorf("%v overflows %s%s", n, t, at(path))
			}
			u = n.Uint64()
		default:
			return reflect.Value{}, d.mismatch(x, t, path)
		}
		v := reflect.New(t).Elem()
		if v.OverflowUint(u) {
			return reflect.Value{}, fmt.Errorf("%d overflows %s%s", u, t, at(path))
		}
		v.SetUint(u)
		return v, nil
	case reflect.Float32, reflect.Float64:
		var f float64
		switch n := x.(type) {
		case float64:
			f = n
		case int64:
			f = float64(n)
		case *big.Int:
			f, _ = new(big.Float).SetInt(n).Float64()
		default:
			return reflect.Value{}, d.mismatch(x, t, path)
		}
		v := reflect.New(t).Elem()
		if t.Kind() == reflect.Float32 && !math.IsInf(f, 0) && !math.IsNaN(f) && v.OverflowFloat(f) {
			return reflect.Value{}, fmt.Errorf("%g overflows %s%s", f, t, at(path))
		}
		v.SetFloat(f)
		return v, nil
	case reflect.Pointer:
		e, err := d.value(x, t.Elem(), path)
		if err != nil {
			return reflect.Value{}, err
		}
		p := reflect.New(t.Elem())
		p.Elem().Set(e)
		return p, nil
	case reflect.Slice, reflect.Array:
		xs, ok := x.([]any)
		if !ok {
			break
		}
		var v reflect.Value
		if t.Kind() == reflect.Slice {
			v = reflect.MakeSlice(t, len(xs), len(xs))
		} else {
			if len(xs) != t.Len() {
				return reflect.Value{}, fmt.Errorf("%s needs %d elements, not %d%s", t, t.Len(), len(xs), at(path))
			}
			v = reflect.New(t).Elem()
		}
		for i, e := range xs {
			ev, err := d.value(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i))
			if err != nil {
				return reflect.Value{}, err
			}
			v.Index(i).Set(ev)
		}
		return v, nil
	case reflect.Map:
		m, ok := x.(map[string]any)
		if !ok {
			break
		}
		v := reflect.MakeMapWithSize(t, len(m))
		for _, k := range sortedKeys(m) {
			kv, err := mapKey(k, t.Key())
			if err != nil {
				return reflect.Value{}, fmt.Errorf("key %q%s: %v", k, at(path), err)
			}
			ev, err := d.value(m[k], t.Elem(), path+"["+strconv.Quote(k)+"]")
			if err != nil {
				return reflect.Value{}, err
			}
			v.SetMapIndex(kv, ev)
		}
		return v, nil
	case reflect.Struct:
		m, ok := x.(map[string]any)
		if !ok {
			break
		}
		return d.structValue(m, t, path)
	}
	return reflect.Value{}, d.mismatch(x, t, path)
}

func (d *decoder) mismatch(x any, t reflect.Type, path string) error {
	return fmt.Errorf("cannot use %s as %s%s", guestType(x), t, at(path))
}

// ownDecoding reports whether t decodes itself from JSON or text.
func ownDecoding(t reflect.Type) bool {
	pt := reflect.PointerTo(t)
	return pt.Implements(jsonUnmarshalerType) || pt.Implements(textUnmarshalerType)
}

// viaJSON decodes x into t through x's JSON encoding, which keeps
// integers exact (encoding/json decodes them into integer fields as
// written).
func (d *decoder) viaJSON(x any, t reflect.Type, path string) (reflect.Value, error) {
	b, err := wire.EncodeJSON(nil, x, wire.MaxDepth)
	if err != nil {
		return reflect.Value{}, err
	}
	p := reflect.New(t)
	if err := json.Unmarshal(b, p.Interface()); err != nil {
		return reflect.Value{}, fmt.Errorf("cannot use %s as %s%s: %v", guestType(x), t, at(path), err)
	}
	return p.Elem(), nil
}

// mapKey converts a hash key to a map's key type: a string kind, an
// integer kind (the key's decimal digits) or a type with UnmarshalText,
// as encoding/json does.
func mapKey(k string, t reflect.Type) (reflect.Value, error) {
	if reflect.PointerTo(t).Implements(textUnmarshalerType) {
		p := reflect.New(t)
		if err := p.Interface().(interface{ UnmarshalText([]byte) error }).UnmarshalText([]byte(k)); err != nil {
			return reflect.Value{}, err
		}
		return p.Elem(), nil
	}
	v := reflect.New(t).Elem()
	switch t.Kind() {
	case reflect.String:
		v.SetString(k)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, err := strconv.ParseInt(k, 10, 64)
		if err != nil || v.OverflowInt(n) {
			return reflect.Value{}, fmt.Errorf("not a %s", t)
		}
		v.SetInt(n)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		n, err := strconv.ParseUint(k, 10, 64)
		if err != nil || v.OverflowUint(n) {
			return reflect.Value{}, fmt.Errorf("not a %s", t)
		}
		v.SetUint(n)
	default:
		return reflect.Value{}, fmt.Errorf("%s cannot be a map key", t)
	}
	return v, nil
}

// field is one JSON field of a struct: its name, the index path to it
// (through embedded structs), and whether it is decoded from a string
// (the json tag's ",string" option) or must be present.
type field struct {
	name     string
	index    []int
	quoted   bool
	required bool
}

// structFields lists t's JSON fields as encoding/json names them (tag
// name or Go field name, "-" skipped, embedded structs flattened, a name
// already present winning), in declaration order.
func structFields(t reflect.Type) []field {
	if f, ok := fieldCache.Load(t); ok {
		return f.([]field)
	}
	f := listFields(t)
	fieldCache.Store(t, f)
	return f
}

// fieldCache holds structFields' answers by type; types are few and
// fixed by the registered tools.
var fieldCache sync.Map

func listFields(t reflect.Type) []field {
	var out []field
	seen := map[string]bool{}
	var walk func(t reflect.Type, prefix []int, visiting map[reflect.Type]bool)
	walk = func(t reflect.Type, prefix []int, visiting map[reflect.Type]bool) {
		visiting[t] = true
		defer delete(visiting, t)
		type emb struct {
			t     reflect.Type
			index []int
		}
		var embedded []emb
		for i := range t.NumField() {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, opts, _ := strings.Cut(tag, ",")
			idx := append(slices.Clone(prefix), i)
			if f.Anonymous && name == "" {
				et := f.Type
				if et.Kind() == reflect.Pointer {
					et = et.Elem()
				}
				if et.Kind() == reflect.Struct {
					if f.IsExported() || f.Type.Kind() != reflect.Pointer {
						embedded = append(embedded, emb{et, idx})
					}
					continue
				}
			}
			if !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			if seen[name] {
				continue
			}
			seen[name] = true
			o := strings.Split(opts, ",")
			out = append(out, field{name: name, index: idx, quoted: slices.Contains(o, "string"),
				required: requiredTag(f.Tag)})
		}
		for _, e := range embedded {
			if !visiting[e.t] {
				walk(e.t, e.index, visiting)
			}
		}
	}
	walk(t, nil, map[reflect.Type]bool{})
	return out
}

// requiredTag reports whether a struct field is tagged
// jsonschema:"required": the one rule by which a parameter's field is
// required (see [Toolset.Func]).
func requiredTag(tag reflect.StructTag) bool {
	return slices.Contains(strings.Split(tag.Get("jsonschema"), ","), "required")
}

// structValue fills a struct of type t from hash m: each key must be one
// of t's JSON field names, exactly.
func (d *decoder) structValue(m map[string]any, t reflect.Type, path string) (reflect.Value, error) {
	fields := structFields(t)
	byName := make(map[string]field, len(fields))
	names := make([]string, len(fields))
	for i, f := range fields {
		byName[f.name], names[i] = f, f.name
	}
	v := reflect.New(t).Elem()
	for _, k := range sortedKeys(m) {
		f, ok := byName[k]
		if !ok {
			return reflect.Value{}, d.unknown(k, names, path)
		}
		dst := fieldByIndex(v, f.index)
		var fv reflect.Value
		var err error
		sub := path + "[" + strconv.Quote(k) + "]"
		if path == "" && d.keywords {
			sub = k + ":"
		}
		if f.quoted {
			fv, err = d.quoted(m[k], dst.Type(), sub)
		} else {
			fv, err = d.value(m[k], dst.Type(), sub)
		}
		if err != nil {
			return reflect.Value{}, err
		}
		dst.Set(fv)
	}
	var missing []string
	for _, f := range fields {
		if _, ok := m[f.name]; f.required && !ok {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		what := "key"
		if path == "" && d.keywords {
			what = "keyword"
		}
		if len(missing) > 1 {
			what += "s"
		}
		return reflect.Value{}, fmt.Errorf("missing %s: %s%s", what, strings.Join(missing, ", "), at(path))
	}
	return v, nil
}

// unknown is the error for hash key k that names no field.
func (d *decoder) unknown(k string, names []string, path string) error {
	accepted := "none"
	if len(names) > 0 {
		accepted = strings.Join(names, ", ")
	}
	if path == "" && d.keywords {
		return fmt.Errorf("unknown keyword: %s (accepted: %s)", k, accepted)
	}
	return fmt.Errorf("unknown key %q%s (accepted: %s)", k, at(path), accepted)
}

// quoted decodes a field with the json tag's ",string" option: a string
// holding the JSON of a number or bool, as encoding/json accepts.
func (d *decoder) quoted(x any, t reflect.Type, path string) (reflect.Value, error) {
	if s, ok := x.(string); ok && t.Kind() != reflect.String {
		p := reflect.New(t)
		if err := json.Unmarshal([]byte(s), p.Interface()); err != nil {
			return reflect.Value{}, fmt.Errorf("cannot use %q as %s%s", s, t, at(path))
		}
		return p.Elem(), nil
	}
	return d.value(x, t, path)
}

// fieldByIndex is v.FieldByIndex, allocating nil embedded pointers.
func fieldByIndex(v reflect.Value, index []int) reflect.Value {
	for i, x := range index {
		if i > 0 && v.Kind() == reflect.Pointer {
			if v.IsNil() {
				v.Set(reflect.New(v.Type().Elem()))
			}
			v = v.Elem()
		}
		v = v.Field(x)
	}
	return v
}
