package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/gloveboxhq/glovebox"
)

// Names of the guest functions [ClientTools] adds.
const (
	FuncAsk          = "mcp_ask"
	FuncProgress     = "mcp_progress"
	FuncCapabilities = "mcp_client_capabilities"
)

// askReason is the PendingCall.Reason of a call to mcp_ask suspended for
// an input_required result.
const askReason = "the program asks the MCP client"

// callInfo is what a tool call running for an MCP request knows of it.
type callInfo struct {
	ss       *mcp.ServerSession
	version  string
	caps     *mcp.ClientCapabilities
	progress any // the request's progress token, nil without one
	// given are the input responses of a first call (one without a
	// request state): mcp_ask takes its answers from them when they
	// answer all it asks, instead of pausing.
	given mcp.InputResponseMap
	// user is the request's authenticated user ("" without one), whom
	// the request states of its results are sealed for; owner is the
	// client whose share of the state directory they count against (see
	// extraOwner).
	user, owner string

	mu sync.Mutex
	// forward is the bound server's question the call's program was
	// suspended in by ForwardElicit, nil without one.
	forward *forwardAsk
}

type callKey struct{}

// mcpRequest is what withCall reads of a request (a tools/call or a
// prompts/get).
type mcpRequest interface {
	ProtocolVersion() string
	ClientCapabilities() *mcp.ClientCapabilities
	GetExtra() *mcp.RequestExtra
}

// withCall gives ctx what a guest function needs of the request req of
// session ss, with progress its progress token (nil: none) and given the
// input responses of a first call.
func withCall(ctx context.Context, ss *mcp.ServerSession, req mcpRequest, progress any, given mcp.InputResponseMap) context.Context {
	ci := &callInfo{ss: ss, version: req.ProtocolVersion(), caps: req.ClientCapabilities(), progress: progress, given: given, user: extraUser(req.GetExtra()), owner: extraOwner(req.GetExtra())}
	return context.WithValue(withSession(ctx, ss), callKey{}, ci)
}

func callFrom(ctx context.Context) *callInfo {
	ci, _ := ctx.Value(callKey{}).(*callInfo)
	return ci
}

// stateless reports whether a call of ci cannot ask its client anything
// while it runs (MCP statelessVersion): its questions are input_required
// results.
func (ci *callInfo) stateless() bool { return ci != nil && ci.version >= statelessVersion }

// ClientTools adds to ts the guest functions through which a program run
// by a [Server] (run_ruby, ruby_session, named programs) talks to the MCP
// client that called it:
//
//   - mcp_ask(requests) asks the client: requests is a Hash of your keys
//     to {"method" => M, "params" => P} with M one of "elicitation/create",
//     "sampling/createMessage" (a request to the client's own model:
//     glovebox never calls a model) and "roots/list", P that method's
//     params as MCP has them. It returns a Hash of the same keys to the
//     client's answers (an ElicitResult, CreateMessageResult or
//     ListRootsResult as a Hash). Under MCP 2025-11-25 and older each is
//     a request to the client during the call, sent at once; under
//     2026-07-28 the program is suspended and the call's result is
//     input_required with these requests, and the client's retry with the
//     answers continues it (the Runtime needs StateKeys). A method the
//     client did not declare the capability of raises
//     Glovebox::ToolError naming it, as does a client that refuses.
//   - mcp_progress(progress, total = nil, message = nil) sends a progress
//     notification for the call, when its client asked for them (a
//     progress token); it returns true when sent, false when not.
//   - mcp_client_capabilities() returns the capabilities the client
//     declared, as a Hash ({} outside an MCP call).
//
// It fails when ts already has one of the names.
func ClientTools(ts *glovebox.Toolset) error {
	if err := ts.Add(FuncAsk, ask); err != nil {
		return err
	}
	if err := ts.Add(FuncProgress, progressFunc); err != nil {
		return err
	}
	if err := ts.Add(FuncCapabilities, func(ctx context.Context, _ glovebox.Args) (any, error) {
		return capabilities(callFrom(ctx)), nil
	}); err != nil {
		return err
	}
	docs := map[string]glovebox.ToolDoc{
		FuncAsk: {Description: "Asks the MCP client that called this program. Under MCP 2026-07-28 the program pauses until the client answers (it may be continued in another server process).",
			Params: []glovebox.Param{{Name: "requests", Required: true, Description: `a Hash of your keys to {"method" => "elicitation/create" | "sampling/createMessage" | "roots/list", "params" => that method's MCP params}`,
				Schema: json.RawMessage(`{"type":"object","additionalProperties":{"type":"object","properties":{"method":{"type":"string","enum":["elicitation/create","sampling/createMessage","roots/list"]},"params":{"type":"object"}},"required":["method"]}}`)}},
			Returns: "a Hash of the same keys to the client's answers (ElicitResult, CreateMessageResult, ListRootsResult); raises Glovebox::ToolError when the client lacks the capability",
			Example: `mcp_ask({"name" => {"method" => "elicitation/create", "params" => {"message" => "Your name?", "requestedSchema" => {"type" => "object", "properties" => {"name" => {"type" => "string"}}}}}})`},
		FuncProgress: {Description: "Sends the MCP client a progress notification for this call, when it asked for progress.",
			Params:  []glovebox.Param{{Name: "progress", Required: true, Schema: json.RawMessage(`{"type":"number"}`)}, {Name: "total", Schema: json.RawMessage(`{"type":"number"}`)}, {Name: "message", Schema: json.RawMessage(`{"type":"string"}`)}},
			Returns: "true when sent, false when the client asked for no progress", Example: "mcp_progress(50, 100)"},
		FuncCapabilities: {Description: "The capabilities the calling MCP client declared.", Returns: `a Hash such as {"elicitation" => {}, "sampling" => {}}`, Example: "mcp_client_capabilities"},
	}
	for _, n := range []string{FuncAsk, FuncProgress, FuncCapabilities} {
		if err := ts.Describe(n, docs[n]); err != nil {
			return err
		}
	}
	return nil
}

// capabilities is ci's client capabilities as guest data.
func capabilities(ci *callInfo) map[string]any {
	out := map[string]any{}
	if ci == nil || ci.caps == nil {
		return out
	}
	b, _ := json.Marshal(ci.caps)
	_ = unmarshalNumbers(b, &out)
	return out
}

func unmarshalNumbers(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	return d.Decode(v)
}

// capabilityOf names the client capability a request method needs.
var capabilityOf = map[string]string{"elicitation/create": "elicitation", "sampling/createMessage": "sampling", "roots/list": "roots"}

// parseAsks reads mcp_ask's argument into the SDK's input requests,
// checking each method against the client's capabilities.
func parseAsks(ci *callInfo, args glovebox.Args, check bool) (mcp.InputRequestMap, json.RawMessage, error) {
	if len(args.Positional) != 1 || len(args.Keyword) > 0 {
		if len(args.Positional) == 0 && len(args.Keyword) > 0 {
			args.Positional = []any{args.Keyword}
		} else {
			return nil, nil, errors.New(FuncAsk + " takes one Hash of keys to {\"method\" => ..., \"params\" => ...}")
		}
	}
	raw, err := json.Marshal(args.Positional[0])
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %v", FuncAsk, err)
	}
	var shape map[string]struct {
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if err := json.Unmarshal(raw, &shape); err != nil || len(shape) == 0 {
		return nil, nil, errors.New(FuncAsk + " takes a non-empty Hash of keys to {\"method\" => ..., \"params\" => ...}")
	}
	have := capabilities(ci)
	var missing []string
	for k, r := range shape {
		c, ok := capabilityOf[r.Method]
		if !ok {
			return nil, nil, fmt.Errorf("%s: %q asks with method %q; the methods are elicitation/create, sampling/createMessage and roots/list", FuncAsk, k, r.Method)
		}
		if _, ok := have[c]; !ok && !slices.Contains(missing, c) {
			missing = append(missing, c)
		}
		if len(r.Params) == 0 || string(r.Params) == "null" {
			r.Params = json.RawMessage("{}")
			shape[k] = r
		}
	}
	if len(missing) > 0 && check {
		slices.Sort(missing)
		return nil, nil, fmt.Errorf("the MCP client did not declare the capabilities %s, so it cannot be asked that (check %s first)", strings.Join(missing, ", "), FuncCapabilities)
	}
	raw, _ = json.Marshal(shape)
	var m mcp.InputRequestMap
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, nil, fmt.Errorf("%s: %v", FuncAsk, err)
	}
	return m, raw, nil
}

// ask is mcp_ask.
func ask(ctx context.Context, args glovebox.Args) (any, error) {
	ci := callFrom(ctx)
	if ci == nil {
		return nil, errors.New(FuncAsk + " works only in a program an MCP client called")
	}
	m, raw, err := parseAsks(ci, args, true)
	if err != nil {
		return nil, err
	}
	if ci.stateless() {
		if a, ok := answerOf(&envelope{Asks: raw}, ci.given); ok && len(ci.given) > 0 {
			return a.Value, nil
		}
		return nil, glovebox.SuspendCall(askReason)
	}
	if ci.ss == nil {
		return nil, errors.New(FuncAsk + ": no MCP client is there to ask")
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	out := map[string]any{}
	var firstErr error
	for k, r := range m {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var res any
			var err error
			switch p := r.(type) {
			case *mcp.ElicitParams:
				res, err = ci.ss.Elicit(ctx, p)
			case *mcp.CreateMessageWithToolsParams:
				res, err = ci.ss.CreateMessageWithTools(ctx, p)
			case *mcp.ListRootsParams:
				res, err = ci.ss.ListRoots(ctx, p)
			}
			var v any
			if err == nil {
				b, _ := json.Marshal(res)
				err = unmarshalNumbers(b, &v)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = fmt.Errorf("the MCP client did not answer %q: %v", k, err)
			}
			out[k] = v
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	return out, nil
}

// progressFunc is mcp_progress.
func progressFunc(ctx context.Context, args glovebox.Args) (any, error) {
	ci := callFrom(ctx)
	if ci == nil || ci.progress == nil || ci.ss == nil {
		return false, nil
	}
	num := func(i int) (float64, bool) {
		if i >= len(args.Positional) || args.Positional[i] == nil {
			return 0, false
		}
		b, _ := json.Marshal(args.Positional[i])
		var f float64
		return f, json.Unmarshal(b, &f) == nil
	}
	p, ok := num(0)
	if !ok {
		return nil, errors.New(FuncProgress + "(progress, total = nil, message = nil): progress must be a number")
	}
	n := &mcp.ProgressNotificationParams{ProgressToken: ci.progress, Progress: p}
	n.Total, _ = num(1)
	if len(args.Positional) > 2 {
		n.Message, _ = args.Positional[2].(string)
	}
	if err := ci.ss.NotifyProgress(ctx, n); err != nil {
		return false, nil
	}
	return true, nil
}

// callContext is ctx for running req's program: its guest functions and
// the Approver find the request's client in it.
func (s *Server) callContext(ctx context.Context, req *mcp.CallToolRequest) context.Context {
	var given mcp.InputResponseMap
	if req.Params.RequestState == "" {
		given = req.Params.InputResponses
	}
	return withCall(ctx, req.Session, req, req.Params.GetProgressToken(), given)
}
