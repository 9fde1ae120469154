package clientwire

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/codemode"
)

// CodeModeRequest asks for glovebox code mode's tool for a client's
// tools (EXECUTOR.md, "Code mode"): the body of an executor's POST
// /v1/codemode and of the embedded child's codemode request.
type CodeModeRequest struct {
	// Name is the tool's name (codemode's rule); "" is "run_ruby".
	Name string `json:"name,omitempty"`
	// Instructions are added to the description under their own heading.
	Instructions string `json:"instructions,omitempty"`
	// Session describes calls that share one VM.
	Session bool `json:"session,omitempty"`
	// MaxOutput caps the bytes of the model's JSON per call (0: 32 KiB;
	// at least 1 KiB).
	MaxOutput int `json:"max_output,omitempty"`
	// Tools document the guest functions the client serves.
	Tools []CodeModeTool `json:"tools,omitempty"`
	// Limits are the eval's, as the client sends them with its evals:
	// the description states them as the server applies them (defaults,
	// caps).
	Limits EvalLimits `json:"limits"`
	// ToolCalls and ToolTimeMS are the client's tool budgets (count,
	// milliseconds), stated in the description; 0: glovebox's defaults
	// (1000 calls; the eval's timeout).
	ToolCalls  int   `json:"tool_calls,omitempty"`
	ToolTimeMS int64 `json:"tool_time_ms,omitempty"`
	// Result, when set, is an eval's result (with the client's own
	// transcript in tool_calls) to encode for the model.
	Result *EvalResult `json:"result,omitempty"`
	// Servers are the tool servers (bound MCP servers) whose functions
	// are among Tools, with their notes (codemode.Server).
	Servers []CodeModeServer `json:"servers,omitempty"`
	// Profile names an executor's eval profile: its tools, mounts and
	// server notes are described beside Tools, its limits applied
	// (executor only; the embedded child refuses it).
	Profile string `json:"profile,omitempty"`
	// Mounts are the guest's directories, described under Files
	// (filled in from the profile; a client's own are refused).
	Mounts []CodeModeMount `json:"-"`
}

// CodeModeMount is a glovebox.Mount as code mode describes it.
type CodeModeMount struct {
	Guest       string
	Writable    bool
	Description string
}

// CodeModeServer is codemode.Server's wire form.
type CodeModeServer struct {
	Name         string   `json:"name"`
	Tools        []string `json:"tools,omitempty"`
	Instructions string   `json:"instructions,omitempty"`
}

// CodeModeTool is glovebox.ToolDoc's wire form.
type CodeModeTool struct {
	Name          string          `json:"name"`
	Description   string          `json:"description,omitempty"`
	Params        []CodeModeParam `json:"params,omitempty"`
	Returns       string          `json:"returns,omitempty"`
	Result        json.RawMessage `json:"result,omitempty"` // JSON Schema of the value returned
	Example       string          `json:"example,omitempty"`
	NeedsApproval bool            `json:"needs_approval,omitempty"`
}

// CodeModeParam is glovebox.Param's wire form.
type CodeModeParam struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Schema      json.RawMessage `json:"schema,omitempty"` // a JSON Schema object
	Required    bool            `json:"required,omitempty"`
	Variadic    bool            `json:"variadic,omitempty"`
	Keywords    bool            `json:"keywords,omitempty"`
}

// CodeModeResponse is the answer to a CodeModeRequest.
type CodeModeResponse struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
	// Output is the JSON object the model receives for the request's
	// Result (absent without one); IsError is set for every status but
	// ok.
	Output  json.RawMessage `json:"output,omitempty"`
	IsError bool            `json:"is_error,omitempty"`
}

// Docs converts the request's tools to glovebox.ToolDocs.
func (r *CodeModeRequest) Docs() []glovebox.ToolDoc {
	out := make([]glovebox.ToolDoc, 0, len(r.Tools))
	for _, t := range r.Tools {
		d := glovebox.ToolDoc{Name: t.Name, Description: t.Description, Returns: t.Returns, Result: t.Result,
			Example: t.Example, NeedsApproval: t.NeedsApproval}
		for _, p := range t.Params {
			d.Params = append(d.Params, glovebox.Param{Name: p.Name, Description: p.Description, Schema: p.Schema,
				Required: p.Required, Variadic: p.Variadic, Keywords: p.Keywords})
		}
		out = append(out, d)
	}
	return out
}

// CodeMode answers req as glovebox's code mode would for a Runtime
// with limits lim (the eval limits the server applies, defaults and
// caps filled in) and memory floor floor (glovebox.Runtime.MemoryFloor):
// the tool's name, description and input schema, and, when req has a
// Result, the JSON a model receives for it. The client's tool budgets
// (req.ToolCalls, req.ToolTimeMS) are stated in place of lim's when set
// (a tool time only when below the timeout). Errors: a bad name, tool
// name or MaxOutput (wrapping codemode.ErrInvalidConfig), or a Result
// not in glovebox's value format.
func CodeMode(req *CodeModeRequest, lim glovebox.Limits, floor int64) (*CodeModeResponse, error) {
	if req.ToolCalls > 0 {
		lim.ToolCalls = req.ToolCalls
	}
	if req.ToolTimeMS > 0 && time.Duration(req.ToolTimeMS)*time.Millisecond < lim.Timeout {
		lim.ToolTime = time.Duration(req.ToolTimeMS) * time.Millisecond
	}
	spec := codemode.Spec{Name: req.Name, Session: req.Session, Tools: req.Docs(), Limits: lim,
		MemoryFloor: floor, Instructions: req.Instructions, MaxOutput: req.MaxOutput}
	for _, sv := range req.Servers {
		spec.Servers = append(spec.Servers, codemode.Server{Name: sv.Name, Tools: sv.Tools, Instructions: sv.Instructions})
	}
	for _, m := range req.Mounts {
		spec.Mounts = append(spec.Mounts, glovebox.Mount{GuestPath: m.Guest, Writable: m.Writable, Description: m.Description})
	}
	name, desc, err := codemode.Describe(spec)
	if err != nil {
		return nil, err
	}
	resp := &CodeModeResponse{Name: name, Description: desc, InputSchema: codemode.InputSchema()}
	if req.Result != nil {
		res, err := req.Result.Result(nil, true)
		if err != nil {
			return nil, fmt.Errorf("result: %w", err)
		}
		out, err := codemode.Encode(res, req.Session, req.MaxOutput)
		if err != nil {
			return nil, err
		}
		resp.Output, resp.IsError = out, res.Status != glovebox.StatusOK
	}
	return resp, nil
}

// FromDocs converts glovebox.ToolDocs to their wire form (the
// inverse of CodeModeRequest.Docs, the labels left out).
func FromDocs(docs []glovebox.ToolDoc) []CodeModeTool {
	out := make([]CodeModeTool, 0, len(docs))
	for _, d := range docs {
		t := CodeModeTool{Name: d.Name, Description: d.Description, Returns: d.Returns, Result: d.Result,
			Example: d.Example, NeedsApproval: d.NeedsApproval}
		for _, p := range d.Params {
			t.Params = append(t.Params, CodeModeParam{Name: p.Name, Description: p.Description, Schema: p.Schema,
				Required: p.Required, Variadic: p.Variadic, Keywords: p.Keywords})
		}
		out = append(out, t)
	}
	return out
}
