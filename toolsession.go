package glovebox

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/gloveboxhq/glovebox/internal/engine"
)

// ToolSession is one run's tool channel for code outside the wasm VM: a
// command in an OS box (package box) calls the Runtime's tools through
// it, with the same hooks, budgets (Limits.ToolCalls, ToolTime,
// ToolPayload) and transcript as a Ruby eval, because every call goes
// through the same path as the eval's.
//
// Its methods are safe for concurrent use; calls run one at a time, as
// they do from a VM. Once a budget is spent (or the deadline passed),
// every later call gets the same abort answer.
type ToolSession struct {
	mu       sync.Mutex
	st       *evalState
	deadline time.Time
	abort    string // the sticky abort frame, once one happened
}

// ToolSession starts a tool channel whose calls must end within timeout
// (zero means the Runtime's Limits.Timeout). It returns nil when the
// Runtime has no tools.
func (r *Runtime) ToolSession(timeout time.Duration) *ToolSession {
	if len(r.tools) == 0 {
		return nil
	}
	if timeout <= 0 {
		timeout = r.limits.Timeout
	}
	return &ToolSession{st: &evalState{r: r}, deadline: time.Now().Add(timeout)}
}

// Names lists the tools, sorted.
func (s *ToolSession) Names() []string { return slices.Clone(s.st.r.names) }

// Call runs tool name with args, the wire form of [positional, keyword]
// (empty for no arguments), and returns the reply frame of the tool wire
// format (see package box): "n", "t", "f", "s\n<string>", "i\n<integer>",
// "j\n<wire value>" for a result; "err\n<Class>\n<message>" for an error
// the caller raises; "abort\n<status>\n<message>" when a budget or the
// deadline ended the session.
func (s *ToolSession) Call(ctx context.Context, name string, args []byte) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.abort != "" {
		return []byte(s.abort)
	}
	if !time.Now().Before(s.deadline) {
		s.abort = "abort\n" + string(StatusTimeout) + "\nthe run's time for tool calls ran out"
		return []byte(s.abort)
	}
	name = engine.CleanToolName(name)
	c := &engine.Call{Name: name, Args: []any{}, Size: len(args), Deadline: s.deadline}
	if len(args) > s.st.r.limits.ToolPayload {
		c.Args, c.Kwargs, c.Err = nil, nil, &engine.PayloadError{Size: len(args), Limit: s.st.r.limits.ToolPayload}
	} else if len(args) > 0 {
		c.DecodeArgs(args)
	}
	// The call's own context (see evalState.call) ends at s.deadline.
	out, err := s.st.call(ctx, c)
	if err != nil {
		var ge *engine.GuestError
		var ab *engine.Abort
		switch {
		case errors.As(err, &ab):
			s.abort = "abort\n" + string(ab.Status) + "\n" + ab.Message
			return []byte(s.abort)
		case errors.As(err, &ge):
			return []byte("err\n" + ge.Class + "\n" + ge.Message)
		}
		return []byte("err\nToolError\n" + err.Error())
	}
	return out
}

// Calls is the transcript so far.
func (s *ToolSession) Calls() []ToolCall {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	return slices.Clone(s.st.calls)
}

// Transcript is Calls as a JSON array (each entry ToolCall's JSON form);
// "[]" when there were none.
func (s *ToolSession) Transcript() json.RawMessage {
	b, err := json.Marshal(s.Calls())
	if err != nil || string(b) == "null" {
		return json.RawMessage("[]")
	}
	return b
}
