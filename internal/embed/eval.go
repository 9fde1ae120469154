package embed

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/internal/clientwire"
)

// evalAnswer is an eval's answer: its result, and for a suspended one
// the token that continues it.
type evalAnswer struct {
	*clientwire.EvalResult
	// State is the suspended eval's token (see pauseToken); "" unless
	// the status is "suspended".
	State string `json:"state,omitempty"`
	// Answered is a continuation's entry for the paused call when the
	// answer was deny or reply (glovebox.ToolCall's JSON: outcome
	// "denied" with the reason, or the reply as its result or error):
	// the parent never saw that call run, and lists it first in its
	// transcript. Absent otherwise (approve runs the call through the
	// parent, which records it).
	Answered json.RawMessage `json:"answered,omitempty"`
}

// eval runs one eval (of a config, or in a session) on ch.
func (s *server) eval(ch *channel, q *request) {
	if q.Code == nil {
		ch.k.refuse(refusef(codeBadRequest, "code: missing"))
		return
	}
	var c *config
	var ss *session
	var rf *refusal
	if q.Session != "" {
		if ss, rf = s.useSession(q.Session); rf != nil {
			ch.k.refuse(rf)
			return
		}
		defer s.doneSession(ss)
		c = ss.cfg
	} else if c, rf = s.config(q.SID); rf != nil {
		ch.k.refuse(rf)
		return
	}
	if rf := s.checkSuspend(c, q.Suspend, ss != nil); rf != nil {
		ch.k.refuse(rf)
		return
	}
	ctx, cancel := context.WithCancel(ch.ctx)
	defer cancel()
	end := s.begin(ctx, ch, q.Key, cancel)
	defer end()
	ctx = context.WithValue(ctx, evalKey{}, &evalCtx{ch: ch, suspend: setOf(q.Suspend), cancel: cancel})
	opts, flush := ch.options(q, cancel)
	defer flush()
	if len(q.Stdin) > 0 {
		opts = append(opts, glovebox.WithStdin(bytes.NewReader(q.Stdin)))
	}
	if len(q.Args) > 0 {
		opts = append(opts, glovebox.WithArgs(q.Args...))
	}
	if len(c.spec.Env) > 0 {
		opts = append(opts, glovebox.WithEnv(c.spec.Env))
	}
	var res *glovebox.Result
	var err error
	if ss != nil {
		res, err = ss.gs.EvalWith(ctx, *q.Code, opts...)
	} else {
		res, err = c.view.EvalWith(ctx, *q.Code, opts...)
	}
	flush()
	end()
	if err != nil {
		ch.k.refuse(evalRefusal(err))
		return
	}
	ch.k.reply(s.answer(res, c, q.Suspend, ss, -1))
}

// begin tracks an eval under key (for the cancel op), makes its end
// interrupt a tool call waiting on ch, and ends it if the parent closes
// ch meanwhile (watchHangup); the function returned undoes all three,
// before the eval's answer goes out (a cancel that follows the answer
// finds nothing running), and is idempotent.
func (s *server) begin(ctx context.Context, ch *channel, key string, cancel context.CancelFunc) func() {
	untrack := s.track(key, cancel)
	unwatch := ch.watch(ctx)
	unhang := ch.watchHangup(cancel)
	var once sync.Once
	return func() {
		once.Do(func() {
			unhang()
			untrack()
			unwatch()
		})
	}
}

// options are the eval's output options: streaming when asked for,
// through an outputSink (a channel gone while it streams ends the eval,
// cancel); the function returned sends what output waits and stops the
// sink, once the eval has returned (before its answer).
func (ch *channel) options(q *request, cancel context.CancelFunc) ([]glovebox.EvalOption, func()) {
	if !q.Stream {
		return nil, func() {}
	}
	ch.out = &outputSink{k: ch.k, cancel: cancel}
	return []glovebox.EvalOption{glovebox.WithOutput(ch.out.writer(frameStdout), ch.out.writer(frameStderr))}, func() {
		ch.out.close()
		ch.out = nil
	}
}

// checkSuspend checks an eval's suspend names: each one of its tools,
// and a state key to seal the pause with in the config's Runtime (a
// session's: the one it opened with).
func (s *server) checkSuspend(c *config, names []string, inSession bool) *refusal {
	if len(names) == 0 {
		return nil
	}
	if !c.rt.keyed {
		if inSession && s.hasKeys() {
			return refusef(codeBadRequest, "suspend: this session was opened before Glovebox.state_key was set, "+
				"so it cannot pause: open a new session")
		}
		return refusef(codeBadRequest, "suspend: needs a state key to seal the paused eval with: set Glovebox.state_key "+
			"(64 hex digits; every process that continues the eval needs the same key) or GLOVEBOX_STATE_KEY")
	}
	for _, n := range names {
		if !c.tools[n] {
			return refusef(codeBadRequest, "suspend: %q is not one of the sandbox's tools", n)
		}
	}
	return nil
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

// answer is res's answer frame. The transcript stays the parent's (it
// has its own, with its hooks' verdicts); a suspended eval gets its
// pending call and its token.
// answered >= 0 is the index in res's transcript of the paused call a
// continuation answered without the parent (deny or reply), sent as
// Answered.
func (s *server) answer(res *glovebox.Result, c *config, suspend []string, ss *session, answered int) evalAnswer {
	plain := *res
	plain.ToolCalls = nil // not encoded at all: the parent keeps its own
	er := clientwire.FromResult(&plain)
	out := evalAnswer{EvalResult: er}
	if answered >= 0 && answered < len(res.ToolCalls) {
		out.Answered, _ = json.Marshal(res.ToolCalls[answered])
	}
	if res.Status != glovebox.StatusSuspended || res.Pending == nil {
		return out
	}
	args, err := clientwire.EncodeArgs(res.Pending.Name, res.Pending.Args)
	if err != nil {
		args = []byte("[[],{}]")
	}
	er.Pending = &clientwire.Pending{ID: res.Pending.ID, Name: res.Pending.Name, Args: string(args), Reason: res.Pending.Reason}
	meta := pauseMeta{Config: c.spec, Suspend: suspend, Calls: len(res.ToolCalls)}
	state := res.State
	if ss != nil {
		// A session's pause stays in the session, in this child: the
		// token names it, and carries none of its (large) state.
		meta.Session, state = ss.id, nil
	}
	out.State = pauseToken(s.macKey(), &meta, state)
	return out
}

// pauseMeta is what a token says of the paused eval in the clear: the
// sandbox config to continue it with (the sealed state names the same
// tools, mounts and limits, and refuses any other), the tools whose calls
// pause it, or the session it paused. The token's MAC covers it: the
// suspend list and the session are in no sealed state, so an edited one
// would change which calls pause (or which session goes on).
type pauseMeta struct {
	Config  sandboxConfig `json:"config"`
	Suspend []string      `json:"suspend,omitempty"`
	Session string        `json:"session,omitempty"`
	// Calls is the length of the eval's transcript at the pause: the
	// continuation's entry for the paused call comes at that index.
	Calls int `json:"calls,omitempty"`
}

// tokenPrefix starts every token: the token format's version.
const tokenPrefix = "gbp1."

// tokenMACSize is the length of a token's MAC: HMAC-SHA-256 (RFC 2104,
// FIPS 198-1), whole.
const tokenMACSize = sha256.Size

// tokenMACKey derives the key of tokens' MACs from the state key (an
// HMAC-SHA-256 of a fixed label under it), so the state key itself
// seals states only.
func tokenMACKey(secret []byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte("glovebox embedded pause token MAC v1"))
	return h.Sum(nil)
}

// tokenMAC is the MAC of a token's length field, meta and sealed state.
func tokenMAC(key, head, meta, state []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(tokenPrefix))
	h.Write(head)
	h.Write(meta)
	h.Write(state)
	return h.Sum(nil)
}

// pauseToken is the String the parent holds for a paused eval:
// tokenPrefix, then URL-safe base64 (no padding) of the meta's JSON
// length (4 bytes, big-endian), the JSON, the MAC of all that and the
// state under key (tokenMAC), and the sealed state. It is opaque to the
// parent; any child holding the same state key continues it.
func pauseToken(key []byte, meta *pauseMeta, state []byte) string {
	mb, _ := json.Marshal(meta)
	b := make([]byte, 4, 4+len(mb)+tokenMACSize+len(state))
	binary.BigEndian.PutUint32(b, uint32(len(mb)))
	mac := tokenMAC(key, b[:4], mb, state)
	b = append(b, mb...)
	b = append(b, mac...)
	b = append(b, state...)
	return tokenPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// parseToken reads a token back, checking its MAC under key. A String
// that is not a token is not_found, as an executor answers a key it
// never paused; a token whose MAC does not match (edited, cut, or made
// under another state key) is state_refused, and nothing of it is used.
func parseToken(key []byte, tok string) (*pauseMeta, []byte, *refusal) {
	bad := refusef(codeNotFound, "%.40q is not a paused eval's key (Result#key of a suspended eval in embedded mode)", tok)
	rest, ok := strings.CutPrefix(tok, tokenPrefix)
	if !ok {
		return nil, nil, bad
	}
	b, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil || len(b) < 4 {
		return nil, nil, bad
	}
	n := binary.BigEndian.Uint32(b)
	if uint64(n)+tokenMACSize > uint64(len(b)-4) {
		return nil, nil, bad
	}
	mb := b[4 : 4+n]
	mac := b[4+n : 4+n+tokenMACSize]
	state := b[4+n+tokenMACSize:]
	if !hmac.Equal(mac, tokenMAC(key, b[:4], mb, state)) {
		return nil, nil, refusef(codeStateRefused, "the paused eval's key was altered (or cut), or made under another state key: "+
			"continue it with the Result#key exactly as the eval returned it, in a process with the same Glovebox.state_key")
	}
	var meta pauseMeta
	if err := strictJSON(mb, &meta); err != nil {
		return nil, nil, bad
	}
	return &meta, state, nil
}

// continueEval answers a paused eval's call and runs it on.
func (s *server) continueEval(ch *channel, q *request) {
	n := 0
	for _, set := range []bool{q.Approve, q.Deny != nil, q.Reply != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		ch.k.refuse(refusef(codeBadRequest, "continue: give exactly one of approve, deny and reply"))
		return
	}
	if !s.hasKeys() {
		ch.k.refuse(refusef(codeBadRequest, "continue: needs the state key the eval was paused with: set Glovebox.state_key or GLOVEBOX_STATE_KEY"))
		return
	}
	meta, state, rf := parseToken(s.macKey(), q.From)
	if rf != nil {
		ch.k.refuse(rf)
		return
	}
	var a glovebox.Answer
	switch {
	case q.Approve:
		a.Approved = true
	case q.Deny != nil:
		a.Denied, a.Reason = true, *q.Deny
	default:
		a = clientwire.Answer(*q.Reply)
	}
	ctx, cancel := context.WithCancel(ch.ctx)
	defer cancel()
	end := s.begin(ctx, ch, q.Key, cancel)
	defer end()
	ctx = context.WithValue(ctx, evalKey{}, &evalCtx{ch: ch, suspend: setOf(meta.Suspend), cancel: cancel})
	opts, flush := ch.options(q, cancel)
	defer flush()
	var res *glovebox.Result
	var err error
	var c *config
	var ss *session
	if meta.Session != "" {
		if ss, rf = s.useSession(meta.Session); rf != nil {
			ch.k.refuse(refusef(codeNotFound, "the paused session %s is not in this glovebox child (closed, idled out, or the child restarted since: a session lives in the child that opened it)", meta.Session))
			return
		}
		defer s.doneSession(ss)
		c = ss.cfg
		res, err = ss.gs.Continue(ctx, a, opts...)
	} else {
		sid, rf := s.register(ch.ctx, &meta.Config)
		if rf == nil {
			c, rf = s.config(sid)
		}
		if rf != nil {
			ch.k.refuse(rf)
			return
		}
		res, err = c.view.Continue(ctx, state, a, opts...)
	}
	flush()
	end()
	if err != nil {
		ch.k.refuse(continueRefusal(q.From, err))
		return
	}
	answered := -1
	if !q.Approve {
		answered = meta.Calls
	}
	ch.k.reply(s.answer(res, c, meta.Suspend, ss, answered))
}

// evalRefusal is the refusal for a failed EvalWith.
func evalRefusal(err error) *refusal {
	code := codeInternal
	switch {
	case errors.Is(err, glovebox.ErrInvalidInput):
		code = codeBadRequest
	case errors.Is(err, glovebox.ErrClosed):
		code = codeUnavailable
	case errors.Is(err, glovebox.ErrSessionClosed):
		code = codeNotFound
	case errors.Is(err, glovebox.ErrSessionPaused):
		code = codeSessionPaused
	}
	return refusef(code, "%v", err)
}

// continueRefusal is the refusal for a failed Continue: nothing ran.
func continueRefusal(from string, err error) *refusal {
	switch {
	case errors.Is(err, glovebox.ErrStateUsed), errors.Is(err, glovebox.ErrSessionPaused):
		return refusef(codeAlreadyContinued, "the paused eval was continued before; a paused call is answered once; this one did not run (%v)", err)
	case errors.Is(err, glovebox.ErrStateInvalid), errors.Is(err, glovebox.ErrStateKey),
		errors.Is(err, glovebox.ErrStateMismatch), errors.Is(err, glovebox.ErrStateDiverged):
		return refusef(codeStateRefused, "the paused eval's state cannot be continued here: %v", err)
	case errors.Is(err, glovebox.ErrInvalidInput):
		return refusef(codeBadRequest, "%v", err)
	case errors.Is(err, glovebox.ErrClosed), errors.Is(err, context.Canceled):
		return refusef(codeUnavailable, "%v", err)
	}
	return refusef(codeInternal, "continuing: %v", err)
}

// session is a glovebox.Session the parent holds between evals.
type session struct {
	id   string
	gs   *glovebox.Session
	cfg  *config
	used time.Time
	busy int // evals running in it (under server.mu)
}

// openSession opens a session of config q.SID.
func (s *server) openSession(ch *channel, q *request) {
	c, rf := s.config(q.SID)
	if rf != nil {
		ch.k.refuse(rf)
		return
	}
	s.mu.Lock()
	if len(s.sessions) >= maxSessions {
		s.mu.Unlock()
		ch.k.refuse(refusef("queue_full", "%d sessions are open, the most the embedded child keeps: close one (Session#close)", maxSessions))
		return
	}
	c.rt.refs++ // the session keeps its Runtime while it lives
	s.mu.Unlock()
	gs, err := c.view.NewSession()
	if err != nil {
		s.release(c.rt)
		ch.k.refuse(evalRefusal(err))
		return
	}
	var b [16]byte
	rand.Read(b[:])
	ss := &session{id: "s-" + hex.EncodeToString(b[:]), gs: gs, cfg: c, used: time.Now()}
	s.mu.Lock()
	s.sessions[ss.id] = ss
	s.mu.Unlock()
	ch.k.reply(map[string]any{"id": ss.id, "idle_timeout_ms": s.opts.SessionIdle.Milliseconds()})
}

// useSession finds session id and marks it busy.
func (s *server) useSession(id string) (*session, *refusal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.sessions[id]
	if ss == nil {
		return nil, refusef(codeNotFound, "no session %s (closed, idled out after %v, or opened by another glovebox child: the app's process restarted or forked since)", id, s.opts.SessionIdle)
	}
	ss.busy++
	ss.used = time.Now()
	return ss, nil
}

func (s *server) doneSession(ss *session) {
	s.mu.Lock()
	ss.busy--
	ss.used = time.Now()
	s.mu.Unlock()
}

// dropSession closes session id; false when there is none.
func (s *server) dropSession(id string) bool {
	s.mu.Lock()
	ss := s.sessions[id]
	delete(s.sessions, id)
	s.mu.Unlock()
	if ss == nil {
		return false
	}
	s.closeSession(ss)
	return true
}

// closeSession closes ss (after its running eval) and releases its
// Runtime.
func (s *server) closeSession(ss *session) {
	ss.gs.Close()
	s.release(ss.cfg.rt)
}

// codeMode answers a code-mode request as an executor's POST
// /v1/codemode does, under glovebox's default limits (the child caps
// nothing beyond them).
func (s *server) codeMode(ch *channel, q *request) {
	if q.CodeMode == nil {
		ch.k.refuse(refusef(codeBadRequest, "codemode: missing"))
		return
	}
	if q.CodeMode.Profile != "" {
		ch.k.refuse(refusef(codeBadRequest, "codemode.profile %q: eval profiles are an executor's; embedded, give the sandbox its mounts, HTTP tool and MCP servers", q.CodeMode.Profile))
		return
	}
	base, rf := s.baseRuntime()
	if rf != nil {
		ch.k.refuse(rf)
		return
	}
	if q.CodeMode.Limits.Negative() {
		ch.k.refuse(refusef(codeBadRequest, "limits: a limit is negative"))
		return
	}
	view, err := base.WithLimits(configLimits{EvalLimits: q.CodeMode.Limits}.glovebox())
	if err != nil {
		ch.k.refuse(refusef(codeBadRequest, "limits: %v", err))
		return
	}
	lim := view.Limits()
	// The tool budgets stated are the parent's (the request's, else
	// glovebox's defaults), as an executor states them.
	lim.ToolCalls, lim.ToolTime = glovebox.DefaultToolCalls, lim.Timeout
	resp, err := clientwire.CodeMode(q.CodeMode, lim, base.MemoryFloor())
	if err != nil {
		ch.k.refuse(refusef(codeBadRequest, "%v", err))
		return
	}
	ch.k.reply(resp)
}

// baseRuntime is the tool-less Runtime warmed at start (made now when
// that failed).
func (s *server) baseRuntime() (*glovebox.Runtime, *refusal) {
	s.mu.Lock()
	base := s.base
	s.mu.Unlock()
	if base != nil {
		return base, nil
	}
	rt, err := glovebox.New(s.ctx, glovebox.Config{PoolSize: -1, Logger: s.log})
	if err != nil {
		return nil, refusef(codeUnavailable, "%v", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.base != nil {
		go rt.Close()
		return s.base, nil
	}
	s.base = rt
	return rt, nil
}
