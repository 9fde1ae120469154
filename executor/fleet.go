package executor

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/executor/internal/wire"
	"github.com/gloveboxhq/glovebox/internal/clientwire"
	gwire "github.com/gloveboxhq/glovebox/internal/wire"
)

// Sessions and paused evals in the store (EvalConfig.StateKeys): any
// executor sharing the store serves any of them.
//
// A session is a row of the store: its tools, limits, a version and the
// sealed state of that version. An eval of it takes the row's lease (so
// two executors never run the same session at once; a second eval waits
// for the first), uses the live session this process keeps when its
// version is the stored one (else resumes the stored state), runs, then
// seals the state (Session.Checkpoint) and stores it as the next version,
// freeing the lease. The store is the truth; the live session is a cache.
// An executor that dies mid-eval leaves the lease to run out (leaseFor):
// the eval is lost, the session goes on from its last stored version.
//
// A paused eval (EvalRequest.SuspendTools) stores its sealed state under
// its key before its record says "suspended"; a continue (any executor)
// claims it in the store, durably and once, as its own job runs, so a
// paused call is answered at most once fleet-wide.
type fleetState struct {
	st     stateStore
	holder string // this process's lease holder id

	mu    sync.Mutex
	cache map[string]*liveSession // tenant "\x00" session ID
}

// liveSession is a session this process ran last, at version.
type liveSession struct {
	gs      *glovebox.Session
	release func()
	version int64
	used    time.Time
	busy    bool
	once    sync.Once
}

// close closes the session and releases its tool set, once (shutdown may
// close a session an eval still holds, which closes it again as it ends).
func (ls *liveSession) close() {
	ls.once.Do(func() {
		ls.gs.Close()
		ls.release()
	})
}

// leaseFor is how long an eval holds its session's lease: twice the
// longest eval (its timeout, and as long again for tool calls), plus a
// minute. Our choice: an executor that dies mid-eval blocks the session
// for at most this long.
func (e *evals) leaseFor() time.Duration { return 2*e.caps.Timeout + time.Minute }

// enableFleet turns on stored sessions and paused evals.
func (e *evals) enableFleet(ctx context.Context) error {
	st, ok := e.s.store.(stateStore)
	if !ok {
		return errors.New("executor: this store cannot keep sessions")
	}
	if err := st.initStates(ctx); err != nil {
		return fmt.Errorf("executor: store: %w", err)
	}
	e.fleet = &fleetState{st: st, holder: st.holderID(), cache: map[string]*liveSession{}}
	if e.s.cfg.StoreURL == "" {
		// Sessions' states count against max_stored_bytes: recount them
		// with the records (a shared store's executors do already).
		e.s.bg.Add(1)
		go e.s.recountLoop()
	}
	return nil
}

// pauseHook is the tool sets' BeforeCall: a call of a tool the eval
// named in SuspendTools pauses the eval.
func pauseHook(ctx context.Context, tool string, _ glovebox.Args) error {
	if run, _ := ctx.Value(evalRunKey{}).(*evalRun); run != nil && run.suspend[tool] {
		return glovebox.SuspendCall("the client asked for " + tool + "'s calls to wait for its answer (suspend_tools)")
	}
	return nil
}

// fleetSessionEval runs req.Code in the stored session req.Session.
func (e *evals) fleetSessionEval(ctx context.Context, t *tenant, key string, req *wire.EvalRequest, opts []glovebox.EvalOption) *wire.Record {
	holder := e.fleet.holder + "/" + key
	row, rec := e.acquireFor(ctx, t, req.Session, holder)
	if rec != nil {
		return rec
	}
	for _, n := range req.SuspendTools {
		if !slices.Contains(row.Tools, n) {
			e.releaseLease(t, req.Session, holder)
			return &wire.Record{State: wire.StateFailed, Error: wire.Errorf(wire.CodeBadRequest, "suspend_tools: %q is not one of the session's tools", n)}
		}
	}
	return e.inSession(ctx, t, key, req.Session, holder, row, req.SuspendTools, func(gs *glovebox.Session) (*glovebox.Result, error) {
		return gs.EvalWith(ctx, req.Code, opts...)
	})
}

// acquireFor takes the stored session sid's lease for holder, waiting
// while another eval of it runs (here or elsewhere); a non-nil record is
// the eval's end when it cannot.
func (e *evals) acquireFor(ctx context.Context, t *tenant, sid, holder string) (*sessionRow, *wire.Record) {
	f := e.fleet
	ck := t.Name + "\x00" + sid
	for {
		have := int64(-1)
		f.mu.Lock()
		if ls := f.cache[ck]; ls != nil && !ls.busy {
			have = ls.version
		}
		f.mu.Unlock()
		row, err := f.st.acquireSession(ctx, t.Name, sid, holder, time.Now().Add(e.leaseFor()), have)
		switch {
		case errors.Is(err, errSessionBusy):
			select { // another eval of the session runs (here or elsewhere): wait for it
			case <-ctx.Done():
				return nil, &wire.Record{State: wire.StateFailed, Error: evalErr(ctx.Err())}
			case <-time.After(20 * time.Millisecond):
			}
			continue
		case errors.Is(err, errNoEntry):
			return nil, &wire.Record{State: wire.StateFailed, Error: wire.Errorf(wire.CodeNotFound, "no session %s (closed, idled out, or never made)", sid)}
		case err != nil:
			return nil, &wire.Record{State: wire.StateFailed, Error: storeFailure(err, "the eval did not run")}
		}
		return row, nil
	}
}

// releaseLease frees holder's lease of session sid (the session goes on
// from its stored version), until the store takes it: a lease left held
// by a live executor would block the session until it ran out.
func (e *evals) releaseLease(t *tenant, sid, holder string) {
	release := func() error { return e.fleet.st.releaseSession(context.Background(), t.Name, sid, holder) }
	if release() != nil {
		e.s.retryWrite("a session's lease release", release)
	}
}

// inSession runs step (an eval, or the continuation of a paused one) on
// the live session for row, whose lease holder holds, and stores the
// session's state after it as the next version. When step pauses at a
// call of a suspend tool, the stored state is the paused session's, and
// key records the pause (pausedMeta.Session) for a continue through any
// executor; while paused, the session's evals fail session_paused.
func (e *evals) inSession(ctx context.Context, t *tenant, key, sid, holder string, row *sessionRow, suspend []string,
	step func(gs *glovebox.Session) (*glovebox.Result, error)) *wire.Record {
	f := e.fleet
	ck := t.Name + "\x00" + sid
	saved := false
	defer func() {
		if !saved {
			e.releaseLease(t, sid, holder)
		}
	}()
	ls, reset, werr := e.liveFor(ctx, t, ck, row)
	if werr != nil {
		return &wire.Record{State: wire.StateFailed, Error: werr}
	}
	res, err := step(ls.gs)
	if errors.Is(err, glovebox.ErrSessionPaused) { // nothing ran: the session is as stored
		f.mu.Lock()
		ls.busy, ls.used = false, time.Now()
		f.mu.Unlock()
		return &wire.Record{State: wire.StateFailed, Error: wire.Errorf(wire.CodeSessionPaused,
			"session %s is paused in a tool call (suspend_tools): continue it (continue.from = the paused eval's key), or close it; this eval did not run", sid)}
	}
	var state []byte
	var serr error
	paused := err == nil && res.Status == glovebox.StatusSuspended
	if paused {
		// The pause first: a session stored paused with no record of
		// its pause could never be continued.
		state = res.State
		var lim wire.EvalLimits
		json.Unmarshal(row.Limits, &lim)
		meta, _ := json.Marshal(pausedMeta{Tools: row.Tools, Suspend: suspend, Limits: lim, Session: sid, Version: row.Version + 1})
		if _, serr = f.st.putPaused(context.Background(), t.Name, key, &pausedRow{Limits: meta, State: []byte{}}, -1); serr != nil {
			serr = fmt.Errorf("recording the pause: %w", serr)
		}
	} else {
		var cerr error
		state, cerr = ls.gs.Checkpoint(context.Background())
		if cerr != nil {
			// Not movable now (a file held open, say): the next eval on
			// another executor starts afresh, and is told (SessionReset).
			e.s.log.Warn("a session's state could not be sealed; stored as reset", "tenant", t.Name, "err", cerr)
			state = nil
		}
	}
	var over *stateQuotaError // the state did not fit in the tenant's quota: the session is reset
	if serr == nil {
		if state, serr = e.bindState(sessionLabel(t.Name, sid, row.Version+1), state); serr == nil {
			// A paused session waits for its answer as long as its
			// pause is kept (the retention), not the idle timeout:
			// a person's approval may take hours.
			used := time.Now()
			if paused {
				used = used.Add(max(0, e.s.cfg.Retention-e.cfg.SessionIdle))
			}
			var held int64
			held, serr = f.st.saveSession(context.Background(), t.Name, sid, holder, row.Version+1, state, used, e.s.space.stateRoom(t))
			if errors.As(serr, &over) {
				// Stored reset instead, and told (an empty state: the
				// next eval starts afresh without being told again),
				// which frees the old state's bytes too; a pause that
				// could not be kept is no pause.
				if paused {
					if err := f.st.deletePaused(context.Background(), t.Name, key); err != nil {
						e.s.log.Warn("removing a pause whose state did not fit failed", "tenant", t.Name, "key", key, "err", err)
					}
				}
				held, serr = f.st.saveSession(context.Background(), t.Name, sid, holder, row.Version+1, []byte{}, time.Now(), -1)
			}
			e.s.space.setStates(t.Name, held)
		}
		saved = serr == nil
	}
	f.mu.Lock()
	ls.busy, ls.used = false, time.Now()
	cached := f.cache[ck] == ls // not when a later eval replaced it (this one outlived its lease)
	if serr == nil && over == nil && cached {
		ls.version = row.Version + 1
	} else {
		if cached {
			delete(f.cache, ck)
		}
		defer ls.close()
	}
	f.mu.Unlock()
	if serr != nil {
		// The eval ran, but the session will not show it: say so rather
		// than report an outcome the session does not hold.
		e.s.log.Error("storing a session's state failed: its next eval starts from the last stored one", "tenant", t.Name, "err", serr)
		return &wire.Record{State: wire.StateLost, Error: wire.Errorf(wire.CodeLost,
			"the eval ran, but the session's new state could not be stored (%v): the session goes on from its state before this eval, which is never run again under this key", serr)}
	}
	if over != nil {
		e.s.log.Warn("a session's state did not fit in its tenant's max_stored_bytes: the session is reset", "tenant", t.Name, "bytes", over.Want, "room", over.Room-over.Held)
	}
	if err != nil {
		return &wire.Record{State: wire.StateFailed, Error: evalErr(err)}
	}
	if paused && over != nil {
		return &wire.Record{State: wire.StateFailed, Error: pauseOverQuota(t, res, over, " The session is reset: its next eval starts afresh.")}
	}
	if paused {
		return suspendedRecord(res)
	}
	if reset || over != nil {
		res.SessionReset = true
	}
	return &wire.Record{State: wire.StateCompleted, Eval: clientwire.FromResult(res), QuotaTruncated: over != nil}
}

// pauseOverQuota is the refusal of a pause whose state (over.Want bytes)
// did not fit in t's quota: the eval ends failed, its pending call not
// run; more says what became of its session.
func pauseOverQuota(t *tenant, res *glovebox.Result, over *stateQuotaError, more string) *wire.Error {
	return wire.Errorf(wire.CodeQuotaExceeded, "the eval paused at its call of %s, but its state (%d bytes) does not fit in tenant %s's max_stored_bytes of %d "+
		"(its other sessions' and paused evals' states hold %d bytes, and its records and running jobs leave them %d): it was not kept, "+
		"so it cannot be continued, and the call did not run.%s Close sessions, or let paused evals expire, to make room",
		res.Pending.Name, over.Want, t.Name, t.MaxStoredBytes, over.Held, over.Room, more)
}

// continueSession is continueEval for a pause of a stored session (the
// paused eval's key from): the session's lease, its state at the pause,
// and the answer.
func (e *evals) continueSession(ctx context.Context, t *tenant, key, from string, meta *pausedMeta, a glovebox.Answer, opts []glovebox.EvalOption, claim func() *wire.Record) *wire.Record {
	holder := e.fleet.holder + "/" + key
	row, rec := e.acquireFor(ctx, t, meta.Session, holder)
	if rec != nil {
		return rec
	}
	if row.Version != meta.Version {
		e.releaseLease(t, meta.Session, holder)
		// A continue racing the one that won sees the session moved on:
		// it says already_continued, as it would have at the claim.
		if p, err := e.fleet.st.peekPaused(context.Background(), t.Name, from); err != nil {
			if rec := pausedRefusal(from, p, err); rec != nil {
				return rec
			}
		}
		return &wire.Record{State: wire.StateFailed, Error: wire.Errorf(wire.CodeStateRefused,
			"session %s is no longer in the state it paused in (its version %d, the pause's %d: its pause could not be stored); the paused call is spent", meta.Session, row.Version, meta.Version)}
	}
	if row.State != nil && len(row.State) == 0 {
		// Stored reset at the pause's version: its state did not fit in
		// the quota (inSession), and removing the pause failed.
		e.releaseLease(t, meta.Session, holder)
		return &wire.Record{State: wire.StateFailed, Error: wire.Errorf(wire.CodeNotFound,
			"the paused eval %s was not kept (its state did not fit in the tenant's max_stored_bytes; its session was reset)", from)}
	}
	// The session's stored state (absent when this executor has the
	// session live at that version) is checked before the pause is
	// claimed, as a paused eval's is.
	if row.State != nil {
		if rec := e.checkStored(ctx, t.Name, row, key); rec != nil {
			e.releaseLease(t, meta.Session, holder)
			return rec
		}
	}
	if rec := claim(); rec != nil {
		e.releaseLease(t, meta.Session, holder)
		return rec
	}
	return e.inSession(ctx, t, key, meta.Session, holder, row, meta.Suspend, func(gs *glovebox.Session) (*glovebox.Result, error) {
		if gs.Pending() == nil {
			return nil, fmt.Errorf("%w: the session's stored state at the pause is not paused", glovebox.ErrStateInvalid)
		}
		return gs.Continue(ctx, a, opts...)
	})
}

// checkStored is stateCheck of a stored session's state (its binding
// tag checked and taken off first; row is left as it is), on the Runtime
// view its tools and limits make here.
func (e *evals) checkStored(ctx context.Context, tenant string, row *sessionRow, from string) *wire.Record {
	state, werr := e.unbindState(sessionLabel(tenant, row.ID, row.Version), row.State)
	if werr != nil {
		return &wire.Record{State: wire.StateFailed, Error: werr}
	}
	rt, release, err := e.toolSet(ctx, tenant, row.Tools)
	if err != nil {
		return &wire.Record{State: wire.StateFailed, Error: wire.Errorf(wire.CodeInternal, "making the VM: %v; the paused eval was not continued", err)}
	}
	defer release()
	var lim wire.EvalLimits
	json.Unmarshal(row.Limits, &lim)
	view, err := rt.WithLimits(e.limits(lim))
	if err != nil {
		return &wire.Record{State: wire.StateFailed, Error: wire.Errorf(wire.CodeBadRequest, "limits: %v", err)}
	}
	return stateCheck(ctx, view, from, state)
}

// liveFor returns the live session for row, marked busy: the cached one
// when it is at row's version, else one resumed from row's state (or
// new, for a session that never stored one: reset when it had).
func (e *evals) liveFor(ctx context.Context, t *tenant, ck string, row *sessionRow) (*liveSession, bool, *wire.Error) {
	f := e.fleet
	f.mu.Lock()
	ls := f.cache[ck]
	if ls != nil && !ls.busy && ls.version == row.Version {
		ls.busy = true
		f.mu.Unlock()
		return ls, false, nil
	}
	if ls != nil && !ls.busy {
		delete(f.cache, ck)
		defer ls.close()
	}
	f.mu.Unlock()
	var lim wire.EvalLimits
	json.Unmarshal(row.Limits, &lim)
	state, werr := e.unbindState(sessionLabel(t.Name, row.ID, row.Version), row.State)
	if werr != nil {
		return nil, false, werr
	}
	gs, release, werr := e.openSession(ctx, t.Name, row.Tools, lim, state)
	if werr != nil {
		return nil, false, werr
	}
	ls = &liveSession{gs: gs, release: release, version: row.Version, busy: true, used: time.Now()}
	f.mu.Lock()
	if old := f.cache[ck]; old != nil && !old.busy {
		defer old.close()
	}
	f.cache[ck] = ls
	f.mu.Unlock()
	// Reset, and not yet told: a stored version without a state (an
	// empty one is a reset already told, inSession).
	return ls, row.State == nil && row.Version > 0, nil
}

// fleetNewSession is POST /v1/sessions with stored sessions: the row,
// then a live session cached at version 0.
func (e *evals) fleetNewSession(w http.ResponseWriter, r *http.Request, t *tenant, req *wire.SessionRequest, names []string) {
	f := e.fleet
	n, err := f.st.countSessions(r.Context(), t.Name)
	if err != nil {
		e.s.refuse(w, r, wire.Errorf(wire.CodeUnavailable, "store: %v", err))
		return
	}
	if n >= e.cfg.MaxSessions {
		e.s.refuse(w, r, wire.Errorf(wire.CodeQueueFull, "tenant %s has %d sessions open, the most allowed", t.Name, n))
		return
	}
	gs, release, werr := e.openSession(r.Context(), t.Name, names, req.Limits, nil)
	if werr != nil {
		e.s.refuse(w, r, werr)
		return
	}
	id := newSessionID()
	lim, _ := json.Marshal(req.Limits)
	if err := f.st.createSession(r.Context(), &sessionRow{Tenant: t.Name, ID: id, Tools: names, Limits: lim}, e.cfg.MaxSessions); err != nil {
		gs.Close()
		release()
		var ce *sessionCapError
		if errors.As(err, &ce) { // made meanwhile, through this executor or another
			e.s.refuse(w, r, wire.Errorf(wire.CodeQueueFull, "tenant %s has %d sessions open, the most allowed", t.Name, ce.Open))
			return
		}
		e.s.refuse(w, r, wire.Errorf(wire.CodeUnavailable, "store: %v", err))
		return
	}
	f.mu.Lock()
	f.cache[t.Name+"\x00"+id] = &liveSession{gs: gs, release: release, used: time.Now()}
	f.mu.Unlock()
	e.s.log.Info("session opened", "tenant", t.Name, "tools", len(names), "stored", true)
	writeJSON(w, wire.SessionInfo{ID: id, IdleTimeoutMS: e.cfg.SessionIdle.Milliseconds()})
}

// fleetCloseSession is DELETE /v1/sessions/{id} with stored sessions.
func (e *evals) fleetCloseSession(w http.ResponseWriter, r *http.Request, t *tenant, id string) {
	f := e.fleet
	ok, err := f.st.deleteSession(r.Context(), t.Name, id)
	if err != nil {
		e.s.refuse(w, r, wire.Errorf(wire.CodeUnavailable, "store: %v", err))
		return
	}
	f.mu.Lock()
	ls := f.cache[t.Name+"\x00"+id]
	if ls != nil && !ls.busy {
		delete(f.cache, t.Name+"\x00"+id)
		defer ls.close()
	}
	f.mu.Unlock()
	if !ok {
		e.s.refuse(w, r, wire.Errorf(wire.CodeNotFound, "no session %q", id))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// fleetJanitor drops live sessions idle past SessionIdle (their state is
// in the store) and expires stored sessions and paused states.
func (e *evals) fleetJanitor(now time.Time) {
	f := e.fleet
	var idle []*liveSession
	f.mu.Lock()
	for k, ls := range f.cache {
		if !ls.busy && now.Sub(ls.used) > e.cfg.SessionIdle {
			delete(f.cache, k)
			idle = append(idle, ls)
		}
	}
	f.mu.Unlock()
	for _, ls := range idle {
		ls.close()
	}
	if n, err := f.st.expireStates(e.s.base, now.Add(-e.cfg.SessionIdle), now.Add(-e.s.cfg.Retention)); err != nil {
		e.s.log.Error("expiring stored sessions failed", "err", err)
	} else if n > 0 {
		e.s.log.Info("expired stored sessions and paused evals", "count", n)
	}
}

// fleetCloseAll closes the live sessions (drain, shutdown): each one's
// state is in the store already, stored after its last eval.
func (e *evals) fleetCloseAll() {
	if e.fleet == nil {
		return
	}
	f := e.fleet
	f.mu.Lock()
	c := f.cache
	f.cache = map[string]*liveSession{}
	f.mu.Unlock()
	for _, ls := range c {
		ls.close()
	}
}

// pausedRecord stores res's paused state under key and returns the
// eval's record (status "suspended", its pending call).
func (e *evals) pausedRecord(ctx context.Context, t *tenant, key string, names, suspend []string, lim wire.EvalLimits, res *glovebox.Result) *wire.Record {
	meta, _ := json.Marshal(pausedMeta{Tools: names, Suspend: suspend, Limits: lim})
	state, err := e.bindState(pausedLabel(t.Name, key, meta), res.State)
	if err == nil {
		var held int64
		held, err = e.fleet.st.putPaused(context.Background(), t.Name, key, &pausedRow{Limits: meta, State: state}, e.s.space.stateRoom(t))
		e.s.space.setStates(t.Name, held)
	}
	var over *stateQuotaError
	if errors.As(err, &over) {
		return &wire.Record{State: wire.StateFailed, Error: pauseOverQuota(t, res, over, "")}
	}
	if err != nil {
		return &wire.Record{State: wire.StateFailed, Error: wire.Errorf(wire.CodeInternal, "the eval paused at %s, but its state could not be stored: %v; it cannot be continued", res.Pending.Name, err)}
	}
	return suspendedRecord(res)
}

// suspendedRecord is the record of an eval that paused (res): status
// "suspended" and its pending call.
func suspendedRecord(res *glovebox.Result) *wire.Record {
	er := clientwire.FromResult(res)
	pos, kw := res.Pending.Args.Positional, res.Pending.Args.Keyword
	if pos == nil {
		pos = []any{}
	}
	if kw == nil {
		kw = map[string]any{}
	}
	args, _ := gwire.Encode(nil, []any{pos, kw}, gwire.MaxDepth)
	er.Pending = &wire.Pending{ID: res.Pending.ID, Name: res.Pending.Name, Args: string(args), Reason: res.Pending.Reason}
	return &wire.Record{State: wire.StateCompleted, Eval: er}
}

// pausedMeta is what a paused eval needs besides its state: the Runtime
// it was made by (tools, limits) and the tools that pause it again.
type pausedMeta struct {
	Tools   []string        `json:"tools"`
	Suspend []string        `json:"suspend"`
	Limits  wire.EvalLimits `json:"limits"`
	// Session, for a session's eval that paused, is the session (its
	// stored state at Version is the paused one; the row keeps none).
	Session string `json:"session,omitempty"`
	Version int64  `json:"version,omitempty"`
}

// continueEval is the work of an eval request with Continue: check that
// this executor can take the paused state (its image, snapshot, tools and
// limits), then claim it (once, fleet-wide), answer its call and run it
// on. A state refused by the check is not claimed: an executor that can
// take it (the rest of a rolling upgrade) still continues it.
func (e *evals) continueEval(ctx context.Context, t *tenant, key string, run *evalRun, c *wire.Continue, opts []glovebox.EvalOption) *wire.Record {
	p, err := e.fleet.st.peekPaused(context.Background(), t.Name, c.From)
	if rec := pausedRefusal(c.From, p, err); rec != nil {
		return rec
	}
	claim := func() *wire.Record {
		p, err := e.fleet.st.claimPaused(context.Background(), t.Name, c.From, key)
		return pausedRefusal(c.From, p, err)
	}
	var meta pausedMeta
	json.Unmarshal(p.Limits, &meta)
	if len(p.State) > 0 || meta.Session == "" {
		state, werr := e.unbindState(pausedLabel(t.Name, c.From, p.Limits), p.State)
		if werr != nil {
			return &wire.Record{State: wire.StateFailed, Error: werr}
		}
		p.State = state
	}
	run.suspend = setOf(meta.Suspend)
	var a glovebox.Answer
	switch {
	case c.Approve:
		a.Approved = true
	case c.Deny != "":
		a.Denied, a.Reason = true, c.Deny
	default:
		a = clientwire.Answer(c.Reply)
	}
	if meta.Session != "" {
		return e.continueSession(ctx, t, key, c.From, &meta, a, opts, claim)
	}
	rt, release, err := e.toolSet(ctx, t.Name, meta.Tools)
	if err != nil {
		return &wire.Record{State: wire.StateFailed, Error: wire.Errorf(wire.CodeInternal, "making the VM: %v; the paused eval was not continued", err)}
	}
	defer release()
	view, err := rt.WithLimits(e.limits(meta.Limits))
	if err != nil {
		return &wire.Record{State: wire.StateFailed, Error: wire.Errorf(wire.CodeBadRequest, "limits: %v", err)}
	}
	if rec := stateCheck(ctx, view, c.From, p.State); rec != nil {
		return rec
	}
	// The claim is taken when the replay reaches the paused call
	// (claimAtCall): a continuation that diverged, or was stopped before
	// the call, claimed nothing and the paused eval stays continuable.
	ticket := &claimTicket{claim: claim}
	res, err := view.Continue(context.WithValue(ctx, claimKey{}, ticket), p.State, a, opts...)
	if ticket.rec != nil {
		return ticket.rec
	}
	if err != nil {
		code := wire.CodeStateRefused
		if errors.Is(err, glovebox.ErrClosed) || errors.Is(err, context.Canceled) {
			code = wire.CodeUnavailable
		}
		return &wire.Record{State: wire.StateFailed, Error: wire.Errorf(code, "continuing %s: %v", c.From, err)}
	}
	if res.Status == glovebox.StatusSuspended {
		return e.pausedRecord(ctx, t, key, meta.Tools, meta.Suspend, meta.Limits, res)
	}
	return &wire.Record{State: wire.StateCompleted, Eval: clientwire.FromResult(res)}
}

// claimAtCall is the tool sets' glovebox.StateStore (with StateKeys):
// the library asks it to claim a paused eval's state when the
// continuation's replay reaches the paused call, before the answer goes
// in, and it runs the fleet-wide claim the continuing request put in the
// context (claimTicket), so a continuation that diverged, or was
// canceled or timed out on its way, claimed nothing and can be retried.
// A state opened without a ticket (a stored session resumed between
// evals, whose versions and leases guard it, or a session's paused call,
// claimed by continueSession before it runs) is not claimed here.
type claimAtCall struct{}

type claimKey struct{}

// claimTicket carries one continuation's claim: rec is its refusal
// (already_continued, or the store's failure), nil while unclaimed or
// when the claim was taken.
type claimTicket struct {
	claim func() *wire.Record
	rec   *wire.Record
}

func (claimAtCall) Claim(ctx context.Context, _ string) error {
	t, _ := ctx.Value(claimKey{}).(*claimTicket)
	if t == nil {
		return nil
	}
	if t.rec = t.claim(); t.rec == nil {
		return nil
	}
	if t.rec.Error != nil && t.rec.Error.Code == wire.CodeAlreadyContinued {
		return fmt.Errorf("%w: %s", glovebox.ErrStateUsed, t.rec.Error.Message)
	}
	return errors.New("the paused eval could not be claimed in the store")
}

// pausedRefusal is the record of a paused state under key from that
// could not be read or claimed (err from peekPaused or claimPaused, p
// its row), nil when err is.
func pausedRefusal(from string, p *pausedRow, err error) *wire.Record {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errNoEntry):
		return &wire.Record{State: wire.StateFailed, Error: wire.Errorf(wire.CodeNotFound, "no paused eval under key %s (it never paused, its state expired after the retention, or it is another tenant's)", from)}
	case errors.Is(err, errPausedUsed):
		return &wire.Record{State: wire.StateFailed, Error: wire.Errorf(wire.CodeAlreadyContinued, "the paused eval %s was continued before, by the eval %s; a paused call is answered once; this one did not run", from, p.ClaimedBy)}
	}
	return &wire.Record{State: wire.StateFailed, Error: storeFailure(err, "the paused eval was not continued")}
}

// stateCheck is the state_refused record of a state this executor's
// Runtime view cannot take (glovebox.Runtime.CheckState: another image,
// snapshot, tools or limits), nil when it can; nothing is claimed.
func stateCheck(ctx context.Context, view *glovebox.Runtime, from string, state []byte) *wire.Record {
	err := view.CheckState(ctx, state)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, glovebox.ErrClosed):
		return &wire.Record{State: wire.StateFailed, Error: wire.Errorf(wire.CodeUnavailable, "continuing %s: %v", from, err)}
	}
	return &wire.Record{State: wire.StateFailed, Error: wire.Errorf(wire.CodeStateRefused, "continuing %s: this executor cannot take its state: %v; it was not used, so an executor configured as the one that paused it can continue it", from, err)}
}

func setOf(names []string) map[string]bool {
	if len(names) == 0 {
		return nil
	}
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// claimStore is the tool sets' glovebox.StateStore: claimAtCall with
// StateKeys (paused evals are kept), nil without.
func claimStore(cfg EvalConfig) glovebox.StateStore {
	if cfg.StateKeys == nil {
		return nil
	}
	return claimAtCall{}
}

// pauseHooks are the tool sets' hooks: pauseHook with StateKeys, none
// without.
func pauseHooks(cfg EvalConfig) glovebox.Hooks {
	if cfg.StateKeys == nil {
		return glovebox.Hooks{}
	}
	return glovebox.Hooks{BeforeCall: pauseHook}
}

// A state in the store carries, after it, a tag binding it to its row
// (glovebox.Keyring.BindState): the tenant, the session and its version,
// or the paused eval's key and its pausedMeta. Sealing proves a state
// was made with the key, not whose it is: without the tag, a state
// copied into another row of the shared store (another tenant's session,
// say) would open there, its variables another tenant's.

// sessionLabel and pausedLabel are the bindings of a session's state at
// version and of a paused eval's (meta is its stored pausedMeta).
func sessionLabel(tenant, sid string, version int64) string {
	return fmt.Sprintf("session\x00%s\x00%s\x00%d", tenant, sid, version)
}

func pausedLabel(tenant, key string, meta []byte) string {
	return "paused\x00" + tenant + "\x00" + key + "\x00" + string(meta)
}

// bindState is state as stored under label: state, then its tag (after
// it, so that a sealed buffer with room to spare is not copied); a nil
// or empty state (a session reset) as it is.
func (e *evals) bindState(label string, state []byte) ([]byte, error) {
	if len(state) == 0 {
		return state, nil
	}
	tag, err := e.cfg.StateKeys.BindState(state, label)
	if err != nil {
		return nil, err
	}
	return append(state, tag...), nil
}

// unbindState is the state stored under label without its tag, once the
// tag is checked; state_refused, before anything of it opens, when it
// was not stored there.
func (e *evals) unbindState(label string, stored []byte) ([]byte, *wire.Error) {
	if len(stored) == 0 { // none, or a reset the client was told of (inSession)
		return nil, nil
	}
	// The tag is BindState's: an HMAC-SHA256, sha256.Size bytes.
	err := fmt.Errorf("%w: too short", glovebox.ErrStateInvalid)
	at := len(stored) - sha256.Size
	if at > 0 {
		err = e.cfg.StateKeys.CheckState(stored[:at], label, stored[at:])
	}
	if errors.Is(err, glovebox.ErrStateKey) {
		// Not tampering: the executor that sealed it had another key, the
		// usual cause a fleet's replicas given different --state-key files.
		return nil, wire.Errorf(wire.CodeStateRefused, "the stored state was sealed with a state key this executor does not hold (%v): every executor of a fleet needs the same --state-key files; nothing of it ran", err)
	}
	if err != nil {
		return nil, wire.Errorf(wire.CodeStateRefused, "the stored state is not this one's (moved from another row of the store, or altered): %v; nothing of it ran", err)
	}
	return stored[:at], nil
}
