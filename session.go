package glovebox

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/gloveboxhq/glovebox/internal/engine"
)

// Session is a conversation with one VM: unlike Runtime.Eval, where every
// eval starts fresh, a session's evals build on each other — local
// variables assigned at the top level, methods, classes, constants and
// required libraries persist — so a model can work step by step. Limits
// apply to each eval, as set on the Runtime the session came from.
//
// A trap (timeout, fuel, memory, cancellation, tool budget, crash, and
// the wasm stack exhausted, which is reported as a SystemStackError
// error but skips every rescue and ensure) discards the VM: that eval's Result has SessionReset set, and the next
// eval starts from a fresh VM. So does an eval that finds a mount's host
// directory replaced (moved away, a new one made at its path): it runs in
// a fresh VM that sees the new directory, with SessionReset set. State is
// never lost silently. The scratch
// directory is wiped after every eval (a scratch file the guest keeps
// open stays open, emptied); mounts stay as they are.
//
// A session must never be shared between users (tenants, customers,
// conversations): anything one eval leaves behind — data fetched through
// tools, a redefined method that rewrites later answers, a file handle —
// is there for the next, so a shared session would leak one user's data
// to another and let one user tamper with what another sees. Give each
// user their own session and close it when the conversation ends.
//
// A Session is safe for concurrent use; its evals run one at a time, in
// the order they acquire it.
type Session struct {
	r    *Runtime
	sh   *shared // the engine and pool s belongs to
	s    *engine.Session
	once sync.Once
	// closed is set by Close, before the engine session closes.
	closed atomic.Bool
	// flow is the session's data-flow state, kept across its evals so a
	// value has one token for the whole session; nil when no tool is
	// labelled.
	flow *flowState
	// mu guards s (replaced when a paused session continues) and the
	// fields of a session paused in a tool call (see suspend.go): its
	// sealed state and its pending call.
	mu      sync.Mutex
	paused  []byte
	pending *PendingCall
	// continuing is set while a Continue answers the paused call.
	continuing bool
	hist       *sessionHistory // for suspending its evals (suspend_eval.go)
	seals      *frameCache     // its last state's frames, for Checkpoint to reuse (seal.go)
}

// NewSession starts a session with r's tools, mounts and limits. The VM
// is taken (prepared, from r's pool when one is waiting) at the first
// eval. It fails with ErrClosed when r is closed.
func (r *Runtime) NewSession() (*Session, error) {
	if r.closed() {
		return nil, ErrClosed
	}
	sh, err := r.target(context.Background())
	if err != nil {
		return nil, err
	}
	s, err := sh.pool.NewSession()
	if err != nil {
		return nil, err
	}
	return &Session{r: r, sh: sh, s: s, flow: r.newFlow()}, nil
}

// Eval runs code in the session's VM and returns what it did, as
// Runtime.Eval does. The error is non-nil only for host-side failures:
// [ErrSessionClosed] after the session's Close, ErrClosed after its
// Runtime's (closing the view it came from does not end it), or a VM
// that could not be made.
func (s *Session) Eval(ctx context.Context, code string) (*Result, error) {
	return s.EvalWith(ctx, code)
}

// EvalWith is Eval with options, as Runtime.EvalWith takes them. Each
// eval's standard input and ARGV are its own: an eval given no WithStdin
// or WithArgs sees empty ones, whatever an earlier eval was given. Input
// the options cannot give fails with ErrInvalidInput and runs nothing.
func (s *Session) EvalWith(ctx context.Context, code string, opts ...EvalOption) (*Result, error) {
	if s.closed.Load() {
		return nil, ErrSessionClosed
	}
	req, st := s.r.request(code)
	st.flow = s.flow
	if err := applyOptions(req, s.r.limits, opts); err != nil {
		return nil, err
	}
	if s.isPaused() {
		return nil, ErrSessionPaused
	}
	st.journaled(req)
	if st.sus != nil {
		s.plan(st, req.Journal)
		defer st.dropHist()
	}
	flush := st.redactTees(req)
	out, reset, err := s.engine().Eval(ctx, req)
	flush()
	if err != nil {
		if errors.Is(err, engine.ErrClosed) && s.closed.Load() {
			// Close ran while this eval waited for the VM.
			return nil, ErrSessionClosed
		}
		return nil, err
	}
	s.record(st, req, out, reset)
	return s.report(st.finishEval(s.sh, out, req, stateSessionPaused), reset), nil
}

// Close frees the session's VM, waiting for a running eval to end. It is
// idempotent and returns nil; later evals return [ErrSessionClosed].
func (s *Session) Close() error {
	s.once.Do(func() {
		s.closed.Store(true)
		s.engine().Close()
		s.setHist(nil)
		s.setSeals(nil)
	})
	return nil
}
