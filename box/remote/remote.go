// Package remote is the interface a remote executor (a dedicated sandbox
// host: glovebox's executor, whose client is executor/client) implements,
// and the Box that wraps one. Code run through it is off-host: its Trust is TrustRemote
// whatever isolation the executor uses.
package remote

import (
	"context"
	"errors"
	"fmt"

	"github.com/gloveboxhq/glovebox/box"
)

// Executor runs commands on another machine. Run gets a Request (the
// Command without its local functions, the resolved credentials and an
// idempotency key) and returns the Result, or an error. An error after
// which the command may have run must wrap ErrInDoubt, so callers never
// retry it blindly.
type Executor interface {
	Run(ctx context.Context, req Request) (*box.Result, error)
	// Isolation is what the executor's backend gives (gvisor, microvm…).
	Isolation() box.Isolation
}

// Request is one remote run.
type Request struct {
	// Command is the run; its Stream, Tools and Credentials are the
	// local side's and do not travel.
	Command box.Command
	// Credentials holds the resolved credential values, sent only in the
	// request body, never in the key or a log line.
	Credentials map[string]string
	// IdempotencyKey names this logical run, so the executor can answer
	// a deliberate retry from its record; empty means none: the executor
	// client then sends a fresh random key, and the run always runs.
	IdempotencyKey string
	// Stream, when set, gets the command's stdout (1) and stderr (2) as
	// the executor relays them, in order, from one goroutine: the
	// Command's own Stream, which does not travel.
	Stream func(stream int, p []byte)
}

// ErrInDoubt marks an error after which the command may have run.
var ErrInDoubt = errors.New("remote: transport failed; the run may have happened")

// Box runs commands through an Executor.
type Box struct {
	x   Executor
	key func(*box.Command) string
}

var _ box.Box = (*Box)(nil)

// New wraps x. key computes the idempotency key of a command, for a
// caller who wants a command sent again answered from its first run
// (executor/client.Key is one such function); nil means none is sent, so
// every Run runs: the same command three times is three runs.
func New(x Executor, key func(*box.Command) string) *Box { return &Box{x: x, key: key} }

// Posture is (the executor's isolation, remote).
func (b *Box) Posture() box.Posture {
	return box.Posture{Backend: "remote", Isolation: b.x.Isolation(), Trust: box.TrustRemote}
}

// Run validates c, resolves its credentials and calls the executor.
func (b *Box) Run(ctx context.Context, c box.Command) (*box.Result, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.Tools != nil {
		return nil, fmt.Errorf("%w: tools over a remote executor come with the executor", box.ErrUnsupported)
	}
	if c.Network.Inspect != nil {
		return nil, fmt.Errorf("%w: Network.Inspect runs in this process, and a remote executor's egress proxy cannot ask it", box.ErrUnsupported)
	}
	req := Request{Credentials: map[string]string{}}
	for k, f := range c.Credentials {
		v, err := f(ctx)
		if err != nil {
			return nil, fmt.Errorf("box: credential %s could not be resolved", k)
		}
		req.Credentials[k] = v
	}
	if b.key != nil {
		req.IdempotencyKey = b.key(&c)
	}
	req.Stream = c.Stream
	c.Credentials, c.Stream = nil, nil
	req.Command = c
	res, err := b.x.Run(ctx, req)
	if err != nil {
		return nil, err
	}
	res.Posture = b.Posture()
	return res, nil
}
