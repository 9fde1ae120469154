package glovebox

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/gloveboxhq/glovebox/internal/engine"
	"github.com/gloveboxhq/glovebox/internal/wire"
)

// Status says how an eval ended.
type Status string

// The statuses. Every eval ends with exactly one; every status but
// StatusOK comes with [Result.Error] set, naming a class and a message.
const (
	// StatusOK: the code ran to the end; Value holds its last expression.
	StatusOK Status = Status(engine.StatusOK)
	// StatusError: the guest raised an exception it did not rescue
	// (SyntaxError and SystemExit included), or its value could not
	// cross (class Glovebox::ValueError). Error has the guest's class,
	// message and backtrace.
	StatusError Status = Status(engine.StatusError)
	// StatusTimeout: Limits.Timeout passed (class Glovebox::Timeout).
	StatusTimeout Status = Status(engine.StatusTimeout)
	// StatusFuelExhausted: Limits.Fuel ran out (class Glovebox::FuelExhausted).
	StatusFuelExhausted Status = Status(engine.StatusFuelExhausted)
	// StatusMemoryLimit: the guest needed more than Limits.Memory, or
	// than the 4 GiB a wasm32 guest can address when that runs out
	// first (limits above 2 GiB). Ruby
	// usually reports this as NoMemoryError, which is the class then; a
	// guest that crashed at its limit gets Glovebox::MemoryLimit.
	StatusMemoryLimit Status = Status(engine.StatusMemoryLimit)
	// StatusCanceled: the context passed to Eval ended (class
	// Glovebox::Canceled).
	StatusCanceled Status = Status(engine.StatusCanceled)
	// StatusToolBudgetExceeded: the eval made more tool calls or spent
	// more time in tools than its Limits allow, or (through an executor)
	// sent more bytes of tool arguments than it allows per eval (class
	// Glovebox::ToolBudgetExceeded). Guest code cannot rescue it. One
	// call's payload over Limits.ToolPayload is not this: it raises the
	// rescuable Glovebox::ToolPayloadError ([PayloadErrorClass]).
	StatusToolBudgetExceeded Status = Status(engine.StatusToolBudgetExceeded)
	// StatusSandboxError: the engine or the guest interface failed, or the
	// Ruby VM crashed (class Glovebox::SandboxError, or SystemExit for a
	// guest that called exit!). The message says what happened.
	StatusSandboxError Status = Status(engine.StatusSandboxError)
)

// Result is everything an eval produced. Stdout and Stderr are valid
// UTF-8; output past the limits is cut at a character boundary and
// followed by a line "[glovebox: stdout truncated at N bytes]".
type Result struct {
	Status Status
	// Value is the last expression's value as data (see the package
	// documentation, Values); nil unless Status is StatusOK.
	Value           any
	Stdout          string
	Stderr          string
	StdoutTruncated bool
	StderrTruncated bool
	// Error is set for every status but StatusOK.
	Error *GuestError
	// FuelUsed is the fuel the eval consumed, the driver's share
	// included; 0 when Limits.Fuel is 0 (no budget: nothing is counted).
	// It is the same for the same program every run, whichever VM ran it,
	// unless the program's work depends on random numbers.
	FuelUsed uint64
	// Duration is the wall-clock time of the eval inside the VM.
	Duration time.Duration
	// ToolCalls lists the eval's tool calls in order.
	ToolCalls []ToolCall
	// SessionReset is set on a Session's eval that trapped (any status
	// but StatusOK and StatusError): its VM was discarded with every
	// variable, method and library the session had built up, and the
	// next eval starts from a fresh VM. It is also set on an eval that
	// found a mount's host directory replaced and so ran in a fresh VM
	// (with StatusOK or StatusError). Always false outside sessions.
	SessionReset bool
	// flow holds the tokens Reveal resolves (dataflow.go).
	flow *flowState
	// Pending is the tool call the eval waits in, with StatusSuspended;
	// nil otherwise.
	Pending *PendingCall
	// State is the sealed state to continue a StatusSuspended eval from
	// (Runtime.Continue; for a session's eval, Runtime.ResumeSession and
	// Session.Continue); nil otherwise. It is not part of MarshalJSON.
	State []byte
}

// GuestError describes why an eval did not end with StatusOK. Backtrace
// holds guest frames only, innermost first, at most 50: user code appears
// as "sandbox:LINE", the guest's standard library under
// /usr/local/lib/ruby; no host path ever appears.
type GuestError struct {
	Class     string   `json:"class"`
	Message   string   `json:"message"`
	Backtrace []string `json:"backtrace"`
}

// Err returns nil for StatusOK and an *EvalError otherwise.
func (r *Result) Err() error {
	if r.Status == StatusOK {
		return nil
	}
	e := &EvalError{Status: r.Status}
	if r.Error != nil {
		e.Class, e.Message = r.Error.Class, r.Error.Message
	}
	return e
}

// MarshalJSON writes the result as one JSON object with the fields
// status, value, stdout, stderr, stdout_truncated, stderr_truncated, error
// (class, message, backtrace; null when ok), fuel_used, duration_ms,
// tool_calls and session_reset, and pending (see PendingCall.MarshalJSON)
// for StatusSuspended; State is left out (it is bytes). Integers are exact at any size; NaN and the infinities,
// which JSON lacks, are written as the strings "NaN", "Infinity" and
// "-Infinity".
func (r *Result) MarshalJSON() ([]byte, error) {
	value, err := wire.EncodeJSON(nil, r.Value, wire.MaxDepth)
	if err != nil {
		return nil, err
	}
	calls := r.ToolCalls
	if calls == nil {
		calls = []ToolCall{}
	}
	return marshalNoEscape(struct {
		Status          Status          `json:"status"`
		Value           json.RawMessage `json:"value"`
		Stdout          string          `json:"stdout"`
		Stderr          string          `json:"stderr"`
		StdoutTruncated bool            `json:"stdout_truncated"`
		StderrTruncated bool            `json:"stderr_truncated"`
		Error           *GuestError     `json:"error"`
		FuelUsed        uint64          `json:"fuel_used"`
		DurationMS      float64         `json:"duration_ms"`
		ToolCalls       []ToolCall      `json:"tool_calls"`
		SessionReset    bool            `json:"session_reset"`
		Pending         *PendingCall    `json:"pending,omitempty"`
	}{r.Status, value, r.Stdout, r.Stderr, r.StdoutTruncated, r.StderrTruncated, r.Error, r.FuelUsed,
		float64(r.Duration.Microseconds()) / 1000, calls, r.SessionReset, r.Pending})
}

// marshalNoEscape is json.Marshal without HTML escaping: results are read
// by people and programs, not embedded in HTML.
func marshalNoEscape(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}
