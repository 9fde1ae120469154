package glovebox

import (
	"bytes"
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"
)

// ToolDoc describes one tool to a model: what it does, its parameters with
// their JSON Schemas, and what it returns. [Runtime.ToolDocs] returns one
// per exposed tool; [Toolset.Describe] adds the prose that reflection
// cannot know. The zero value describes a tool about which nothing is
// known.
type ToolDoc struct {
	// Name is the tool's guest name. [Runtime.ToolDocs] sets it;
	// Describe requires it to be empty or the name described.
	Name string
	// Description says what the tool does, in a sentence or two, for a
	// model. Empty means undocumented.
	Description string
	// Params are the positional parameters in call order. For a tool
	// registered with Func or Object they are inferred from the Go
	// signature (the context.Context parameter is not one).
	Params []Param
	// Returns says in prose what the tool returns. Empty means
	// undocumented.
	Returns string
	// Result is the JSON Schema (draft 2020-12) of the value the tool
	// returns, as the guest receives it. For Func and Object tools it
	// is inferred from the Go result type; nil means unknown (no value,
	// or a tool registered with Add).
	Result json.RawMessage
	// Example is one Ruby call of the tool with plausible arguments, such
	// as `orders(status: "shipped")`. Empty lets a description generator
	// make one from Params.
	Example string
	// NeedsApproval marks a tool whose every call waits for a person's
	// approval (see [Hooks].Approver); [Toolset.RequireApproval] sets it
	// too. A description generator should say so, since a denied call
	// raises Glovebox::ToolDenied.
	NeedsApproval bool
	// Labelled lists the kinds of labelled values the tool's results
	// carry ([Toolset.Label]), sorted; Accepts the kinds its arguments
	// may carry ([Toolset.Sink]), sorted, set only when some tool of the
	// Runtime is labelled (then nil means none). [Runtime.ToolDocs] sets
	// both; Describe ignores them. A description generator should say
	// that labelled values reach the model as tokens and which tools
	// take them.
	Labelled, Accepts []Kind
}

// Param describes one positional parameter of a tool.
type Param struct {
	// Name names the parameter for the model. Go keeps no parameter
	// names, so inferred parameters are named after their struct type in
	// snake_case (an OrderQuery is order_query) or else arg1, arg2, ...
	// by position.
	Name string
	// Description says what the argument means. Empty means
	// undocumented.
	Description string
	// Schema is the argument's JSON Schema (draft 2020-12), a JSON
	// object. Inferred for Func and Object tools (see [Toolset.Describe]);
	// nil when documenting means "keep the inferred one", or {} (any
	// value) for a tool registered with Add. An inferred object schema
	// names properties by their JSON names, which keywords must match
	// exactly, and lists as "required" only fields tagged
	// jsonschema:"required", the only ones a call is refused without.
	Schema json.RawMessage
	// Required is set when a call without this argument fails. For Func
	// and Object tools the signature decides: every parameter but a
	// variadic one or a last options bag (which may be left out) is
	// required.
	Required bool
	// Variadic marks a last parameter that takes all remaining
	// positional arguments (Go's ...T); Schema describes one of them.
	Variadic bool
	// Keywords marks a last parameter that the guest may pass as keyword
	// arguments, orders(status: "shipped"), which arrive as one Hash; it
	// is inferred for a struct or string-keyed map in last position.
	Keywords bool
}

// Describe documents the tool registered under name: doc's Description,
// Returns and Example replace the empty ones, and its Params name and
// explain the parameters.
//
// For a tool registered with Func or Object, the Go signature is the
// truth: doc.Params must be empty (keep the inferred ones) or list exactly
// as many parameters as the function takes (the context.Context
// excluded); a Param with a nil Schema keeps the inferred schema, and
// Required, Variadic and Keywords always come from the signature. A nil
// doc.Result keeps the inferred result schema. For a tool registered with
// Add, doc is taken as given.
//
// Describe fails with [ErrInvalidTool] when no tool has that name, the tool
// is already described, doc.Name names another tool, the parameter count
// does not match the signature, a parameter has no name or a duplicate
// one, or a schema is not a JSON object.
func (s *Toolset) Describe(name string, doc ToolDoc) error {
	if _, ok := s.tools[name]; !ok {
		known := "the set is empty"
		if len(s.tools) > 0 {
			known = "tools: " + joinNames(s.Names())
		}
		return fmt.Errorf("%w: Describe(%q): no tool has that name (%s); register it first", ErrInvalidTool, name, known)
	}
	if _, ok := s.docs[name]; ok {
		return fmt.Errorf("%w: Describe(%q): the tool is already described", ErrInvalidTool, name)
	}
	if doc.Name != "" && doc.Name != name {
		return fmt.Errorf("%w: Describe(%q): the ToolDoc names %q", ErrInvalidTool, name, doc.Name)
	}
	d, err := mergeDoc(s.inferredDoc(name), doc)
	if err != nil {
		return fmt.Errorf("%w: Describe(%q): %v", ErrInvalidTool, name, err)
	}
	if s.docs == nil {
		s.docs = map[string]ToolDoc{}
	}
	s.docs[name] = d
	return nil
}

// mergeDoc lays doc over what reflection inferred.
func mergeDoc(inferred, doc ToolDoc) (ToolDoc, error) {
	out := inferred
	out.Description, out.Returns, out.Example = doc.Description, doc.Returns, doc.Example
	out.NeedsApproval = doc.NeedsApproval
	if doc.Result != nil {
		if err := checkSchema(doc.Result); err != nil {
			return ToolDoc{}, fmt.Errorf("Result: %v", err)
		}
		out.Result = slices.Clone(doc.Result)
	}
	known := inferred.Params != nil
	if len(doc.Params) > 0 {
		if known && len(doc.Params) != len(inferred.Params) {
			return ToolDoc{}, fmt.Errorf("the ToolDoc lists %d parameters, but the function takes %d", len(doc.Params), len(inferred.Params))
		}
		out.Params = make([]Param, len(doc.Params))
		seen := map[string]bool{}
		for i, p := range doc.Params {
			if p.Name == "" {
				return ToolDoc{}, fmt.Errorf("parameter %d has no name", i+1)
			}
			if seen[p.Name] {
				return ToolDoc{}, fmt.Errorf("two parameters are named %q", p.Name)
			}
			seen[p.Name] = true
			if p.Schema != nil {
				if err := checkSchema(p.Schema); err != nil {
					return ToolDoc{}, fmt.Errorf("parameter %q: %v", p.Name, err)
				}
				p.Schema = slices.Clone(p.Schema)
			}
			if known {
				in := inferred.Params[i]
				p.Required, p.Variadic, p.Keywords = in.Required, in.Variadic, in.Keywords
				if p.Schema == nil {
					p.Schema = in.Schema
				}
			} else if p.Schema == nil {
				p.Schema = json.RawMessage(`{}`)
			}
			out.Params[i] = p
		}
	}
	return out, nil
}

func checkSchema(s json.RawMessage) error {
	var m map[string]any
	if err := json.Unmarshal(s, &m); err != nil || m == nil {
		return fmt.Errorf("schema %.60q is not a JSON object", s)
	}
	return nil
}

// inferredDoc is what the tool's Go signature says about it.
func (s *Toolset) inferredDoc(name string) ToolDoc {
	t := s.sigs[name]
	if t == nil {
		return ToolDoc{}
	}
	first := 0
	if t.NumIn() > 0 && t.In(0) == ctxType {
		first = 1
	}
	params := []Param{}
	named := map[string]int{}
	for i := first; i < t.NumIn(); i++ {
		pt := t.In(i)
		p := Param{Required: true}
		if t.IsVariadic() && i == t.NumIn()-1 {
			pt = pt.Elem()
			p.Required, p.Variadic = false, true
		}
		sc := schemaOf(pt, true, map[reflect.Type]bool{})
		// A struct or string-keyed map in last place can take keywords.
		p.Keywords = !p.Variadic && i == t.NumIn()-1 && sc.Type == "object"
		if !t.IsVariadic() && i == t.NumIn()-1 && optionsBag(pt) {
			p.Required = false // an omitted options bag is empty (see Func)
		}
		p.Schema = encodeSchema(sc)
		if n := structName(pt); n != "" && sc.Properties != nil {
			p.Name = n
			named[n]++
		}
		params = append(params, p)
	}
	for i := range params {
		if params[i].Name == "" || named[params[i].Name] > 1 {
			params[i].Name = fmt.Sprintf("arg%d", i+1)
		}
	}
	d := ToolDoc{Params: params}
	if t.NumOut() > 0 && t.Out(0) != errType {
		d.Result = encodeSchema(schemaOf(t.Out(0), false, map[reflect.Type]bool{}))
	}
	return d
}

// structName is the snake_case name of a named struct type (or pointer to
// one), or "".
func structName(t reflect.Type) string {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t.Name() == "" {
		return ""
	}
	if n := SnakeCase(t.Name()); !rubyKeywords[n] {
		return n
	}
	return ""
}

// allDocs returns one ToolDoc per tool, sorted by name.
func (s *Toolset) allDocs() []ToolDoc {
	out := make([]ToolDoc, 0, len(s.tools))
	for _, name := range s.Names() {
		d, ok := s.docs[name]
		if !ok {
			d = s.inferredDoc(name)
		}
		d.Name = name
		out = append(out, cloneDoc(d))
	}
	return out
}

func cloneDoc(d ToolDoc) ToolDoc {
	d.Result = slices.Clone(d.Result)
	d.Labelled, d.Accepts = slices.Clone(d.Labelled), slices.Clone(d.Accepts)
	if d.Params != nil {
		d.Params = slices.Clone(d.Params)
		for i := range d.Params {
			d.Params[i].Schema = slices.Clone(d.Params[i].Schema)
		}
	}
	return d
}

// ToolDocs returns one [ToolDoc] per tool the guest can call, sorted by
// name: what [Toolset.Describe] documented over what reflection inferred,
// or only the inferred shape for an undocumented tool (nothing but the
// name for one registered with Add). The slice and its schemas are the
// caller's to keep.
func (r *Runtime) ToolDocs() []ToolDoc {
	out := make([]ToolDoc, len(r.docs))
	for i, d := range r.docs {
		out[i] = cloneDoc(d)
	}
	return out
}

var (
	timeType            = reflect.TypeFor[time.Time]()
	durationType        = reflect.TypeFor[time.Duration]()
	jsonUnmarshalerType = reflect.TypeFor[json.Unmarshaler]()
	jsonMarshalerType   = reflect.TypeFor[json.Marshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
	textMarshalerType   = reflect.TypeFor[encoding.TextMarshaler]()
	rawMessageType      = reflect.TypeFor[json.RawMessage]()
)

func encodeSchema(s *schema) json.RawMessage {
	b, err := marshalNoEscape(s)
	if err != nil {
		return json.RawMessage(`{}`)
	}
	return b
}

// schema is one JSON Schema object, with its keys in a fixed order.
type schema struct {
	Type                 string             `json:"type,omitempty"`
	Format               string             `json:"format,omitempty"`
	Description          string             `json:"description,omitempty"`
	Minimum              *int               `json:"minimum,omitempty"`
	Items                *schema            `json:"items,omitempty"`
	Properties           *orderedProperties `json:"properties,omitempty"`
	Required             []string           `json:"required,omitempty"`
	AdditionalProperties *schema            `json:"additionalProperties,omitempty"`
	Nullable             bool               `json:"-"`
}

// MarshalJSON writes a nullable schema's type as [type, "null"].
func (s *schema) MarshalJSON() ([]byte, error) {
	type plain schema
	b, err := marshalNoEscape((*plain)(s))
	if err != nil || !s.Nullable || s.Type == "" {
		return b, err
	}
	typ, _ := json.Marshal(s.Type)
	return bytes.Replace(b, append([]byte(`"type":`), typ...), []byte(`"type":[`+string(typ)+`,"null"]`), 1), nil
}

type orderedProperties struct {
	names []string
	props []*schema
}

func (p *orderedProperties) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, n := range p.names {
		if i > 0 {
			buf.WriteByte(',')
		}
		k, _ := json.Marshal(n)
		v, err := marshalNoEscape(p.props[i])
		if err != nil {
			return nil, err
		}
		buf.Write(k)
		buf.WriteByte(':')
		buf.Write(v)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// schemaOf returns the JSON Schema of Go type t as the guest sees it:
// decoded from guest data when in is set (a parameter), encoded to it
// otherwise (a result). Struct fields follow encoding/json's rules: the
// json tag's name, "-" skipped, embedded structs flattened. In a result,
// fields without omitempty or omitzero are listed as required (they are
// always written); in a parameter, only fields tagged
// jsonschema:"required" are, since only those are refused when missing
// (an absent field keeps its zero value). A jsonschema_description
// tag becomes the property's description.
func schemaOf(t reflect.Type, in bool, visiting map[reflect.Type]bool) *schema {
	nullable := false
	for t.Kind() == reflect.Pointer && t != bigIntPtr {
		t, nullable = t.Elem(), true
	}
	s := schemaOfValue(t, in, visiting)
	if nullable {
		s.Nullable = true
	}
	return s
}

func schemaOfValue(t reflect.Type, in bool, visiting map[reflect.Type]bool) *schema {
	pt := reflect.PointerTo(t)
	switch {
	case t == bigIntPtr || t == bigIntPtr.Elem():
		return &schema{Type: "integer"}
	case t == timeType:
		return &schema{Type: "string", Format: "date-time"}
	case t == rawMessageType:
		return &schema{}
	case t == durationType:
		return &schema{Type: "integer", Description: "nanoseconds"}
	case in && (t.Implements(jsonUnmarshalerType) || pt.Implements(jsonUnmarshalerType)):
		return &schema{}
	case !in && (t.Implements(jsonMarshalerType) || pt.Implements(jsonMarshalerType)):
		return &schema{}
	case in && (t.Implements(textUnmarshalerType) || pt.Implements(textUnmarshalerType)):
		return &schema{Type: "string"}
	case !in && (t.Implements(textMarshalerType) || pt.Implements(textMarshalerType)):
		return &schema{Type: "string"}
	}
	zero := 0
	switch t.Kind() {
	case reflect.Bool:
		return &schema{Type: "boolean"}
	case reflect.String:
		return &schema{Type: "string"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return &schema{Type: "integer"}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return &schema{Type: "integer", Minimum: &zero}
	case reflect.Float32, reflect.Float64:
		return &schema{Type: "number"}
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 && t.Kind() == reflect.Slice {
			return &schema{Type: "string", Format: "byte", Description: "base64"}
		}
		return &schema{Type: "array", Items: schemaOf(t.Elem(), in, visiting), Nullable: t.Kind() == reflect.Slice && !in}
	case reflect.Map:
		return &schema{Type: "object", AdditionalProperties: schemaOf(t.Elem(), in, visiting), Nullable: !in}
	case reflect.Struct:
		if visiting[t] {
			return &schema{Type: "object"} // recursive: not expanded again
		}
		visiting[t] = true
		defer delete(visiting, t)
		s := &schema{Type: "object", Properties: &orderedProperties{}}
		addFields(s, t, in, visiting, map[string]bool{})
		return s
	}
	return &schema{}
}

// addFields adds t's JSON fields to s, flattening embedded structs as
// encoding/json does (a name already present wins).
func addFields(s *schema, t reflect.Type, in bool, visiting map[reflect.Type]bool, seen map[string]bool) {
	var embedded []reflect.Type
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		ft := f.Type
		if f.Anonymous && name == "" {
			et := ft
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				embedded = append(embedded, et)
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
		var fs *schema
		if slices.Contains(strings.Split(opts, ","), "string") {
			fs = &schema{Type: "string"}
		} else {
			fs = schemaOf(ft, in, visiting)
		}
		if d := f.Tag.Get("jsonschema_description"); d != "" {
			fs.Description = d
		}
		s.Properties.names = append(s.Properties.names, name)
		s.Properties.props = append(s.Properties.props, fs)
		o := strings.Split(opts, ",")
		if in && requiredTag(f.Tag) || !in && !slices.Contains(o, "omitempty") && !slices.Contains(o, "omitzero") {
			s.Required = append(s.Required, name)
		}
	}
	for _, et := range embedded {
		if !visiting[et] {
			addFields(s, et, in, visiting, seen)
		}
	}
}
