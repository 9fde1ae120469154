package glovebox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
// With labelled tools (Toolset.Label) it applies the data-flow policy as
// an eval does: the values its calls hand out are recorded, a call whose
// arguments carry one of a kind its tool does not accept is refused (and
// a token is replaced by its value where the kind is accepted), and
// [ToolSession.Redact] and [ToolSession.RedactOutput] show what the code
// outside returns as tokens.
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
// Runtime has no tools; a nil *ToolSession is a channel without tools
// (see its methods), and box.Command treats one in Tools as no tools.
func (r *Runtime) ToolSession(timeout time.Duration) *ToolSession {
	if len(r.tools) == 0 {
		return nil
	}
	if timeout <= 0 {
		timeout = r.limits.Timeout
	}
	return &ToolSession{st: &evalState{r: r, flow: r.newFlow()}, deadline: time.Now().Add(timeout)}
}

// Next starts a tool channel for the next run of the same conversation
// (a remote session's next eval): fresh budgets, transcript and a
// deadline timeout from now (zero: Limits.Timeout), but s's labelled
// values and tokens, so a value an earlier run's call handed out keeps
// its token and its sinks. nil for a nil session.
func (s *ToolSession) Next(timeout time.Duration) *ToolSession {
	if s == nil {
		return nil
	}
	n := s.st.r.ToolSession(timeout)
	n.st.flow = s.st.flow
	return n
}

// Redact replaces, in everything res shows (Value, Stdout, Stderr, the
// error, the transcript, the pending call's arguments), each labelled
// value this session's calls handed out with its token, and makes
// res.Reveal turn the tokens back: for a Result made outside the VM's
// Runtime, such as an executor's (package executor/client). Without
// labels, or on a nil session, it changes nothing.
func (s *ToolSession) Redact(res *Result) {
	if s == nil || s.st.flow == nil || res == nil {
		return
	}
	s.st.flow.redactResult(res)
	if res.Pending != nil {
		res.Pending.Args = s.st.flow.redactArgs(res.Pending.Args)
	}
}

// RedactOutput returns a writer that passes what is written to it on to
// w with the labelled values of this session's calls replaced by their
// tokens, a line at a time (a line goes out when its newline arrives);
// flush writes the rest. Without labels, or on a nil session, it returns
// w itself.
func (s *ToolSession) RedactOutput(w io.Writer) (out io.Writer, flush func()) {
	if s == nil || s.st.flow == nil || w == nil {
		return w, func() {}
	}
	lr := &lineRedactor{w: w, f: s.st.flow}
	return lr, lr.flush
}

// Names lists the tools, sorted; nil for a nil session.
func (s *ToolSession) Names() []string {
	if s == nil {
		return nil
	}
	return slices.Clone(s.st.r.names)
}

// Call runs tool name with args, the wire form of [positional, keyword]
// (empty for no arguments), and returns the reply frame of the tool wire
// format (see package box): "n", "t", "f", "s\n<string>", "i\n<integer>",
// "j\n<wire value>" for a result; "err\n<Class>\n<message>" for an error
// the caller raises; "abort\n<status>\n<message>" when a budget or the
// deadline ended the session. ctx's deadline, when earlier than the
// session's, is this call's: a call whose hooks or approval end after
// its deadline does not run the tool and answers
// "abort\ntimeout\n…" (the transcript says OutcomeTimeout). A nil
// session answers every call with "err\nUnknownToolError\nno tool
// named …", as for any name that is not a tool.
func (s *ToolSession) Call(ctx context.Context, name string, args []byte) []byte {
	if s == nil {
		return []byte(fmt.Sprintf("err\nUnknownToolError\nno tool named %q (this session has no tools)", engine.CleanToolName(name)))
	}
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
	if d, ok := ctx.Deadline(); ok && d.Before(c.Deadline) {
		c.Deadline = d // the eval's own end, when the caller knows it (an executor's time_left_ms)
	}
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

// Calls is the transcript so far; nil for a nil session.
func (s *ToolSession) Calls() []ToolCall {
	if s == nil {
		return nil
	}
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
