package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/executor/internal/wire"
)

// Evaluator runs Ruby programs on the executor, off this host, with the
// tools of a local [glovebox.Runtime]: the guest runs in the executor's
// wasm engine, and each tool call it makes comes back here and runs
// through the Runtime's Toolset with its hooks, budgets (Limits.ToolCalls,
// ToolTime, ToolPayload), approval and transcript, exactly as an
// in-process eval's would; the answer (a value, an exception of the same
// class, or a budget abort) goes back to the guest. The Runtime's
// execution limits (Timeout, Fuel, Memory, output sizes) travel with each
// eval and are capped by the executor's.
//
// Its Eval has codemode.Evaluator's shape, so an agent moves its code
// off-host by changing one constructor:
//
//	tool, _ := codemode.New(codemode.Config{Runtime: rt, Evaluator: c.Evaluator(rt)})
//
// It is safe for concurrent use. Errors are *Error, as for runs: InDoubt
// when the transport failed after the eval may have started (retry with
// [Evaluator.Retry] to get its outcome; tool calls it already made are not
// made again), definite otherwise.
type Evaluator struct {
	c  *Client
	rt *glovebox.Runtime

	mu sync.Mutex
	// inDoubt keeps, per key of an eval that ended in doubt, its tool
	// session (transcript, budgets) and the answers already given, so a
	// retry from this process answers a call handed to it again from
	// memory instead of running the tool twice. At most maxInDoubt keys.
	inDoubt map[string]*inflight
	order   []string

	profile string // the executor's eval profile its evals and sessions name
}

// inflight is one eval's client-side state across attempts.
type inflight struct {
	ts      *glovebox.ToolSession
	mu      sync.Mutex
	replies map[uint64][]byte
}

// maxInDoubt bounds the in-doubt evals an Evaluator remembers for retry.
const maxInDoubt = 64

// begin returns the eval's state: the remembered one for a retry, else
// new; a session's eval (s non-nil) keeps the session's labelled values.
func (e *Evaluator) begin(key string, s *Session) *inflight {
	e.mu.Lock()
	defer e.mu.Unlock()
	if f := e.inDoubt[key]; f != nil {
		delete(e.inDoubt, key)
		return f
	}
	timeout := 2 * e.rt.Limits().Timeout
	if s != nil {
		return &inflight{ts: s.flow.Next(timeout), replies: map[uint64][]byte{}}
	}
	return &inflight{ts: e.rt.ToolSession(timeout), replies: map[uint64][]byte{}}
}

// remember keeps f for a retry of key.
func (e *Evaluator) remember(key string, f *inflight) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.inDoubt == nil {
		e.inDoubt = map[string]*inflight{}
	}
	if _, ok := e.inDoubt[key]; !ok {
		e.order = append(e.order, key)
	}
	e.inDoubt[key] = f
	for len(e.order) > maxInDoubt {
		delete(e.inDoubt, e.order[0])
		e.order = e.order[1:]
	}
}

// answer runs call through f's tool session once; a call already
// answered (handed again after a broken stream) gets the same reply.
func (f *inflight) answer(ctx context.Context, call *wire.ToolCall) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r, ok := f.replies[call.ID]; ok {
		return r
	}
	reply := []byte("err\nUnknownToolError\nno tool named " + call.Name)
	if f.ts != nil {
		reply = f.ts.Call(ctx, call.Name, []byte(call.Args))
	}
	f.replies[call.ID] = reply
	return reply
}

// Evaluator returns an Evaluator using rt's tools, hooks and limits.
// rt's mounts are not available off-host: the executor's guest sees only
// its own scratch directory.
func (c *Client) Evaluator(rt *glovebox.Runtime) *Evaluator { return &Evaluator{c: c, rt: rt} }

// WithProfile returns an Evaluator of the same Runtime whose evals and
// sessions name the executor's eval profile name (EXECUTOR.md, "Eval
// profiles"): the guest gets the profile's mounts and the tools it runs
// on the executor beside rt's, under its limits. An executor that does
// not grant the tenant that profile refuses them with code
// unknown_profile. The copy keeps its own in-doubt memory.
func (e *Evaluator) WithProfile(name string) *Evaluator {
	return &Evaluator{c: e.c, rt: e.rt, profile: name}
}

// EvalOptions are one eval's input, output streaming and key.
type EvalOptions struct {
	// Key is the idempotency key; empty means a fresh random one, so
	// the same code evaluated twice runs twice (its tools may answer
	// differently the second time). Give an earlier eval's key only to
	// retry it.
	Key string
	// Stdin and Args are the guest's standard input and ARGV, as
	// glovebox.WithStdin and WithArgs give them; Env, when not empty,
	// its whole ENV, as glovebox.WithEnv gives it.
	Stdin []byte
	Args  []string
	Env   map[string]string
	// Stdout and Stderr, if set, receive the guest's output as it is
	// written on the executor, in order.
	Stdout, Stderr io.Writer
	// Suspend names tools whose calls pause the eval on the executor
	// instead of coming back here: the Result then has
	// glovebox.StatusSuspended and its Pending call (no State: the
	// sealed state stays in the executor's store), and
	// [Evaluator.Continue] answers it later, through any executor of the
	// fleet. Needs an executor with a state key. In a session's eval the
	// names are of the session's tools, and the whole session waits:
	// until the pause is continued its evals fail with code
	// session_paused.
	Suspend []string
}

// Eval runs code in a fresh VM on the executor; see [Evaluator].
func (e *Evaluator) Eval(ctx context.Context, code string) (*glovebox.Result, error) {
	return e.EvalWith(ctx, code, EvalOptions{})
}

// EvalWith is Eval with options.
func (e *Evaluator) EvalWith(ctx context.Context, code string, o EvalOptions) (*glovebox.Result, error) {
	req := wire.EvalRequest{Code: code, Tools: e.rt.Tools(), Limits: evalLimits(e.rt.Limits()), Stdin: o.Stdin, Args: o.Args, Env: o.Env,
		SuspendTools: o.Suspend, Profile: e.profile}
	return e.eval(ctx, &req, o, nil)
}

// Retry runs code again under the key of err, the *Error an earlier Eval
// of the same code returned: the executor attaches to that eval (handing
// this call its pending tool calls) or answers its recorded result; it
// never runs it twice. An err without a key is returned as is.
func (e *Evaluator) Retry(ctx context.Context, code string, o EvalOptions, err error) (*glovebox.Result, error) {
	var ce *Error
	if !errors.As(err, &ce) || ce.Key == "" {
		return nil, err
	}
	o.Key = ce.Key
	return e.EvalWith(ctx, code, o)
}

func evalLimits(l glovebox.Limits) wire.EvalLimits {
	return wire.EvalLimits{
		TimeoutMS: l.Timeout.Milliseconds(), Fuel: l.Fuel, Memory: l.Memory, Stdout: l.Stdout, Stderr: l.Stderr,
		Value: l.Value, ToolPayload: l.ToolPayload, FileWrite: l.FileWrite, FileCreates: l.FileCreates,
	}
}

func newEvalKey() string { return wire.NewKey("e-") }

// eval sends req and serves its tool calls until the result; s is the
// session req names, nil for none.
func (e *Evaluator) eval(ctx context.Context, req *wire.EvalRequest, o EvalOptions, s *Session) (*glovebox.Result, error) {
	req.IdempotencyKey = o.Key
	if req.IdempotencyKey == "" {
		req.IdempotencyKey = newEvalKey()
	}
	key := req.IdempotencyKey
	if d, ok := ctx.Deadline(); ok {
		req.ExpiresAt = &d
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, &Error{Code: "bad_request", Message: err.Error(), Key: key}
	}
	// The tool channel's deadline (begin): the eval's Timeout, plus as
	// much again for the time it may wait in the executor's queue.
	f := e.begin(key, s)
	var (
		holder   uint64
		attached bool
		rec      *wire.Record
	)
	// What the guest writes and returns shows labelled values as tokens,
	// as an in-process eval's Result does (the tools' labels are here).
	stdout, flushOut := f.ts.RedactOutput(o.Stdout)
	stderr, flushErr := f.ts.RedactOutput(o.Stderr)
	defer flushErr()
	defer flushOut()
	err = e.c.stream(ctx, wire.PathEvals, body, key, func(ev *wire.Event) error {
		switch ev.Type {
		case wire.EventAccepted:
			attached = ev.Attached
		case wire.EventHolder:
			var h wire.Holder
			if json.Unmarshal(ev.Extra, &h) == nil {
				holder = h.Holder
			}
		case wire.EventStdout:
			if stdout != nil {
				stdout.Write(ev.Data)
			}
		case wire.EventStderr:
			if stderr != nil {
				stderr.Write(ev.Data)
			}
		case wire.EventToolCall:
			var call wire.ToolCall
			if err := json.Unmarshal(ev.Extra, &call); err != nil {
				return &Error{Code: "bad_response", Message: "tool_call: " + err.Error(), Key: key, inDoubt: true}
			}
			if call.Holder != holder || holder == 0 {
				return nil // handed to another follower (or to us again, later)
			}
			cctx := ctx
			if call.TimeLeftMS != nil {
				// The eval ends then: a call whose hooks or approval take
				// longer is not run (glovebox.ToolSession.Call).
				var cancel context.CancelFunc
				cctx, cancel = context.WithTimeout(ctx, time.Duration(*call.TimeLeftMS)*time.Millisecond)
				defer cancel()
			}
			return e.c.toolResult(ctx, key, call.ID, f.answer(cctx, &call))
		case wire.EventResult:
			rec = ev.Record
		}
		return nil
	})
	if rec == nil && err == nil {
		err = &Error{Code: "bad_response", Message: "the stream ended without a record", Key: key, inDoubt: true}
	}
	if err != nil {
		if ce := (*Error)(nil); errors.As(err, &ce) && ce.inDoubt {
			e.remember(key, f)
		}
		return nil, err
	}
	if rec.State != wire.StateCompleted || rec.Eval == nil {
		ce := &Error{Code: string(wire.CodeInternal), Message: "eval ended in state " + rec.State, Key: key}
		if rec.Error != nil {
			ce.Code, ce.Message = string(rec.Error.Code), rec.Error.Message
		}
		return nil, ce
	}
	var local []glovebox.ToolCall
	if f.ts != nil {
		local = f.ts.Calls()
	}
	res, err := rec.Eval.Result(local, attached && len(local) == 0)
	if err != nil {
		return nil, &Error{Code: "bad_response", Message: err.Error(), Key: key}
	}
	f.ts.Redact(res)
	return res, nil
}

// toolResult posts one reply frame. A call nobody waits for any more
// (answered by an earlier holder, or the eval ended) is not an error:
// the stream says what happened next.
func (c *Client) toolResult(ctx context.Context, key string, id uint64, reply []byte) error {
	body, _ := json.Marshal(wire.ToolResult{ID: id, Reply: string(reply)})
	err := c.post(ctx, wire.PathEvals+"/"+key+"/tool-results", body, nil)
	var ce *Error
	if errors.As(err, &ce) && ce.Code == string(wire.CodeNotFound) {
		return nil
	}
	if ce != nil {
		ce.Key, ce.inDoubt = key, true // the eval is running; its outcome is unknown
	}
	return err
}

// post sends a JSON body and decodes a JSON answer into out (nil: none).
func (c *Client) post(ctx context.Context, path string, body []byte, out any) error {
	return c.do(ctx, http.MethodPost, path, body, out)
}

func (c *Client) do(ctx context.Context, method, path string, body []byte, out any) error {
	hr, err := http.NewRequestWithContext(ctx, method, c.base+path, bytes.NewReader(body))
	if err != nil {
		return &Error{Code: "bad_request", Message: err.Error()}
	}
	hr.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		hr.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(hr)
	if err != nil {
		return &Error{Code: "transport", Message: scrub(err), err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return &Error{Code: "transport", Message: scrub(err), err: err}
	}
	if resp.StatusCode/100 != 2 {
		return refusal(resp.StatusCode, b, "")
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return &Error{Code: "bad_response", Message: err.Error()}
		}
	}
	return nil
}

// Session is a remote session: a VM on the executor kept between evals,
// so state (variables, methods, required libraries) carries from one to
// the next, with the local Runtime's tools called back as for
// [Evaluator.Eval]. Each eval has its own idempotency key. It lives on
// one executor, which closes it after its idle timeout; Close it when the
// conversation ends. A Session must serve one user only (see
// glovebox.Session). Its Eval has codemode.Evaluator's shape.
type Session struct {
	e  *Evaluator
	id string
	// flow carries the labelled values the session's evals' calls handed
	// out, for the next eval's tokens and sinks (nil without tools).
	flow *glovebox.ToolSession
}

// NewSession opens a session on the executor with the Evaluator's tools
// and limits. Errors are *Error (queue_full when the tenant has its most
// sessions open).
func (e *Evaluator) NewSession(ctx context.Context) (*Session, error) {
	body, _ := json.Marshal(wire.SessionRequest{Tools: e.rt.Tools(), Limits: evalLimits(e.rt.Limits()), Profile: e.profile})
	var info wire.SessionInfo
	if err := e.c.post(ctx, wire.PathSessions, body, &info); err != nil {
		return nil, err
	}
	if !wire.ValidSessionID(info.ID) {
		return nil, &Error{Code: "bad_response", Message: "a session ID not in the documented form"}
	}
	return &Session{e: e, id: info.ID, flow: e.rt.ToolSession(0)}, nil
}

// ID is the session's ID on the executor.
func (s *Session) ID() string { return s.id }

// Eval runs code in the session's VM.
func (s *Session) Eval(ctx context.Context, code string) (*glovebox.Result, error) {
	return s.EvalWith(ctx, code, EvalOptions{})
}

// EvalWith is Eval with options.
func (s *Session) EvalWith(ctx context.Context, code string, o EvalOptions) (*glovebox.Result, error) {
	req := wire.EvalRequest{Code: code, Session: s.id, Stdin: o.Stdin, Args: o.Args, Env: o.Env, SuspendTools: o.Suspend}
	return s.e.eval(ctx, &req, o, s)
}

// Retry is [Evaluator.Retry] for an eval of this session.
func (s *Session) Retry(ctx context.Context, code string, o EvalOptions, err error) (*glovebox.Result, error) {
	var ce *Error
	if !errors.As(err, &ce) || ce.Key == "" {
		return nil, err
	}
	o.Key = ce.Key
	return s.EvalWith(ctx, code, o)
}

// Close ends the session on the executor (waiting for a running eval of
// it). Closing a session the executor already closed is not an error.
func (s *Session) Close(ctx context.Context) error {
	err := s.e.c.do(ctx, http.MethodDelete, wire.PathSessions+"/"+s.id, nil, nil)
	var ce *Error
	if errors.As(err, &ce) && ce.Code == string(wire.CodeNotFound) {
		return nil
	}
	return err
}
