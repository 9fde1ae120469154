package wire

import (
	"encoding/json"

	"github.com/gloveboxhq/glovebox"
)

// PathCodeMode: POST returns glovebox code mode's tool for a tool list
// (name, description, input schema) and, given an eval's result, the
// JSON a model receives for it (EXECUTOR.md, "Code mode"). It runs
// nothing and records nothing.
const PathCodeMode = Version + "/codemode"

// CodeModeRequest is the body of POST /v1/codemode.
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
	// Limits are the eval's, as sent to POST /v1/evals: the description
	// states them as the executor would apply them (defaults, caps).
	Limits EvalLimits `json:"limits"`
	// ToolCalls and ToolTimeMS are the client's tool budgets (count,
	// milliseconds), stated in the description; 0: glovebox's defaults
	// (1000 calls; the eval's timeout).
	ToolCalls  int   `json:"tool_calls,omitempty"`
	ToolTimeMS int64 `json:"tool_time_ms,omitempty"`
	// Result, when set, is an eval's result (a record's "eval", with
	// the client's own transcript in tool_calls) to encode for the model.
	Result *EvalResult `json:"result,omitempty"`
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

// CodeModeResponse is POST /v1/codemode's answer.
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

// DecodeCodeModeRequest decodes and checks a POST /v1/codemode body
// (strict, as every request); errors are *Error with CodeBadRequest.
func DecodeCodeModeRequest(data []byte) (*CodeModeRequest, error) {
	var r CodeModeRequest
	if err := Strict(data, &r); err != nil {
		return nil, err
	}
	if len(r.Tools) > MaxEvalTools {
		return nil, Errorf(CodeBadRequest, "tools: %d, over %d", len(r.Tools), MaxEvalTools)
	}
	if err := checkLimits(&r.Limits); err != nil {
		return nil, err
	}
	if r.ToolCalls < 0 || r.ToolTimeMS < 0 || r.MaxOutput < 0 {
		return nil, Errorf(CodeBadRequest, "tool_calls, tool_time_ms and max_output must not be negative")
	}
	return &r, nil
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
