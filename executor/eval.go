package executor

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/executor/internal/wire"
	"github.com/gloveboxhq/glovebox/internal/clientwire"
	"github.com/gloveboxhq/glovebox/internal/engine"
)

// EvalConfig turns on Ruby evals ([Server.EnableEvals]): the guest runs
// in the wasm engine on the executor, and every tool call it makes goes
// back to the client over the eval's event stream (EXECUTOR.md, "Evals").
// Zero fields take the defaults beside them.
type EvalConfig struct {
	// CacheDir and ImagePath are glovebox.Config's (zero: the defaults,
	// $GLOVEBOX_CACHE_DIR; $GLOVEBOX_IMAGE, else a ruby+stdlib.wasm beside
	// the executable, else the pinned image in the cache).
	CacheDir, ImagePath string
	// Limits are the most one eval may ask for; a request's limits are
	// capped field by field at these, and a zero request field takes
	// them. Zero fields mean glovebox's defaults (glovebox.DefaultTimeout,
	// DefaultMemory, …).
	Limits glovebox.Limits
	// PoolSize is how many prepared VMs each tenant's tool set (each tool
	// set, with ShareVMsAcrossTenants) keeps ready (a VM has the guest's
	// tool methods defined, so each set of tool names has its own pool);
	// zero means 1, negative none.
	PoolSize int
	// DisableVMReuse is glovebox.Config's: every eval in a VM made for
	// it, in linear memory mapped anew, never one rewound after another
	// eval or memory reset after one (by default a VM is rewound for the
	// tenant's next eval with the same tools: its bytes are reset, but
	// page residency can tell that tenant how much memory its own earlier
	// evals wrote). See glovebox.Config.DisableVMReuse for the cost.
	DisableVMReuse bool
	// ShareVMsAcrossTenants lets tenants naming the same tools share one
	// Runtime, and so each other's rewound VMs and reset memory (bytes
	// reset exactly; what residency still tells, see
	// glovebox.Config.DisableVMReuse, then crosses tenants). The zero
	// value keeps each tenant's VMs and memory its own: a Runtime per
	// tenant and tool set, in a memory group of its own
	// (glovebox.Config.ReuseGroup), which costs each tenant its own pool
	// and idle VMs (about 1 MB each) and a VM made for its first eval.
	ShareVMsAcrossTenants bool
	// MaxToolSets bounds the Runtimes (one per tenant and tool set, or per
	// tool set with ShareVMsAcrossTenants; tool-less evals count as a tool
	// set) kept between evals; the least recently used idle one is closed
	// past it. Zero means DefaultMaxToolSets.
	MaxToolSets int
	// MaxSessions bounds each tenant's open sessions; zero means
	// DefaultMaxSessions.
	MaxSessions int
	// SessionIdle closes a session unused this long; zero means
	// DefaultSessionIdle.
	SessionIdle time.Duration
	// MaxToolBytes bounds the bytes of tool-call arguments one eval
	// sends back (they stay in the eval's event log, replayed to a
	// retry, until it ends); past it the eval ends with
	// tool_budget_exceeded. Zero means DefaultMaxToolBytes.
	MaxToolBytes int
	// Worker, when its Kind is set, runs each eval in a sandboxed worker
	// process instead of this process's engine; sessions are then
	// refused (worker.go).
	Worker WorkerConfig
	// StateKeys, when set, keeps sessions and paused evals in the store,
	// sealed with these keys (fleet.go): any executor sharing the store
	// and the keys serves a session's next eval or a paused eval's
	// answer, and they survive a restart. Every executor of a fleet
	// needs the same ring (the first key seals, all open). Nil: sessions
	// live in this process's memory only, and SuspendTools and Continue
	// are refused bad_request.
	StateKeys *glovebox.Keyring
	// Profiles are the eval profiles requests may name, by name
	// (profile.go): the operator's mounts, tools run here and limits,
	// each granted to the tenants it lists. Names are 1 to 64 of a-z
	// 0-9 _ -, starting with a letter.
	Profiles map[string]EvalProfile
}

// Eval defaults: our choices for a 2-core executor (a session holds a VM
// of about 30–60 MB of private memory while it lives).
const (
	DefaultMaxToolSets = 16
	DefaultMaxSessions = 8
	DefaultSessionIdle = 10 * time.Minute
	// DefaultMaxToolBytes is 16 MiB: sixteen calls at glovebox's
	// largest default payload, DefaultToolPayload.
	DefaultMaxToolBytes = 16 << 20
)

// evals is the eval half of a Server.
type evals struct {
	s      *Server
	cfg    EvalConfig
	base   *glovebox.Runtime // no tools: the caps, and tool-less evals with ShareVMsAcrossTenants
	caps   glovebox.Limits   // base's limits, defaults filled in
	worker *workerPool       // nil: evals run in-process

	mu       sync.Mutex
	sets     map[string]*toolSet       // tenant "\x00" sorted names joined by "," → runtime
	live     map[string]*evalRun       // tenant "\x00" key → running eval
	sessions map[string]*remoteSession // session ID → session
	opening  map[string]int            // tenant → sessions being made (counted against MaxSessions)

	fleet *fleetState // stored sessions and paused evals (StateKeys); nil: none

	profiles map[string]*profileState // EvalConfig.Profiles, checked

	waits relayWaits // calls waiting for an answer through the store (relay.go)
}

// toolSet is a Runtime whose tools relay to the client, shared by every
// eval of one tenant (of any, with ShareVMsAcrossTenants) naming the same
// tools.
type toolSet struct {
	rt   *glovebox.Runtime
	refs int
	used time.Time
}

// EnableEvals makes a glovebox Runtime (compiling the guest on first use:
// one to two minutes on 2 cores, then tens of milliseconds from the cache)
// and adds the eval and session routes. Call it once, before serving.
// Errors: the Runtime could not be made (no image, bad limits), or evals
// are already on.
func (s *Server) EnableEvals(ctx context.Context, cfg EvalConfig) error {
	if s.evals != nil {
		return errors.New("executor: evals are already enabled")
	}
	if cfg.PoolSize == 0 {
		cfg.PoolSize = 1
	}
	if cfg.MaxToolSets <= 0 {
		cfg.MaxToolSets = DefaultMaxToolSets
	}
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = DefaultMaxSessions
	}
	if cfg.SessionIdle <= 0 {
		cfg.SessionIdle = DefaultSessionIdle
	}
	if cfg.MaxToolBytes <= 0 {
		cfg.MaxToolBytes = DefaultMaxToolBytes
	}
	// base runs tool-less evals only when tenants share VMs; otherwise
	// each tenant has its own Runtime for them (see toolSet), and base,
	// kept for the caps, needs no pool.
	basePool := cfg.PoolSize
	if !cfg.ShareVMsAcrossTenants {
		basePool = -1
	}
	base, err := glovebox.New(ctx, glovebox.Config{CacheDir: cfg.CacheDir, ImagePath: cfg.ImagePath, Limits: cfg.Limits,
		PoolSize: basePool, DisableVMReuse: cfg.DisableVMReuse, Logger: s.log, StateKeys: cfg.StateKeys, StateStore: claimStore(cfg), Hooks: pauseHooks(cfg)})
	if err != nil {
		return fmt.Errorf("executor: evals: %w", err)
	}
	profiles, err := checkProfiles(ctx, &cfg)
	if err != nil {
		base.Close()
		return err
	}
	e := &evals{s: s, cfg: cfg, base: base, caps: base.Limits(), profiles: profiles,
		sets: map[string]*toolSet{}, live: map[string]*evalRun{}, sessions: map[string]*remoteSession{}}
	if cfg.Worker.Kind != "" {
		if e.worker, err = newWorkerPool(cfg, e.caps, s.log); err != nil {
			base.Close()
			return err
		}
	}
	if rs, ok := s.store.(toolReplyStore); ok {
		// A shared store: answers reaching another executor than the
		// running one go through it, with --state-key or without.
		if err := rs.initToolReplies(ctx); err != nil {
			base.Close()
			return fmt.Errorf("executor: store: %w", err)
		}
		s.bg.Add(1)
		go func() {
			defer s.bg.Done()
			rs.listenToolReplies(s.base, e.waits.wake)
		}()
	}
	if cfg.StateKeys != nil {
		if err := e.enableFleet(ctx); err != nil {
			base.Close()
			return err
		}
	}
	s.evals = e
	s.Handle("POST "+wire.PathEvals, e.post)
	s.Handle("GET "+wire.PathEvals+"/{key}", s.getRun)
	s.Handle("POST "+wire.PathEvals+"/{key}/tool-results", e.toolResult)
	s.Handle("DELETE "+wire.PathEvals+"/{key}", s.cancelRun)
	s.Handle("POST "+wire.PathSessions, e.newSession)
	s.Handle("DELETE "+wire.PathSessions+"/{id}", e.closeSession)
	s.Handle("POST "+wire.PathCodeMode, e.codeMode)
	// Tracked with the purge loop, so that Close returns only once the
	// evals' runtimes and worker processes are closed.
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		e.janitor()
	}()
	return nil
}

// backendOf is the backend label of a job's record and metrics: "wasm"
// for evals ("wasm+bwrap" with a bwrap eval worker), the run backend's
// name for runs.
func (s *Server) backendOf(kind string) string {
	if kind == "eval" {
		if s.evals != nil && s.evals.worker != nil {
			return "wasm+" + s.evals.cfg.Worker.Kind
		}
		return "wasm"
	}
	return s.posture.Backend
}

// janitor closes idle sessions, and everything when the server stops.
func (e *evals) janitor() {
	t := time.NewTicker(min(e.cfg.SessionIdle/4, 30*time.Second))
	defer t.Stop()
	for {
		select {
		case <-e.s.base.Done():
			e.closeAll()
			return
		case now := <-t.C:
			if e.fleet != nil {
				e.fleetJanitor(now) // the relayed answers too
			} else {
				e.expireRelayed(now)
			}
			e.mu.Lock()
			var idle []*remoteSession
			for id, rs := range e.sessions {
				if rs.busy == 0 && now.Sub(rs.used) > e.cfg.SessionIdle {
					delete(e.sessions, id)
					idle = append(idle, rs)
				}
			}
			e.mu.Unlock()
			for _, rs := range idle {
				e.s.log.Info("session closed after idling", "tenant", rs.tenant, "idle", e.cfg.SessionIdle)
				rs.close(e)
			}
		}
	}
}

func (e *evals) closeAll() {
	e.fleetCloseAll()
	e.mu.Lock()
	ss := e.sessions
	e.sessions = map[string]*remoteSession{}
	e.mu.Unlock()
	for _, rs := range ss {
		rs.close(e)
	}
	e.s.wg.Wait() // running evals end (canceled) before their runtimes close
	if e.worker != nil {
		e.worker.close()
	}
	e.mu.Lock()
	for k, ts := range e.sets {
		ts.rt.Close()
		delete(e.sets, k)
	}
	e.mu.Unlock()
	e.base.Close()
}

// toolSet returns the Runtime for tenant's evals with names (sorted,
// checked) and its release.
func (e *evals) toolSet(ctx context.Context, tenant string, names []string) (*glovebox.Runtime, func(), error) {
	group := "tenant:" + tenant
	if e.cfg.ShareVMsAcrossTenants {
		if len(names) == 0 {
			return e.base, func() {}, nil
		}
		tenant, group = "", ""
	}
	key := tenant + "\x00" + strings.Join(names, ",")
	e.mu.Lock()
	if ts, ok := e.sets[key]; ok {
		ts.refs++
		e.mu.Unlock()
		return ts.rt, func() { e.release(ts) }, nil
	}
	e.mu.Unlock()
	var tools glovebox.Toolset
	rcfg := glovebox.Config{Tools: &tools, CacheDir: e.cfg.CacheDir, ImagePath: e.cfg.ImagePath,
		Limits: e.cfg.Limits, PoolSize: e.cfg.PoolSize, DisableVMReuse: e.cfg.DisableVMReuse, ReuseGroup: group, Logger: e.s.log,
		StateKeys: e.cfg.StateKeys, StateStore: claimStore(e.cfg), Hooks: pauseHooks(e.cfg)}
	relayed, err := e.profileRuntime(names, &tools, &rcfg) // a profile's tools and mounts (profile.go)
	if err != nil {
		return nil, nil, err
	}
	for _, n := range relayed {
		if err := tools.Add(n, relay(n)); err != nil {
			return nil, nil, err
		}
	}
	rt, err := glovebox.New(ctx, rcfg)
	if err != nil {
		return nil, nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if ts, ok := e.sets[key]; ok { // made meanwhile by another eval
		ts.refs++
		go rt.Close()
		return ts.rt, func() { e.release(ts) }, nil
	}
	ts := &toolSet{rt: rt, refs: 1, used: time.Now()}
	e.sets[key] = ts
	e.evictLocked()
	return rt, func() { e.release(ts) }, nil
}

func (e *evals) release(ts *toolSet) {
	e.mu.Lock()
	ts.refs--
	ts.used = time.Now()
	e.evictLocked()
	e.mu.Unlock()
}

// evictLocked closes the least recently used idle tool sets past
// MaxToolSets.
func (e *evals) evictLocked() {
	for len(e.sets) > e.cfg.MaxToolSets {
		oldest := ""
		for k, ts := range e.sets {
			if ts.refs == 0 && (oldest == "" || ts.used.Before(e.sets[oldest].used)) {
				oldest = k
			}
		}
		if oldest == "" {
			return // all in use; they are closed when released past the bound
		}
		go e.sets[oldest].rt.Close()
		delete(e.sets, oldest)
	}
}

// checkNames sorts names and checks each with glovebox.ValidToolName.
func checkNames(names []string) ([]string, *wire.Error) {
	names = slices.Clone(names)
	slices.Sort(names)
	for _, n := range names {
		if err := glovebox.ValidToolName(n); err != nil {
			return nil, wire.Errorf(wire.CodeBadRequest, "tools: %v", err)
		}
	}
	return names, nil
}

// limits turns a request's limits into glovebox.Limits within the caps.
// Tool budgets stay the client's: here the count is the cap and the tool
// time is the eval's whole timeout.
func (e *evals) limits(l wire.EvalLimits) glovebox.Limits {
	c := e.caps
	pick := func(v, cap int64) int64 {
		if v <= 0 || v > cap {
			return cap
		}
		return v
	}
	out := c
	out.Timeout = time.Duration(pick(l.TimeoutMS, c.Timeout.Milliseconds())) * time.Millisecond
	out.Memory = pick(l.Memory, c.Memory)
	out.Stdout = int(pick(int64(l.Stdout), int64(c.Stdout)))
	out.Stderr = int(pick(int64(l.Stderr), int64(c.Stderr)))
	out.Value = int(pick(int64(l.Value), int64(c.Value)))
	out.ToolPayload = int(pick(int64(l.ToolPayload), int64(c.ToolPayload)))
	out.FileWrite = pick(l.FileWrite, c.FileWrite)
	out.FileCreates = int(pick(int64(l.FileCreates), int64(c.FileCreates)))
	if c.Fuel > 0 && (l.Fuel == 0 || l.Fuel > c.Fuel) {
		out.Fuel = c.Fuel
	} else {
		out.Fuel = l.Fuel
	}
	out.ToolTime = out.Timeout
	return out
}

// post is POST /v1/evals.
func (e *evals) post(w http.ResponseWriter, r *http.Request, _ *Tenant) {
	growStack()
	t := tenantOf(r)
	body, werr := readBody(w, r)
	if werr != nil {
		e.s.refuse(w, r, werr)
		return
	}
	req, err := wire.DecodeEvalRequest(body)
	if err != nil {
		e.s.refuse(w, r, err.(*wire.Error))
		return
	}
	if req.ExpiresAt != nil && time.Now().After(*req.ExpiresAt) {
		e.s.refuse(w, r, wire.Errorf(wire.CodeExpired, "the request expired at %s", req.ExpiresAt.UTC().Format(time.RFC3339Nano)))
		return
	}
	names, werr := checkNames(req.Tools)
	if werr != nil {
		e.s.refuse(w, r, werr)
		return
	}
	hash := wire.EvalHash(req) // as the client sent it, before a profile's limits apply
	if names, req.Limits, werr = e.resolveProfile(t.Name, req.Profile, names, req.Limits); werr != nil {
		e.s.refuse(w, r, werr)
		return
	}
	if (len(req.SuspendTools) > 0 || req.Continue != nil) && (e.fleet == nil || e.worker != nil) {
		e.s.refuse(w, r, wire.Errorf(wire.CodeBadRequest, "suspend_tools and continue need an executor with a state key (--state-key) running evals in-process"))
		return
	}
	key := req.IdempotencyKey
	if key == "" {
		key = wire.NewKey("e-") // no key given: an eval of its own
	}
	run := &evalRun{pending: map[uint64]*pendingCall{}, maxBytes: e.cfg.MaxToolBytes, pickup: e.pickupFor(t, key), wake: e.wakeFor(t, key)}
	lim := e.limits(req.Limits)
	e.s.serveJob(w, r, t, jobSpec{
		kind: "eval", key: key, hash: hash, expires: req.ExpiresAt,
		// Output and the value, allowing for JSON escapes, and room for
		// the rest; the tool-call transcript is kept when it fits (it
		// is the first part cut: the client keeps its own).
		maxRecord: 2*int64(lim.Stdout+lim.Stderr+lim.Value) + minReserve,
		work: func(ctx context.Context, j *job) *wire.Record {
			return e.run(ctx, j, t, key, run, req, names)
		},
		attach: run.attach,
		detach: run.detach,
		handed: run.takeHanded,
	})
}

// run is an eval's work: the eval itself, under the server's context.
func (e *evals) run(ctx context.Context, j *job, t *tenant, key string, run *evalRun, req *wire.EvalRequest, names []string) *wire.Record {
	run.mu.Lock()
	run.j = j
	run.mu.Unlock()
	id := t.Name + "\x00" + key
	e.mu.Lock()
	e.live[id] = run
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.live, id)
		e.mu.Unlock()
		run.closeAll()
	}()
	if e.worker != nil && req.Session == "" {
		return e.runInWorker(ctx, j, run, req, names)
	}
	ctx = context.WithValue(ctx, evalRunKey{}, run)
	opts := []glovebox.EvalOption{glovebox.WithOutput(streamWriter{j, wire.EventStdout}, streamWriter{j, wire.EventStderr})}
	if len(req.Stdin) > 0 {
		opts = append(opts, glovebox.WithStdin(bytes.NewReader(req.Stdin)))
	}
	if len(req.Args) > 0 {
		opts = append(opts, glovebox.WithArgs(req.Args...))
	}
	if len(req.Env) > 0 {
		opts = append(opts, glovebox.WithEnv(req.Env))
	}
	var res *glovebox.Result
	var err error
	run.suspend = setOf(req.SuspendTools)
	if req.Continue != nil {
		return e.continueEval(ctx, t, key, run, req.Continue, opts)
	}
	if req.Session != "" && e.fleet != nil {
		return e.fleetSessionEval(ctx, t, key, req, opts)
	}
	if req.Session != "" {
		rs := e.session(t.Name, req.Session)
		if rs == nil {
			msg := "no session %s (closed, idled out, or never made)"
			if e.s.cfg.StoreURL != "" {
				// A fleet replica without a state key sees only its own
				// sessions: say so, or a session stored by its peers
				// reads as gone.
				msg = "no session %s on this executor (closed, idled out, or never made here: it has no --state-key, so it keeps its sessions in its memory and does not see those its fleet stored)"
			}
			return &wire.Record{State: wire.StateFailed, Error: wire.Errorf(wire.CodeNotFound, msg, req.Session)}
		}
		defer e.done(rs)
		res, err = rs.gs.EvalWith(ctx, req.Code, opts...)
	} else {
		rt, release, terr := e.toolSet(ctx, t.Name, names)
		if terr != nil {
			return &wire.Record{State: wire.StateFailed, Error: wire.Errorf(wire.CodeInternal, "making the VM: %v; the eval did not run", terr)}
		}
		defer release()
		view, lerr := rt.WithLimits(e.limits(req.Limits))
		if lerr != nil {
			return &wire.Record{State: wire.StateFailed, Error: wire.Errorf(wire.CodeBadRequest, "limits: %v", lerr)}
		}
		res, err = view.EvalWith(ctx, req.Code, opts...)
	}
	if err != nil {
		return &wire.Record{State: wire.StateFailed, Error: evalErr(err)}
	}
	if res.Status == glovebox.StatusSuspended && e.fleet != nil && req.Session == "" {
		return e.pausedRecord(ctx, t, key, names, req.SuspendTools, req.Limits, res)
	}
	return &wire.Record{State: wire.StateCompleted, Eval: clientwire.FromResult(res)}
}

// streamWriter turns the guest's output into stdout or stderr events.
type streamWriter struct {
	j   *job
	typ string
}

func (w streamWriter) Write(p []byte) (int, error) {
	w.j.output(w.typ, p)
	return len(p), nil
}

// toolResult is POST /v1/evals/{key}/tool-results.
func (e *evals) toolResult(w http.ResponseWriter, r *http.Request, _ *Tenant) {
	t := tenantOf(r)
	key := r.PathValue("key")
	if !wire.ValidKey(key) {
		e.s.refuse(w, r, wire.Errorf(wire.CodeBadRequest, "malformed idempotency key"))
		return
	}
	body, werr := readBody(w, r)
	if werr != nil {
		e.s.refuse(w, r, werr)
		return
	}
	tr, err := wire.DecodeToolResult(body)
	if err != nil {
		e.s.refuse(w, r, err.(*wire.Error))
		return
	}
	e.mu.Lock()
	run := e.live[t.Name+"\x00"+key]
	e.mu.Unlock()
	if run == nil {
		// Not running here: on another executor of the fleet, it
		// picks the answer up from the store (relay.go).
		if werr := e.relayToolResult(r.Context(), t, key, tr); werr != nil {
			e.s.refuse(w, r, werr)
			return
		}
		w.WriteHeader(http.StatusAccepted)
		return
	}
	if !run.answer(tr.ID, tr.Reply) {
		e.s.refuse(w, r, wire.Errorf(wire.CodeNotFound, "eval %s has no tool call %d waiting (answered already, ended, or another tenant's)", key, tr.ID))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// evalRun is one running eval's tool channel.
type evalRun struct {
	mu       sync.Mutex
	j        *job
	holder   uint64 // the follower answering tool calls; 0 before the first
	numbered uint64 // followers numbered so far
	// streams are the followers whose streams have not ended, by number:
	// a call is handed to a new follower only when its holder's is gone
	// (attach, detach), so two clients following one eval never both
	// run one of its calls.
	streams map[*eventStream]uint64
	// handed are the tool_call events detach handed to a follower whose
	// stream was already past its attach: sent to that stream alone
	// (takeHanded), never into the log, so a tenant cycling followers
	// cannot grow the log.
	handed   map[*eventStream][]wire.Event
	next     uint64
	pending  map[uint64]*pendingCall
	done     bool
	sent     int // bytes of arguments sent in tool_call events
	maxBytes int
	suspend  map[string]bool // tools whose calls pause the eval (SuspendTools)
	// pickup looks in the store for an answer another executor of the
	// fleet received for call id (relay.go); nil: none can.
	pickup func(id uint64) (string, bool)
	// wake subscribes to the store's word that an answer for this eval
	// was recorded (relay.go), until the returned stop; nil: no word
	// comes (pickup's polling alone).
	wake func() (<-chan struct{}, func())
}

type pendingCall struct {
	call     wire.ToolCall
	deadline time.Time   // the call's end (its context's), for TimeLeftMS; zero: none
	reply    chan string // buffered 1
}

// event is pc's tool_call event, its time left counted from now.
func (pc *pendingCall) event() wire.Event {
	if !pc.deadline.IsZero() {
		left := max(time.Until(pc.deadline).Milliseconds(), 0)
		pc.call.TimeLeftMS = &left
	}
	return toolCallEvent(pc.call)
}

type evalRunKey struct{}

// attach runs for each request following the eval: it learns its
// number and, if the holder (the follower expected to answer tool calls)
// has no stream open any more (or there is none yet), becomes the holder
// and gets the calls still waiting handed to it again: to this request
// only, after the events the log held now (so after the output written
// before them), and never into the log (a tenant attaching over and over
// must not grow it). While the holder's stream is open, a new follower
// only watches: calls name the holder, and it does not answer them.
func (run *evalRun) attach(j *job, st *eventStream) (int, []wire.Event) {
	run.mu.Lock()
	run.numbered++
	h := run.numbered
	if run.j == nil {
		run.j = j
	}
	if run.streams == nil {
		run.streams = map[*eventStream]uint64{}
	}
	run.streams[st] = h
	again := []wire.Event{}
	if !run.holderOpenLocked() {
		run.holder = h
		again = run.handLocked(h)
	}
	j.mu.Lock()
	at := len(j.events)
	j.mu.Unlock()
	run.mu.Unlock()
	// Sent before follow replays the log (no other writer yet), and
	// outside the lock: a slow reader must not hold up the eval.
	extra, _ := json.Marshal(wire.Holder{Holder: h})
	st.write(&wire.Event{Type: wire.EventHolder, Extra: extra}) // flushed with what follows (follow)
	return at, again
}

// holderOpenLocked reports whether the holder's stream is still open.
func (run *evalRun) holderOpenLocked() bool {
	for _, n := range run.streams {
		if n == run.holder {
			return true
		}
	}
	return false
}

// newestLocked is the number of the newest follower still streaming,
// or 0.
func (run *evalRun) newestLocked() uint64 {
	var n uint64
	for _, h := range run.streams {
		n = max(n, h)
	}
	return n
}

// handLocked readdresses the waiting calls to follower h and returns
// their tool_call events, in call order.
func (run *evalRun) handLocked(h uint64) []wire.Event {
	var calls []*pendingCall
	for _, pc := range run.pending {
		pc.call.Holder = h
		calls = append(calls, pc)
	}
	slices.SortFunc(calls, func(a, b *pendingCall) int { return int(a.call.ID) - int(b.call.ID) })
	evs := make([]wire.Event, 0, len(calls))
	for _, pc := range calls {
		evs = append(evs, pc.event())
	}
	return evs
}

// detach runs when a follower's stream ends. When it was the holder's
// and calls wait, the newest follower still streaming becomes the holder
// and the calls are handed to its stream alone (it is past its attach:
// takeHanded gives them to it), not through the log, which a tenant
// cycling followers would otherwise grow by a copy of the calls each
// time.
func (run *evalRun) detach(st *eventStream) {
	run.mu.Lock()
	h, ok := run.streams[st]
	if !ok {
		run.mu.Unlock()
		return
	}
	delete(run.streams, st)
	delete(run.handed, st)
	if h != run.holder || len(run.pending) == 0 || run.done || run.j == nil {
		run.mu.Unlock()
		return
	}
	var to *eventStream
	for s, n := range run.streams {
		if to == nil || n > run.streams[to] {
			to = s
		}
	}
	if to == nil {
		run.mu.Unlock()
		return // the next follower to attach takes them
	}
	run.holder = run.streams[to]
	if run.handed == nil {
		run.handed = map[*eventStream][]wire.Event{}
	}
	run.handed[to] = run.handLocked(run.holder)
	j := run.j
	run.mu.Unlock()
	j.poke()
}

// takeHanded returns and forgets the events detach handed to st.
func (run *evalRun) takeHanded(st *eventStream) []wire.Event {
	run.mu.Lock()
	defer run.mu.Unlock()
	evs := run.handed[st]
	delete(run.handed, st)
	return evs
}

func toolCallEvent(c wire.ToolCall) wire.Event {
	extra, _ := json.Marshal(c)
	return wire.Event{Type: wire.EventToolCall, Extra: extra}
}

// call hands one tool call to the holder and waits for its answer or the
// end of ctx (the eval's deadline or cancellation).
func (run *evalRun) call(ctx context.Context, name string, args []byte) (any, error) {
	rep, err := run.callRaw(ctx, name, args)
	if err != nil {
		return nil, err
	}
	return clientwire.DecodeReply(rep)
}

// callRaw is call before the reply frame is decoded.
func (run *evalRun) callRaw(ctx context.Context, name string, args []byte) (string, error) {
	run.mu.Lock()
	if run.done || run.j == nil {
		run.mu.Unlock()
		return "", &engine.GuestError{Class: "ToolError", Message: "the eval's tool channel is closed"}
	}
	if run.sent += len(args); run.sent > run.maxBytes {
		run.mu.Unlock()
		return "", &engine.Abort{Status: engine.StatusToolBudgetExceeded,
			Message: fmt.Sprintf("the eval sent over %d bytes of tool arguments, the executor's limit per eval", run.maxBytes)}
	}
	run.next++
	if !run.holderOpenLocked() {
		// The holder went away while no call waited: the newest
		// follower still streaming answers this one (if none, the next
		// to attach is handed it).
		if n := run.newestLocked(); n != 0 {
			run.holder = n
		}
	}
	pc := &pendingCall{call: wire.ToolCall{ID: run.next, Holder: run.holder, Name: name, Args: string(args)}, reply: make(chan string, 1)}
	pc.deadline, _ = ctx.Deadline() // the tool's context: the eval's deadline or its tool-time budget's end
	run.pending[pc.call.ID] = pc
	run.j.emit(pc.event())
	run.mu.Unlock()
	var look <-chan time.Time // stays nil without pickup
	var woken <-chan struct{} // stays nil without wake
	var t *time.Timer
	wait := pickupFirst
	if run.pickup != nil {
		t = time.NewTimer(wait)
		defer t.Stop()
		look = t.C
		if run.wake != nil {
			ch, stop := run.wake()
			defer stop()
			woken = ch
		}
	}
	for {
		select {
		case rep := <-pc.reply:
			return rep, nil
		case <-woken:
			if rep, ok := run.pickup(pc.call.ID); ok {
				run.answer(pc.call.ID, rep)
			}
		case <-look:
			if rep, ok := run.pickup(pc.call.ID); ok {
				run.answer(pc.call.ID, rep) // false: answered here meanwhile, in pc.reply
			}
			wait = min(2*wait, pickupMax)
			t.Reset(wait)
		case <-ctx.Done():
			run.mu.Lock()
			delete(run.pending, pc.call.ID)
			run.mu.Unlock()
			return "", ctx.Err()
		}
	}
}

// answer delivers a reply to the waiting call id; false when none waits.
func (run *evalRun) answer(id uint64, reply string) bool {
	run.mu.Lock()
	pc := run.pending[id]
	delete(run.pending, id)
	run.mu.Unlock()
	if pc == nil {
		return false
	}
	pc.reply <- reply
	return true
}

func (run *evalRun) closeAll() {
	run.mu.Lock()
	run.done = true
	run.pending = map[uint64]*pendingCall{}
	run.mu.Unlock()
}

// relay is the executor's stand-in for the client's tool name: it sends
// the call back over the eval's stream and gives the guest the client's
// answer exactly (value, exception class, or budget abort).
func relay(name string) glovebox.ToolFunc {
	return func(ctx context.Context, a glovebox.Args) (any, error) {
		run, _ := ctx.Value(evalRunKey{}).(*evalRun)
		if run == nil {
			return nil, &engine.GuestError{Class: "ToolError", Message: "no client is attached to this eval"}
		}
		args, err := clientwire.EncodeArgs(name, a)
		if err != nil {
			return nil, err
		}
		return run.call(ctx, name, args)
	}
}

// remoteSession is a glovebox.Session held for a tenant between evals.
type remoteSession struct {
	id, tenant string
	gs         *glovebox.Session
	release    func()
	used       time.Time
	busy       int // evals running in it (under evals.mu)
	once       sync.Once
}

func (rs *remoteSession) close(e *evals) {
	rs.once.Do(func() {
		rs.gs.Close()
		rs.release()
	})
}

// session finds the tenant's session and marks it busy; done unmarks it.
func (e *evals) session(tenant, id string) *remoteSession {
	e.mu.Lock()
	defer e.mu.Unlock()
	rs := e.sessions[id]
	if rs == nil || rs.tenant != tenant {
		return nil
	}
	rs.busy++
	rs.used = time.Now()
	return rs
}

func (e *evals) done(rs *remoteSession) {
	e.mu.Lock()
	rs.busy--
	rs.used = time.Now()
	e.mu.Unlock()
}

// newSession is POST /v1/sessions.
func (e *evals) newSession(w http.ResponseWriter, r *http.Request, _ *Tenant) {
	t := tenantOf(r)
	body, werr := readBody(w, r)
	if werr != nil {
		e.s.refuse(w, r, werr)
		return
	}
	req, err := wire.DecodeSessionRequest(body)
	if err != nil {
		e.s.refuse(w, r, err.(*wire.Error))
		return
	}
	names, werr := checkNames(req.Tools)
	if werr != nil {
		e.s.refuse(w, r, werr)
		return
	}
	if e.worker != nil {
		e.s.refuse(w, r, wire.Errorf(wire.CodeBadRequest, "sessions are not served with an eval worker (each eval runs in a fresh sandboxed process)"))
		return
	}
	if names, req.Limits, werr = e.resolveProfile(t.Name, req.Profile, names, req.Limits); werr != nil {
		e.s.refuse(w, r, werr)
		return
	}
	if e.s.draining.Load() {
		e.s.refuse(w, r, wire.Errorf(wire.CodeUnavailable, "the executor is draining"))
		return
	}
	if e.fleet != nil {
		e.fleetNewSession(w, r, t, req, names)
		return
	}
	// The slot is reserved before the runtime and VM are made, so a burst
	// of requests makes no more runtimes than the cap allows.
	e.mu.Lock()
	n := e.countLocked(t.Name)
	if n >= e.cfg.MaxSessions {
		e.mu.Unlock()
		e.s.refuse(w, r, wire.Errorf(wire.CodeQueueFull, "tenant %s has %d sessions open, the most allowed", t.Name, n))
		return
	}
	if e.opening == nil {
		e.opening = map[string]int{}
	}
	e.opening[t.Name]++
	e.mu.Unlock()
	opened := false
	defer func() {
		if !opened {
			e.mu.Lock()
			e.unreserveLocked(t.Name)
			e.mu.Unlock()
		}
	}()
	gs, release, werr := e.openSession(r.Context(), t.Name, names, req.Limits, nil)
	if werr != nil {
		e.s.refuse(w, r, werr)
		return
	}
	rs := &remoteSession{id: newSessionID(), tenant: t.Name, gs: gs, release: release, used: time.Now()}
	e.mu.Lock()
	e.unreserveLocked(t.Name)
	opened = true
	e.sessions[rs.id] = rs
	e.mu.Unlock()
	e.s.log.Info("session opened", "tenant", t.Name, "tools", len(names))
	writeJSON(w, wire.SessionInfo{ID: rs.id, IdleTimeoutMS: e.cfg.SessionIdle.Milliseconds()})
}

// openSession makes a new session of tenant's tool set names with
// limits (resumed from state, when not nil: fleet.go), and the tool
// set's release.
func (e *evals) openSession(ctx context.Context, tenant string, names []string, limits wire.EvalLimits, state []byte) (*glovebox.Session, func(), *wire.Error) {
	rt, release, err := e.toolSet(ctx, tenant, names)
	if err != nil {
		return nil, nil, wire.Errorf(wire.CodeInternal, "making the VM: %v", err)
	}
	view, err := rt.WithLimits(e.limits(limits))
	if err != nil {
		release()
		return nil, nil, wire.Errorf(wire.CodeBadRequest, "limits: %v", err)
	}
	var gs *glovebox.Session
	if state == nil {
		gs, err = view.NewSession()
	} else {
		gs, err = view.ResumeSession(ctx, state)
	}
	if err != nil {
		release()
		if state != nil && !errors.Is(err, glovebox.ErrClosed) {
			return nil, nil, wire.Errorf(wire.CodeStateRefused, "the session's stored state cannot be opened here: %v", err)
		}
		return nil, nil, wire.Errorf(wire.CodeUnavailable, "%v", err)
	}
	return gs, release, nil
}

// newSessionID is a fresh session ID: "s-" and 32 hex digits.
func newSessionID() string {
	var b [16]byte
	rand.Read(b[:])
	return "s-" + hex.EncodeToString(b[:])
}

// unreserveLocked gives back a slot newSession reserved.
func (e *evals) unreserveLocked(tenant string) {
	if e.opening[tenant]--; e.opening[tenant] <= 0 {
		delete(e.opening, tenant)
	}
}

// countLocked is how many sessions tenant has open or being opened.
func (e *evals) countLocked(tenant string) int {
	n := e.opening[tenant]
	for _, rs := range e.sessions {
		if rs.tenant == tenant {
			n++
		}
	}
	return n
}

// closeSession is DELETE /v1/sessions/{id}: it waits for a running eval
// of the session to end.
func (e *evals) closeSession(w http.ResponseWriter, r *http.Request, _ *Tenant) {
	t := tenantOf(r)
	id := r.PathValue("id")
	if e.fleet != nil {
		e.fleetCloseSession(w, r, t, id)
		return
	}
	e.mu.Lock()
	rs := e.sessions[id]
	if rs != nil && rs.tenant == t.Name {
		delete(e.sessions, id)
	} else {
		rs = nil
	}
	e.mu.Unlock()
	if rs == nil {
		e.s.refuse(w, r, wire.Errorf(wire.CodeNotFound, "no session %q", id))
		return
	}
	rs.close(e)
	w.WriteHeader(http.StatusNoContent)
}

// evalStack is the goroutine stack an eval's handler is given at once
// (growStack). net/http starts each request's handler on a fresh
// goroutine with a small stack, which the eval's path (the strict JSON
// decoder, the store's SQLite calls, the engine) then grew by doubling,
// each step copying the stack and adjusting every frame on it: in a CPU
// profile of BenchmarkExecutorEval (6000 evals of `1+1`, 2 workers)
// runtime.newstack under the handler was 3.4% of the process's samples.
// Grown once while the stack is shallow, it was 0.6% (growStack's one
// copy), and no handler stack grew again, so 64 KiB covers the path.
const evalStack = 64 << 10

// growStack makes the calling goroutine's stack at least evalStack
// bytes: the runtime sizes a grown stack to fit the frame that
// overflowed, so one frame of half that size grows it in one step.
//
//go:noinline
func growStack() {
	var pad [evalStack / 2]byte
	stackSink(pad[:])
}

// stackSink keeps growStack's frame from being optimized away.
//
//go:noinline
func stackSink(b []byte) { b[0] = 0 }
