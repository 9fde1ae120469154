package client

import (
	"context"
	"github.com/gloveboxhq/glovebox"

	"github.com/gloveboxhq/glovebox/executor/internal/wire"
	gwire "github.com/gloveboxhq/glovebox/internal/wire"
)

// Answer answers a paused eval's call ([Evaluator.Continue]). Exactly
// one of its fields is used: Approve first, then Deny, else Value.
type Answer struct {
	// Approve runs the paused tool now: its call comes back to this
	// Evaluator's Runtime, as any tool call of the eval does.
	Approve bool
	// Deny raises Glovebox::ToolDenied with this reason in the guest.
	Deny string
	// Value is what the call returns, in place of the tool (a value
	// glovebox encodes: nil, bool, integers, floats, strings, []any,
	// map[string]any).
	Value any
}

// Continue answers the call the eval under key from paused in (its
// Result had glovebox.StatusSuspended) and runs it on, on whichever
// executor the request reaches; the Result is the rest of the eval's
// (it may pause again: continue that one under o.Key). A paused eval is
// continued once: a second Continue under another key fails with an
// *Error of code already_continued, and the paused call is not answered
// again. o.Key names this continuation (empty: a fresh one); a retry
// with the same key attaches to it or answers its record. o.Suspend is
// ignored (the paused eval's own apply). Errors are *Error, as for Eval.
func (e *Evaluator) Continue(ctx context.Context, from string, a Answer, o EvalOptions) (*glovebox.Result, error) {
	c := &wire.Continue{From: from}
	switch {
	case a.Approve:
		c.Approve = true
	case a.Deny != "":
		c.Deny = a.Deny
	default:
		v, err := gwire.Encode(nil, a.Value, gwire.MaxDepth)
		if err != nil {
			return nil, &Error{Code: "bad_request", Message: "the answer's value: " + err.Error()}
		}
		c.Reply = "j\n" + string(v)
	}
	req := wire.EvalRequest{Limits: evalLimits(e.rt.Limits()), Continue: c}
	return e.eval(ctx, &req, o, nil)
}

// Attach returns the session id made by [Evaluator.NewSession] (through
// any executor sharing the store, with a state key there), to run its
// evals through this Evaluator's executor. It checks nothing: an eval of
// a session that does not exist fails with not_found.
func (e *Evaluator) Attach(id string) *Session {
	return &Session{e: e, id: id, flow: e.rt.ToolSession(0)}
}
