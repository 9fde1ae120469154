package wire

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/internal/clientwire"
)

// Eval routes (EXECUTOR.md, "Evals").
const (
	// PathEvals: POST starts or attaches to an eval (an NDJSON event
	// stream like a run's); POST {PathEvals}/{key}/tool-results answers
	// one of its tool calls; GET {PathEvals}/{key} returns its record.
	PathEvals = Version + "/evals"
	// PathSessions: POST makes a session (a VM kept between evals);
	// DELETE {PathSessions}/{id} ends it.
	PathSessions = Version + "/sessions"
)

// Eval event types, added to a run stream's (accepted, stdout, stderr,
// result, error).
const (
	// EventHolder is sent to each request that follows an eval, right
	// after "accepted": Extra is a Holder, the request's number. A
	// request answers the tool calls whose Holder is its number: the
	// executor addresses calls to one follower at a time, a new one only
	// once the last one's stream has ended.
	EventHolder = "holder"
	// EventToolCall: the guest called a tool; Extra is a ToolCall. The
	// guest waits until a tool result with the same ID arrives.
	EventToolCall = "tool_call"
)

// Holder is the Extra of a "holder" event.
type Holder struct {
	Holder uint64 `json:"holder"`
}

// ToolCall is the Extra of a "tool_call" event.
type ToolCall struct {
	// ID numbers the eval's calls from 1; a call handed again to a new
	// holder keeps its ID.
	ID uint64 `json:"id"`
	// Holder is the follower that should answer (see EventHolder);
	// the others ignore the call.
	Holder uint64 `json:"holder"`
	Name   string `json:"name"`
	// Args is the guest's arguments in the glovebox value format (JSON
	// with NaN and Infinity tokens): a two-element array [positional,
	// keyword].
	Args string `json:"args"`
	// TimeLeftMS is how long the call may take, in milliseconds, counted
	// when the event was sent: until the eval's deadline or the end of
	// its tool-time budget, whichever comes first (0: none left). A
	// client must not start the tool once that time has passed (after
	// its hooks or a person's approval, say): the eval is over, and the
	// answer would be refused. Absent from executors older than the
	// field.
	TimeLeftMS *int64 `json:"time_left_ms,omitempty"`
}

// ToolResult is the body of POST /v1/evals/{key}/tool-results.
type ToolResult struct {
	ID uint64 `json:"id"`
	// Reply is the tool's answer as a glovebox.ToolSession reply frame:
	// "n", "t", "f", "s\n<string>", "i\n<integer>", "j\n<value>" for a
	// result, "err\n<Class>\n<message>" for an error raised in the
	// guest, "abort\n<status>\n<message>" when a client-side budget or
	// deadline ends the eval.
	Reply string `json:"reply"`
}

// EvalLimits, EvalResult and GuestError are clientwire.s, shared with the
// embedded child.
type (
	EvalLimits = clientwire.EvalLimits
	EvalResult = clientwire.EvalResult
	GuestError = clientwire.GuestError
)

// EvalRequest is the body of POST /v1/evals.
type EvalRequest struct {
	// IdempotencyKey names the logical eval within the tenant; empty
	// means a fresh random one ([NewKey] "e-"). The Go client sends a fresh random key per
	// Eval call (the same code asked twice is two evals), and the same
	// key only for a deliberate retry.
	IdempotencyKey string     `json:"idempotency_key,omitempty"`
	ExpiresAt      *time.Time `json:"expires_at,omitempty"`
	Code           string     `json:"code"`
	// Tools are the names the guest can call, each a top-level method
	// that comes back to the client as a tool_call event. Not allowed
	// with Session (a session's tools are fixed when it is made).
	Tools  []string   `json:"tools,omitempty"`
	Limits EvalLimits `json:"limits"`
	Stdin  []byte     `json:"stdin,omitempty"`
	Args   []string   `json:"args,omitempty"`
	// Env is the guest's whole ENV for this eval (glovebox.WithEnv);
	// absent or empty leaves it as the VM has it (empty in a fresh one).
	// Not allowed with Continue (a paused eval keeps its own).
	Env map[string]string `json:"env,omitempty"`
	// Session, when set, runs the code in that session's VM.
	Session string `json:"session,omitempty"`
	// SuspendTools names tools (of Tools) whose calls pause the eval
	// instead of coming back to the client: the eval ends completed with
	// status "suspended" and its Pending call, and its sealed state stays
	// in the executor's store until a Continue answers it, on any
	// executor of the fleet (pause.go). Not allowed with Session.
	SuspendTools []string `json:"suspend_tools,omitempty"`
	// Continue, when set, answers the call a paused eval waits in and
	// runs it on; Code, Tools and Session must then be empty (the paused
	// eval's own are used).
	Continue *Continue `json:"continue,omitempty"`
	// Profile names one of the executor's eval profiles (its operator's
	// mounts, HTTP tool and MCP servers, and limits): the eval runs with
	// them beside Tools. Not allowed with Session or Continue (theirs
	// are fixed).
	Profile string `json:"profile,omitempty"`
}

// SessionRequest is the body of POST /v1/sessions.
type SessionRequest struct {
	Tools  []string   `json:"tools,omitempty"`
	Limits EvalLimits `json:"limits"`
	// Profile names an eval profile, as EvalRequest's.
	Profile string `json:"profile,omitempty"`
}

// ValidProfileName reports whether n can name an eval profile: 1 to 64
// of a-z 0-9 _ -, starting with a letter.
func ValidProfileName(n string) bool {
	if n == "" || len(n) > 64 || n[0] < 'a' || n[0] > 'z' {
		return false
	}
	for i := 0; i < len(n); i++ {
		c := n[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// checkProfile refuses a malformed profile name.
func checkProfile(n string) error {
	if n != "" && !ValidProfileName(n) {
		return Errorf(CodeBadRequest, "profile: %.64q is not a profile name (a-z 0-9 _ -, starting with a letter, at most 64)", n)
	}
	return nil
}

// SessionInfo is POST /v1/sessions' answer.
type SessionInfo struct {
	ID string `json:"id"`
	// IdleTimeoutMS is how long the session lives without an eval.
	IdleTimeoutMS int64 `json:"idle_timeout_ms"`
}

// Eval request bounds.
const (
	MaxEvalTools = 1000 // names per eval or session
	MaxArgs      = 4096 // glovebox.MaxArgs
)

// ValidSessionID checks a session ID: "s-" and 32 lower-case hex digits.
func ValidSessionID(id string) bool {
	if len(id) != 34 || id[:2] != "s-" {
		return false
	}
	for i := 2; i < len(id); i++ {
		if c := id[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// EvalHash is an eval request's fingerprint: SHA-256 (hex) of the JSON
// of everything but the key and the expiry.
func EvalHash(r *EvalRequest) string {
	c := *r
	c.IdempotencyKey, c.ExpiresAt = "", nil
	b, err := json.Marshal(&c)
	if err != nil { // cannot happen: the types marshal
		panic(err)
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// DecodeEvalRequest parses a POST /v1/evals body strictly (see
// [Strict]): a valid key when given, code that is UTF-8, tool names
// that are plausible method names (the executor checks them fully), no
// tools with a session, non-negative limits. Errors are *Error with
// CodeBadRequest.
func DecodeEvalRequest(data []byte) (*EvalRequest, error) {
	var r EvalRequest
	if err := Strict(data, &r); err != nil {
		return nil, err
	}
	if r.IdempotencyKey != "" && !ValidKey(r.IdempotencyKey) {
		return nil, Errorf(CodeBadRequest, "idempotency_key: want 1 to 128 bytes of A-Z a-z 0-9 . _ : -")
	}
	if !utf8.ValidString(r.Code) || strings.IndexByte(r.Code, 0) >= 0 {
		return nil, Errorf(CodeBadRequest, "code: not UTF-8 text without NUL bytes")
	}
	if err := checkPause(&r); err != nil {
		return nil, err
	}
	if r.Session != "" {
		if !ValidSessionID(r.Session) {
			return nil, Errorf(CodeBadRequest, "session: want s- and 32 hex digits")
		}
		if len(r.Tools) > 0 {
			return nil, Errorf(CodeBadRequest, "tools: a session's tools are fixed when it is made; send none with session")
		}
		if r.Profile != "" {
			return nil, Errorf(CodeBadRequest, "profile: a session's profile is fixed when it is made; send none with session")
		}
	}
	if r.Continue != nil && r.Profile != "" {
		return nil, Errorf(CodeBadRequest, "profile: a continuation runs with the paused eval's profile; send none with continue")
	}
	if err := checkProfile(r.Profile); err != nil {
		return nil, err
	}
	if err := checkTools(r.Tools); err != nil {
		return nil, err
	}
	if err := checkLimits(&r.Limits); err != nil {
		return nil, err
	}
	if len(r.Args) > MaxArgs {
		return nil, Errorf(CodeBadRequest, "args: %d, over %d", len(r.Args), MaxArgs)
	}
	if len(r.Env) > 0 {
		if r.Continue != nil {
			return nil, Errorf(CodeBadRequest, "env: a continued eval keeps the environment it was paused with; send none with continue")
		}
		if err := glovebox.CheckEnv(r.Env); err != nil {
			return nil, Errorf(CodeBadRequest, "env: %s", strings.TrimPrefix(err.Error(), glovebox.ErrInvalidInput.Error()+": "))
		}
	}
	return &r, nil
}

// DecodeSessionRequest parses a POST /v1/sessions body as strictly.
func DecodeSessionRequest(data []byte) (*SessionRequest, error) {
	var r SessionRequest
	if err := Strict(data, &r); err != nil {
		return nil, err
	}
	if err := checkProfile(r.Profile); err != nil {
		return nil, err
	}
	if err := checkTools(r.Tools); err != nil {
		return nil, err
	}
	if err := checkLimits(&r.Limits); err != nil {
		return nil, err
	}
	return &r, nil
}

// DecodeToolResult parses a POST /v1/evals/{key}/tool-results body.
func DecodeToolResult(data []byte) (*ToolResult, error) {
	var r ToolResult
	if err := Strict(data, &r); err != nil {
		return nil, err
	}
	if r.ID == 0 || r.Reply == "" {
		return nil, Errorf(CodeBadRequest, "tool result: want an id and a reply")
	}
	return &r, nil
}

// validToolName checks a tool name as a Ruby method name glovebox
// defines: [a-z_], then up to 127 of [A-Za-z0-9_], then an optional ? or !.
func validToolName(n string) bool {
	if n != "" && (n[len(n)-1] == '?' || n[len(n)-1] == '!') {
		n = n[:len(n)-1]
	}
	if len(n) < 1 || len(n) > 128 || !('a' <= n[0] && n[0] <= 'z' || n[0] == '_') {
		return false
	}
	for i := 1; i < len(n); i++ {
		if c := n[i]; !isAlnum(c) && c != '_' {
			return false
		}
	}
	return true
}

func checkTools(names []string) error {
	if len(names) > MaxEvalTools {
		return Errorf(CodeBadRequest, "tools: %d names, over %d", len(names), MaxEvalTools)
	}
	seen := make(map[string]bool, len(names))
	for _, n := range names {
		if !validToolName(n) {
			return Errorf(CodeBadRequest, "tools: %q is not a method name", n)
		}
		if seen[n] {
			return Errorf(CodeBadRequest, "tools: %q twice", n)
		}
		seen[n] = true
	}
	return nil
}

func checkLimits(l *EvalLimits) error {
	if l.Negative() {
		return Errorf(CodeBadRequest, "limits: a limit is negative")
	}
	return nil
}
