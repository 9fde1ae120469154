package mcpserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// outputSchema describes the structuredContent of run_ruby and
// ruby_session: the codemode result object.
var outputSchema = json.RawMessage(`{
  "type": "object",
  "properties": {
    "status": {"type": "string", "enum": ["ok", "error", "timeout", "fuel_exhausted", "memory_limit", "canceled", "tool_budget_exceeded", "sandbox_error", "invalid_input", "suspended"],
      "description": "how the program ended"},
    "value": {"description": "the value of the last expression, as JSON (integers exact at any size); present when status is ok"},
    "value_truncated": {"type": "boolean"},
    "stdout": {"type": "string"},
    "stdout_truncated": {"type": "boolean"},
    "stderr": {"type": "string"},
    "stderr_truncated": {"type": "boolean"},
    "error": {"type": "object", "properties": {
      "class": {"type": "string"}, "message": {"type": "string"},
      "backtrace": {"type": "array", "items": {"type": "string"}}},
      "required": ["class", "message"]},
    "tool_calls": {"type": "array", "items": {"type": "object", "properties": {
      "name": {"type": "string"}, "count": {"type": "integer"}, "error": {"type": "string"},
      "approval": {"type": "string", "enum": ["approved", "denied"]}},
      "required": ["name"]}},
    "session_reset": {"type": "boolean", "description": "ruby_session only: the VM was discarded, state is lost"},
    "session_reset_reason": {"type": "string", "description": "ruby_session only: why the state was lost, when the loss happened before this call (a canceled call, idleness, ruby_session_reset)"},
    "session": {"type": "string", "description": "ruby_session under MCP 2026-07-28 over HTTP: the handle of the session's state after this call; pass it as the session argument of the next call"}
  },
  "required": ["status"]
}`)

// render writes a result object as text for people: the status, the
// value or the error, then the output.
func render(out json.RawMessage) string {
	var o struct {
		Status          string          `json:"status"`
		Value           json.RawMessage `json:"value"`
		ValueTruncated  bool            `json:"value_truncated"`
		Stdout          string          `json:"stdout"`
		StdoutTruncated bool            `json:"stdout_truncated"`
		Stderr          string          `json:"stderr"`
		Error           *struct {
			Class     string   `json:"class"`
			Message   string   `json:"message"`
			Backtrace []string `json:"backtrace"`
		} `json:"error"`
		ToolCalls []struct {
			Name  string `json:"name"`
			Count int    `json:"count"`
			Error string `json:"error"`
		} `json:"tool_calls"`
		SessionReset       bool   `json:"session_reset"`
		SessionResetReason string `json:"session_reset_reason"`
	}
	d := json.NewDecoder(bytes.NewReader(out))
	d.UseNumber()
	if err := d.Decode(&o); err != nil {
		return string(out)
	}
	var b strings.Builder
	if o.SessionResetReason != "" {
		b.WriteString("note: " + o.SessionResetReason + "\n")
	}
	if o.Stdout != "" {
		b.WriteString(o.Stdout)
		if !strings.HasSuffix(o.Stdout, "\n") {
			b.WriteByte('\n')
		}
	}
	if o.Stderr != "" {
		b.WriteString("[stderr]\n" + o.Stderr)
		if !strings.HasSuffix(o.Stderr, "\n") {
			b.WriteByte('\n')
		}
	}
	if o.Status == "ok" {
		b.WriteString("=> " + string(o.Value))
		if o.ValueTruncated {
			b.WriteString(" (truncated)")
		}
		b.WriteByte('\n')
	} else {
		fmt.Fprintf(&b, "status: %s\n", o.Status)
		if o.Error != nil {
			fmt.Fprintf(&b, "%s: %s\n", o.Error.Class, o.Error.Message)
			for i, f := range o.Error.Backtrace {
				if i == 5 {
					fmt.Fprintf(&b, "\t… %d more\n", len(o.Error.Backtrace)-5)
					break
				}
				b.WriteString("\tfrom " + f + "\n")
			}
		}
	}
	for _, c := range o.ToolCalls {
		switch {
		case c.Error != "":
			fmt.Fprintf(&b, "called %s: failed: %s\n", c.Name, c.Error)
		case c.Count > 1:
			fmt.Fprintf(&b, "called %s ×%d\n", c.Name, c.Count)
		default:
			fmt.Fprintf(&b, "called %s\n", c.Name)
		}
	}
	if o.StdoutTruncated {
		b.WriteString("(stdout truncated)\n")
	}
	if o.SessionReset && o.SessionResetReason == "" {
		b.WriteString("(the session's VM was reset: earlier state is gone)\n")
	}
	return strings.TrimRight(b.String(), "\n")
}
