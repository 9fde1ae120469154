package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/gloveboxhq/glovebox"
)

// forwardKey is the input request key of a bound server's question passed
// on to the client.
const forwardKey = "elicitation"

// forwardReason is the PendingCall.Reason of a call to a bound server's
// tool suspended because the server asked a question.
const forwardReason = "a bound MCP server asks the MCP client a question"

// forwarded is one question of a bound server's that the client answered:
// its message (to check that the call asks the same again) and the answer.
type forwarded struct {
	Server  string            `json:"server"`
	Message string            `json:"message"`
	Result  *mcp.ElicitResult `json:"result"`
}

// forwardAsk is the question a call suspended in: the server that asked
// and its params, and the questions answered before it in the same call.
type forwardAsk struct {
	server   string
	params   *mcp.ElicitParams
	answered []forwarded
}

// forwardQueue holds the answers a continued call's questions get, in the
// order they were asked.
type forwardQueue struct {
	mu   sync.Mutex
	all  []forwarded
	next int
}

type forwardQueueKey struct{}

// ForwardElicit is an mcptools Config.Elicit for the MCP servers bound
// into a Runtime that a [Server] serves: a bound server's elicitation
// during a tool call goes to the MCP client whose request runs the
// program. Under MCP 2025-11-25 and older it is an elicitation request to
// that client during the call, and the client's answer is the server's.
// Under 2026-07-28 the program is suspended in its call of the bound
// tool (the Runtime needs StateKeys): the result is input_required with
// the server's question under the input request key "elicitation", and
// the client's retry with the answer makes the tool call again, answering
// the server's question with it (a question the server asks again with
// the same message gets the same answer; each new one is another
// input_required round). server is the bound server's name, unused but
// for errors.
//
// Its errors (the bound server gets them as its request's error): the
// call did not come through a Server; the client did not declare
// elicitation (or URL elicitation, for mode "url"); the client failed to
// answer (2025-11-25). Under 2026-07-28 it returns an error wrapping
// [glovebox.ErrSuspend], which mcptools turns into the suspension.
func ForwardElicit(ctx context.Context, server string, req *mcp.ElicitParams) (*mcp.ElicitResult, error) {
	ci := callFrom(ctx)
	if ci == nil {
		return nil, fmt.Errorf("the MCP server %s asked a question, and no MCP client is there to ask (the call did not come through glovebox mcp, or several calls to the server were under way)", server)
	}
	if err := canElicit(ci.caps, req); err != nil {
		return nil, fmt.Errorf("the MCP server %s asked a question: %v", server, err)
	}
	if !ci.stateless() {
		if ci.ss == nil {
			return nil, fmt.Errorf("the MCP server %s asked a question, and no MCP client is there to ask", server)
		}
		return ci.ss.Elicit(ctx, req)
	}
	q, _ := ctx.Value(forwardQueueKey{}).(*forwardQueue)
	var answered []forwarded
	if q != nil {
		q.mu.Lock()
		if q.next < len(q.all) && q.all[q.next].Server == server && q.all[q.next].Message == req.Message {
			r := q.all[q.next].Result
			q.next++
			q.mu.Unlock()
			return r, nil
		}
		answered = append(answered, q.all[:q.next]...)
		q.all = q.all[:q.next] // a question not asked again is not answered later
		q.mu.Unlock()
	}
	ci.mu.Lock()
	ci.forward = &forwardAsk{server: server, params: req, answered: answered}
	ci.mu.Unlock()
	return nil, glovebox.SuspendCall(forwardReason)
}

// canElicit says why a client with caps cannot be asked req, or nil.
func canElicit(caps *mcp.ClientCapabilities, req *mcp.ElicitParams) error {
	switch {
	case caps == nil || caps.Elicitation == nil:
		return errors.New("the MCP client did not declare elicitation, so it cannot be asked")
	case req.Mode == "url" && caps.Elicitation.URL == nil:
		return errors.New("the MCP client did not declare URL elicitation, so it cannot be asked to open one")
	}
	return nil
}

// pauseForward fills e with the question a call suspended in by
// ForwardElicit: the input request, and the answers before it.
func pauseForward(ci *callInfo, e *envelope) error {
	var f *forwardAsk
	if ci != nil {
		ci.mu.Lock()
		f = ci.forward
		ci.mu.Unlock()
	}
	if f == nil {
		return errors.New("the program waits for a bound MCP server's question, and the question is not known")
	}
	var err error
	if e.Asks, err = json.Marshal(map[string]any{forwardKey: map[string]any{"method": "elicitation/create", "params": f.params}}); err != nil {
		return err
	}
	e.Forward = &forwardState{Server: f.server, Message: f.params.Message, Answered: f.answered}
	return nil
}

// forwardState is what a request state keeps of a bound server's
// question: who asked, its message, and the answers before it.
type forwardState struct {
	Server   string      `json:"server"`
	Message  string      `json:"message"`
	Answered []forwarded `json:"answered,omitempty"`
}

// forwardAnswer makes the answer of a call paused in a bound server's
// question: the call is made again, its questions answered from the
// queue. False when resp has no elicitation answer.
func forwardAnswer(e *envelope, resp mcp.InputResponseMap) (glovebox.Answer, []forwarded, bool) {
	r, ok := resp[forwardKey].(*mcp.ElicitResult)
	if !ok {
		return glovebox.Answer{}, nil, false
	}
	all := append(append([]forwarded(nil), e.Forward.Answered...), forwarded{Server: e.Forward.Server, Message: e.Forward.Message, Result: r})
	return glovebox.Answer{Approved: true}, all, true
}

// in is ctx for continuing r's program: a call paused in a bound server's
// question finds the answers there.
func (r *retry) in(ctx context.Context) context.Context {
	if r.fwd == nil {
		return ctx
	}
	return context.WithValue(ctx, forwardQueueKey{}, &forwardQueue{all: r.fwd})
}
