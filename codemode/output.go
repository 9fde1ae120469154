package codemode

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/internal/wire"
)

// StatusInvalidInput is the status of an Outcome whose input was refused
// before anything ran (not JSON, no code, an unknown tool name).
const StatusInvalidInput glovebox.Status = "invalid_input"

// output is the JSON object the model receives; field order is the
// order the model reads.
type output struct {
	Status          string          `json:"status"`
	Value           json.RawMessage `json:"value,omitempty"`
	ValueTruncated  bool            `json:"value_truncated,omitempty"`
	Stdout          string          `json:"stdout,omitempty"`
	StdoutTruncated bool            `json:"stdout_truncated,omitempty"`
	Stderr          string          `json:"stderr,omitempty"`
	StderrTruncated bool            `json:"stderr_truncated,omitempty"`
	Error           *errorOut       `json:"error,omitempty"`
	ToolCalls       []callOut       `json:"tool_calls,omitempty"`
	SessionReset    *bool           `json:"session_reset,omitempty"`
	Pending         *pendingOut     `json:"pending,omitempty"`
}

// pendingOut is the call a suspended program waits in, as the model
// reads it: the function, why it waits, and its arguments when they are
// short. The state to continue from stays with the host.
type pendingOut struct {
	Name       string          `json:"name"`
	WaitingFor string          `json:"waiting_for"`
	Args       json.RawMessage `json:"args,omitempty"`
}

// maxPendingArgs bounds the pending call's arguments shown to the model.
const maxPendingArgs = 1024

type errorOut struct {
	Class     string   `json:"class"`
	Message   string   `json:"message"`
	Backtrace []string `json:"backtrace,omitempty"`
}

// callOut summarizes tool calls: one entry per call, or per run of
// error-free calls to the same function.
type callOut struct {
	Name  string `json:"name"`
	Count int    `json:"count,omitempty"` // more than one call merged
	Error string `json:"error,omitempty"`
	// Approval is "approved" or "denied" for a function that needs a
	// person's approval.
	Approval string `json:"approval,omitempty"`
}

func encodeRefusal(class, msg string, limit int) json.RawMessage {
	return fit(&output{Status: string(StatusInvalidInput), Error: &errorOut{Class: class, Message: msg}}, limit)
}

func encodeResult(res *glovebox.Result, session bool, limit int) json.RawMessage {
	o := &output{Status: string(res.Status), Stdout: res.Stdout, Stderr: res.Stderr,
		StdoutTruncated: res.StdoutTruncated, StderrTruncated: res.StderrTruncated}
	if res.Status == glovebox.StatusOK {
		v, err := wire.EncodeJSON(nil, res.Value, wire.MaxDepth)
		if err != nil { // the engine already checked it crosses; keep a trace
			v, _ = json.Marshal(fmt.Sprint(res.Value))
		}
		o.Value = v
	}
	if e := res.Error; e != nil {
		o.Error = &errorOut{Class: e.Class, Message: e.Message, Backtrace: e.Backtrace}
	}
	for _, c := range res.ToolCalls {
		if n := len(o.ToolCalls); n > 0 && c.Error == "" && o.ToolCalls[n-1].Name == c.Name && o.ToolCalls[n-1].Error == "" && o.ToolCalls[n-1].Approval == c.Approval {
			o.ToolCalls[n-1].Count = max(o.ToolCalls[n-1].Count, 1) + 1
			continue
		}
		o.ToolCalls = append(o.ToolCalls, callOut{Name: c.Name, Error: c.Error, Approval: c.Approval})
	}
	if p := res.Pending; p != nil {
		po := &pendingOut{Name: p.Name, WaitingFor: p.Reason}
		if p.Approval {
			po.WaitingFor = "a person's approval of this call (" + p.Reason + "); the program continues from inside the call once it is answered"
		}
		if b, err := json.Marshal(p); err == nil {
			var parts struct {
				Args   json.RawMessage `json:"args"`
				Kwargs json.RawMessage `json:"kwargs"`
			}
			if json.Unmarshal(b, &parts) == nil && len(parts.Args)+len(parts.Kwargs) <= maxPendingArgs {
				po.Args, _ = json.Marshal([]json.RawMessage{parts.Args, parts.Kwargs})
			}
		}
		o.Pending = po
	}
	if session {
		reset := res.SessionReset
		o.SessionReset = &reset
	}
	return fit(o, limit)
}

// fit encodes o in at most limit bytes (at least minOutput), cutting its
// longest texts first.
func fit(o *output, limit int) json.RawMessage {
	b := encode(o)
	if len(b) <= limit {
		return b
	}
	// Long lists go first: a summary of the calls and a few frames say
	// as much.
	if len(o.ToolCalls) > 20 {
		n := len(o.ToolCalls)
		o.ToolCalls = append(o.ToolCalls[:19:19], callOut{Name: fmt.Sprintf("(%d more entries)", n-19)})
	}
	var msg string
	if o.Error != nil {
		msg = o.Error.Message
		o.Error = &errorOut{Class: o.Error.Class, Backtrace: o.Error.Backtrace[:min(len(o.Error.Backtrace), 10)]}
	}
	full := []string{string(o.Value), o.Stdout, o.Stderr, msg}
	// Then the texts: each gets an equal share of the room left, the
	// shorter ones giving up what they do not need to the longer.
	for budget := limit; budget > 0; budget -= limit / 8 {
		t := *o
		t.Value, t.Stdout, t.Stderr = nil, "", ""
		if o.Error != nil {
			e := *o.Error
			t.Error = &e
		}
		caps := share(full, budget-len(encode(&t))-200) // 200: flags and cut markers
		if full[0] != "" {
			if caps[0] >= len(full[0]) {
				t.Value = o.Value
			} else {
				t.Value, _ = json.Marshal(cut(full[0], caps[0]))
				t.ValueTruncated = true
			}
		}
		t.Stdout, t.Stderr = cut(full[1], caps[1]), cut(full[2], caps[2])
		t.StdoutTruncated = o.StdoutTruncated || t.Stdout != full[1]
		t.StderrTruncated = o.StderrTruncated || t.Stderr != full[2]
		if t.Error != nil {
			t.Error.Message = cut(full[3], caps[3])
		}
		if b = encode(&t); len(b) <= limit {
			return b
		}
	}
	// Nothing else fits (a huge tool-call list or backtrace): the status
	// and the error's beginning.
	last := &output{Status: o.Status, ValueTruncated: full[0] != "", StdoutTruncated: o.StdoutTruncated || full[1] != "",
		StderrTruncated: o.StderrTruncated || full[2] != "", SessionReset: o.SessionReset}
	if o.Error != nil {
		last.Error = &errorOut{Class: cut(o.Error.Class, 100), Message: cut(msg, 300)}
	}
	return encode(last)
}

// share divides budget bytes of JSON among texts: each gets at most its
// own length, and what a short one leaves goes to the longer. It returns
// each text's cap in bytes of the text itself.
func share(texts []string, budget int) []int {
	caps := make([]int, len(texts))
	left := map[int]bool{}
	for i, t := range texts {
		if t != "" {
			left[i] = true
		}
	}
	for len(left) > 0 && budget > 0 {
		each := budget / len(left)
		settled := false
		for i := range left {
			if n := jsonLen(texts[i]); n <= each {
				caps[i], budget = len(texts[i]), budget-n
				delete(left, i)
				settled = true
			}
		}
		if !settled {
			for i := range left {
				// An escaped text is longer than its bytes: scale the
				// cap so that its JSON form fits the share.
				caps[i] = int(int64(each) * int64(len(texts[i])) / int64(jsonLen(texts[i])))
			}
			break
		}
	}
	return caps
}

func jsonLen(s string) int {
	b, _ := json.Marshal(s)
	return len(b)
}

// cut shortens s to at most n bytes at a character boundary, ending it
// with a marker that says how much is shown.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	room := n - len(fmt.Sprintf(" …[cut: %d of %d bytes shown]", len(s), len(s)))
	keep := max(room, 0)
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return s[:keep] + fmt.Sprintf(" …[cut: %d of %d bytes shown]", keep, len(s))
}

func encode(o *output) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(o); err != nil {
		// Every field is a string, a bool or JSON the wire encoder made.
		panic(fmt.Sprintf("codemode: encoding a result: %v", err))
	}
	return bytes.TrimRight(buf.Bytes(), "\n")
}
