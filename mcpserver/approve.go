package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/gloveboxhq/glovebox"
)

type sessionKey struct{}

func withSession(ctx context.Context, ss *mcp.ServerSession) context.Context {
	if ss == nil {
		return ctx
	}
	return context.WithValue(ctx, sessionKey{}, ss)
}

// maxApprovalArgs bounds the arguments shown in an approval request, in
// bytes of JSON: enough to judge a call, not a page of data.
const maxApprovalArgs = 2000

// approvalSchema asks for one yes/no answer.
var approvalSchema = json.RawMessage(`{"type":"object","properties":{"approve":{"type":"boolean","title":"Allow this call","description":"Run the call (true) or refuse it (false)","default":false}},"required":["approve"]}`)

// Approve is a [glovebox.Hooks].Approver for a Runtime served by a
// [Server]: it asks the person behind the MCP client that made the call
// whether the tool call may run. Under MCP 2025-11-25 and older it asks
// through elicitation during the call. Under 2026-07-28 it suspends the
// call ([glovebox.SuspendCall]; the Runtime needs StateKeys): the call's
// result is input_required with the question as an elicitation, and the
// client's retry with the answer runs the tool (accept with approve
// true) or raises Glovebox::ToolDenied in the program (accept with
// approve false, decline, cancel), in whichever process receives it.
// It denies the call with a reason when the call did not come through a
// Server, when the client does not support elicitation (nobody can be
// asked), when the person declines or dismisses the request, or when
// asking fails.
func Approve(ctx context.Context, tool string, args glovebox.Args) error {
	ss, _ := ctx.Value(sessionKey{}).(*mcp.ServerSession)
	ci := callFrom(ctx)
	var caps *mcp.ClientCapabilities
	switch {
	case ci != nil:
		caps = ci.caps
	case ss != nil && ss.InitializeParams() != nil:
		caps = ss.InitializeParams().Capabilities
	}
	switch {
	case ss == nil && ci == nil:
		return fmt.Errorf("%s needs a person's approval, and no MCP client is there to ask", tool)
	case caps == nil || caps.Elicitation == nil:
		return fmt.Errorf("%s needs a person's approval, and this MCP client does not support elicitation, so nobody can be asked", tool)
	case ci.stateless():
		return glovebox.SuspendCall(approvalReason)
	case ss == nil:
		return fmt.Errorf("%s needs a person's approval, and no MCP client is there to ask", tool)
	}
	res, err := ss.Elicit(ctx, &mcp.ElicitParams{Message: approvalMessage(tool, args), RequestedSchema: approvalSchema})
	switch {
	case err != nil && ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		return fmt.Errorf("asking for approval of %s failed: %v", tool, err)
	case res.Action == "accept":
		if ok, _ := res.Content["approve"].(bool); ok {
			return nil
		}
		return errors.New("the user did not approve the call")
	case res.Action == "decline":
		return errors.New("the user declined the call")
	}
	return errors.New("the user dismissed the approval request")
}

func approvalMessage(tool string, args glovebox.Args) string {
	call := glovebox.ToolCall{Name: tool, Args: args}
	b, err := json.Marshal(call)
	var shown string
	if err == nil {
		var m struct {
			Args   json.RawMessage `json:"args"`
			Kwargs json.RawMessage `json:"kwargs"`
		}
		_ = json.Unmarshal(b, &m)
		shown = "arguments " + string(m.Args)
		if k := string(m.Kwargs); k != "null" && k != "{}" {
			shown += ", keywords " + string(m.Kwargs)
		}
	}
	if len(shown) > maxApprovalArgs {
		shown = strings.ToValidUTF8(shown[:maxApprovalArgs], "") + "…"
	}
	return fmt.Sprintf("The sandboxed Ruby program wants to call %s with %s. Allow this call?", tool, shown)
}
