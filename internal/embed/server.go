package embed

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/box"
	"github.com/gloveboxhq/glovebox/internal/clientwire"
)

// Options configure [Serve].
type Options struct {
	// Version names this build in the hello's answer and info (the
	// CLI's version line).
	Version string
	// Logger receives the child's own reports (the engine's slow first
	// steps, a session closed for idling, a refused parent); the CLI
	// writes them to stderr as JSON lines, which the gem forwards to its
	// logger. Zero means slog.Default().
	Logger *slog.Logger
	// SessionIdle closes a session unused this long; zero means
	// DefaultSessionIdle.
	SessionIdle time.Duration
}

// Bounds of what one parent keeps in the child. Our choices: a Rails app
// has a handful of sandbox shapes; a parent past these gets the oldest
// dropped (it registers a config again when told unknown_config).
const (
	// DefaultSessionIdle closes a session unused for 10 minutes, as an
	// executor does.
	DefaultSessionIdle = 10 * time.Minute
	// maxConfigs is the most sandbox configs kept registered.
	maxConfigs = 256
	// maxRuntimes is the most idle Runtimes kept (each holds its pool
	// of prepared VMs).
	maxRuntimes = 16
	// maxSessions is the most sessions open at once.
	maxSessions = 64
)

// server is one parent's child.
type server struct {
	opts Options
	log  *slog.Logger
	ctx  context.Context // ends when the parent is gone
	ctl  *conn
	base *glovebox.Runtime // no tools: the engine warmed at start, code mode's limits

	// keys, store and tokenKey are read and set under mu once the hello
	// is answered (a state_key request replaces them).
	keys  *glovebox.Keyring   // the state key; nil: nothing suspends
	store glovebox.StateStore // claims of continued states (state_dir)
	// tokenKey is the key of pause tokens' MACs (tokenMACKey of the
	// state key); nil with keys.
	tokenKey []byte
	keyGen   uint64 // state_key requests taken: part of a Runtime's key

	mu       sync.Mutex
	configs  map[uint64]*config // by sid
	byPrint  map[string]*config // by fingerprint
	nextSID  uint64
	runtimes map[string]*runtimeEntry
	sessions map[string]*session
	live     map[string]context.CancelFunc // eval or run key → cancel
	unkeyed  uint64                        // jobs run without a key so far

	// handles are the host tools bound (hosttools.go), by handle id,
	// by the spec's fingerprint, and an HTTP tool's by its parent ID.
	handles       map[string]*hostTools
	byHandlePrint map[string]*hostTools
	byHTTPID      map[string]*hostTools
	nextHandle    uint64

	boxes boxes
	wg    sync.WaitGroup // channels being served
}

// Serve serves the parent on ctl, the control socket (descriptor 3 of
// `glovebox embedded`): a hello first, then channels, each handed over
// on ctl with a "channel" request (docs/embedded.md). It returns when
// ctl reaches its end (the parent closed it or exited), ctx ends, or the
// parent's hello names another protocol; running evals are canceled and
// waited for up to 2 s. Errors: a failed read of ctl other than its end,
// or a refused hello.
func Serve(ctx context.Context, ctl *net.UnixConn, opts Options) error {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	if opts.SessionIdle <= 0 {
		opts.SessionIdle = DefaultSessionIdle
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s := &server{opts: opts, log: log, ctx: ctx, ctl: newConn(ctl, true),
		configs: map[uint64]*config{}, byPrint: map[string]*config{}, runtimes: map[string]*runtimeEntry{},
		sessions: map[string]*session{}, live: map[string]context.CancelFunc{}}
	// The engine loads (a compiled module and a snapshot from the cache:
	// tens of milliseconds) while the parent sends its hello and its
	// first sandbox, whose Runtime then shares it.
	warm := make(chan struct{})
	go func() {
		defer close(warm)
		rt, err := glovebox.New(ctx, glovebox.Config{PoolSize: -1, Logger: log})
		if err != nil {
			log.Warn("glovebox: the engine did not load at start; the first sandbox says why", "error", err.Error())
			return
		}
		s.mu.Lock()
		if s.base == nil {
			s.base = rt
		} else { // made meanwhile by a request that could not wait
			go rt.Close()
		}
		s.mu.Unlock()
	}()
	go s.watchParent(cancel)
	go s.janitor()
	defer func() {
		cancel()
		done := make(chan struct{})
		go func() { s.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
		}
		<-warm
		s.closeAll()
	}()
	ctlDone := make(chan error, 1)
	go func() { ctlDone <- s.serveControl() }()
	select {
	case err := <-ctlDone:
		return err
	case <-ctx.Done():
		ctl.Close()
		return nil
	}
}

// watchParent ends the child when its parent process is gone though the
// control socket stays open (a process forked from the parent that
// kept a copy of it): the parent's pid is no longer the child's parent.
func (s *server) watchParent(cancel func()) {
	ppid := os.Getppid()
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
			if os.Getppid() != ppid {
				s.log.Info("glovebox: the parent process is gone; the embedded child stops", "parent", ppid)
				cancel()
				return
			}
		}
	}
}

// serveControl reads control requests until the socket's end.
func (s *server) serveControl() error {
	hello := false
	for {
		t, b, err := s.ctl.read()
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("the control socket: %w", err)
		}
		if t != frameRequest {
			return fmt.Errorf("the control socket: a frame of type %q, want Q", t)
		}
		q, rf := decodeRequest(b)
		if rf != nil {
			s.ctl.refuse(rf)
			continue
		}
		if !hello && q.Op != "hello" {
			s.ctl.refuse(refusef(codeBadRequest, "the first request must be hello, not %q", q.Op))
			return errors.New("the parent sent no hello")
		}
		switch q.Op {
		case "hello":
			if err := s.hello(q); err != nil {
				return err
			}
			hello = true
		case "channel":
			fd := -1
			if s.ctl.fds != nil {
				fd = s.ctl.fds.take()
			}
			if fd < 0 {
				return errors.New("a channel request without its socket")
			}
			s.startChannel(fd)
		case "cancel":
			if !s.cancel(q.Key) {
				s.ctl.refuse(refusef(codeNotFound, "nothing runs under key %q", q.Key))
				continue
			}
			s.ctl.reply(struct{}{})
		case "info":
			s.ctl.reply(s.info())
		case "state_key":
			if rf := s.setStateKey(q); rf != nil {
				s.ctl.refuse(rf)
				continue
			}
			s.ctl.reply(struct{}{})
		default:
			s.ctl.refuse(refusef(codeBadRequest, "unknown control op %q", q.Op))
		}
	}
}

// hello checks the parent's protocol and takes its settings. A parent of
// another protocol is refused, and the child ends.
func (s *server) hello(q *request) error {
	if q.Protocol != Protocol {
		msg := fmt.Sprintf("this glovebox binary (%s) speaks embedded protocol %d, the gem (%s) protocol %d: "+
			"use the glovebox binary of the gem's own version (the platform gem packs it; GLOVEBOX_BIN names another)",
			s.opts.Version, Protocol, q.Gem, q.Protocol)
		s.ctl.refuse(&refusal{Code: codeProtocol, Message: msg})
		s.log.Error("glovebox: " + msg)
		return errors.New(msg)
	}
	keys, store, tk, rf := stateKeys(q)
	if rf != nil {
		s.ctl.refuse(rf)
		return rf
	}
	s.mu.Lock()
	s.keys, s.store, s.tokenKey = keys, store, tk
	s.mu.Unlock()
	s.log.Info("glovebox: embedded child ready", "pid", os.Getpid(), "version", s.opts.Version, "gem", q.Gem, "suspend", s.keys != nil)
	return s.ctl.reply(map[string]any{"protocol": Protocol, "version": s.opts.Version, "pid": os.Getpid()})
}

// stateKeys reads a hello's or a state_key request's state_key and
// state_dir: the keyring that seals paused evals and the store of their
// claims, and the key of pause tokens' MACs; all nil for an empty key
// (nothing suspends).
func stateKeys(q *request) (*glovebox.Keyring, glovebox.StateStore, []byte, *refusal) {
	if q.StateKey == "" {
		return nil, nil, nil, nil
	}
	secret, err := hex.DecodeString(strings.TrimSpace(q.StateKey))
	if err != nil || len(secret) != 32 {
		return nil, nil, nil, refusef(codeBadRequest, "state_key: want 64 hex digits (32 random bytes, such as `openssl rand -hex 32` prints)")
	}
	sum := sha256.Sum256(secret)
	keys, err := glovebox.NewKeyring(glovebox.StateKey{ID: "gem-" + hex.EncodeToString(sum[:6]), Secret: secret})
	if err != nil {
		return nil, nil, nil, refusef(codeBadRequest, "state_key: %v", err)
	}
	dir := q.StateDir
	if dir == "" {
		cache, err := glovebox.DefaultCacheDir()
		if err != nil {
			return nil, nil, nil, refusef(codeBadRequest, "state_dir: %v", err)
		}
		dir = filepath.Join(cache, "embedded-continued")
	}
	store, err := glovebox.NewDirStateStore(dir)
	if err != nil {
		return nil, nil, nil, refusef(codeBadRequest, "state_dir: %v", err)
	}
	return keys, store, tokenMACKey(secret), nil
}

// macKey is the key of pause tokens' MACs now (nil: no state key).
func (s *server) macKey() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tokenKey
}

// hasKeys reports whether the child has a state key now.
func (s *server) hasKeys() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys != nil
}

// setStateKey takes a state key (and claims directory) the parent set
// after the hello: Glovebox.state_key assigned once the child runs. The
// Runtimes made so far seal with the old key (or none), so every config
// is dropped (the parent registers its configs again when told
// unknown_config) and the next ones get Runtimes with the new key; a
// session keeps its Runtime, and so the key it opened with (its suspend:
// evals are refused, saying so, when that was none).
func (s *server) setStateKey(q *request) *refusal {
	keys, store, tk, rf := stateKeys(q)
	if rf != nil {
		return rf
	}
	s.mu.Lock()
	s.keys, s.store, s.tokenKey = keys, store, tk
	s.keyGen++
	old := s.configs
	s.configs, s.byPrint = map[uint64]*config{}, map[string]*config{}
	s.mu.Unlock()
	for _, c := range old {
		s.release(c.rt)
	}
	s.log.Info("glovebox: the state key changed", "suspend", keys != nil)
	return nil
}

// info is the info op's answer.
func (s *server) info() map[string]any {
	s.mu.Lock()
	running, sessions, suspend := len(s.live), len(s.sessions), s.keys != nil
	s.mu.Unlock()
	out := map[string]any{"protocol": Protocol, "version": s.opts.Version, "pid": os.Getpid(),
		"backend": "wasm", "isolation": string(box.IsolationWasm), "suspend": suspend,
		"running": running, "sessions": sessions}
	if b, err := s.boxes.get(""); err == nil {
		p := b.Posture()
		out["box"] = map[string]any{"backend": p.Backend, "isolation": p.Isolation, "trust": p.Trust}
	} else {
		out["box"] = map[string]any{"error": err.Error()}
	}
	return out
}

// cancel ends the eval or run under key; false when none runs.
func (s *server) cancel(key string) bool {
	s.mu.Lock()
	c := s.live[key]
	s.mu.Unlock()
	if c == nil {
		return false
	}
	c()
	return true
}

// track registers cancel under key while a job runs (an empty key
// under a name of its own, which no cancel names: it is counted in
// info's running); the returned function unregisters it.
func (s *server) track(key string, cancel context.CancelFunc) func() {
	s.mu.Lock()
	if key == "" {
		s.unkeyed++
		key = "\x00" + strconv.FormatUint(s.unkeyed, 10)
	}
	s.live[key] = cancel
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.live, key)
		s.mu.Unlock()
	}
}

// janitor closes sessions idle past SessionIdle.
func (s *server) janitor() {
	t := time.NewTicker(min(s.opts.SessionIdle/4, 30*time.Second))
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case now := <-t.C:
			s.mu.Lock()
			var idle []*session
			for id, ss := range s.sessions {
				if ss.busy == 0 && now.Sub(ss.used) > s.opts.SessionIdle {
					delete(s.sessions, id)
					idle = append(idle, ss)
				}
			}
			s.mu.Unlock()
			for _, ss := range idle {
				s.log.Info("glovebox: session closed after idling", "session", ss.id, "idle", s.opts.SessionIdle.String())
				s.closeSession(ss)
			}
			s.idleHandles(now, s.opts.SessionIdle)
		}
	}
}

// closeAll closes the sessions and Runtimes.
func (s *server) closeAll() {
	s.mu.Lock()
	ss := s.sessions
	s.sessions = map[string]*session{}
	rts := s.runtimes
	s.runtimes = map[string]*runtimeEntry{}
	base := s.base
	s.mu.Unlock()
	for _, x := range ss {
		x.gs.Close()
	}
	for _, e := range rts {
		e.rt.Close()
	}
	s.closeHandles()
	if base != nil {
		base.Close()
	}
}

// sandboxConfig is what a Sandbox registers once (the config op): every
// eval naming its sid runs with it. Fields are added as the gem grows
// (a profile, the HTTP tool, bound MCP servers: issue 35); a field this
// child does not know is refused, never ignored.
type sandboxConfig struct {
	// Tools are the guest function names, each served by the parent.
	Tools []string `json:"tools"`
	// Limits are the eval limits (zero fields: glovebox's defaults) and
	// the parent's tool-call budget.
	Limits configLimits `json:"limits"`
	// Mounts are host directories the guest sees, read-only unless
	// writable (glovebox.Mount's rules).
	Mounts []mountSpec `json:"mounts,omitempty"`
	// Env is the guest's environment (glovebox.WithEnv on every eval of
	// the config, its sessions' included): empty by default, and nothing
	// of the parent's or the child's reaches the guest. A variable
	// WithEnv refuses is refused here, naming it.
	Env map[string]string `json:"env,omitempty"`
	// Profile names an operator's profile; none are served yet.
	Profile string `json:"profile,omitempty"`
}

// configLimits are an eval's limits and the parent's tool budget.
type configLimits struct {
	clientwire.EvalLimits
	// ToolCalls is the parent's count budget (0: glovebox's default).
	ToolCalls int `json:"tool_calls,omitempty"`
}

// mountSpec is glovebox.Mount's wire form.
type mountSpec struct {
	Host        string `json:"host"`
	Guest       string `json:"guest"`
	Writable    bool   `json:"writable,omitempty"`
	Description string `json:"description,omitempty"`
}

// glovebox returns l as glovebox.Limits. The tool budgets are the
// parent's: the child lets one call more through than the parent's
// count, so the parent sees the call over its budget and ends the eval
// with its own transcript; tool time is the eval's timeout (the parent
// counts its own).
func (l configLimits) glovebox() glovebox.Limits {
	out := glovebox.Limits{Timeout: time.Duration(l.TimeoutMS) * time.Millisecond, Fuel: l.Fuel, Memory: l.Memory,
		Stdout: l.Stdout, Stderr: l.Stderr, Value: l.Value, ToolPayload: l.ToolPayload,
		FileWrite: l.FileWrite, FileCreates: l.FileCreates}
	calls := l.ToolCalls
	if calls <= 0 {
		calls = glovebox.DefaultToolCalls
	}
	out.ToolCalls = calls + 1
	return out
}

// config is a registered sandbox config: its Runtime with its limits.
type config struct {
	sid   uint64
	print string
	spec  sandboxConfig
	rt    *runtimeEntry
	view  *glovebox.Runtime
	tools map[string]bool
	used  time.Time
}

// runtimeEntry is a Runtime shared by the configs (and sessions) with
// the same tools and mounts.
type runtimeEntry struct {
	key  string
	rt   *glovebox.Runtime
	refs int
	used time.Time
	// keyed: made with a state key, so its evals can pause.
	keyed bool
}

// register makes (or finds) the config spec and returns its sid.
func (s *server) register(ctx context.Context, spec *sandboxConfig) (uint64, *refusal) {
	if spec == nil {
		return 0, refusef(codeBadRequest, "config: missing")
	}
	if spec.Profile != "" {
		return 0, refusef(codeBadRequest, "config.profile %q: named profiles are not served by the embedded child yet", spec.Profile)
	}
	if err := glovebox.CheckEnv(spec.Env); err != nil {
		return 0, refusef(codeBadRequest, "env: %v", err)
	}
	if spec.Limits.Negative() || spec.Limits.ToolCalls < 0 {
		return 0, refusef(codeBadRequest, "limits: a limit is negative")
	}
	tools := slices.Clone(spec.Tools)
	slices.Sort(tools)
	for i, n := range tools {
		if err := glovebox.ValidToolName(n); err != nil {
			return 0, refusef(codeBadRequest, "tools: %v", err)
		}
		if i > 0 && tools[i-1] == n {
			return 0, refusef(codeBadRequest, "tools: %q twice", n)
		}
	}
	spec.Tools = tools
	b, _ := json.Marshal(spec)
	sum := sha256.Sum256(b)
	print := hex.EncodeToString(sum[:])
	s.mu.Lock()
	if c := s.byPrint[print]; c != nil {
		c.used = time.Now()
		s.mu.Unlock()
		return c.sid, nil
	}
	s.mu.Unlock()
	rt, rf := s.runtime(ctx, tools, spec.Mounts)
	if rf != nil {
		return 0, rf
	}
	view, err := rt.rt.WithLimits(spec.Limits.glovebox())
	if err != nil {
		s.release(rt)
		return 0, refusef(codeBadRequest, "limits: %v", err)
	}
	c := &config{print: print, spec: *spec, rt: rt, view: view, tools: map[string]bool{}, used: time.Now()}
	for _, n := range tools {
		c.tools[n] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.byPrint[print]; old != nil { // registered meanwhile
		go s.release(rt)
		return old.sid, nil
	}
	s.nextSID++
	c.sid = s.nextSID
	s.configs[c.sid] = c
	s.byPrint[print] = c
	for len(s.configs) > maxConfigs {
		var oldest *config
		for _, x := range s.configs {
			if oldest == nil || x.used.Before(oldest.used) {
				oldest = x
			}
		}
		delete(s.configs, oldest.sid)
		delete(s.byPrint, oldest.print)
		go s.release(oldest.rt)
	}
	return c.sid, nil
}

// config returns the registered config sid.
func (s *server) config(sid uint64) (*config, *refusal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.configs[sid]
	if c == nil {
		return nil, refusef(codeUnknownConfig, "no sandbox config %d (never registered, or dropped as the oldest of %d): register it again", sid, maxConfigs)
	}
	c.used = time.Now()
	return c, nil
}

// runtime returns the Runtime for tools and mounts, holding a reference.
func (s *server) runtime(ctx context.Context, tools []string, mounts []mountSpec) (*runtimeEntry, *refusal) {
	mb, _ := json.Marshal(mounts)
	s.mu.Lock()
	keys, store := s.keys, s.store
	key := strings.Join(tools, ",") + "\x00" + string(mb) + "\x00" + strconv.FormatUint(s.keyGen, 10)
	if e := s.runtimes[key]; e != nil {
		e.refs++
		s.mu.Unlock()
		return e, nil
	}
	s.mu.Unlock()
	var ts glovebox.Toolset
	for _, n := range tools {
		if err := ts.Add(n, relay(n)); err != nil {
			return nil, refusef(codeBadRequest, "tools: %v", err)
		}
	}
	var ms []glovebox.Mount
	for _, m := range mounts {
		ms = append(ms, glovebox.Mount{HostPath: m.Host, GuestPath: m.Guest, Writable: m.Writable, Description: m.Description})
	}
	cfg := glovebox.Config{Tools: &ts, Mounts: ms, Logger: s.log, StateKeys: keys, StateStore: store,
		Hooks: glovebox.Hooks{BeforeCall: pauseHook}}
	rt, err := glovebox.New(ctx, cfg)
	if err != nil {
		code := codeUnavailable
		if errors.Is(err, glovebox.ErrInvalidMount) || errors.Is(err, glovebox.ErrInvalidLimits) {
			code = codeBadRequest
		}
		return nil, refusef(code, "%v", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.runtimes[key]; e != nil { // made meanwhile
		e.refs++
		go rt.Close()
		return e, nil
	}
	e := &runtimeEntry{key: key, rt: rt, refs: 1, used: time.Now(), keyed: keys != nil}
	s.runtimes[key] = e
	return e, nil
}

// release drops a reference to e; past maxRuntimes, idle Runtimes are
// closed, oldest first.
func (s *server) release(e *runtimeEntry) {
	s.mu.Lock()
	e.refs--
	e.used = time.Now()
	var closing []*glovebox.Runtime
	for len(s.runtimes) > maxRuntimes {
		var oldest *runtimeEntry
		for _, x := range s.runtimes {
			if x.refs == 0 && (oldest == nil || x.used.Before(oldest.used)) {
				oldest = x
			}
		}
		if oldest == nil {
			break
		}
		delete(s.runtimes, oldest.key)
		closing = append(closing, oldest.rt)
	}
	s.mu.Unlock()
	for _, rt := range closing {
		rt.Close()
	}
}
