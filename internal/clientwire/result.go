package clientwire

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/gloveboxhq/glovebox"
	gwire "github.com/gloveboxhq/glovebox/internal/wire"
)

// EvalLimits bound one eval; zero fields take the server's defaults
// (an executor also caps every field at its maximum). Tool-call budgets
// (count, time) are the client's: its own dispatch enforces them.
type EvalLimits struct {
	TimeoutMS   int64  `json:"timeout_ms,omitempty"`
	Fuel        uint64 `json:"fuel,omitempty"`
	Memory      int64  `json:"memory,omitempty"` // bytes
	Stdout      int    `json:"stdout,omitempty"` // bytes
	Stderr      int    `json:"stderr,omitempty"` // bytes
	Value       int    `json:"value,omitempty"`  // bytes of the encoded value
	ToolPayload int    `json:"tool_payload,omitempty"`
	FileWrite   int64  `json:"file_write,omitempty"`
	FileCreates int    `json:"file_creates,omitempty"`
}

// Negative reports whether a field is below zero (every server refuses
// such limits).
func (l *EvalLimits) Negative() bool {
	return l.TimeoutMS < 0 || l.Memory < 0 || l.Stdout < 0 || l.Stderr < 0 || l.Value < 0 ||
		l.ToolPayload < 0 || l.FileWrite < 0 || l.FileCreates < 0
}

// EvalResult is a glovebox.Result's wire form: the Eval field of an
// executor's eval record, and the embedded child's eval answer.
type EvalResult struct {
	Status string `json:"status"`
	// Value is the value in the glovebox value format (JSON with NaN
	// and Infinity tokens; integers exact at any size); "null" unless ok.
	Value           string      `json:"value"`
	Stdout          string      `json:"stdout"`
	Stderr          string      `json:"stderr"`
	StdoutTruncated bool        `json:"stdout_truncated,omitempty"`
	StderrTruncated bool        `json:"stderr_truncated,omitempty"`
	Error           *GuestError `json:"error,omitempty"`
	FuelUsed        uint64      `json:"fuel_used"`
	DurationMS      float64     `json:"duration_ms"`
	SessionReset    bool        `json:"session_reset,omitempty"`
	// ToolCalls is the server's view of the transcript (as
	// glovebox.ToolCall's JSON): the client keeps its own, with its
	// hooks' and approvals' verdicts, and uses this one only for an eval
	// answered from a record.
	ToolCalls json.RawMessage `json:"tool_calls,omitempty"`
	// Pending is the call a "suspended" eval waits in.
	Pending *Pending `json:"pending,omitempty"`
}

// GuestError is glovebox.GuestError.
type GuestError struct {
	Class     string   `json:"class"`
	Message   string   `json:"message"`
	Backtrace []string `json:"backtrace"`
}

// Pending is an EvalResult's paused call.
type Pending struct {
	// ID is the pause's state id (32 hex digits).
	ID   string `json:"id"`
	Name string `json:"name"`
	// Args is [positional, keyword] in the glovebox value format, as a
	// tool call's.
	Args   string `json:"args"`
	Reason string `json:"reason"`
}

// FromResult is res's wire form. A value that cannot be encoded (it
// cannot happen for a guest's value) is "null"; the transcript is
// left out when it cannot be encoded.
func FromResult(res *glovebox.Result) *EvalResult {
	v, err := gwire.Encode(nil, res.Value, gwire.MaxDepth)
	if err != nil {
		v = []byte("null")
	}
	out := &EvalResult{
		Status: string(res.Status), Value: string(v), Stdout: res.Stdout, Stderr: res.Stderr,
		StdoutTruncated: res.StdoutTruncated, StderrTruncated: res.StderrTruncated,
		FuelUsed: res.FuelUsed, DurationMS: float64(res.Duration.Microseconds()) / 1000, SessionReset: res.SessionReset,
	}
	if res.Error != nil {
		out.Error = &GuestError{Class: res.Error.Class, Message: res.Error.Message, Backtrace: res.Error.Backtrace}
	}
	if len(res.ToolCalls) > 0 {
		if b, err := json.Marshal(res.ToolCalls); err == nil {
			out.ToolCalls = b
		}
	}
	return out
}

// Result rebuilds the glovebox.Result er is the wire form of. The
// transcript is local (the client's own, with its hooks' verdicts)
// unless recorded is set: then it is er's (the executor's record of an
// eval the caller did not serve). Errors: a value or transcript not in
// glovebox's value format.
func (er *EvalResult) Result(local []glovebox.ToolCall, recorded bool) (*glovebox.Result, error) {
	res := &glovebox.Result{
		Status: glovebox.Status(er.Status), Stdout: er.Stdout, Stderr: er.Stderr,
		StdoutTruncated: er.StdoutTruncated, StderrTruncated: er.StderrTruncated,
		FuelUsed: er.FuelUsed, Duration: time.Duration(er.DurationMS * float64(time.Millisecond)),
		SessionReset: er.SessionReset, ToolCalls: local,
	}
	if er.Value != "" {
		v, err := gwire.Decode([]byte(er.Value))
		if err != nil {
			return nil, errors.New("the eval's value: " + err.Error())
		}
		res.Value = v
	}
	if er.Error != nil {
		res.Error = &glovebox.GuestError{Class: er.Error.Class, Message: er.Error.Message, Backtrace: er.Error.Backtrace}
		if res.Error.Backtrace == nil {
			res.Error.Backtrace = []string{}
		}
	}
	if p := er.Pending; p != nil {
		pc := &glovebox.PendingCall{ID: p.ID, Name: p.Name, Reason: p.Reason}
		if a, err := gwire.Decode([]byte(p.Args)); err == nil {
			if parts, _ := a.([]any); len(parts) == 2 {
				pc.Args.Positional, _ = parts[0].([]any)
				if m, _ := parts[1].(map[string]any); len(m) > 0 {
					pc.Args.Keyword = m
				}
			}
		}
		res.Pending = pc
	}
	if recorded && len(er.ToolCalls) > 0 {
		calls, err := Transcript(er.ToolCalls)
		if err != nil {
			return nil, err
		}
		res.ToolCalls = calls
	}
	return res, nil
}

// Transcript decodes a JSON array of glovebox.ToolCall's JSON form (an
// EvalResult's ToolCalls). Errors: raw is not such an array.
func Transcript(raw json.RawMessage) ([]glovebox.ToolCall, error) {
	var entries []struct {
		Name       string          `json:"name"`
		Args       json.RawMessage `json:"args"`
		Kwargs     json.RawMessage `json:"kwargs"`
		Result     json.RawMessage `json:"result"`
		Error      string          `json:"error"`
		DurationMS float64         `json:"duration_ms"`
		Elided     bool            `json:"elided"`
		Approval   string          `json:"approval"`
		Outcome    string          `json:"outcome"`
	}
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, errors.New("the eval's transcript: " + err.Error())
	}
	out := make([]glovebox.ToolCall, 0, len(entries))
	for _, en := range entries {
		c := glovebox.ToolCall{Name: en.Name, Error: en.Error, Elided: en.Elided, Approval: en.Approval, Outcome: glovebox.CallOutcome(en.Outcome),
			Duration: time.Duration(en.DurationMS * float64(time.Millisecond))}
		if a, err := gwire.Decode(en.Args); err == nil {
			c.Args.Positional, _ = a.([]any)
		}
		if k, err := gwire.Decode(en.Kwargs); err == nil {
			if m, _ := k.(map[string]any); len(m) > 0 {
				c.Args.Keyword = m
			}
		}
		if len(en.Result) > 0 {
			c.Result, _ = gwire.Decode(en.Result)
		}
		out = append(out, c)
	}
	return out, nil
}
