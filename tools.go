package glovebox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode"

	"github.com/gloveboxhq/glovebox/internal/wire"
)

// Args are the arguments a guest passed to a tool, as data (see Values in
// the package documentation): symbols have become strings, in nested data
// too. Keyword is nil when the guest passed no keyword arguments.
type Args struct {
	Positional []any
	Keyword    map[string]any
}

// ToolFunc is the explicit form of a tool. What it returns crosses back to
// the guest as data; an error raises Glovebox::ToolError in the guest with
// the error's message (or what [Hooks].SanitizeError makes of it).
type ToolFunc func(ctx context.Context, args Args) (any, error)

// Toolset is a set of named tools the guest may call. The zero value is
// empty and ready to use. Registration is not safe for concurrent use; a
// [Runtime] takes a copy at [New], so later changes do not reach it.
//
// Each tool becomes a private top-level method in the guest, so guest
// code calls orders() or change_plan("premium"); keyword arguments arrive
// as a map. Glovebox.call("name", ...) reaches the same tools.
type Toolset struct {
	tools map[string]ToolFunc
	from  map[string]string       // where each name was registered, for errors
	sigs  map[string]reflect.Type // Go signatures of Func and Object tools
	docs  map[string]ToolDoc      // what Describe documented
	// approval names the tools RequireApproval marked.
	approval map[string]bool
	// flow is the data-flow policy Label and Sink set (labels.go).
	flow *flowSpec
}

// Add registers fn under name. The name must be a valid Ruby method name
// that does not shadow a core method; see [ValidToolName].
func (s *Toolset) Add(name string, fn ToolFunc) error {
	if fn == nil {
		return fmt.Errorf("%w: %q: nil function", ErrInvalidTool, name)
	}
	return s.add(name, fn, "Add")
}

func (s *Toolset) add(name string, fn ToolFunc, from string) error {
	if err := ValidToolName(name); err != nil {
		return err
	}
	if s.tools == nil {
		s.tools, s.from = map[string]ToolFunc{}, map[string]string{}
	}
	if prev, ok := s.from[name]; ok {
		return fmt.Errorf("%w: %q is registered twice (by %s and by %s)", ErrInvalidTool, name, prev, from)
	}
	s.tools[name], s.from[name] = fn, from
	return nil
}

// Func registers the Go function fn under name, calling it by reflection.
// fn may take a context.Context first; the guest's positional arguments
// fill the remaining parameters (a variadic last parameter takes the rest),
// and keyword arguments, when given, arrive as one more argument, a
// map[string]any (or any type that map decodes into); a last parameter that
// is a struct, a pointer to one or a string-keyed map (an options bag) may
// be left out, and then gets what an empty map decodes into. Each argument is
// converted to its parameter's type: exactly for bool, string, the number
// kinds (range-checked) and any, and element by element for pointers,
// slices, arrays, maps and structs, so integers stay exact at any depth: an
// Integer arrives as int64 in an any (also inside []any and
// map[string]any), or as *big.Int when it does not fit one, as results
// cross back; integer, *big.Int and json.Number fields take it exactly
// (json.Number holds its decimal digits, any number of them), and one that
// does not fit (or a negative one for an unsigned field) is refused. A
// hash fills a struct only through its fields' exact JSON names (the json
// tag's name, else the Go field name; embedded structs flattened): an
// unknown key or keyword is refused with the accepted names, never
// dropped or matched case-insensitively, so what a [Hooks].BeforeCall
// sees in [Args] is what the tool receives. An absent field keeps its
// zero value, unless it is tagged jsonschema:"required". Types with their
// own UnmarshalJSON or UnmarshalText (time.Time) and []byte (base64)
// decode from the value's JSON. Keywords given to a tool whose last
// parameter cannot take them are refused. fn may return nothing, a
// value, an error, or a value and an error. A mismatch raises
// ArgumentError in the guest, naming the argument and the place in it.
func (s *Toolset) Func(name string, fn any) error {
	f, err := reflectTool(reflect.ValueOf(fn))
	if err != nil {
		return fmt.Errorf("%w: %q: %v", ErrInvalidTool, name, err)
	}
	if err := s.add(name, f, "Func"); err != nil {
		return err
	}
	s.setSig(name, reflect.TypeOf(fn))
	return nil
}

// setSig records the Go signature of the tool name, for [ToolDoc]s.
func (s *Toolset) setSig(name string, t reflect.Type) {
	if s.sigs == nil {
		s.sigs = map[string]reflect.Type{}
	}
	s.sigs[name] = t
}

// ToolCeiling is implemented by a tool object to declare the most it is
// ever willing to expose: [Toolset.Object] exposes no method outside the
// names ToolMethods returns, whatever [Only] and [Except] say. Names may
// be given as Go method names or as guest (snake_case) names; a name that
// is not an exposable method is an error. ToolMethods itself is never
// exposed.
type ToolCeiling interface {
	ToolMethods() []string
}

// ObjectOption narrows what [Toolset.Object] exposes.
type ObjectOption func(*objectOptions)

type objectOptions struct {
	only, except []string
}

// Only exposes just the named methods (an allowlist; recommended).
func Only(names ...string) ObjectOption {
	return func(o *objectOptions) { o.only = append(o.only, names...) }
}

// Except exposes every method but the named ones (a denylist).
func Except(names ...string) ObjectOption {
	return func(o *objectOptions) { o.except = append(o.except, names...) }
}

// Object registers v's exported methods as tools named in snake_case
// (UserInfo becomes user_info, HTTPGet http_get), each called as [Func]
// would call it. Methods whose signatures cannot be called that way are not
// exposable. Names given to [Only], [Except] or v's [ToolCeiling] may be Go
// or snake_case names; one that is not an exposable method of v is an
// error, so a typo never widens or misnames the surface.
func (s *Toolset) Object(v any, opts ...ObjectOption) error {
	var o objectOptions
	for _, opt := range opts {
		opt(&o)
	}
	rv := reflect.ValueOf(v)
	if !rv.IsValid() {
		return fmt.Errorf("%w: Object(nil)", ErrInvalidTool)
	}
	typ := rv.Type()
	exposable := map[string]reflect.Value{} // snake name -> bound method
	goName := map[string]string{}
	for i := range typ.NumMethod() {
		m := typ.Method(i)
		if m.Name == "ToolMethods" {
			continue
		}
		if _, err := reflectTool(rv.Method(i)); err != nil {
			continue
		}
		sn := SnakeCase(m.Name)
		exposable[sn], goName[m.Name] = rv.Method(i), sn
	}
	resolve := func(list string, names []string) (map[string]bool, error) {
		out := map[string]bool{}
		for _, n := range names {
			sn := n
			if g, ok := goName[n]; ok {
				sn = g
			}
			if _, ok := exposable[sn]; !ok {
				return nil, fmt.Errorf("%w: %s names %q, which is not an exposable method of %s (exposable: %s)",
					ErrInvalidTool, list, n, typ, strings.Join(sortedKeys(exposable), ", "))
			}
			out[sn] = true
		}
		return out, nil
	}
	allowed := map[string]bool{}
	for sn := range exposable {
		allowed[sn] = true
	}
	if c, ok := v.(ToolCeiling); ok {
		ceiling, err := resolve("ToolMethods", c.ToolMethods())
		if err != nil {
			return err
		}
		allowed = ceiling
	}
	if o.only != nil {
		only, err := resolve("Only", o.only)
		if err != nil {
			return err
		}
		for sn := range only {
			if !allowed[sn] {
				return fmt.Errorf("%w: Only names %q, which %s's ToolMethods ceiling does not allow", ErrInvalidTool, sn, typ)
			}
		}
		allowed = only
	}
	except, err := resolve("Except", o.except)
	if err != nil {
		return err
	}
	for sn := range except {
		delete(allowed, sn)
	}
	for _, sn := range sortedKeys(allowed) {
		f, _ := reflectTool(exposable[sn])
		if err := s.add(sn, f, "Object("+typ.String()+")"); err != nil {
			return err
		}
		s.setSig(sn, exposable[sn].Type())
	}
	return nil
}

// Merge adds every tool of others to s; a name already present is an error
// and leaves s without the rest of that set.
func (s *Toolset) Merge(others ...*Toolset) error {
	for _, o := range others {
		if o == nil {
			continue
		}
		for _, name := range o.Names() {
			if err := s.add(name, o.tools[name], o.from[name]); err != nil {
				return err
			}
			if t, ok := o.sigs[name]; ok {
				s.setSig(name, t)
			}
			if d, ok := o.docs[name]; ok {
				if s.docs == nil {
					s.docs = map[string]ToolDoc{}
				}
				s.docs[name] = cloneDoc(d)
			}
			if o.approval[name] {
				s.markApproval(name)
			}
			s.mergeFlow(o, name)
		}
	}
	return nil
}

// Names returns the tool names, sorted: exactly the functions the guest
// sees. Use it as a test assertion so a new method cannot slip into the
// surface unnoticed.
func (s *Toolset) Names() []string { return sortedKeys(s.tools) }

// hostTool is a tool as a Runtime holds it.
type hostTool struct {
	fn ToolFunc
	// noCtx: fn never looks at its context (a Func whose Go function
	// takes none), so a call need not make one.
	noCtx bool
}

func (s *Toolset) clone() map[string]hostTool {
	out := make(map[string]hostTool, len(s.tools))
	for k, v := range s.tools {
		sig, ok := s.sigs[k]
		noCtx := ok && s.from[k] == "Func" && (sig.NumIn() == 0 || sig.In(0) != ctxType)
		out[k] = hostTool{fn: v, noCtx: noCtx}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// SnakeCase converts a Go method name to its guest name: words split at
// case changes, initialisms kept together, all lower case (UserInfo →
// user_info, HTTPGet → http_get, GetURLs → get_urls, ID → id).
func SnakeCase(s string) string {
	rs := []rune(s)
	var b strings.Builder
	for i, r := range rs {
		if unicode.IsUpper(r) && i > 0 {
			prev := rs[i-1]
			nextLower := i+1 < len(rs) && unicode.IsLower(rs[i+1])
			if unicode.IsLower(prev) || unicode.IsDigit(prev) || (unicode.IsUpper(prev) && nextLower && !(rs[i+1] == 's' && i+2 == len(rs))) {
				b.WriteByte('_')
			}
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// ValidToolName reports whether name can be a tool: a Ruby method name
// callable as a plain top-level call ([a-z_][A-Za-z0-9_]* with an optional
// final ? or !), not starting with "__", not a Ruby keyword, not a method
// every object has (puts, require, send, ...), which it would shadow, not
// one of the top-level object's own methods (include, private, using,
// ...), which would shadow it, and not a conversion or protocol method
// Ruby calls implicitly (to_str, to_ary and every other to_*, each, call,
// coerce, exception, dig, succ, the Marshal hooks), which would change how
// unrelated objects behave, and not it or _1 to _9 (block parameters).
// The error says which rule failed.
func ValidToolName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty name", ErrInvalidTool)
	}
	body := strings.TrimRight(name, "?!")
	if len(name)-len(body) > 1 || body == "" {
		return fmt.Errorf("%w: %q is not a Ruby method name", ErrInvalidTool, name)
	}
	for i, r := range body {
		ok := r == '_' || (r >= 'a' && r <= 'z') || (i > 0 && ((r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9')))
		if !ok {
			return fmt.Errorf("%w: %q is not a Ruby method name callable as name(...) (letters, digits and _, starting with a lower-case letter or _)", ErrInvalidTool, name)
		}
	}
	if strings.HasPrefix(name, "__") {
		return fmt.Errorf("%w: %q: names starting with __ are reserved", ErrInvalidTool, name)
	}
	if rubyKeywords[name] {
		return fmt.Errorf("%w: %q is a Ruby keyword", ErrInvalidTool, name)
	}
	if name == "it" || (len(name) == 2 && name[0] == '_' && name[1] >= '1' && name[1] <= '9') {
		return fmt.Errorf("%w: %q names a block's implicit parameter in Ruby", ErrInvalidTool, name)
	}
	if slices.Contains(coreMethods, name) {
		return fmt.Errorf("%w: %q would shadow Ruby's core method of that name", ErrInvalidTool, name)
	}
	if slices.Contains(mainMethods, name) {
		return fmt.Errorf("%w: %q is a method of Ruby's top-level object, which would hide the tool", ErrInvalidTool, name)
	}
	if strings.HasPrefix(name, "to_") || slices.Contains(protocolMethods, name) {
		return fmt.Errorf("%w: %q is a conversion or protocol method Ruby calls implicitly; a tool of that name would change how every object behaves", ErrInvalidTool, name)
	}
	return nil
}

// mainMethods are the singleton methods of Ruby's top-level object.
var mainMethods = strings.Fields("include public private protected using define_method module_function")

// protocolMethods are methods Ruby calls implicitly on arbitrary objects
// (besides every to_* conversion).
var protocolMethods = strings.Fields("each call coerce method_missing respond_to_missing? initialize_copy marshal_dump marshal_load _dump _load encode_with init_with exception dig succ")

var rubyKeywords = map[string]bool{}

func init() {
	for _, k := range strings.Fields("alias and begin break case class def defined? do else elsif end ensure false for if in module next nil not or redo rescue retry return self super then true undef unless until when while yield") {
		rubyKeywords[k] = true
	}
}

// coreMethods are the methods every guest object responds to (Kernel,
// Object and BasicObject, public and private, with the json library
// loaded), read from the guest image; a tool may not shadow them.
var coreMethods = strings.Fields(`abort at_exit autoload autoload? binding block_given? caller caller_locations
catch class clone define_singleton_method display dup enum_for eql? equal? eval exec exit exit! extend fail fork
format freeze frozen? gets global_variables hash initialize initialize_clone initialize_copy initialize_dup inspect
instance_eval instance_exec instance_of? instance_variable_defined? instance_variable_get instance_variable_set
instance_variables instance_variables_to_inspect is_a? iterator? itself j jj kind_of? lambda load local_variables
loop method method_missing methods nil? object_id open p pp print printf private_methods proc protected_methods
public_method public_methods public_send putc puts raise rand readline readlines remove_instance_variable require
require_relative respond_to? respond_to_missing? select send set_trace_func singleton_class singleton_method
singleton_method_added singleton_method_removed singleton_method_undefined singleton_methods sleep spawn sprintf
srand syscall system tap test then throw to_enum to_json to_s trace_var trap untrace_var warn yield_self`)

var (
	ctxType   = reflect.TypeFor[context.Context]()
	errType   = reflect.TypeFor[error]()
	anyType   = reflect.TypeFor[any]()
	bigIntPtr = reflect.TypeFor[*big.Int]()
)

// reflectTool wraps fn as a ToolFunc, or says why it cannot be one.
func reflectTool(fn reflect.Value) (ToolFunc, error) {
	if !fn.IsValid() || fn.Kind() != reflect.Func || fn.IsNil() {
		return nil, errors.New("not a function")
	}
	t := fn.Type()
	first := 0
	if t.NumIn() > 0 && t.In(0) == ctxType {
		first = 1
	}
	for i := first; i < t.NumIn(); i++ {
		if err := decodable(t.In(i)); err != nil {
			return nil, fmt.Errorf("parameter %d: %v", i+1, err)
		}
	}
	valueOut, errOut := -1, -1
	switch t.NumOut() {
	case 0:
	case 1:
		if t.Out(0) == errType {
			errOut = 0
		} else {
			valueOut = 0
		}
	case 2:
		if t.Out(1) != errType {
			return nil, errors.New("a second result must be error")
		}
		valueOut, errOut = 0, 1
	default:
		return nil, errors.New("too many results (want at most a value and an error)")
	}
	// Everything about the signature is worked out here, once; a call
	// only converts its arguments and calls fn.
	variadic := t.IsVariadic()
	nfixed := t.NumIn() - first
	if variadic {
		nfixed--
	}
	params := make([]reflect.Type, t.NumIn()-first) // the type each argument converts to
	for i := range params {
		params[i] = t.In(first + i)
	}
	if variadic {
		params[len(params)-1] = params[len(params)-1].Elem()
	}
	bagLast := !variadic && nfixed > 0 && optionsBag(t.In(t.NumIn()-1))
	kwLast := variadic || (nfixed > 0 && takesKeywords(t.In(t.NumIn()-1)))
	want := fmt.Sprint(nfixed)
	if variadic {
		want += "+"
	}
	fast := scalarFast(fn.Interface())
	return func(ctx context.Context, a Args) (any, error) {
		if fast != nil && a.Keyword == nil {
			if res, err, ok := fast(ctx, a.Positional); ok {
				return res, err
			}
		}
		npos := len(a.Positional)
		nin := npos
		if a.Keyword != nil {
			nin++
		}
		bag := bagLast && nin == nfixed-1 // an omitted options bag is empty
		if bag {
			nin++
		}
		if a.Keyword != nil && !kwLast {
			return nil, &argError{fmt.Sprintf("unknown keyword: %s (this tool takes no keywords)", strings.Join(sortedKeys(a.Keyword), ", "))}
		}
		if nin < nfixed || (!variadic && nin > nfixed) {
			return nil, &argError{fmt.Sprintf("wrong number of arguments (given %d, expected %s)", nin, want)}
		}
		args := make([]reflect.Value, first+nin)
		if first == 1 {
			args[0] = reflect.ValueOf(ctx)
		}
		for i := range nin {
			var x any
			switch {
			case i < npos:
				x = a.Positional[i]
			case a.Keyword != nil && i == npos:
				x = a.Keyword
			default:
				x = map[string]any{}
			}
			pt := params[min(i, len(params)-1)]
			v, err := convertArg(x, pt, a.Keyword != nil && i == nin-1)
			if err != nil {
				return nil, &argError{fmt.Sprintf("argument %d: %v", i+1, err)}
			}
			args[first+i] = v
		}
		out := fn.Call(args)
		var res any
		if valueOut >= 0 {
			res = out[valueOut].Interface()
		}
		if errOut >= 0 && !out[errOut].IsNil() {
			return nil, out[errOut].Interface().(error)
		}
		return res, nil
	}, nil
}

// optionsBag reports whether a last parameter of type t may be omitted:
// a struct, a pointer to one, or a map with string keys, which is where
// keyword arguments go.
func optionsBag(t reflect.Type) bool {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Map:
		return t.Key().Kind() == reflect.String
	case reflect.Struct:
		// Values with their own encoding (time.Time, big.Int) are not bags.
		pt := reflect.PointerTo(t)
		return !pt.Implements(jsonUnmarshalerType) && !pt.Implements(textUnmarshalerType)
	}
	return false
}

// takesKeywords reports whether a last parameter of type t can receive
// keyword arguments: any, or a type a hash decodes into.
func takesKeywords(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t == anyType || t.Kind() == reflect.Map || (t.Kind() == reflect.Struct && !ownDecoding(t))
}

// argError marks an argument mismatch: ArgumentError in the guest.
type argError struct{ msg string }

func (e *argError) Error() string { return e.msg }

func decodable(t reflect.Type) error {
	switch t.Kind() {
	case reflect.Chan, reflect.Func, reflect.UnsafePointer, reflect.Complex64, reflect.Complex128:
		return fmt.Errorf("a %s cannot be decoded from guest data", t)
	case reflect.Interface:
		if t != anyType {
			return fmt.Errorf("interface %s cannot be decoded from guest data (use any)", t)
		}
	}
	return nil
}

func guestType(x any) string { return wire.TypeName(x) }

// Hooks observe and control tool calls. Every field is optional.
type Hooks struct {
	// BeforeCall runs before each tool call; a non-nil error vetoes the
	// call, and its message is what the guest sees (as
	// Glovebox::ToolError, unsanitized: the message is the host's own).
	// The transcript entry of a vetoed call has Outcome OutcomeVetoed; a
	// BeforeCall that panics vetoes it too, with OutcomePanic.
	BeforeCall func(ctx context.Context, tool string, args Args) error
	// AfterCall runs after each call that was attempted (vetoed ones
	// included) with its transcript entry.
	AfterCall func(ctx context.Context, call ToolCall)
	// SanitizeError decides the message the guest sees for a tool's own
	// error, which may otherwise leak host details. If it panics or
	// returns "", the guest sees "tool call failed". Nil passes messages
	// through.
	SanitizeError func(tool string, err error) string
	// Approver decides, for each call of a tool that needs approval
	// ([ToolDoc].NeedsApproval, [Toolset.RequireApproval]), whether it
	// runs: nil approves; an error denies, and its message is the reason
	// the guest sees as Glovebox::ToolDenied (a Glovebox::ToolError it
	// can rescue). It runs after BeforeCall, with the eval's context,
	// which ends when the eval is canceled; it waits at most
	// Limits.ApprovalTimeout (then the call is denied), and the wait
	// counts against neither the eval's Timeout nor its ToolTime. In a
	// [ToolSession] (a command in an OS box, an executor's eval whose
	// tools run here) the session's deadline does not stand still: the
	// wait ends at it. A decision that comes after the eval has ended
	// (its deadline, its context) never runs the tool: the transcript
	// records the call with OutcomeTimeout or OutcomeCanceled. It may be
	// called from several evals at once. Nil denies every such call.
	Approver func(ctx context.Context, tool string, args Args) error
}

// ToolCall is one entry of an eval's transcript.
type ToolCall struct {
	Name     string
	Args     Args
	Result   any    // the value the tool returned; nil on error
	Error    string // the message the guest saw; "" on success
	Duration time.Duration
	// Elided is set when Args and Result were dropped: the eval's
	// transcript already held MaxTranscriptData bytes of data, the tool
	// name was unknown, the call was over Limits.ToolCalls, or its
	// arguments were over Limits.ToolPayload (they were not decoded).
	Elided bool
	// Approval is "approved" or "denied" for a call of a tool that needs
	// approval, "" for any other call.
	Approval string
	// Outcome says how the call ended: OutcomeOK, or which refusal,
	// failure or limit ended it. The zero value "" appears only in
	// entries made by hand or decoded from a transcript written before
	// the field existed.
	Outcome CallOutcome
}

// CallOutcome says how one tool call ended ([ToolCall].Outcome, "outcome"
// in the transcript's JSON). Every call ends with exactly one.
type CallOutcome string

// The outcomes. The guest saw a rescuable exception for every outcome but
// OutcomeOK and the three that end the eval (OutcomeBudgetExceeded,
// OutcomeTimeout, OutcomeCanceled); ToolCall.Error holds the message it
// saw.
const (
	// OutcomeOK: the tool returned a value; ToolCall.Result holds it.
	OutcomeOK CallOutcome = "ok"
	// OutcomeError: the tool returned an error (Glovebox::ToolError or
	// the subclass a [ToolError] chose).
	OutcomeError CallOutcome = "error"
	// OutcomePanic: the tool or the BeforeCall hook panicked; the guest
	// saw Glovebox::ToolError "tool call failed" and the panic was logged.
	OutcomePanic CallOutcome = "panic"
	// OutcomeVetoed: Hooks.BeforeCall returned an error, so the tool did
	// not run (Glovebox::ToolError with the hook's message).
	OutcomeVetoed CallOutcome = "vetoed"
	// OutcomeDenied: the tool needs approval and it was not given
	// (Glovebox::ToolDenied); Approval is "denied".
	OutcomeDenied CallOutcome = "denied"
	// OutcomeOversized: the call's encoded arguments or result were over
	// Limits.ToolPayload (Glovebox::ToolPayloadError, see
	// [PayloadErrorClass]). Oversized arguments are not kept (Elided).
	OutcomeOversized CallOutcome = "oversized"
	// OutcomeUnknownTool: no tool has the name (Glovebox::UnknownToolError).
	OutcomeUnknownTool CallOutcome = "unknown_tool"
	// OutcomeInvalid: the arguments did not fit the tool's parameters or
	// could not be decoded (ArgumentError), or its result has no data
	// form (TypeError).
	OutcomeInvalid CallOutcome = "invalid"
	// OutcomeBudgetExceeded: the call was over Limits.ToolCalls or
	// ToolTime (or the executor's bytes per eval); the eval ended with
	// StatusToolBudgetExceeded.
	OutcomeBudgetExceeded CallOutcome = "budget_exceeded"
	// OutcomeTimeout: the eval's Timeout passed during the call, or
	// before it could start (while its hooks ran or it waited for
	// approval: then the tool did not run, and Error says so); the eval
	// ended with StatusTimeout.
	OutcomeTimeout CallOutcome = "timeout"
	// OutcomeCanceled: the caller's context ended during the call, or
	// before it could start (the tool did not run); the eval ended with
	// StatusCanceled.
	OutcomeCanceled CallOutcome = "canceled"
)

// PayloadErrorClass is the exception class, in the guest's Glovebox
// module, of a tool call whose encoded arguments or result are over
// Limits.ToolPayload: Glovebox::ToolPayloadError, a Glovebox::ToolError
// that exists before first use, so guest code can rescue one oversized
// answer and carry on (ask for less). The eval-wide budgets —
// Limits.ToolCalls, ToolTime, the executor's bytes per eval — end the
// eval with StatusToolBudgetExceeded instead, which no rescue catches.
const PayloadErrorClass = "ToolPayloadError"

// remoteOutcome is the outcome of a call a remote toolset answered with
// the guest error class.
func remoteOutcome(class string) CallOutcome {
	switch class {
	case PayloadErrorClass:
		return OutcomeOversized
	case "ToolDenied":
		return OutcomeDenied
	case "UnknownToolError":
		return OutcomeUnknownTool
	case "ArgumentError", "TypeError":
		return OutcomeInvalid
	}
	return OutcomeError
}

// MarshalJSON writes {"name", "args", "kwargs", "result", "error",
// "duration_ms", "elided", "approval", "outcome"}, with values encoded as in [Result.MarshalJSON].
// "args" is always an array and "kwargs" always an object: no arguments
// of a kind (and elided ones) are [] and {}, never null.
func (c ToolCall) MarshalJSON() ([]byte, error) {
	args, kwargs := any(c.Args.Positional), any(c.Args.Keyword)
	if c.Args.Positional == nil {
		args = []any{}
	}
	if c.Args.Keyword == nil {
		kwargs = map[string]any{}
	}
	enc := func(v any) json.RawMessage {
		b, err := wire.EncodeJSON(nil, v, wire.MaxDepth)
		if err != nil {
			b, _ = json.Marshal(fmt.Sprint(v))
		}
		return b
	}
	return marshalNoEscape(struct {
		Name       string          `json:"name"`
		Args       json.RawMessage `json:"args"`
		Kwargs     json.RawMessage `json:"kwargs"`
		Result     json.RawMessage `json:"result"`
		Error      string          `json:"error,omitempty"`
		DurationMS float64         `json:"duration_ms"`
		Elided     bool            `json:"elided,omitempty"`
		Approval   string          `json:"approval,omitempty"`
		Outcome    CallOutcome     `json:"outcome,omitempty"`
	}{c.Name, enc(args), enc(kwargs), enc(c.Result), c.Error, float64(c.Duration.Microseconds()) / 1000, c.Elided, c.Approval, c.Outcome})
}
