package glovebox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gloveboxhq/glovebox/internal/engine"
)

// Suspension: a session's state, or an eval paused inside a tool call, as
// sealed bytes that a Runtime in any process can continue.
//
// An idle [Session] becomes bytes with [Session.Suspend] and a working
// session again with [Runtime.ResumeSession]: its variables, methods,
// constants, loaded libraries and random generator are exactly as they
// were.
//
// A tool call can be suspended instead of answered: a tool, [Hooks].BeforeCall
// (a host-wide policy) or [Hooks].Approver (a person decides later) returns
// an error wrapping [ErrSuspend] (see [SuspendCall]). The eval then ends
// with [StatusSuspended]; its Result holds the pending call
// ([Result.Pending]) and the sealed state ([Result.State]), and its
// Stdout, Stderr, ToolCalls and FuelUsed so far. [Runtime.Continue] (or,
// for a session's eval, [Runtime.ResumeSession] then [Session.Continue])
// answers the call and runs the program on from inside it, as if it had
// never stopped; it may suspend again at a later call. The final Result
// reports the whole eval: all its output, its whole transcript, its fuel
// and tool time; its Duration and its wall-clock limit count only the
// time spent running.
//
// States are sealed with the Runtime's [Keyring] (AES-256-GCM, after
// compression) and name what they need: the guest image and state-format
// versions, the tools and their documented schemas, the mount layout
// (guest paths and access, never host paths) and the limits. A state that
// is damaged, sealed with a key the ring lacks, or given to a Runtime that
// differs is refused before any guest code runs, with [ErrStateInvalid],
// [ErrStateKey] or [ErrStateMismatch] (a *[StateMismatchError] naming the
// difference). See RATIONALE.md, "Why are paused evals replayed?", for how
// an eval paused in a call is continued, and what refuses to suspend.

// StatusSuspended: the eval stopped inside a tool call that was suspended
// instead of answered (class Glovebox::Suspended). [Result.Pending] names
// the call and [Result.State] holds the sealed state to continue it from.
const StatusSuspended Status = "suspended"

// Errors of suspension and resumption.
var (
	// ErrSuspend, returned (or wrapped) by a tool, Hooks.BeforeCall or
	// Hooks.Approver, suspends the eval at that call instead of answering
	// it (see [SuspendCall]). A Runtime without StateKeys cannot suspend:
	// the guest then sees Glovebox::ToolError saying so.
	ErrSuspend = errors.New("glovebox: suspend the eval at this tool call")
	// ErrNotSuspendable is returned by [Session.Suspend] for a session
	// that cannot be suspended now, and is the reason a suspend request
	// is refused (the guest sees Glovebox::ToolError with the message);
	// the message says why and what to change.
	ErrNotSuspendable = errors.New("glovebox: cannot suspend")
	// ErrStateInvalid: the bytes are not a state glovebox sealed, or were
	// damaged — truncated, or any byte changed (the authentication
	// failed).
	ErrStateInvalid = errors.New("glovebox: invalid state")
	// ErrStateKey: the state was sealed with a key the Runtime's Keyring
	// does not hold (the message names the key id), or the Runtime has no
	// Keyring.
	ErrStateKey = errors.New("glovebox: state sealed with an unknown key")
	// ErrStateMismatch: the state needs a Runtime unlike this one; the
	// error is a *StateMismatchError naming the difference.
	ErrStateMismatch = errors.New("glovebox: state made by a different runtime")
	// ErrStateUsed: Config.StateStore says the state was continued
	// before.
	ErrStateUsed = errors.New("glovebox: state already continued")
	// ErrStateDiverged: an eval paused in a call did not reach the same
	// call again when continued (see RATIONALE.md, "Why are paused evals
	// replayed?"): a mounted file it read had changed, for instance. The
	// eval's effects stay inside the discarded VM, no call after the
	// pause ran, and the state was not claimed (Config.StateStore): once
	// the cause is undone (the file put back), it can be continued again.
	ErrStateDiverged = errors.New("glovebox: the paused eval did not replay to its call")
	// ErrSessionPaused is returned by Session.Eval on a session paused in
	// a tool call (answer it with Session.Continue first), and by
	// Session.Continue on one that is not.
	ErrSessionPaused = errors.New("glovebox: session is paused in a tool call")
)

// StateMismatchError names what a state needs that a Runtime lacks. It
// matches [ErrStateMismatch] under errors.Is.
type StateMismatchError struct {
	// What differs: "format", "image", "tools", "mounts", "snapshot"
	// (the boot snapshot was built again since), "limits", "prepared VM"
	// (a session's base) or "kind" (a session's state given to
	// Runtime.Continue, or the other way round).
	What string
	// State and Runtime describe each side (a version, a hash, a list).
	// For "tools" they list the tools that differ, each as its name and a
	// hash of its documentation ("[refund:1a2b3c4d5e6f]"): the state's
	// that this Runtime lacks or documents otherwise, and this Runtime's
	// that the state lacks or documents otherwise.
	State, Runtime string
	detail         string // what differs, in words, when it can say
}

func (e *StateMismatchError) Error() string {
	if e.detail != "" {
		return fmt.Sprintf("glovebox: state made by a different runtime: its %s differ: %s", e.What, e.detail)
	}
	return fmt.Sprintf("glovebox: state made by a different runtime: its %s is %s, this runtime's is %s", e.What, e.State, e.Runtime)
}

// Is reports whether target is ErrStateMismatch.
func (e *StateMismatchError) Is(target error) bool { return target == ErrStateMismatch }

// SuspendCall returns an error wrapping [ErrSuspend] that gives the
// reason the call waits (a person's approval, a slow job); the reason is
// [PendingCall].Reason. An empty reason is "suspended".
func SuspendCall(reason string) error {
	if reason == "" {
		reason = "suspended"
	}
	return &suspendRequest{reason: reason}
}

type suspendRequest struct{ reason string }

func (s *suspendRequest) Error() string {
	return "glovebox: suspend the eval at this tool call: " + s.reason
}
func (s *suspendRequest) Is(target error) bool { return target == ErrSuspend }

// PendingCall is the tool call a suspended eval waits in.
type PendingCall struct {
	// ID names this pause: the state's id (32 hex digits), unique per
	// suspension, the key a StateStore records.
	ID string
	// Name and Args are the call as the guest made it; when tools are
	// labelled (Toolset.Label), labelled values in Args show as tokens
	// ([Result.Reveal] gives them back), and the state keeps the values.
	Name string
	Args Args
	// Reason is what SuspendCall was given ("suspended" for a bare
	// ErrSuspend).
	Reason string
	// Approval is set when the Approver suspended the call: the call has
	// not run, and answering it with a value answers for the tool.
	Approval bool
}

// MarshalJSON writes {"id", "name", "args", "kwargs", "reason",
// "approval"}, with args and kwargs as in [ToolCall.MarshalJSON].
func (p *PendingCall) MarshalJSON() ([]byte, error) {
	tc, err := ToolCall{Name: p.Name, Args: p.Args}.MarshalJSON()
	if err != nil {
		return nil, err
	}
	var parts struct {
		Args   json.RawMessage `json:"args"`
		Kwargs json.RawMessage `json:"kwargs"`
	}
	if err := json.Unmarshal(tc, &parts); err != nil {
		return nil, err
	}
	return marshalNoEscape(struct {
		ID       string          `json:"id"`
		Name     string          `json:"name"`
		Args     json.RawMessage `json:"args"`
		Kwargs   json.RawMessage `json:"kwargs"`
		Reason   string          `json:"reason"`
		Approval bool            `json:"approval"`
	}{p.ID, p.Name, parts.Args, parts.Kwargs, p.Reason, p.Approval})
}

// Answer answers a pending call. The zero Answer returns nil to the
// guest.
type Answer struct {
	// Value is what the call returns, as a tool's result would be.
	Value any
	// Err, if set, raises in the guest as a tool's error does: a
	// *ToolError chooses the class, any other error raises
	// Glovebox::ToolError with its message (through Hooks.SanitizeError).
	// The guest can rescue it.
	Err error
	// Denied raises Glovebox::ToolDenied with Reason ("denied" if empty),
	// as a denying Approver does.
	Denied bool
	Reason string
	// Approved runs the tool now, in the process that continues the
	// eval, as it would have run had the Approver approved: within the
	// eval's tool-time budget and deadline, recorded in the transcript
	// ("approved" when the Approver suspended the call) and seen by
	// Hooks.AfterCall. BeforeCall and the Approver are not asked again.
	// Value and Err are ignored; Denied wins over it.
	Approved bool
}

// StateStore records which states were continued, so a front end can
// continue each at most once: set Config.StateStore, and ResumeSession
// claims an idle session's state before restoring it, and Continue (and
// Session.Continue) claims a paused eval's state when its replay reaches
// the paused call, before the answer goes in; both fail with
// [ErrStateUsed] when the id was claimed before. A continuation that
// never reached its call — refused, [ErrStateDiverged], or canceled or
// timed out during the replay — claimed nothing, and the state can be
// continued again; two continuations of one state at the same time both
// replay, and the second to reach the call gets ErrStateUsed before
// anything after the pause runs. Implementations must be safe for
// concurrent use; see [DirStateStore].
type StateStore interface {
	// Claim records id as continued. It returns an error wrapping
	// ErrStateUsed when id was claimed before, or another error when it
	// cannot tell (the state is then not continued).
	Claim(ctx context.Context, id string) error
}

// Suspend returns the session's complete state as sealed bytes and
// closes the session, whose VM is freed: nothing of it stays in this
// process. [Runtime.ResumeSession] makes a working session of the bytes
// in any process with a compatible Runtime. A session that never ran an
// eval is suspended too (its state is a fresh VM's). Do not run an eval
// on the session while it is suspended: the state is taken before or
// after it, and the session is closed.
//
// It fails with [ErrNotSuspendable] (the session stays usable) when the
// Runtime has no StateKeys or when the guest keeps files open (close them
// first: an open file's descriptor cannot be carried to another process);
// with [ErrSessionPaused] on a session paused in a tool call, whose state
// the eval that paused it gave; with [ErrSessionClosed] after Close.
func (s *Session) Suspend(ctx context.Context) ([]byte, error) {
	state, err := s.checkpoint(false)
	if err != nil {
		return nil, err
	}
	s.Close()
	return state, nil
}

// Checkpoint returns the session's complete state as sealed bytes, as
// [Session.Suspend] does, but leaves the session open and usable: a host
// that keeps the live session for its next eval and the bytes elsewhere
// (a database shared by several processes) resumes from the bytes only
// where the live session is not. Each call makes a state with an id of
// its own. It fails as Suspend does, and the session stays usable.
//
// The frames of the state whose bytes did not change since the state
// the session was resumed from, or its last Checkpoint, are not
// encrypted again: their sealed bytes are reused, so the cost of a
// suspension follows what the evals since changed (see seal.go).
func (s *Session) Checkpoint(ctx context.Context) ([]byte, error) {
	return s.checkpoint(true)
}

// checkpoint seals the session's state; keep keeps its frames for the
// next checkpoint to reuse (Suspend, which closes the session, does not).
func (s *Session) checkpoint(keep bool) ([]byte, error) {
	if s.closed.Load() {
		return nil, ErrSessionClosed
	}
	if s.isPaused() {
		return nil, ErrSessionPaused
	}
	if s.r.keys == nil {
		return nil, fmt.Errorf("%w: the Runtime has no StateKeys (Config.StateKeys)", ErrNotSuspendable)
	}
	// The manifest and the data-flow part go to a small buffer of their
	// own; the session's state, the rest of the body, to a pooled one of
	// its size, which Capture asks for once it knows the size.
	e := &benc{b: make([]byte, 0, 1024)}
	s.r.manifest(s.sh).put(e)
	putFlow(e, s.flow)
	prefix := len(e.b)
	var err error
	body, err := s.engine().Capture(e.b, func(dst []byte, n int) []byte {
		return append(getBuf(len(dst)+n), dst...)
	})
	if err != nil {
		var ns *engine.NotSuspendable
		if errors.As(err, &ns) {
			return nil, fmt.Errorf("%w: %s", ErrNotSuspendable, ns.Reason)
		}
		return nil, err
	}
	s.mu.Lock()
	reuse := s.seals
	s.seals = nil // this checkpoint's; another at the same time reuses nothing
	s.mu.Unlock()
	state, _, next, err := sealFrames(s.r.keys, stateIdle, body, bodySegments(body, prefix), reuse, keep)
	reuse.release()
	if next == nil {
		putBuf(body)
	}
	s.setSeals(next)
	return state, err
}

// setSeals makes c the frames the session's next checkpoint reuses,
// letting go of those before; a closed session keeps none.
func (s *Session) setSeals(c *frameCache) {
	s.mu.Lock()
	old, gone := s.seals, (*frameCache)(nil)
	s.seals = c
	if s.closed.Load() {
		s.seals, gone = nil, c
	}
	s.mu.Unlock()
	old.release()
	gone.release()
}

// ResumeSession makes a session of a state from [Session.Suspend], or of
// a session eval's [StatusSuspended] Result.State (the session is then
// paused: [Session.Pending] names the call, and [Session.Continue]
// answers it). The state is opened and checked before anything runs; it
// fails with [ErrStateInvalid], [ErrStateKey], [ErrStateMismatch] (a
// *StateMismatchError), [ErrStateUsed] (with Config.StateStore; a paused
// session's state is claimed when Continue answers it) or ErrClosed.
func (r *Runtime) ResumeSession(ctx context.Context, state []byte) (*Session, error) {
	sh, err := r.target(ctx)
	if err != nil {
		return nil, err
	}
	o, err := r.openKeep(sh, state, true, stateIdle, stateSessionPaused)
	if err != nil {
		return nil, err
	}
	if o.hdr.kind == stateSessionPaused {
		o.seals.release()
		o.seals = nil
		p, err := decodePaused(o.body)
		if err != nil {
			return nil, err
		}
		es, err := sh.pool.NewSession()
		if err != nil {
			return nil, err
		}
		pc := p.pending
		pc.ID = o.hdr.id
		if o.flow != nil {
			pc.Args = o.flow.redactArgs(pc.Args)
		}
		return &Session{r: r, sh: sh, s: es, flow: o.flow, paused: append([]byte(nil), state...), pending: &pc}, nil
	}
	if err := r.claim(ctx, o.hdr.id); err != nil {
		o.release()
		return nil, err
	}
	es, err := sh.pool.RestoreSession(o.body.b) // the rest of the body
	if err != nil {
		o.release()
		return nil, restoreError(err)
	}
	// The session's history starts at this state: it keeps the opened
	// body (not a copy: copying 1.7 MB cost as much as decrypting it),
	// whose buffer goes back to the pool once the session and every eval
	// that may read it let go (see heldBuf). So do the frames its next
	// Checkpoint may reuse.
	hist := &sessionHistory{base: o.body.b, held: newHeldBuf(o.buf), capCost: time.Millisecond}
	seals := cacheFrames(o.seals, o.buf, bodySegments(o.buf, len(o.buf)-len(o.body.b)))
	if seals != nil {
		hist.held.hold()
		seals.body = hist.held
	}
	return &Session{r: r, sh: sh, s: es, hist: hist, flow: o.flow, seals: seals}, nil
}

// restoreError reports the engine's refusal of a session's state.
func restoreError(err error) error {
	var bm *engine.BaseMismatch
	if errors.As(err, &bm) {
		return &StateMismatchError{What: "prepared VM", State: bm.State, Runtime: bm.Here}
	}
	if errors.Is(err, engine.ErrClosed) {
		return err
	}
	return fmt.Errorf("%w: %v", ErrStateInvalid, err)
}

// Pending returns the tool call a paused session waits in, or nil.
func (s *Session) Pending() *PendingCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending == nil {
		return nil
	}
	pc := *s.pending
	return &pc
}

// engine returns the engine session s runs on.
func (s *Session) engine() *engine.Session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.s
}

func (s *Session) isPaused() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.paused != nil
}

// report makes a session eval's Result; a suspended eval pauses the
// session.
func (s *Session) report(res *Result, reset bool) *Result {
	res.SessionReset = reset
	if res.Status == StatusSuspended {
		res.SessionReset = false // the state is in res.State, not lost
		s.mu.Lock()
		s.paused, s.pending = res.State, res.Pending
		s.mu.Unlock()
	}
	return res
}

// Continue answers the call a paused session waits in and runs its eval
// on from inside the call; the Result is that eval's whole Result, as
// Session.EvalWith returns it (it may be StatusSuspended again, and the
// session paused again). opts may give WithOutput, which receives only
// output made after the pause; input options fail with ErrInvalidInput.
// It fails with ErrSessionPaused when the session is not paused (or
// another Continue is answering its call at the same time),
// [ErrStateUsed] when Config.StateStore says the pause was continued
// before, [ErrStateDiverged] when the eval cannot be continued, and
// [ErrSessionClosed] after Close. The session stays paused in the same
// call when the continuation answered nothing: it diverged, the
// StateStore refused it, or it was canceled or timed out before its
// replay reached the call (the Result then has that status); nothing
// after the pause ran, and a diverged or stopped one can be continued
// again.
func (s *Session) Continue(ctx context.Context, a Answer, opts ...EvalOption) (*Result, error) {
	if s.closed.Load() {
		return nil, ErrSessionClosed
	}
	s.mu.Lock()
	state, busy := s.paused, s.continuing
	if state != nil && !busy {
		// One Continue answers the call: a second one at the same time
		// would run the calls after the pause twice.
		s.continuing = true
	}
	s.mu.Unlock()
	if state == nil {
		return nil, fmt.Errorf("%w: not paused: there is no call to answer", ErrSessionPaused)
	}
	if busy {
		return nil, fmt.Errorf("%w: another Continue is answering its call", ErrSessionPaused)
	}
	defer func() {
		s.mu.Lock()
		s.continuing = false
		s.mu.Unlock()
	}()
	r := s.r
	o, p, req, st, err := r.openPaused(s.sh, state, stateSessionPaused, opts)
	if err != nil {
		return nil, err
	}
	es, err := s.sh.pool.RestoreSession(p.base)
	if err != nil {
		return nil, restoreError(err)
	}
	s.mu.Lock()
	if s.closed.Load() {
		s.mu.Unlock()
		es.Close()
		return nil, ErrSessionClosed
	}
	// The session runs on es from now on (Close waits for its eval); while
	// paused, what its engine session holds is never used: a Continue
	// starts from the state.
	old := s.s
	s.s = es
	s.mu.Unlock()
	old.Close()
	st.flow = s.flow // the session's labels, as the state holds them
	if err := r.fastForward(ctx, es, p.priors); err != nil {
		return nil, err
	}
	st.resume(req, p, a, o.hdr.id)
	out, reset, err := es.Eval(ctx, req)
	if err != nil {
		return nil, err
	}
	res, err := st.continued(s.sh, out, req, stateSessionPaused)
	if err != nil {
		return nil, err
	}
	if !st.sus.reached { // stopped before the call: still paused in it
		res.SessionReset = false
		return res, nil
	}
	s.mu.Lock()
	s.paused, s.pending = nil, nil // report pauses it again at a later call
	s.mu.Unlock()
	s.record(st, req, out, reset)
	return s.report(res, reset), nil
}

// Continue answers the pending call of a Runtime.Eval's [StatusSuspended]
// Result (given its State) and runs the eval on from inside the call, in
// a fresh VM of r; the Result is the whole eval's (it may be
// StatusSuspended again, at a later call). opts may give WithOutput,
// which receives only output made after the pause; input options fail
// with ErrInvalidInput (the eval keeps its own). It fails as
// ResumeSession does (a session's state is a StateMismatchError of
// "kind"; ErrStateUsed once the replay reaches the call, see
// [StateStore]), and with [ErrStateDiverged], which leaves the state
// continuable: nothing after the pause ran. A Result canceled or timed
// out before the replay reached the call claimed nothing either.
func (r *Runtime) Continue(ctx context.Context, state []byte, a Answer, opts ...EvalOption) (*Result, error) {
	sh, err := r.target(ctx)
	if err != nil {
		return nil, err
	}
	o, p, req, st, err := r.openPaused(sh, state, statePaused, opts)
	if err != nil {
		return nil, err
	}
	st.resume(req, p, a, o.hdr.id)
	out, err := sh.pool.Eval(ctx, req)
	if err != nil {
		return nil, err
	}
	return st.continued(sh, out, req, statePaused)
}

// CheckState reports whether r can take state, a [StatusSuspended]
// Result.State (for Continue, or a session's for ResumeSession) or a
// [Session.Suspend] state (for ResumeSession), without running or
// claiming anything: a caller that records its own claim on a state (a
// fleet of executors sharing a store) checks first, so that a state
// refused here stays usable by a Runtime that can take it. It opens the
// state as Continue and ResumeSession do (decrypting and decompressing
// it: about the cost of their own check) and fails as they would before
// running: [ErrStateInvalid], [ErrStateKey], [ErrStateMismatch] (a
// *StateMismatchError naming the difference: image, snapshot, tools,
// mounts, limits) or ErrClosed. It does not ask Config.StateStore, so a
// state continued before passes; nil means Continue or ResumeSession
// (whichever the state's kind is for) would open it.
func (r *Runtime) CheckState(ctx context.Context, state []byte) error {
	sh, err := r.target(ctx)
	if err != nil {
		return err
	}
	o, err := r.open(sh, state, statePaused, stateIdle, stateSessionPaused)
	if err != nil {
		return err
	}
	o.release()
	return nil
}

// openPaused opens a paused state of the given kind and makes the request
// that replays it, with opts (output writers only) applied. Nothing is
// claimed here: the state's id is claimed in the StateStore when the
// replay reaches the paused call (answerPending), so a state refused, a
// replay that diverges or one stopped on the way leaves it continuable.
func (r *Runtime) openPaused(sh *shared, state []byte, kind byte, opts []EvalOption) (*opened, *paused, *engine.Request, *evalState, error) {
	o, err := r.open(sh, state, kind)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	p, err := decodePaused(o.body)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	req, st := r.request(p.code)
	st.flow = o.flow
	if err := outputOnly(req, r.limits, opts); err != nil {
		return nil, nil, nil, nil, err
	}
	return o, p, req, st, nil
}
