package wire

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/gloveboxhq/glovebox/internal/clientwire"
)

// Code is a documented error code (EXECUTOR.md, "Error codes").
type Code string

// The error codes a response or a final event carries.
const (
	CodeUnauthenticated  Code = "unauthenticated"    // 401: no bearer token, or one no tenant holds
	CodeRequestTooLarge  Code = "request_too_large"  // 413: body over the tenant's max_request_bytes
	CodeBadRequest       Code = "bad_request"        // 400: not one JSON object of the documented shape, or a bad key
	CodeInvalidCommand   Code = "invalid_command"    // 422: the command breaks box.Command's rules
	CodeExpired          Code = "expired"            // 408: the request arrived after its expires_at
	CodeKeyConflict      Code = "key_conflict"       // 409: the key names a different request of this tenant
	CodeQueueFull        Code = "queue_full"         // 429: the tenant's running and queued runs are at their limits
	CodeNotFound         Code = "not_found"          // 404: no such route, or no run with this key for this tenant
	CodeMethodNotAllowed Code = "method_not_allowed" // 405
	CodeUnavailable      Code = "unavailable"        // 503: draining, or the store is not usable
	CodeInternal         Code = "internal"           // 500: the store failed; nothing was started
	CodeEvalsDisabled    Code = "evals_disabled"     // 501: an eval or session route on an executor started without --evals
	CodeStoreFull        Code = "store_full"         // 507: the store's disk is (nearly) full; nothing was started
	CodeQuotaExceeded    Code = "quota_exceeded"     // 507: the tenant's stored records are at its max_stored_bytes; nothing was started

	// Codes of a run that ended without a result (the "error" of a
	// final record; the HTTP status of the stream was already 200).
	CodeBackend     Code = "backend_error" // the backend could not run the command (box.ErrUnavailable, set-up failure)
	CodeUnsupported Code = "unsupported"   // the backend cannot honour a part of the command (box.ErrUnsupported)
	CodeLost        Code = "lost"          // the executor stopped while the run was queued or running; it is never re-run
	CodeRunExpired  Code = "run_expired"   // the run was still queued at its expires_at and never started
	CodeCanceled    Code = "canceled"      // DELETE /v1/runs/{key} cancelled it before it started; it did not run
	CodeStoreFailed Code = "store_failed"  // the job ended but its final record could not be stored (state lost); never re-run
	// CodeAlreadyContinued: a continue named a paused eval that another
	// continue (another key) answered before; this one did not run.
	CodeAlreadyContinued Code = "already_continued"
	// CodeStateRefused: a stored session or paused state could not be
	// opened here (another sealing key, another image or tools).
	CodeStateRefused Code = "state_refused"
	// CodeSessionPaused: an eval of a session paused in a tool call
	// (suspend_tools); it did not run. Continue the pause, or close the
	// session.
	CodeSessionPaused Code = "session_paused"
	// CodeUnknownProfile: the request names an eval profile this
	// executor does not declare for the tenant (400); nothing ran.
	CodeUnknownProfile Code = "unknown_profile"
)

// HTTPStatus is the status a response refused with c carries.
func (c Code) HTTPStatus() int {
	switch c {
	case CodeUnauthenticated:
		return http.StatusUnauthorized
	case CodeRequestTooLarge:
		return http.StatusRequestEntityTooLarge
	case CodeBadRequest, CodeUnknownProfile:
		return http.StatusBadRequest
	case CodeInvalidCommand, CodeUnsupported:
		return http.StatusUnprocessableEntity
	case CodeExpired:
		return http.StatusRequestTimeout
	case CodeKeyConflict:
		return http.StatusConflict
	case CodeQueueFull:
		return http.StatusTooManyRequests
	case CodeNotFound:
		return http.StatusNotFound
	case CodeMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case CodeUnavailable:
		return http.StatusServiceUnavailable
	case CodeEvalsDisabled:
		return http.StatusNotImplemented
	case CodeStoreFull, CodeQuotaExceeded:
		return http.StatusInsufficientStorage
	}
	return http.StatusInternalServerError
}

// Error is an error response's body ({"error": {...}}) and the error
// value both sides use.
type Error struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s", e.Code, e.Message) }

// Errorf makes an *Error.
func Errorf(c Code, format string, a ...any) *Error {
	return &Error{Code: c, Message: fmt.Sprintf(format, a...)}
}

// ErrorBody is the JSON body of a refused request.
type ErrorBody struct {
	Error *Error `json:"error"`
}

// Run states, in a record and in the final event.
const (
	StateQueued    = "queued"    // recorded, waiting for a slot
	StateRunning   = "running"   // started on the backend
	StateCompleted = "completed" // ran; Result holds what it did (any exit status)
	StateFailed    = "failed"    // could not be run; Error says why; nothing ran
	StateLost      = "lost"      // the executor stopped while it was queued or running
	StateExpired   = "expired"   // still queued at expires_at; never started
)

// Final reports whether state is one a run ends in.
func Final(state string) bool {
	return state == StateCompleted || state == StateFailed || state == StateLost || state == StateExpired
}

// Record is a run's durable record: GET /v1/runs/{key} returns it, and
// the final "result" event carries it.
type Record struct {
	Key     string    `json:"key"`
	State   string    `json:"state"`
	Backend string    `json:"backend"`
	Created time.Time `json:"created"`
	// Started says the command was handed to the backend (for a lost
	// run: it may have partly run).
	Started  bool        `json:"started"`
	Finished *time.Time  `json:"finished,omitempty"`
	Result   *Result     `json:"result,omitempty"`
	Eval     *EvalResult `json:"eval,omitempty"` // an eval's outcome (eval.go)
	Error    *Error      `json:"error,omitempty"`
	// QuotaTruncated says the record was cut to fit the tenant's
	// max_stored_bytes: an eval's tool-call transcript was dropped, or
	// the end of stdout or stderr, or whole outputs files, each with its
	// own truncated flag set; or a session eval's new state did not fit
	// (the session was reset: Eval.SessionReset is set too).
	QuotaTruncated bool `json:"quota_truncated,omitempty"`
}

// Result is box.Result's wire form (clientwire's, shared with the
// embedded child).
type Result = clientwire.Result

// Event is one line of an NDJSON event stream. Type says which fields are
// set:
//
//	accepted  Key, Attached (a run with this key was in progress or done), State
//	stdout    Data (bytes as the command wrote them, in order)
//	stderr    Data
//	result    Record (final state; the last event of a run stream)
//	error     Error (the stream ended without a record; see Code)
//
// Evals (executor/eval*.go) add their own types on the same stream.
type Event struct {
	Type     string          `json:"type"`
	Key      string          `json:"key,omitempty"`
	Attached bool            `json:"attached,omitempty"`
	State    string          `json:"state,omitempty"`
	Data     []byte          `json:"data,omitempty"`
	Record   *Record         `json:"record,omitempty"`
	Error    *Error          `json:"error,omitempty"`
	Extra    json.RawMessage `json:"extra,omitempty"` // type-specific payload of extension events
}

// Event types.
const (
	EventAccepted = "accepted"
	EventStdout   = "stdout"
	EventStderr   = "stderr"
	EventResult   = "result"
	EventError    = "error"
)

// Info is GET /v1/info's body.
type Info struct {
	Version   string `json:"version"`   // "v1"
	Backend   string `json:"backend"`   // "bwrap", "gvisor"
	Isolation string `json:"isolation"` // box.Isolation of the backend
	Tenant    string `json:"tenant"`    // the caller's tenant name
}
