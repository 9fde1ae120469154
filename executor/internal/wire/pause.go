package wire

import "github.com/gloveboxhq/glovebox/internal/clientwire"

// Continue is an EvalRequest's answer to a paused eval's call. Exactly
// one of Approve, Deny and Reply is given.
type Continue struct {
	// From is the idempotency key of the eval that paused (its record
	// says status "suspended"). A paused eval is continued at most once:
	// a second Continue of it, under another key, is refused
	// already_continued.
	From string `json:"from"`
	// Approve runs the paused tool now: its call comes back to the
	// client over the continuation's stream, as any tool call does.
	Approve bool `json:"approve,omitempty"`
	// Deny raises Glovebox::ToolDenied with this reason in the guest.
	Deny string `json:"deny,omitempty"`
	// Reply answers for the tool, a ToolResult reply frame ("n", "s\nx",
	// "j\n[1]", "err\nClass\nmessage", …).
	Reply string `json:"reply,omitempty"`
}

// Pending is clientwire.s (an EvalResult's paused call).
type Pending = clientwire.Pending

// checkPause checks an eval request's SuspendTools and Continue.
func checkPause(r *EvalRequest) error {
	if len(r.SuspendTools) > 0 {
		in := map[string]bool{}
		for _, n := range r.Tools {
			in[n] = true
		}
		for _, n := range r.SuspendTools {
			if r.Session != "" { // the session's tools: the executor checks
				if err := checkTools([]string{n}); err != nil {
					return Errorf(CodeBadRequest, "suspend_tools: %v", err)
				}
				continue
			}
			if !in[n] {
				return Errorf(CodeBadRequest, "suspend_tools: %q is not one of tools", n)
			}
		}
	}
	c := r.Continue
	if c == nil {
		return nil
	}
	if r.Code != "" || len(r.Tools) > 0 || r.Session != "" || len(r.SuspendTools) > 0 {
		return Errorf(CodeBadRequest, "continue: send no code, tools, session or suspend_tools (the paused eval's own are used)")
	}
	if !ValidKey(c.From) {
		return Errorf(CodeBadRequest, "continue.from: want the paused eval's idempotency key")
	}
	n := 0
	for _, set := range []bool{c.Approve, c.Deny != "", c.Reply != ""} {
		if set {
			n++
		}
	}
	if n != 1 {
		return Errorf(CodeBadRequest, "continue: give exactly one of approve, deny and reply")
	}
	return nil
}
