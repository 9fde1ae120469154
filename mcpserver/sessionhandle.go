package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/codemode"
)

// handleArg is ruby_session's argument that carries the session handle
// under statelessVersion over HTTP.
const handleArg = "session"

// sessionInputSchema is ruby_session's inputSchema: run_ruby's with the
// session handle added.
func sessionInputSchema(in json.RawMessage) json.RawMessage {
	var m map[string]any
	if err := json.Unmarshal(in, &m); err != nil {
		return in
	}
	props, _ := m["properties"].(map[string]any)
	if props == nil {
		return in
	}
	props[handleArg] = map[string]any{"type": "string", "description": "Under MCP 2026-07-28 over HTTP: the session handle the previous " + ToolSession + " result gave (its \"session\"); leave it out to start a fresh session. Each handle is used once: sending one again returns the result its first use gave."}
	b, err := json.Marshal(m)
	if err != nil {
		return in
	}
	return b
}

// splitHandle returns a ruby_session call's arguments without the
// handle, and the handle ("" when absent).
func splitHandle(args json.RawMessage) (json.RawMessage, string) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(args, &m); err != nil || m[handleArg] == nil {
		return args, ""
	}
	var h string
	_ = json.Unmarshal(m[handleArg], &h)
	delete(m, handleArg)
	b, _ := json.Marshal(m)
	return b, h
}

// runHandled serves ruby_session where no MCP session lasts beyond a
// request (statelessVersion over HTTP): the session's state travels as a
// sealed handle. A call resumes the handle's session (or starts one),
// runs the program, suspends the session again and returns the new
// handle in the result's "session"; no VM is held between calls. A call
// paused in a question answers input_required, and its retry continues
// the paused session. A handle or request state is continued once: a
// replay gets the recorded outcome. The whole call holds one of the
// MaxConcurrent slots: reading, resuming and suspending a session's state
// take memory in its size (up to the memory limit), so only that many
// sessions' states are in memory at once.
func (s *Server) runHandled(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	ctx, release, ok := s.takeSlot(ctx)
	if !ok {
		return errorResult("canceled", "Glovebox::Canceled", "the call was canceled while waiting for a free sandbox"), nil
	}
	defer release()
	p := req.Params
	if p.RequestState != "" {
		return resume(s, req, p.Name, p.RequestState, p.InputResponses, func(asks mcp.InputRequestMap) *mcp.CallToolResult {
			return &mcp.CallToolResult{InputRequests: asks, RequestState: p.RequestState}
		}, func(r *retry) (*mcp.CallToolResult, error) {
			gs, err := s.rt.ResumeSession(ctx, r.st)
			if err != nil {
				return errorResult("sandbox_error", "Glovebox::SandboxError", err.Error()), nil
			}
			return s.handledRun(ctx, req, gs, func(ctx context.Context, t *codemode.Tool) (*codemode.Outcome, error) {
				return continueWith(ctx, r, t.Continue)
			})
		})
	}
	args, handle := splitHandle(p.Arguments)
	run := func(ctx context.Context, t *codemode.Tool) (*codemode.Outcome, error) { return t.Handle(ctx, args) }
	if handle == "" {
		gs, err := s.rt.NewSession()
		if err != nil {
			return errorResult("sandbox_error", "Glovebox::SandboxError", err.Error()), nil
		}
		return s.handledRun(ctx, req, gs, run)
	}
	e, st, err := s.book.open(handle, "session", ToolSession, requestUser(req))
	if err != nil {
		return nil, &jsonrpc.Error{Code: CodeInvalidParams, Message: err.Error()}
	}
	if o, ok := s.book.outcome(e); ok {
		var res mcp.CallToolResult
		if err := json.Unmarshal(o, &res); err != nil {
			return nil, fmt.Errorf("the recorded outcome of this session handle is damaged: %v", err)
		}
		return &res, nil
	}
	first, err := s.book.claim(e)
	if err != nil {
		return nil, err
	}
	if !first {
		return nil, &jsonrpc.Error{Code: CodeInvalidParams, Message: s.book.busy(e, "invalid params: this session handle is in use by another call right now (each handle continues once); retry in a moment to get that call's result").Error()}
	}
	if st, err = s.book.load(e); err != nil {
		return nil, &jsonrpc.Error{Code: CodeInvalidParams, Message: err.Error()}
	}
	gs, err := s.rt.ResumeSession(ctx, st)
	if err != nil {
		return errorResult("sandbox_error", "Glovebox::SandboxError", "the session handle could not be resumed: "+err.Error()), nil
	}
	res, err := s.handledRun(ctx, req, gs, run)
	if err == nil {
		if b, merr := json.Marshal(res); merr == nil {
			if rerr := s.book.record(e, b); rerr != nil {
				s.log.Error("mcpserver: recording the outcome of a session handle failed", "err", rerr)
			}
		}
	}
	return res, err
}

// handledRun runs do on session gs and suspends it into the handle the
// result carries; gs is closed. A run paused in a question answers
// input_required (the paused session is in its request state).
func (s *Server) handledRun(ctx context.Context, req *mcp.CallToolRequest, gs *glovebox.Session, do func(context.Context, *codemode.Tool) (*codemode.Outcome, error)) (*mcp.CallToolResult, error) {
	defer gs.Close()
	t, err := codemode.New(codemode.Config{Runtime: s.rt, Evaluator: gs, Session: true, Name: ToolSession, Instructions: s.opts.Instructions, Servers: s.opts.Servers})
	if err != nil {
		return nil, err
	}
	res, out, err := s.runDo(ctx, req, "", func(ctx context.Context) (*codemode.Outcome, error) { return do(ctx, t) })
	if err != nil || out == nil || out.Result == nil || res.InputRequests != nil || gs.Pending() != nil {
		return res, err
	}
	state, err := gs.Suspend(ctx)
	var handle string
	if err == nil {
		handle, err = s.book.seal(envelope{Kind: "session", Tool: ToolSession}, state, requestUser(req), extraOwner(req.GetExtra()))
	}
	structured, _ := res.StructuredContent.(json.RawMessage)
	if err != nil {
		structured = markReset(structured, "the session's state could not be kept after this call ("+err.Error()+"); the next call starts a fresh session")
	} else {
		structured = withHandle(structured, handle)
	}
	res.StructuredContent = structured
	text := render(structured)
	if handle != "" {
		text += "\nsession: " + handle + " (pass it as the " + handleArg + " argument of the next " + ToolSession + " call)"
	}
	res.Content = []mcp.Content{&mcp.TextContent{Text: text}}
	return res, nil
}

// withHandle adds "session": handle to a result object.
func withHandle(out json.RawMessage, handle string) json.RawMessage {
	h, _ := json.Marshal(handle)
	body := bytes.TrimSuffix(bytes.TrimSpace(out), []byte("}"))
	b := append(append(append(bytes.Clone(body), `,"session":`...), h...), '}')
	if !json.Valid(b) {
		return out
	}
	return b
}
