package wire

import "github.com/gloveboxhq/glovebox/internal/clientwire"

// PathCodeMode: POST returns glovebox code mode's tool for a tool list
// (name, description, input schema) and, given an eval's result, the
// JSON a model receives for it (EXECUTOR.md, "Code mode"). It runs
// nothing and records nothing.
const PathCodeMode = Version + "/codemode"

// The code mode shapes are clientwire.s, shared with the embedded child.
type (
	CodeModeRequest  = clientwire.CodeModeRequest
	CodeModeTool     = clientwire.CodeModeTool
	CodeModeParam    = clientwire.CodeModeParam
	CodeModeResponse = clientwire.CodeModeResponse
)

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
