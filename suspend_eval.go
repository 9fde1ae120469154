package glovebox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gloveboxhq/glovebox/internal/engine"
	"github.com/gloveboxhq/glovebox/internal/wire"
)

// pause is an eval's suspension state: its journal while it runs (so it
// can suspend), the call it suspended in, and on a continuation the answer
// to give that call when the replay reaches it.
type pause struct {
	journal *engine.Journal
	// Set when the eval suspends.
	pending       *PendingCall
	pendingDigest uint64
	pendingElided bool
	toolDur       time.Duration // time the suspended call's tool ran
	// Set on a continuation. reached: the replay got to the paused call;
	// claimErr: Config.StateStore refused (or could not record) the
	// claim taken there, and the call was not answered.
	answer   *Answer
	reached  bool
	diverged string
	claimErr error
	// For a session's eval: the session's history before it, unless the
	// eval captures a new base (journal.CaptureBase); ffwd marks an
	// earlier eval replayed to its end, which may call no tool live.
	hist *sessionHistory
	ffwd bool
}

// A session's history, for suspending its evals in a call: the state it
// had at some point (a captured base, Session.Capture's form) and the
// evals it ran since, with their journals. A state paused in a session's
// eval holds both; continuing restores the base and replays those evals
// to their ends before replaying the paused one. Capturing a base copies
// the session's pages (milliseconds for a session of a few MiB), so it is
// done only when replaying the evals since the last would take longer
// than a few captures (see plan), instead of before every eval.
type sessionHistory struct {
	base    []byte
	held    *heldBuf // base's pooled buffer, or nil (see plan)
	evals   []priorEval
	cost    time.Duration // the evals' running time: what replaying them costs
	capCost time.Duration // what the last capture cost
	broken  bool          // an eval could not be journaled: capture before the next
}

// priorEval is an eval of a session's history.
type priorEval struct {
	code  string
	stdin []byte
	args  []string
	env   []string // WithEnv's entries; nil: none given
	log   []byte
	spent time.Duration
}

// Bounds on a session's history: it is replaced by a captured base once
// replaying it would cost rebaseFactor captures, or it holds maxHistory
// evals.
const (
	rebaseFactor = 4
	maxHistory   = 64
)

// A history's base may live in a pooled buffer (a resumed session's
// opened body): s.hist holds it, and so does each eval that took s.hist
// (plan) until the eval has ended (dropHist), since finishing it may seal
// the base into a paused state. The buffer goes back to the pool with the
// last holder, so no other session's state is ever read from it.

// plan decides whether st's session eval captures a new base first; when
// it does not, the eval holds the session's history until dropHist.
func (s *Session) plan(st *evalState, j *engine.Journal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.hist
	if h == nil || h.broken || len(h.evals) >= maxHistory || h.cost >= rebaseFactor*max(h.capCost, time.Millisecond) {
		j.CaptureBase = true
		return
	}
	h.held.hold()
	st.sus.hist = h
}

// dropHist lets go of the history an eval held (see plan), once nothing
// of the eval reads it any more.
func (st *evalState) dropHist() {
	if st.sus != nil && st.sus.hist != nil {
		st.sus.hist.held.drop()
	}
}

// setHist makes h (holding its base, if pooled) the session's history,
// letting go of the one before; a closed session keeps none.
func (s *Session) setHist(h *sessionHistory) {
	s.mu.Lock()
	old, gone := s.hist, (*sessionHistory)(nil)
	s.hist = h
	if s.closed.Load() {
		s.hist, gone = nil, h
	}
	s.mu.Unlock()
	old.dropHeld()
	gone.dropHeld()
}

// dropHeld lets go of h's hold on its base.
func (h *sessionHistory) dropHeld() {
	if h != nil {
		h.held.drop()
	}
}

// record updates the session's history after an eval of it (which did not
// suspend).
func (s *Session) record(st *evalState, req *engine.Request, out *engine.Outcome, reset bool) {
	if st.sus == nil || out.Status == engine.StatusSuspended {
		return
	}
	j := st.sus.journal
	var h sessionHistory
	switch {
	case reset:
		h = sessionHistory{base: engine.FreshState()}
	case j.Base != nil:
		h = sessionHistory{base: j.Base, capCost: j.CaptureTook}
	case st.sus.hist != nil:
		h = *st.sus.hist
		h.evals = slices.Clone(h.evals)
		h.held.hold() // for the session, besides the eval's own hold
	default:
		h.broken = true
	}
	kept := !out.Trapped && (out.Status == engine.StatusOK || out.Status == engine.StatusError)
	if kept && !h.broken {
		if j.Overflow {
			h.broken = true
		} else {
			h.evals = append(h.evals, priorEval{code: req.Code, stdin: req.Stdin, args: req.Args, env: req.Env, log: j.Log(), spent: out.Duration})
			h.cost += out.Duration
		}
	}
	s.setHist(&h)
}

// fastForward replays a session's earlier evals to their ends in es.
func (r *Runtime) fastForward(ctx context.Context, es *engine.Session, evals []priorEval) error {
	for i, pe := range evals {
		req, st := r.request(pe.code)
		req.Stdin, req.Args, req.Env = pe.stdin, pe.args, pe.env
		j := engine.ReplayAll(pe.log, pe.spent)
		st.sus = &pause{journal: j, ffwd: true}
		req.Journal = j
		out, reset, err := es.Eval(ctx, req)
		if err != nil {
			return err
		}
		switch {
		case j.Diverged != "":
			return fmt.Errorf("%w: the session's eval %d of %d before the pause: %s", ErrStateDiverged, i+1, len(evals), j.Diverged)
		case st.sus.diverged != "":
			return fmt.Errorf("%w: the session's eval %d of %d before the pause: %s", ErrStateDiverged, i+1, len(evals), st.sus.diverged)
		case reset || j.Replaying():
			return fmt.Errorf("%w: the session's eval %d of %d before the pause ended (%s) before its recorded end", ErrStateDiverged, i+1, len(evals), out.Status)
		}
	}
	return nil
}

// journaled makes req record what a suspension needs, when r can seal.
func (st *evalState) journaled(req *engine.Request) {
	if st.r.keys == nil {
		return
	}
	st.sus = &pause{journal: engine.NewJournal()}
	req.Journal = st.sus.journal
}

// cannotSuspend says why this eval cannot suspend, or "".
func (st *evalState) cannotSuspend() string {
	switch {
	case st.r.keys == nil || st.sus == nil:
		return "the Runtime has no StateKeys"
	case st.sus.journal.Overflow:
		return st.sus.journal.Refused
	}
	for _, m := range st.r.mounts {
		if m.Writable {
			return fmt.Sprintf("the mount at %s is writable, and a continued eval would repeat its writes there", m.GuestPath)
		}
	}
	return ""
}

// suspendCall ends the eval in call c, which err (wrapping ErrSuspend)
// asked to suspend; approval says the Approver asked. An eval that cannot
// suspend gets Glovebox::ToolError saying why.
func (st *evalState) suspendCall(ctx context.Context, c *engine.Call, entry *ToolCall, err error, approval bool) ([]byte, error) {
	reason := "suspended"
	var sr *suspendRequest
	if errors.As(err, &sr) {
		reason = sr.reason
	}
	if why := st.cannotSuspend(); why != "" {
		msg := fmt.Sprintf("%s: cannot suspend this call: %s", c.Name, why)
		st.finish(ctx, entry, OutcomeError, msg)
		return nil, &engine.GuestError{Class: "ToolError", Message: msg}
	}
	args := Args{Positional: c.Args}
	if len(c.Kwargs) > 0 {
		args.Keyword = c.Kwargs
	}
	st.sus.pending = &PendingCall{Name: c.Name, Args: args, Reason: reason, Approval: approval}
	st.sus.pendingDigest, st.sus.pendingElided, st.sus.toolDur = c.Digest, entry.Elided, entry.Duration
	return nil, &engine.Abort{Status: engine.StatusSuspended, Message: fmt.Sprintf("the eval is suspended in its call to %s: %s", c.Name, reason)}
}

// answerPending answers the call a continued eval was paused in, which
// the replay has just reached.
func (st *evalState) answerPending(ctx context.Context, c *engine.Call, entry *ToolCall) ([]byte, error) {
	p := st.sus
	if p.ffwd {
		p.diverged = fmt.Sprintf("it called %s after its recorded end", c.Name)
		return nil, &engine.Abort{Status: engine.StatusSandboxError, Message: "the paused eval did not replay the same way: " + p.diverged}
	}
	a := p.answer
	p.answer, p.reached = nil, true
	if c.Digest != p.pendingDigest {
		p.diverged = fmt.Sprintf("it called %s where it had called %s", c.Name, p.pending.Name)
		if c.Name == p.pending.Name {
			p.diverged = fmt.Sprintf("it called %s with other arguments than when it paused", c.Name)
		}
		return nil, &engine.Abort{Status: engine.StatusSandboxError, Message: "the paused eval did not replay the same way: " + p.diverged}
	}
	if _, ok := st.r.tools[c.Name]; a.Approved && !ok {
		p.diverged = fmt.Sprintf("the approved tool %s is not in this Runtime", c.Name)
		return nil, &engine.Abort{Status: engine.StatusSandboxError, Message: p.diverged}
	}
	// The point of no return: from here the answer goes in and the calls
	// after the pause run. Config.StateStore records the continuation
	// now, not before the replay, so a continuation that could not replay
	// (or was stopped on the way) leaves the state continuable.
	if err := st.claimPending(ctx, c); err != nil {
		p.claimErr = err
		return nil, &engine.Abort{Status: engine.StatusSandboxError, Message: err.Error()}
	}
	entry.Args, entry.Elided, entry.Duration = p.pending.Args, p.pendingElided, p.toolDur
	if p.pendingElided {
		entry.Args = Args{}
	}
	if a.Denied {
		reason := a.Reason
		if reason == "" {
			reason = "denied"
		}
		if p.pending.Approval {
			entry.Approval = "denied"
		}
		st.finish(ctx, entry, OutcomeDenied, reason)
		return nil, &engine.GuestError{Class: "ToolDenied", Message: reason}
	}
	if p.pending.Approval {
		entry.Approval = "approved"
	}
	if a.Approved {
		entry.Duration = 0
		return st.run(ctx, c, entry, st.r.tools[c.Name], p.pending.Args)
	}
	return st.reply(ctx, c, entry, a.Value, a.Err)
}

// claimPending claims the paused state's id in Config.StateStore, if
// there is one, with the eval's clock stopped: the store's round trip is
// not the program's running time.
func (st *evalState) claimPending(ctx context.Context, c *engine.Call) error {
	if st.r.store == nil {
		return nil
	}
	if c.Hold != nil {
		resume := c.Hold()
		defer func() { c.Deadline = resume() }()
	}
	return st.r.claim(ctx, st.sus.pending.ID)
}

// manifest is what a state needs of the Runtime that continues it.
type manifest struct{ image, tools, mounts, snapshot, limits string }

func (r *Runtime) manifest(sh *shared) manifest {
	m := manifest{image: sh.eng.Load().Identity(), snapshot: sh.pool.SnapshotID(), limits: fmt.Sprintf("%+v", r.limits), tools: r.toolIDs}
	var ms []string
	for _, mt := range r.mounts {
		acc := "ro"
		if mt.Writable {
			acc = "rw"
		}
		ms = append(ms, mt.GuestPath+":"+acc)
	}
	m.mounts = "[" + strings.Join(ms, " ") + "]"
	return m
}

func (m manifest) put(e *benc) {
	e.str(m.image)
	e.str(m.tools)
	e.str(m.mounts)
	e.str(m.snapshot)
	e.str(m.limits)
}

// check compares the manifest a state holds (read from d) with r's.
func (r *Runtime) check(sh *shared, d *bdec) error {
	got := manifest{image: d.str(), tools: d.str(), mounts: d.str(), snapshot: d.str(), limits: d.str()}
	if d.err != nil {
		return fmt.Errorf("%w: %v", ErrStateInvalid, d.err)
	}
	want := r.manifest(sh)
	for _, f := range []struct{ what, state, here string }{
		{"image", got.image, want.image}, {"tools", got.tools, want.tools},
		{"mounts", got.mounts, want.mounts}, {"snapshot", got.snapshot, want.snapshot}, {"limits", got.limits, want.limits},
	} {
		if f.state != f.here {
			switch f.what {
			case "limits":
				f.state, f.here = fieldsDiff(f.state, f.here)
			case "tools":
				return toolsDiff(f.state, f.here)
			}
			return &StateMismatchError{What: f.what, State: f.state, Runtime: f.here}
		}
	}
	return nil
}

// toolsManifest names docs (sorted by name) for a state's manifest: each
// tool's name and the first 48 bits of the SHA-256 of its documentation
// as JSON (schema, description, approval, labels), separated by spaces:
// "lookup:1a2b3c4d5e6f send:0f1e2d3c4b5a".
func toolsManifest(docs []ToolDoc) string {
	var b strings.Builder
	for i, d := range docs {
		j, _ := json.Marshal(d)
		h := sha256.Sum256(j)
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(d.Name)
		b.WriteByte(':')
		b.WriteString(hex.EncodeToString(h[:6]))
	}
	return b.String()
}

// toolsDiff is the refusal of a state whose tools (toolsManifest's form)
// differ from a Runtime's: it names the tools the Runtime lacks, those it
// has beyond the state's, and those whose documentation changed. State
// and Runtime list each side's differing tools with their hashes.
func toolsDiff(state, here string) *StateMismatchError {
	parse := func(s string) (map[string]string, bool) {
		m := map[string]string{}
		for _, f := range strings.Fields(s) {
			name, h, ok := strings.Cut(f, ":")
			if !ok {
				return nil, false
			}
			m[name] = h
		}
		return m, true
	}
	sm, ok1 := parse(state)
	hm, ok2 := parse(here)
	if !ok1 || !ok2 { // not toolsManifest's form
		return &StateMismatchError{What: "tools", State: state, Runtime: here}
	}
	var lacks, adds, changed, stateSide, hereSide []string
	for _, n := range slices.Sorted(maps.Keys(sm)) {
		switch h, ok := hm[n]; {
		case !ok:
			lacks = append(lacks, n)
			stateSide = append(stateSide, n+":"+sm[n])
		case h != sm[n]:
			changed = append(changed, n)
			stateSide = append(stateSide, n+":"+sm[n])
			hereSide = append(hereSide, n+":"+h)
		}
	}
	for _, n := range slices.Sorted(maps.Keys(hm)) {
		if _, ok := sm[n]; !ok {
			adds = append(adds, n)
			hereSide = append(hereSide, n+":"+hm[n])
		}
	}
	var parts []string
	for _, p := range []struct {
		what  string
		names []string
	}{{"this runtime lacks ", lacks}, {"this runtime also has ", adds}, {"the documentation (schema, description or approval) differs for ", changed}} {
		if len(p.names) > 0 {
			parts = append(parts, p.what+strings.Join(p.names, ", "))
		}
	}
	return &StateMismatchError{What: "tools", State: "[" + strings.Join(stateSide, " ") + "]", Runtime: "[" + strings.Join(hereSide, " ") + "]",
		detail: strings.Join(parts, "; ")}
}

// fieldsDiff keeps, of two "{Name:value Name:value ...}" renderings of
// Limits, only the fields that differ, so that a mismatch names them;
// renderings it cannot pair field by field come back whole.
func fieldsDiff(a, b string) (string, string) {
	fa, fb := strings.Fields(strings.Trim(a, "{}")), strings.Fields(strings.Trim(b, "{}"))
	if len(fa) != len(fb) {
		return a, b
	}
	var da, db []string
	for i := range fa {
		if fa[i] != fb[i] {
			da, db = append(da, fa[i]), append(db, fb[i])
		}
	}
	if len(da) == 0 {
		return a, b
	}
	return "{" + strings.Join(da, " ") + "}", "{" + strings.Join(db, " ") + "}"
}

// opened is a state, opened and checked against a Runtime.
type opened struct {
	hdr   stateHeader
	body  *bdec
	buf   []byte      // the body's buffer, for release
	flow  *flowState  // the labels and tokens it holds (nil without labels)
	seals *frameCache // its frames, when asked for (without a body yet)
}

// release gives the body's buffer back for reuse; nothing may use the
// body afterwards.
func (o *opened) release() {
	putBuf(o.buf)
	o.seals.release()
}

// open authenticates state, checks that it is of one of kinds and that r
// can continue it, before anything runs.
func (r *Runtime) open(sh *shared, state []byte, kinds ...byte) (*opened, error) {
	return r.openKeep(sh, state, false, kinds...)
}

// openKeep is open; with keep, opened.seals holds the state's frames.
func (r *Runtime) openKeep(sh *shared, state []byte, keep bool, kinds ...byte) (*opened, error) {
	h, body, seals, err := openFrames(r.keys, state, keep)
	if err != nil {
		return nil, err
	}
	ok := false
	for _, k := range kinds {
		ok = ok || h.kind == k
	}
	if !ok {
		var want []string
		for _, k := range kinds {
			want = append(want, kindNames[k])
		}
		return nil, &StateMismatchError{What: "kind", State: kindNames[h.kind], Runtime: strings.Join(want, " or ")}
	}
	d := &bdec{b: body}
	err = r.check(sh, d)
	var flow *flowState
	if err == nil {
		flow, err = r.readFlow(d)
	}
	if err != nil {
		putBuf(body)
		return nil, err
	}
	return &opened{hdr: h, body: d, buf: body, flow: flow, seals: seals}, nil
}

// claim records a state's id in Config.StateStore, if there is one.
func (r *Runtime) claim(ctx context.Context, id string) error {
	if r.store == nil {
		return nil
	}
	return r.store.Claim(ctx, id)
}

// paused is a paused eval's part of a state.
type paused struct {
	code           string
	stdin          []byte
	args           []string
	env            []string
	spent          time.Duration
	fuel           uint64
	stdout, stderr int
	toolTime       time.Duration
	kept           int
	calls          []ToolCall
	pending        PendingCall
	pendingDigest  uint64
	pendingElided  bool
	toolDur        time.Duration
	log            []byte
	base           []byte      // a session's base state (session evals)
	priors         []priorEval // the session's evals since its base
}

// sealPaused makes res, a suspended eval's Result, carry its state.
func (st *evalState) sealPaused(sh *shared, res *Result, out *engine.Outcome, req *engine.Request, kind byte) {
	r, p := st.r, st.sus
	base, priors := p.journal.Base, []priorEval(nil)
	if base == nil && p.hist != nil {
		base, priors = p.hist.base, p.hist.evals
	}
	// A session's base is most of the body: a pooled buffer with room
	// for it and the rest, instead of growing (and copying) by doubling.
	e := &benc{b: getBuf(len(base) + len(p.journal.Log()) + len(req.Code) + len(req.Stdin) + 64<<10)}
	defer func() { putBuf(e.b) }()
	r.manifest(sh).put(e)
	putFlow(e, st.flow)
	e.str(req.Code)
	e.bytes(req.Stdin)
	e.u64(uint64(len(req.Args)))
	for _, a := range req.Args {
		e.str(a)
	}
	e.u64(uint64(out.Duration))
	e.u64(out.FuelUsed)
	e.u64(uint64(out.StdoutBytes))
	e.u64(uint64(out.StderrBytes))
	st.mu.Lock()
	e.u64(uint64(st.toolTime))
	e.u64(uint64(st.kept))
	calls, err := encodeCalls(st.calls)
	st.mu.Unlock()
	if err == nil {
		e.bytes(calls)
		var args []byte
		args, err = wire.Encode(nil, []any{p.pending.Args.Positional, p.pending.Args.Keyword}, wire.MaxDepth)
		e.str(p.pending.Name)
		e.bytes(args)
	}
	if err != nil {
		res.Status, res.Error = StatusSandboxError, &GuestError{Class: "Glovebox::SandboxError", Message: "the suspended eval's state could not be encoded: " + err.Error(), Backtrace: []string{}}
		return
	}
	e.str(p.pending.Reason)
	e.u64(b2u(p.pending.Approval))
	e.u64(b2u(p.pendingElided))
	e.u64(p.pendingDigest)
	e.u64(uint64(p.toolDur))
	e.bytes(p.journal.Log())
	e.bytes(base)
	e.u64(uint64(len(priors)))
	for _, pe := range priors {
		e.str(pe.code)
		e.bytes(pe.stdin)
		e.u64(uint64(len(pe.args)))
		for _, a := range pe.args {
			e.str(a)
		}
		e.bytes(pe.log)
		e.u64(uint64(pe.spent))
	}
	// The environments given with WithEnv, last: states sealed before
	// they were kept end at the history and decode as none given.
	putEnv(e, req.Env)
	for _, pe := range priors {
		putEnv(e, pe.env)
	}
	state, id, err := sealState(r.keys, kind, e.b)
	if err != nil {
		res.Status, res.Error = StatusSandboxError, &GuestError{Class: "Glovebox::SandboxError", Message: err.Error(), Backtrace: []string{}}
		return
	}
	pc := *p.pending
	pc.ID = id
	if st.flow != nil { // the Result shows tokens; the state keeps the values
		pc.Args = st.flow.redactArgs(pc.Args)
	}
	res.Pending, res.State = &pc, state
}

// putEnv writes env: 0 for nil (none given), else 1 + its length and
// its entries.
func putEnv(e *benc, env []string) {
	if env == nil {
		e.u64(0)
		return
	}
	e.u64(uint64(len(env)) + 1)
	for _, kv := range env {
		e.str(kv)
	}
}

// getEnv reads what putEnv wrote; nothing left to read is none given.
func getEnv(d *bdec) ([]string, error) {
	if d.err != nil || len(d.b) == 0 {
		return nil, nil
	}
	n := d.u64()
	if n == 0 {
		return nil, nil
	}
	if n-1 > MaxArgs {
		return nil, fmt.Errorf("%w: %d environment variables", ErrStateInvalid, n-1)
	}
	env := make([]string, 0, n-1)
	for range n - 1 {
		env = append(env, d.str())
	}
	return env, nil
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// decodePaused reads a paused eval's part of a state.
func decodePaused(d *bdec) (*paused, error) {
	p := &paused{code: d.str(), stdin: d.bytes()}
	n := d.u64()
	if n > MaxArgs {
		return nil, fmt.Errorf("%w: %d arguments", ErrStateInvalid, n)
	}
	for range n {
		p.args = append(p.args, d.str())
	}
	p.spent, p.fuel = time.Duration(d.u64()), d.u64()
	p.stdout, p.stderr = int(d.u64()), int(d.u64())
	p.toolTime, p.kept = time.Duration(d.u64()), int(d.u64())
	calls := d.bytes()
	p.pending.Name = d.str()
	args := d.bytes()
	p.pending.Reason = d.str()
	p.pending.Approval = d.u64() == 1
	p.pendingElided = d.u64() == 1
	p.pendingDigest = d.u64()
	p.toolDur = time.Duration(d.u64())
	p.log = d.bytes()
	p.base = d.bytes()
	np := d.u64()
	if np > maxHistory {
		return nil, fmt.Errorf("%w: %d earlier evals", ErrStateInvalid, np)
	}
	for range np {
		pe := priorEval{code: d.str(), stdin: d.bytes()}
		na := d.u64()
		if na > MaxArgs {
			return nil, fmt.Errorf("%w: %d arguments", ErrStateInvalid, na)
		}
		for range na {
			pe.args = append(pe.args, d.str())
		}
		pe.log, pe.spent = d.bytes(), time.Duration(d.u64())
		p.priors = append(p.priors, pe)
	}
	var err error
	if p.env, err = getEnv(d); err != nil {
		return nil, err
	}
	for i := range p.priors {
		if p.priors[i].env, err = getEnv(d); err != nil {
			return nil, err
		}
	}
	if d.err != nil {
		return nil, fmt.Errorf("%w: %v", ErrStateInvalid, d.err)
	}
	if p.calls, err = decodeCalls(calls); err != nil {
		return nil, err
	}
	v, err := wire.DecodeDepth(args, wire.MaxDepth)
	pair, _ := v.([]any)
	if err != nil || len(pair) != 2 {
		return nil, fmt.Errorf("%w: the pending call's arguments", ErrStateInvalid)
	}
	p.pending.Args.Positional, _ = pair[0].([]any)
	p.pending.Args.Keyword, _ = pair[1].(map[string]any)
	if len(p.pending.Args.Keyword) == 0 {
		p.pending.Args.Keyword = nil
	}
	return p, nil
}

func encodeCalls(calls []ToolCall) ([]byte, error) {
	list := make([]any, len(calls))
	for i, c := range calls {
		list[i] = map[string]any{"n": c.Name, "a": c.Args.Positional, "k": c.Args.Keyword, "r": c.Result,
			"e": c.Error, "d": int64(c.Duration), "x": c.Elided, "p": c.Approval, "o": string(c.Outcome)}
	}
	return wire.Encode(nil, list, wire.MaxDepth)
}

func decodeCalls(b []byte) ([]ToolCall, error) {
	v, err := wire.DecodeDepth(b, wire.MaxDepth)
	list, ok := v.([]any)
	if err != nil || !ok {
		return nil, fmt.Errorf("%w: the transcript", ErrStateInvalid)
	}
	out := make([]ToolCall, len(list))
	for i, x := range list {
		m, _ := x.(map[string]any)
		c := &out[i]
		c.Name, _ = m["n"].(string)
		c.Args.Positional, _ = m["a"].([]any)
		c.Args.Keyword, _ = m["k"].(map[string]any)
		if len(c.Args.Keyword) == 0 {
			c.Args.Keyword = nil
		}
		c.Result = m["r"]
		c.Error, _ = m["e"].(string)
		d, _ := m["d"].(int64)
		c.Duration = time.Duration(d)
		c.Elided, _ = m["x"].(bool)
		c.Approval, _ = m["p"].(string)
		o, _ := m["o"].(string)
		c.Outcome = CallOutcome(o)
	}
	return out, nil
}

// resume sets st and req up to continue the paused eval p with a.
func (st *evalState) resume(req *engine.Request, p *paused, a Answer, id string) {
	req.Stdin, req.Args, req.Env = p.stdin, p.args, p.env
	st.calls, st.kept, st.toolTime = p.calls, p.kept, p.toolTime
	j := engine.Replay(p.log, p.spent)
	pc := p.pending
	pc.ID = id
	st.sus = &pause{journal: j, answer: &a, pending: &pc, pendingDigest: p.pendingDigest, pendingElided: p.pendingElided, toolDur: p.toolDur}
	if p.base != nil {
		st.sus.hist = &sessionHistory{base: p.base, evals: p.priors, capCost: time.Millisecond}
		for _, pe := range p.priors {
			st.sus.hist.cost += pe.spent
		}
	}
	req.Journal = j
	// The caller already saw the output made before the pause.
	if req.StdoutTee != nil {
		req.StdoutTee = &skipWriter{w: req.StdoutTee, skip: p.stdout}
	}
	if req.StderrTee != nil {
		req.StderrTee = &skipWriter{w: req.StderrTee, skip: p.stderr}
	}
}

// continued reports a continued eval: its Result, sealed again if it
// suspended again, or ErrStateDiverged when it did not replay to its call.
func (st *evalState) continued(sh *shared, out *engine.Outcome, req *engine.Request, kind byte) (*Result, error) {
	p := st.sus
	if p.claimErr != nil {
		return nil, p.claimErr
	}
	if p.journal.Diverged != "" {
		return nil, fmt.Errorf("%w: %s", ErrStateDiverged, p.journal.Diverged)
	}
	if p.diverged != "" {
		return nil, fmt.Errorf("%w: %s", ErrStateDiverged, p.diverged)
	}
	if !p.reached && out.Status != engine.StatusCanceled && out.Status != engine.StatusTimeout {
		return nil, fmt.Errorf("%w: it ended (%s) before it reached its call to %s", ErrStateDiverged, out.Status, p.pending.Name)
	}
	return st.finishEval(sh, out, req, kind), nil
}

// finishEval makes the Result of an eval that may have suspended.
func (st *evalState) finishEval(sh *shared, out *engine.Outcome, req *engine.Request, kind byte) *Result {
	res := st.result(out)
	if res.Status == StatusSuspended {
		st.sealPaused(sh, res, out, req, kind)
	}
	return res
}

// skipWriter drops the first skip bytes written to it.
type skipWriter struct {
	w    io.Writer
	skip int
}

func (s *skipWriter) Write(p []byte) (int, error) {
	n := len(p)
	if s.skip > 0 {
		k := min(s.skip, len(p))
		s.skip -= k
		p = p[k:]
	}
	if len(p) > 0 {
		s.w.Write(p)
	}
	return n, nil
}

// outputOnly applies opts to req, refusing input options: a continued
// eval keeps the input it was given.
func outputOnly(req *engine.Request, l Limits, opts []EvalOption) error {
	if err := applyOptions(req, l, opts); err != nil {
		return err
	}
	if len(req.Stdin) > 0 || len(req.Args) > 0 || req.Env != nil {
		return fmt.Errorf("%w: a continued eval keeps the input it was given (WithStdin, WithArgs and WithEnv are refused)", ErrInvalidInput)
	}
	return nil
}
