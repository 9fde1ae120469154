package wire

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/gloveboxhq/glovebox"
	gwire "github.com/gloveboxhq/glovebox/internal/wire"
)

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
