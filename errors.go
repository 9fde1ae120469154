package glovebox

import (
	"context"
	"errors"
	"fmt"

	"github.com/gloveboxhq/glovebox/internal/engine"
	"github.com/gloveboxhq/glovebox/internal/image"
)

// Errors returned by this package. Everything a guest does is reported in
// a [Result]; these are host-side failures.
var (
	// ErrClosed is returned by calls on a closed [Runtime] (or a closed
	// view of one, see [Runtime.Close]), and by a Session's evals once
	// the Runtime it came from is closed.
	ErrClosed = engine.ErrClosed
	// ErrSessionClosed is returned by the evals of a [Session] after its
	// own Close. It is not ErrClosed: the Runtime may well be open, and a
	// new session can be started from it.
	ErrSessionClosed = errors.New("glovebox: session is closed")
	// ErrInvalidLimits wraps every rejection of a [Limits] value.
	ErrInvalidLimits = errors.New("glovebox: invalid limits")
	// ErrInvalidTool wraps every rejection of a tool registration.
	ErrInvalidTool = errors.New("glovebox: invalid tool")
	// ErrNoNPM is returned by [New] when the guest image is not cached
	// and the npm client, needed to fetch it, is not installed. Its
	// message says what to run.
	ErrNoNPM = image.ErrNoNPM
)

// EvalError describes an eval that did not end with [StatusOK]; see
// [Result.Err]. It matches [context.DeadlineExceeded] for
// [StatusTimeout] and [context.Canceled] for [StatusCanceled] under
// errors.Is.
type EvalError struct {
	Status  Status
	Class   string // the guest exception class, or a Glovebox:: class for limits
	Message string
}

func (e *EvalError) Error() string {
	return fmt.Sprintf("glovebox: eval ended %s: %s: %s", e.Status, e.Class, e.Message)
}

// Is reports whether target is the context error matching e's status.
func (e *EvalError) Is(target error) bool {
	switch e.Status {
	case StatusTimeout:
		return target == context.DeadlineExceeded
	case StatusCanceled:
		return target == context.Canceled
	}
	return false
}

// ToolError is an error a tool returns to choose the exception the guest
// sees: Glovebox::<Class>, a subclass of Glovebox::ToolError made on first
// use, with Message. Guest code can rescue the kind of failure it cares
// about (rescue Glovebox::HTTPBlockedAddressError) or all tool errors at
// once (rescue Glovebox::ToolError).
//
// Class must be a Ruby constant name of at most 64 characters
// ([A-Z][A-Za-z0-9_]*); any other Class, or a name the guest has already
// used for something that is not a ToolError subclass, raises plain
// Glovebox::ToolError. Message is written for the guest and passes through
// unchanged: Hooks.SanitizeError does not see it. A tool may return a
// ToolError wrapped in other errors; errors.As finds it.
type ToolError struct {
	Class   string
	Message string
}

// Error returns Class and Message as one line.
func (e *ToolError) Error() string { return e.Class + ": " + e.Message }
