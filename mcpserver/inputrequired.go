package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/gloveboxhq/glovebox"
)

// approvalKey is the input request key of the approval question.
const approvalKey = "approval"

// approvalReason is the reason Approve suspends a call with under
// statelessVersion.
const approvalReason = "needs a person's approval"

// pause turns a run suspended in a call into the input requests of an
// input_required result and its request state. It fails when the call
// waits for something no MCP client can answer (a tool's own
// suspension), or when the state cannot be kept.
func (s *Server) pause(ci *callInfo, tool string, res *glovebox.Result) (mcp.InputRequestMap, string, error) {
	pc := res.Pending
	e := envelope{Kind: "call", Tool: tool}
	switch {
	case pc == nil:
		return nil, "", errors.New("the program was suspended outside a call")
	case pc.Approval:
		e.Approval = true
		e.Asks, _ = json.Marshal(map[string]any{approvalKey: map[string]any{"method": "elicitation/create",
			"params": map[string]any{"message": approvalMessage(pc.Name, pc.Args), "requestedSchema": approvalSchema}}})
	case pc.Reason == forwardReason:
		if err := pauseForward(ci, &e); err != nil {
			return nil, "", err
		}
	case pc.Name == FuncAsk && pc.Reason == askReason:
		var err error
		if _, e.Asks, err = parseAsks(nil, pc.Args, false); err != nil {
			return nil, "", err
		}
	default:
		return nil, "", fmt.Errorf("the program waits in its call to %s (%s), which is not a question an MCP client can answer", pc.Name, pc.Reason)
	}
	var user, owner string
	if ci != nil {
		user, owner = ci.user, ci.owner
	}
	st, err := s.book.seal(e, res.State, user, owner)
	if err != nil {
		return nil, "", err
	}
	var m mcp.InputRequestMap
	if err := json.Unmarshal(e.Asks, &m); err != nil {
		return nil, "", err
	}
	return m, st, nil
}

// retry is an opened retry of a paused call: its envelope and state, and
// the answer its input responses make.
type retry struct {
	e  *envelope
	st []byte
	a  glovebox.Answer
	// fwd are the answers to a bound server's questions, in order, for
	// a call paused in one (ForwardElicit); nil otherwise.
	fwd []forwarded
	// diverged: the program could not be replayed to its call
	// (glovebox.ErrStateDiverged); nothing after the pause ran, so the
	// claim is given back and the request state may be retried.
	diverged bool
}

// continueWith continues r's program with f (a Continue of a Runtime,
// or of a codemode Tool), noting a continuation that never reached its
// call.
func continueWith[O any](ctx context.Context, r *retry, f func(context.Context, []byte, glovebox.Answer) (O, error)) (O, error) {
	o, err := f(r.in(ctx), r.st, r.a)
	if errors.Is(err, glovebox.ErrStateDiverged) {
		r.diverged = true
	}
	return o, err
}

// openRetry checks a retry's request state and input responses. It
// returns the outcome recorded for the state when it was continued before
// (a replay), or asks != nil when an answer is missing (the requests to
// send again, with the same request state), or the retry to run, claimed
// so that no other request runs it. Errors are *jsonrpc.Error: a request
// state refused (altered, another key, expired, another tool's, another
// user's than user), or one being continued by another request right now.
func (s *Server) openRetry(tool, state, user string, resp mcp.InputResponseMap) (rt *retry, recorded []byte, asks mcp.InputRequestMap, err error) {
	e, st, err := s.book.open(state, "call", tool, user)
	if err != nil {
		return nil, nil, nil, &jsonrpc.Error{Code: CodeInvalidParams, Message: err.Error()}
	}
	if o, ok := s.book.outcome(e); ok {
		return nil, o, nil, nil
	}
	var fwd []forwarded
	var a glovebox.Answer
	var ok bool
	if e.Forward != nil {
		a, fwd, ok = forwardAnswer(e, resp)
	} else {
		a, ok = answerOf(e, resp)
	}
	if !ok {
		var m mcp.InputRequestMap
		if err := json.Unmarshal(e.Asks, &m); err != nil {
			return nil, nil, nil, err
		}
		return nil, nil, m, nil
	}
	first, err := s.book.claim(e)
	if err != nil {
		return nil, nil, nil, err
	}
	if !first {
		if o, ok := s.book.outcome(e); ok {
			return nil, o, nil, nil
		}
		return nil, nil, nil, &jsonrpc.Error{Code: CodeInvalidParams, Message: s.book.busy(e, "invalid params: this requestState is being continued by another request right now (a paused program continues once); retry in a moment to get its outcome").Error()}
	}
	if st, err = s.book.load(e); err != nil {
		return nil, nil, nil, &jsonrpc.Error{Code: CodeInvalidParams, Message: err.Error()}
	}
	return &retry{e: e, st: st, a: a, fwd: fwd}, nil, nil, nil
}

// answerOf makes the answer of a paused call from the client's input
// responses: false when one of its requests has no fitting response.
// Keys the call did not ask are ignored.
func answerOf(e *envelope, resp mcp.InputResponseMap) (glovebox.Answer, bool) {
	if e.Approval {
		r, ok := resp[approvalKey].(*mcp.ElicitResult)
		if !ok {
			return glovebox.Answer{}, false
		}
		switch r.Action {
		case "accept":
			if ok, _ := r.Content["approve"].(bool); ok {
				return glovebox.Answer{Approved: true}, true
			}
			return glovebox.Answer{Denied: true, Reason: "the user did not approve the call"}, true
		case "decline":
			return glovebox.Answer{Denied: true, Reason: "the user declined the call"}, true
		}
		return glovebox.Answer{Denied: true, Reason: "the user dismissed the approval request"}, true
	}
	var asks map[string]struct {
		Method string `json:"method"`
	}
	if err := json.Unmarshal(e.Asks, &asks); err != nil {
		return glovebox.Answer{}, false
	}
	out := map[string]any{}
	for k, q := range asks {
		r := resp[k]
		switch r.(type) {
		case *mcp.ElicitResult:
			ok := q.Method == "elicitation/create"
			if !ok {
				return glovebox.Answer{}, false
			}
		case *mcp.CreateMessageWithToolsResult, *mcp.CreateMessageResult:
			if q.Method != "sampling/createMessage" {
				return glovebox.Answer{}, false
			}
		case *mcp.ListRootsResult:
			if q.Method != "roots/list" {
				return glovebox.Answer{}, false
			}
		default:
			return glovebox.Answer{}, false
		}
		b, err := json.Marshal(r)
		var v any
		if err == nil {
			err = unmarshalNumbers(b, &v)
		}
		if err != nil {
			return glovebox.Answer{}, false
		}
		out[k] = v
	}
	return glovebox.Answer{Value: out}, true
}

// isRetry reports whether a call is the retry of an input_required
// result.
func isRetry(p *mcp.CallToolParamsRaw) bool {
	return p != nil && (p.RequestState != "" || len(p.InputResponses) > 0)
}

// retryCall serves the retry of a paused tool call: its recorded outcome,
// its questions again, or the program continued by cont (whose result,
// input_required again or final, is recorded for replays). A call with
// input responses and no request state is a first call (the responses
// answer the program's questions as it asks them): start runs it.
func (s *Server) retryCall(ctx context.Context, req *mcp.CallToolRequest, start func() (*mcp.CallToolResult, error), cont func(r *retry) (*mcp.CallToolResult, error)) (*mcp.CallToolResult, error) {
	p := req.Params
	if p.RequestState == "" {
		return start()
	}
	return resume(s, req, p.Name, p.RequestState, p.InputResponses, func(asks mcp.InputRequestMap) *mcp.CallToolResult {
		return &mcp.CallToolResult{InputRequests: asks, RequestState: p.RequestState}
	}, cont)
}

// resume serves a retry carrying a request state, sent by req, for a
// result type T: the recorded outcome of a replay, again(asks) when an
// answer is missing, or cont's result, recorded.
func resume[T any](s *Server, req mcp.Request, name, state string, resp mcp.InputResponseMap, again func(mcp.InputRequestMap) *T, cont func(r *retry) (*T, error)) (*T, error) {
	rt, recorded, asks, err := s.openRetry(name, state, requestUser(req), resp)
	switch {
	case err != nil:
		return nil, err
	case recorded != nil:
		res := new(T)
		if err := json.Unmarshal(recorded, res); err != nil {
			return nil, fmt.Errorf("the recorded outcome of this requestState is damaged: %v", err)
		}
		return res, nil
	case asks != nil:
		return again(asks), nil
	}
	res, err := cont(rt)
	if rt.diverged {
		// Not recorded: the state was not used up, and a retry of the
		// same request state (once what changed is back) continues it.
		s.book.unclaim(rt.e)
	}
	if err != nil || rt.diverged {
		return res, err
	}
	if b, merr := json.Marshal(res); merr == nil {
		if rerr := s.book.record(rt.e, b); rerr != nil {
			s.log.Error("mcpserver: recording the outcome of a continued state failed; a replay of it will be refused", "err", rerr)
		}
	}
	return res, nil
}

// pausedResult is the input_required result of a suspended run, or, when
// it cannot be one, an error result saying why.
func (s *Server) pausedResult(ci *callInfo, tool string, res *glovebox.Result) *mcp.CallToolResult {
	asks, st, err := s.pause(ci, tool, res)
	if err != nil {
		return errorResult("suspended", "Glovebox::Suspended", err.Error())
	}
	return &mcp.CallToolResult{InputRequests: asks, RequestState: st}
}
