package codemode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/gloveboxhq/glovebox"
)

// DefaultName is the tool's name when [Config].Name is empty.
const DefaultName = "run_ruby"

// DefaultMaxOutput is the size, in bytes, of the JSON a model receives
// per call when [Config].MaxOutput is zero: 32 KiB, about 8,000 tokens,
// so that several results fit in a model's context beside the
// conversation.
const DefaultMaxOutput = 32 << 10

// minOutput is the smallest MaxOutput accepted: room for a status, an
// error message and the truncation flags.
const minOutput = 1 << 10

// Errors returned by this package and its adapters.
var (
	// ErrInvalidConfig wraps every rejection of a [Config].
	ErrInvalidConfig = errors.New("codemode: invalid configuration")
	// ErrMaxRounds is returned by the adapters' Run helpers when the
	// model still asked for tools after the last allowed round; the
	// transcript so far comes with it.
	ErrMaxRounds = errors.New("codemode: the model gave no final answer within its tool rounds")
	// ErrNoAnswer is returned by the adapters' Run helpers when the model
	// stopped without a usable answer (cut at its token limit, refused,
	// or an empty reply); the message names the provider's stop reason.
	ErrNoAnswer = errors.New("codemode: the model stopped without an answer")
)

// Evaluator runs one program. [*glovebox.Runtime] is one (a fresh VM per
// call); a session, which keeps its VM between calls, is another.
type Evaluator interface {
	Eval(ctx context.Context, code string) (*glovebox.Result, error)
}

// Config configures [New]. Only Runtime is required.
type Config struct {
	// Runtime supplies what the description states — tools, mounts and
	// limits — and runs the code unless Evaluator is set.
	Runtime *glovebox.Runtime
	// Evaluator, if set, runs the code instead of Runtime: typically a
	// session made with Runtime.NewSession (its Eval has this shape), so
	// the limits stated are the session's.
	Evaluator Evaluator
	// Session tells the model that calls share one VM, so state
	// survives from one call to the next (and that a result may report
	// session_reset). It requires Evaluator. A *glovebox.Session
	// Evaluator is always described (and its results encoded) as a
	// session, whatever Session says, because that is what it does; set
	// Session for an Evaluator of your own that keeps state.
	Session bool
	// Name is the tool's name as the model sees it: 1 to 64 characters
	// from [A-Za-z0-9_-], the rule both the Anthropic and the OpenAI APIs
	// apply. Zero means DefaultName.
	Name string
	// Instructions are added to the description under their own
	// heading: what the program is for, who the customer is, house
	// rules. Zero adds nothing.
	Instructions string
	// MaxOutput caps the bytes of JSON the model receives per call (see
	// [Tool.Run] for how the result is cut to fit); at least 1 KiB.
	// Zero means DefaultMaxOutput.
	MaxOutput int
	// Servers lists the tool servers whose functions the Runtime binds
	// (for MCP servers, what mcptools' Binding.Notes returns); the
	// description gives each a server-notes entry with its
	// instructions. Nil adds no section.
	Servers []Server
}

// Tool is the one tool a model sees: a name, a description of the
// sandbox, an input schema, and the handler that runs the model's code.
// It is immutable and safe for concurrent use when its Evaluator is (a
// Runtime is; a session runs one program at a time).
type Tool struct {
	name, desc string
	rt         *glovebox.Runtime
	eval       Evaluator
	session    bool
	maxOutput  int
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// New makes the tool for cfg. It fails with [ErrInvalidConfig] when
// Runtime is nil, Name breaks the naming rule, Session is set without
// an Evaluator or with a *glovebox.Runtime one (which runs every call in
// a fresh VM), or MaxOutput is negative or below 1 KiB.
func New(cfg Config) (*Tool, error) {
	if cfg.Runtime == nil {
		return nil, fmt.Errorf("%w: Runtime is nil", ErrInvalidConfig)
	}
	name, err := checkName(cfg.Name)
	if err != nil {
		return nil, err
	}
	if cfg.Session && cfg.Evaluator == nil {
		return nil, fmt.Errorf("%w: Session is set but Evaluator is nil; pass the session as Evaluator", ErrInvalidConfig)
	}
	// The description states what the Evaluator does.
	switch cfg.Evaluator.(type) {
	case *glovebox.Session:
		cfg.Session = true
	case *glovebox.Runtime:
		if cfg.Session {
			return nil, fmt.Errorf("%w: Session is set but Evaluator is a Runtime, which runs every call in a fresh VM; pass a session (Runtime.NewSession) as Evaluator", ErrInvalidConfig)
		}
	}
	maxOut, err := checkMaxOutput(cfg.MaxOutput)
	if err != nil {
		return nil, err
	}
	ev := cfg.Evaluator
	if ev == nil {
		ev = cfg.Runtime
	}
	sb := sandbox{
		name: name, session: cfg.Session, tools: cfg.Runtime.ToolDocs(), mounts: cfg.Runtime.Mounts(),
		limits: cfg.Runtime.Limits(), memoryFloor: cfg.Runtime.MemoryFloor(), maxOutput: maxOut,
		instructions: cfg.Instructions, servers: cfg.Servers,
	}
	return &Tool{name: name, desc: describe(sb), rt: cfg.Runtime, eval: ev, session: cfg.Session, maxOutput: maxOut}, nil
}

// Name returns the tool's name.
func (t *Tool) Name() string { return t.name }

// Description returns the generated description: Markdown prose telling
// the model how the sandbox behaves, its limits, each function with its
// parameters, JSON Schemas and an example call, each mount, and the
// result format.
func (t *Tool) Description() string { return t.desc }

// InputSchema returns the JSON Schema of the tool's input, an object
// with one required string property, code. The slice is the caller's.
func (t *Tool) InputSchema() json.RawMessage {
	return json.RawMessage(`{"type":"object","properties":{"code":{"type":"string","description":"A complete Ruby program. The value of its last expression is returned."}},"required":["code"],"additionalProperties":false}`)
}

// Outcome is what one call of the tool did.
type Outcome struct {
	// Code is the program run; "" when the input had none.
	Code string
	// Result is the eval's result; nil when the input was refused
	// before anything ran. For glovebox.StatusSuspended (a call waits
	// for approval or an answer), Result.Pending names the call and
	// Result.State is the sealed state to continue from with
	// [Tool.Continue]; the model's Output says the call waits, with the
	// call's name and short arguments, never the state.
	Result *glovebox.Result
	// Output is the JSON object the model receives (see [Tool.Run]),
	// at most the configured MaxOutput bytes.
	Output json.RawMessage
	// IsError is set for every status but ok: the result should be
	// flagged as an error to the model where the API allows.
	IsError bool
}

// Handle runs the program in input, the model's tool input: a JSON
// object {"code": "..."}. Input that is not such an object, or whose code
// is empty, is not run: its Outcome has the status "invalid_input" and an
// error saying what to send, for the model to read. The Go error is set
// only when the Evaluator fails on the host side (such as
// [glovebox.ErrClosed]).
func (t *Tool) Handle(ctx context.Context, input json.RawMessage) (*Outcome, error) {
	var in map[string]json.RawMessage
	if err := json.Unmarshal(input, &in); err != nil || in == nil {
		return t.refuse("InvalidInput", `the input is not a JSON object; send {"code": "<a Ruby program>"}`), nil
	}
	raw, ok := in["code"]
	if !ok {
		return t.refuse("InvalidInput", `the input has no "code" field; send {"code": "<a Ruby program>"}`), nil
	}
	var code string
	if err := json.Unmarshal(raw, &code); err != nil {
		return t.refuse("InvalidInput", `"code" must be a string holding a Ruby program`), nil
	}
	if strings.TrimSpace(code) == "" {
		return t.refuse("InvalidInput", `"code" is empty; send a Ruby program`), nil
	}
	return t.Run(ctx, code)
}

// HandleCall is Handle for a call the model addressed to the tool name:
// a name other than t's is refused with the status "invalid_input" and
// class UnknownTool, so a model that invents a tool reads why it failed.
func (t *Tool) HandleCall(ctx context.Context, name string, input json.RawMessage) (*Outcome, error) {
	if name != t.name {
		return t.refuse("UnknownTool", fmt.Sprintf("there is no tool named %q; the only tool is %s, which runs Ruby code", name, t.name)), nil
	}
	return t.Handle(ctx, input)
}

// Run runs code and turns its result into the model's JSON: status,
// value (for ok), stdout and stderr (when not empty), error (class,
// message, backtrace), stdout_truncated, stderr_truncated and
// value_truncated flags (when set), tool_calls (each function called,
// runs of error-free calls to the same function merged with a count) and
// session_reset (sessions only). When that JSON is longer than
// MaxOutput, the longest of value, stdout, stderr and the error message
// are cut first (a cut value becomes a string of its JSON's beginning)
// and their flags set. A guest exception, a limit or a failing tool is
// an Outcome, never an error; the error is set only when the Evaluator
// fails on the host side.
func (t *Tool) Run(ctx context.Context, code string) (*Outcome, error) {
	res, err := t.eval.Eval(ctx, code)
	if err != nil {
		return nil, fmt.Errorf("codemode: running the program: %w", err)
	}
	if res == nil {
		return nil, errors.New("codemode: the Evaluator returned neither a result nor an error")
	}
	out := &Outcome{Code: code, Result: res, IsError: res.Status != glovebox.StatusOK}
	out.Output = encodeResult(res, t.session, t.maxOutput)
	return out, nil
}

// checkName applies Config.Name's rule; "" is DefaultName.
func checkName(name string) (string, error) {
	if name == "" {
		name = DefaultName
	}
	if !nameRE.MatchString(name) {
		return "", fmt.Errorf("%w: name %q must be 1 to 64 letters, digits, _ or -", ErrInvalidConfig, name)
	}
	return name, nil
}

// checkMaxOutput applies Config.MaxOutput's rule; 0 is DefaultMaxOutput.
func checkMaxOutput(n int) (int, error) {
	maxOut := n
	if maxOut == 0 {
		maxOut = DefaultMaxOutput
	}
	if maxOut < minOutput {
		return 0, fmt.Errorf("%w: MaxOutput is %d bytes; it must be at least %d", ErrInvalidConfig, n, minOutput)
	}
	return maxOut, nil
}

// Continue answers the call a suspended Outcome waits in and runs the
// program on from inside it (see glovebox.Runtime.Continue), returning
// the Outcome to give the model as the tool's result, which may be
// suspended again at a later call. state is that Outcome's Result.State;
// with a session as the Evaluator (a *glovebox.Session, paused by the
// suspended eval) the session continues its own pause and state is not
// read. It fails as Runtime.Continue and Session.Continue do (a damaged
// or foreign state, one continued before with a StateStore).
func (t *Tool) Continue(ctx context.Context, state []byte, a glovebox.Answer) (*Outcome, error) {
	var res *glovebox.Result
	var err error
	if s, ok := t.eval.(*glovebox.Session); ok {
		res, err = s.Continue(ctx, a)
	} else {
		res, err = t.rt.Continue(ctx, state, a)
	}
	if err != nil {
		return nil, fmt.Errorf("codemode: continuing the program: %w", err)
	}
	return &Outcome{Result: res, IsError: res.Status != glovebox.StatusOK, Output: encodeResult(res, t.session, t.maxOutput)}, nil
}

func (t *Tool) refuse(class, msg string) *Outcome {
	return &Outcome{IsError: true, Output: encodeRefusal(class, msg, t.maxOutput)}
}

// DefaultMaxRounds is the adapters' tool-round limit when their Run
// helpers are given zero: enough for a first program, two corrections
// and a follow-up.
const DefaultMaxRounds = 8

// Step is one tool call an agent loop ran: the adapters' Run helpers
// return them in order, for logs and demos.
type Step struct {
	// Round is the model turn that asked for the call, from 1.
	Round int
	// ID is the provider's tool-call ID.
	ID string
	// Name is the tool the model called (normally the codemode tool).
	Name string
	// Input is the tool input the model sent, as sent: a model may send
	// arguments that are not JSON, which the Outcome then reports.
	Input json.RawMessage
	// Outcome is what running it did.
	Outcome *Outcome
}
