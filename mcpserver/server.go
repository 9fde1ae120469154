package mcpserver

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/codemode"
)

// Tool names the server offers.
const (
	ToolRun          = "run_ruby"
	ToolSession      = "ruby_session"
	ToolSessionReset = "ruby_session_reset"
)

// Defaults for zero [Options] fields.
const (
	// DefaultSessionIdle is how long a session's VM is kept without a
	// call (30 minutes: a pause in a conversation, not a day).
	DefaultSessionIdle = 30 * time.Minute
	// DefaultProgressInterval is how often a running call that asked for
	// progress hears about it.
	DefaultProgressInterval = time.Second
	// DefaultMaxSessions bounds the MCP sessions that hold a
	// ruby_session at once: 8 × the default 512 MiB memory limit is
	// 4 GiB of linear memory at most, a sixth of the 24 GiB development
	// machine.
	DefaultMaxSessions = 8
)

// Options configure [New]. Only Runtime is required.
type Options struct {
	// Runtime runs the programs; its tools, mounts and limits are what
	// the tool descriptions state. For approval through elicitation, make
	// it with Hooks.Approver set to [Approve]. The caller closes it, after
	// the Server.
	Runtime *glovebox.Runtime
	// Name and Version identify the server to clients. Zero means
	// "glovebox" and "dev".
	Name, Version string
	// Instructions are added to the server's instructions and to the
	// tools' descriptions (what the programs are for, house rules).
	Instructions string
	// Programs, if set, is a folder of named programs: each NAME.rb with
	// its side file NAME.json is served as an MCP tool, prompt or
	// resource that runs it in a fresh VM with the call's arguments as
	// ARGS (see the package documentation, "Named programs"). Empty means
	// none. [New] fails on a malformed folder, naming the file.
	Programs string
	// Servers are the MCP servers bound into Runtime's tools (see
	// mcptools' Binding.Notes); the tool descriptions list them and their
	// instructions under "Server notes". Zero means none.
	Servers []codemode.Server
	// MaxSessions is how many MCP sessions may hold a ruby_session at
	// once (each keeps a VM of up to Limits.Memory); the ruby_session
	// call of one more gets an error result naming the bound until a
	// session ends. run_ruby is not affected. Zero means
	// DefaultMaxSessions.
	MaxSessions int
	// SessionIdle suspends a session's VM after this long without a
	// call: its state is kept as sealed bytes (the Runtime needs
	// StateKeys) and resumed at the next call. A VM that cannot be
	// suspended (its guest keeps a file open, or no StateKeys) is freed
	// instead, and the next call starts a fresh one, its text saying so.
	// Zero means DefaultSessionIdle.
	SessionIdle time.Duration
	// MaxConcurrent is how many programs run at once across all
	// sessions; later calls wait their turn (their context still
	// cancels them). Zero means 2 × GOMAXPROCS.
	MaxConcurrent int
	// ProgressInterval is the period of progress notifications. Zero
	// means DefaultProgressInterval.
	ProgressInterval time.Duration
	// Tasks bound and time the tasks of clients that declare the tasks
	// extension (see [TasksExtension]). The zero value means every
	// default.
	Tasks TaskOptions
	// Logger receives the server's own reports (panics recovered,
	// sessions closed). Zero means slog.Default().
	Logger *slog.Logger
	// StateKey is the secret (at least 32 bytes) that signs the request
	// states of input_required results and the ruby_session handles of
	// MCP 2026-07-28 (see the package documentation, "Questions and
	// approval"); processes that serve one client need the same one, and
	// Runtimes with the same StateKeys. nil means a random key made by
	// New: its states open only in this Server.
	StateKey []byte
	// StateDir holds what outlives a request at 2026-07-28: states
	// larger than MaxInlineState (the request state then refers to them)
	// and the outcome of every continued state, so that a replayed
	// request state gets its recorded outcome and never runs twice.
	// Processes that serve one client need the same directory. Empty
	// means in memory (this Server only).
	StateDir string
	// StateTTL is how long a request state or session handle can be
	// used; its outcome is kept as long, and an older one is refused
	// with a message saying it expired. Zero means DefaultStateTTL.
	StateTTL time.Duration
	// MaxInlineState is the largest sealed state (bytes) carried in a
	// request state itself. Zero means DefaultMaxInlineState.
	MaxInlineState int
	// MaxStateBytes bounds the bytes of the stored states and outcomes
	// StateDir (or memory) holds, across every process sharing it (each
	// counts the directory). MaxClientStateBytes is one client's share
	// of it (a client: see DefaultClientStateShare). Room for a new
	// record is made by dropping the oldest session-handle states and
	// outcomes, the client's own first while it is over its share (their
	// request states are then refused as expired early); past that, a
	// call that would pause, or a ruby_session call under 2026-07-28,
	// gets an error saying which bound and when its oldest record
	// expires. Zero means DefaultMaxStateBytes, and MaxStateBytes /
	// DefaultClientStateShare for the share.
	MaxStateBytes       int64
	MaxClientStateBytes int64
	// WatchInterval is how often the mount files clients subscribed to
	// (resources/subscribe) are checked for changes; a change (its
	// modification time, size or existence) sends
	// notifications/resources/updated. Zero means DefaultWatchInterval.
	WatchInterval time.Duration
}

// Server is a glovebox MCP server. It is safe for concurrent use; one
// Server serves any number of MCP sessions, over stdio or HTTP.
type Server struct {
	mcp      *mcp.Server
	rt       *glovebox.Runtime
	fresh    *codemode.Tool
	opts     Options
	log      *slog.Logger
	slots    chan struct{}
	schemas  map[string]*toolSchema // each tool's inputSchema
	programs []*program             // the named programs served (Options.Programs)
	mu       sync.Mutex
	sessions map[*mcp.ServerSession]*vmSession
	// gone holds, for each session served over stdio, a context that
	// ends when its client has gone (end of input).
	gone map[*mcp.ServerSession]context.Context
	// calls holds, for each HTTP request carrying calls, the request's
	// context (it ends when the client drops the connection), keyed by
	// the token in its callHeader.
	calls  sync.Map
	tasks  *taskStore // the tasks of MCP's tasks extension
	closed bool
	// book seals, opens and records request states (requeststate.go).
	book *stateBook
	// watch tracks subscribed resources (subscribe.go).
	watch *watcher
}

// vmSession is one MCP session's glovebox session.
type vmSession struct {
	mu   sync.Mutex // held while a program runs: one at a time
	gs   *glovebox.Session
	tool *codemode.Tool
	idle *time.Timer
	// lost says why the VM's state was lost with no result telling the
	// client (freed for idleness, a canceled call that discarded it,
	// ruby_session_reset): the next call reports it. "" when nothing was.
	lost    string
	lastUse time.Time
	// parked is the session's state while it is idle: after SessionIdle
	// without a call its VM is suspended into these sealed bytes (a few
	// hundred KiB at most, against the VM's MiBs) and resumed at the next
	// call. nil when the VM is live or there is none.
	parked []byte
}

// New makes a Server. It fails when Runtime is nil, an option is
// negative, StateKey is shorter than 32 bytes, or StateDir cannot be
// made.
func New(opts Options) (*Server, error) {
	if opts.Runtime == nil {
		return nil, errors.New("mcpserver: Options.Runtime is nil")
	}
	if opts.SessionIdle < 0 || opts.MaxConcurrent < 0 || opts.MaxSessions < 0 || opts.ProgressInterval < 0 || opts.StateTTL < 0 || opts.MaxInlineState < 0 || opts.WatchInterval < 0 || opts.MaxStateBytes < 0 || opts.MaxClientStateBytes < 0 {
		return nil, errors.New("mcpserver: negative option")
	}
	opts.Name = cmp.Or(opts.Name, "glovebox")
	opts.Version = cmp.Or(opts.Version, "dev")
	opts.SessionIdle = cmp.Or(opts.SessionIdle, DefaultSessionIdle)
	opts.MaxSessions = cmp.Or(opts.MaxSessions, DefaultMaxSessions)
	opts.MaxConcurrent = cmp.Or(opts.MaxConcurrent, 2*runtime.GOMAXPROCS(0))
	opts.ProgressInterval = cmp.Or(opts.ProgressInterval, DefaultProgressInterval)
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	fresh, err := codemode.New(codemode.Config{Runtime: opts.Runtime, Name: ToolRun, Instructions: opts.Instructions, Servers: opts.Servers})
	if err != nil {
		return nil, fmt.Errorf("mcpserver: %w", err)
	}
	tasks, err := newTaskStore(opts.Tasks)
	if err != nil {
		return nil, err
	}
	s := &Server{rt: opts.Runtime, tasks: tasks, fresh: fresh, opts: opts, log: log,
		slots: make(chan struct{}, opts.MaxConcurrent), sessions: map[*mcp.ServerSession]*vmSession{},
		gone: map[*mcp.ServerSession]context.Context{}, schemas: map[string]*toolSchema{}}
	if s.book, err = newStateBook(opts); err != nil {
		return nil, err
	}
	s.watch = &watcher{s: s, interval: cmp.Or(opts.WatchInterval, DefaultWatchInterval), watched: map[string]*watchedFile{}, stop: make(chan struct{})}
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: opts.Name, Title: "glovebox Ruby sandbox", Version: opts.Version},
		&mcp.ServerOptions{Instructions: s.instructions(), SupportedProtocolVersions: protocolVersions(),
			Capabilities: &mcp.ServerCapabilities{Logging: &mcp.LoggingCapabilities{}, Extensions: map[string]any{TasksExtension: map[string]any{}}}, CompletionHandler: s.completer(),
			SubscribeHandler: s.watch.subscribe, UnsubscribeHandler: s.watch.unsubscribe})
	s.mcp.AddReceivingMiddleware(s.taskCalls) // inside checkCalls: a call is checked before it becomes a task
	s.mcp.AddReceivingMiddleware(s.checkCalls)
	in := fresh.InputSchema()
	s.mcp.AddTool(&mcp.Tool{Name: ToolRun, Title: "Run Ruby in a fresh sandbox", Description: fresh.Description(),
		InputSchema: in, OutputSchema: outputSchema,
		Annotations: &mcp.ToolAnnotations{OpenWorldHint: ptr(len(opts.Runtime.Tools()) > 0)}}, s.guard(s.runFresh))
	s.mcp.AddTool(&mcp.Tool{Name: ToolSession, Title: "Run Ruby in this conversation's sandbox session", Description: s.sessionDescription(),
		InputSchema: sessionInputSchema(in), OutputSchema: outputSchema}, s.guard(s.runSession))
	s.mcp.AddTool(&mcp.Tool{Name: ToolSessionReset, Title: "Reset the sandbox session",
		Description: "Discards the VM behind " + ToolSession + " for this MCP session: every variable, method, class and library it built up is gone, and the next " + ToolSession + " call starts from a fresh VM. " + ToolRun + " is unaffected (it never keeps state).",
		InputSchema: resetSchema,
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true}}, s.guard(s.resetSession))
	if err := s.addResources(); err != nil {
		return nil, err
	}
	for _, name := range []string{ToolRun, ToolSession, ToolSessionReset} {
		raw := in
		switch name {
		case ToolSessionReset:
			raw = resetSchema
		case ToolSession:
			raw = sessionInputSchema(in)
		}
		ts, err := newToolSchema(raw)
		if err != nil {
			return nil, fmt.Errorf("mcpserver: %s's inputSchema: %w", name, err)
		}
		s.schemas[name] = ts
	}
	if err := s.addPrograms(); err != nil {
		return nil, err
	}
	return s, nil
}

func ptr[T any](v T) *T { return &v }

// resetSchema is ruby_session_reset's inputSchema: no arguments.
var resetSchema = json.RawMessage(`{"type":"object","properties":{},"additionalProperties":false}`)

// statelessVersion is the first protocol version without sessions (no
// initialize: every request carries the protocol version, client info
// and capabilities in its _meta, SEP-2575) and whose calls cannot ask
// the client anything while they run (multi round-trip requests,
// SEP-2322): a question is a result, and the client calls again with the
// answer.
const statelessVersion = "2026-07-28"

// protocolVersions are the protocol versions the server speaks, newest
// first: all of the SDK's, statelessVersion among them. Each client gets
// the one it asks for: an initialize names one of the older revisions; a
// request whose _meta names statelessVersion is served without a session.
func protocolVersions() []string { return mcp.SupportedProtocolVersions() }

// sessionVersion is the protocol version of req's client: the one its
// initialize negotiated, or the one its request's _meta names.
func sessionVersion(req *mcp.CallToolRequest) string {
	if req == nil || req.Session == nil {
		return ""
	}
	if p := req.Session.InitializeParams(); p != nil {
		return p.ProtocolVersion
	}
	return ""
}

// MCP returns the underlying SDK server, to run on a transport of the
// caller's choosing.
func (s *Server) MCP() *mcp.Server { return s.mcp }

// Close frees every session's VM and cancels the running tasks. Calls
// that arrive later get an error result. It does not close the Runtime.
func (s *Server) Close() error {
	s.watch.close()
	s.mu.Lock()
	s.closed = true
	all := s.sessions
	s.sessions = map[*mcp.ServerSession]*vmSession{}
	s.mu.Unlock()
	for _, v := range all {
		v.close()
	}
	s.tasks.stopAll()
	return nil
}

// LiveSessions reports how many MCP sessions hold a VM now.
func (s *Server) LiveSessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, v := range s.sessions {
		v.mu.Lock()
		if v.gs != nil {
			n++
		}
		v.mu.Unlock()
	}
	return n
}

func (s *Server) instructions() string {
	var b strings.Builder
	b.WriteString("glovebox runs Ruby programs in a WebAssembly sandbox: the code reaches only the functions, folders and hosts this server grants, under time, CPU, memory and output limits. ")
	b.WriteString("Use " + ToolRun + " for a self-contained program (a fresh VM each call, nothing kept); use " + ToolSession + " to work step by step (variables and methods persist for this MCP session until " + ToolSessionReset + " or an idle timeout). ")
	b.WriteString("Results are JSON with a status (ok, error, timeout, ...), the value of the last expression, stdout, stderr and the error. ")
	if len(s.rt.Mounts()) > 0 {
		b.WriteString("The folders the programs see are listed as resources (read-only here). ")
	}
	if s.opts.Instructions != "" {
		b.WriteString("\n\n" + s.opts.Instructions)
	}
	return b.String()
}

// sessionDescription is ruby_session's description. Everything the two
// tools share (the sandbox, its limits, the functions with their schemas,
// the files, the result format) is in run_ruby's description and is not
// repeated: with a few MCP servers bound, the functions alone are tens of
// kilobytes, and a client reads every tool's description.
func (s *Server) sessionDescription() string {
	return "This tool keeps state. Runs a Ruby program like " + ToolRun + " — the same sandbox, functions, files, limits and result format, all described in " + ToolRun + "'s description — but in a VM kept for this MCP session: " +
		"top-level local variables, methods, classes, constants and required libraries survive from one call to the next, so you can work step by step (files in " + glovebox.ScratchPath + " do not: it is emptied after every call). " +
		"Two MCP sessions never share a VM; " + ToolSessionReset + " discards this one.\n\n" +
		"The result also has session_reset: true when the session's state is gone, with session_reset_reason saying why: this call was stopped by a limit or a crash (the next call starts empty), " +
		"or, reported on the next call, an earlier call was canceled, the VM was freed after " + s.opts.SessionIdle.String() + " without a call (when it could not be suspended: a file left open), or " + ToolSessionReset + " was called. " +
		"Call " + ToolRun + " for a self-contained program that needs no state.\n\n" +
		"Under MCP " + statelessVersion + " over HTTP there is no MCP session: each result has \"session\", a handle of the session's state (the server holds no VM between calls), and the next call passes it back as the " + handleArg + " argument; a call without one starts a fresh session."
}

// guard recovers a handler's panic into an error result.
func (s *Server) guard(h mcp.ToolHandler) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (res *mcp.CallToolResult, err error) {
		defer func() {
			if p := recover(); p != nil {
				s.log.Error("mcpserver: tool handler panicked", "tool", req.Params.Name, "panic", p, "stack", string(debug.Stack()))
				res, err = errorResult("sandbox_error", "Glovebox::SandboxError", "the server failed while handling the call"), nil
			}
		}()
		return h(ctx, req)
	}
}

func (s *Server) runFresh(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	start := func() (*mcp.CallToolResult, error) {
		res, _, err := s.run(ctx, req, s.fresh, "")
		return res, err
	}
	if !isRetry(req.Params) {
		return start()
	}
	return s.retryCall(ctx, req, start, func(r *retry) (*mcp.CallToolResult, error) {
		res, _, err := s.runDo(ctx, req, "", func(ctx context.Context) (*codemode.Outcome, error) { return continueWith(ctx, r, s.fresh.Continue) })
		return res, err
	})
}

func (s *Server) runSession(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	if s.noSession(req) {
		return s.runHandled(ctx, req)
	}
	req.Params.Arguments, _ = splitHandle(req.Params.Arguments) // a handle means nothing where the connection is the session
	v, err := s.session(req.Session)
	if err != nil {
		return errorResult("sandbox_error", "Glovebox::SandboxError", err.Error()), nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.gs == nil && v.parked != nil {
		gs, err := s.rt.ResumeSession(ctx, v.parked)
		v.parked = nil
		if err == nil {
			if v.tool, err = codemode.New(codemode.Config{Runtime: s.rt, Evaluator: gs, Session: true, Name: ToolSession, Instructions: s.opts.Instructions, Servers: s.opts.Servers}); err != nil {
				gs.Close()
				return nil, err
			}
			v.gs = gs
		} else {
			v.lost = "this session's state was suspended while idle and could not be resumed (" + err.Error() + "); this program ran in a fresh VM"
		}
	}
	if v.gs == nil {
		if err := v.open(s); err != nil {
			var se *sessionError
			if errors.As(err, &se) {
				return errorResult("sandbox_error", "Glovebox::SandboxError", se.msg), nil
			}
			return nil, err
		}
	}
	lost := v.lost
	v.touch(s.opts.SessionIdle)
	defer v.touch(s.opts.SessionIdle)
	if p := req.Params; p.RequestState != "" {
		// The retry of a call this session's VM is paused in (MCP
		// statelessVersion over a connection, such as stdio).
		return resume(s, req, p.Name, p.RequestState, p.InputResponses, func(asks mcp.InputRequestMap) *mcp.CallToolResult {
			return &mcp.CallToolResult{InputRequests: asks, RequestState: p.RequestState}
		}, func(r *retry) (*mcp.CallToolResult, error) {
			if pc := v.gs.Pending(); pc == nil || pc.ID != r.e.ID {
				return errorResult("sandbox_error", "Glovebox::SandboxError", "this session is no longer paused in that call (a later call, a reset or idleness replaced it); run the program again"), nil
			}
			res, _, err := s.runDo(ctx, req, lost, func(ctx context.Context) (*codemode.Outcome, error) { return continueWith(ctx, r, v.tool.Continue) })
			return res, err
		})
	}
	if v.gs.Pending() != nil {
		// A new program while the VM waits in a call: the pause is
		// abandoned, with the state it held.
		v.free()
		if err := v.open(s); err != nil {
			return nil, err
		}
		lost = "the session's previous call was waiting for an answer that never came, and its state was discarded; this program ran in a fresh VM"
	}
	res, out, err := s.run(ctx, req, v.tool, lost)
	switch {
	case out != nil && out.Result != nil && out.Result.SessionReset && s.undelivered(ctx, req):
		// The result saying so never reaches the client.
		v.lost = "an earlier " + ToolSession + " call was canceled, and its VM discarded with the session's state; this program ran in a fresh one"
	case out != nil && out.Result != nil:
		v.lost = "" // reported with this result
	}
	return res, err
}

func (s *Server) resetSession(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	if s.noSession(req) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "nothing to discard: under MCP " + statelessVersion + " over HTTP a session is the handle its last " + ToolSession + " result gave, and this server holds none; call " + ToolSession + " without a " + handleArg + " argument to start fresh"}}}, nil
	}
	s.mu.Lock()
	v := s.sessions[req.Session]
	s.mu.Unlock()
	had := false
	if v != nil {
		v.mu.Lock()
		had = v.gs != nil || v.parked != nil
		v.free()
		if had {
			v.lost = ToolSessionReset + " discarded the session's VM; this program ran in a fresh one"
		}
		v.mu.Unlock()
	}
	msg := "the session had no VM; the next " + ToolSession + " call starts fresh"
	if had {
		msg = "the session's VM was discarded; the next " + ToolSession + " call starts fresh"
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: msg}}}, nil
}

// noSession reports whether req comes where no MCP session lasts beyond
// the call (MCP statelessVersion over HTTP, where each request may reach
// another process): ruby_session then carries its state in a handle.
// Over stdio the connection is the session, whatever the revision.
func (s *Server) noSession(req *mcp.CallToolRequest) bool {
	return sessionVersion(req) >= statelessVersion && req.Extra != nil && req.Extra.Header != nil
}

// session returns ss's vmSession, made on first use; it is freed when
// ss ends.
func (s *Server) session(ss *mcp.ServerSession) (*vmSession, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("the server is shutting down")
	}
	if v, ok := s.sessions[ss]; ok {
		return v, nil
	}
	if len(s.sessions) >= s.opts.MaxSessions {
		return nil, fmt.Errorf("this server already holds %d sessions, its limit (--max-sessions); %s keeps no state and still works, or try again when a session has ended", len(s.sessions), ToolRun)
	}
	v := &vmSession{}
	s.sessions[ss] = v
	go func() {
		_ = ss.Wait()
		s.mu.Lock()
		delete(s.sessions, ss)
		s.mu.Unlock()
		v.close()
	}()
	return v, nil
}

// sessionError is a session VM that could not be made.
type sessionError struct{ msg string }

func (e *sessionError) Error() string { return e.msg }

// open gives v a fresh VM and its tool; v.mu is held.
func (v *vmSession) open(s *Server) error {
	gs, err := s.rt.NewSession()
	if err != nil {
		return &sessionError{err.Error()}
	}
	t, err := codemode.New(codemode.Config{Runtime: s.rt, Evaluator: gs, Session: true, Name: ToolSession, Instructions: s.opts.Instructions, Servers: s.opts.Servers})
	if err != nil {
		gs.Close()
		return err
	}
	v.gs, v.tool = gs, t
	return nil
}

// touch restarts v's idle timer; v.mu is held.
func (v *vmSession) touch(idle time.Duration) {
	v.lastUse = time.Now()
	if v.idle != nil {
		v.idle.Stop()
	}
	v.idle = time.AfterFunc(idle, func() {
		v.mu.Lock() // waits for a running program
		defer v.mu.Unlock()
		if v.gs != nil && time.Since(v.lastUse) >= idle {
			if v.gs.Pending() == nil {
				// Suspend closes the session's VM when it succeeds; it
				// fails, leaving it usable, when the guest keeps a file
				// open or the Runtime has no StateKeys.
				if st, err := v.gs.Suspend(context.Background()); err == nil {
					v.gs, v.tool, v.parked = nil, nil, st
					return
				}
			}
			v.free()
			v.lost = fmt.Sprintf("this session's previous VM was freed after %v without a call, with the session's state; this program ran in a fresh one", idle)
		}
	})
}

// free closes v's VM and drops its parked state; v.mu is held.
func (v *vmSession) free() {
	v.parked = nil
	if v.gs != nil {
		v.gs.Close()
		v.gs, v.tool = nil, nil
	}
}

// close frees v for good, after a running program ends.
func (v *vmSession) close() {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.idle != nil {
		v.idle.Stop()
	}
	v.free()
}

// callHeader is the request header through which [Server.HTTPHandler]
// hands a call the context of the HTTP request that carried it; a
// client's own header of that name is removed.
const callHeader = "Glovebox-Internal-Call"

// callGone returns a context that ends when the client that made req has
// gone (its HTTP connection dropped, or, over stdio, its input ended), or
// nil when none is known. A call whose HTTP request has already ended
// gets an ended context.
func (s *Server) callGone(ctx context.Context, req *mcp.CallToolRequest) context.Context {
	if req.Extra != nil && req.Extra.Header != nil {
		if tok := req.Extra.Header.Get(callHeader); tok != "" {
			if c, ok := s.calls.Load(tok); ok {
				return c.(context.Context)
			}
			return ended
		}
	}
	if req.Session != nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		if c, ok := s.gone[req.Session]; ok {
			return c
		}
	}
	return nil
}

// undelivered reports whether the result of req can no longer reach its
// client: the call was canceled, or the client has gone.
func (s *Server) undelivered(ctx context.Context, req *mcp.CallToolRequest) bool {
	if ctx.Err() != nil {
		return true
	}
	g := s.callGone(ctx, req)
	return g != nil && g.Err() != nil
}

var ended = func() context.Context {
	c, cancel := context.WithCancel(context.Background())
	cancel()
	return c
}()

// run runs the call's program with t and makes its result; note, when
// set, says the session's state was lost since its last result: the
// result then has session_reset true and the note as its reason.
func (s *Server) run(ctx context.Context, req *mcp.CallToolRequest, t *codemode.Tool, note string) (*mcp.CallToolResult, *codemode.Outcome, error) {
	return s.runDo(ctx, req, note, func(ctx context.Context) (*codemode.Outcome, error) { return t.Handle(ctx, req.Params.Arguments) })
}

// slotKey marks a context whose call holds one of Server.slots.
type slotKey struct{}

// takeSlot waits for one of s.slots (MaxConcurrent) unless ctx's call
// holds one already; ok is false when ctx ended first. release gives
// back the slot taken (nothing when none was).
func (s *Server) takeSlot(ctx context.Context) (_ context.Context, release func(), ok bool) {
	if ctx.Value(slotKey{}) != nil {
		return ctx, func() {}, true
	}
	select {
	case s.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx, func() {}, false
	}
	return context.WithValue(ctx, slotKey{}, true), func() { <-s.slots }, true
}

// runDo is run with do running the program: a first run, or a paused
// one continued. A run suspended in a question under statelessVersion
// answers input_required.
func (s *Server) runDo(ctx context.Context, req *mcp.CallToolRequest, note string, do func(context.Context) (*codemode.Outcome, error)) (*mcp.CallToolResult, *codemode.Outcome, error) {
	ctx = s.callContext(ctx, req)
	if gone := s.callGone(ctx, req); gone != nil {
		// Nobody could receive the result (the SDK keeps none for a
		// client to fetch after it reconnects): the call stops with its
		// client.
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		stop := context.AfterFunc(gone, cancel)
		defer stop()
	}
	ctx, release, ok := s.takeSlot(ctx)
	if !ok {
		return errorResult("canceled", "Glovebox::Canceled", "the call was canceled while waiting for a free sandbox"), nil, nil
	}
	defer release()
	if tok := req.Params.GetProgressToken(); tok != nil && req.Session != nil {
		stop := s.progress(ctx, req.Session, tok)
		defer stop()
	}
	start := time.Now()
	out, err := do(ctx)
	if err != nil {
		s.log.Error("mcpserver: eval failed on the host", "err", err)
		return errorResult("sandbox_error", "Glovebox::SandboxError", err.Error()), nil, nil
	}
	if out.Result != nil && out.Result.Status == glovebox.StatusSuspended && callFrom(ctx).stateless() {
		return s.pausedResult(callFrom(ctx), req.Params.Name, out.Result), out, nil
	}
	status := "invalid_input"
	if out.Result != nil {
		status = string(out.Result.Status)
	}
	if req.Session != nil {
		_ = req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Logger: "glovebox",
			Data: map[string]any{"tool": req.Params.Name, "status": status, "ms": time.Since(start).Milliseconds()}})
	}
	structured := out.Output
	if note != "" && out.Result != nil {
		structured = markReset(structured, note)
	}
	text := render(structured)
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}},
		StructuredContent: structured, IsError: out.IsError}, out, nil
}

// markReset sets session_reset in a session tool's result object, with
// reason as its session_reset_reason.
func markReset(out json.RawMessage, reason string) json.RawMessage {
	r, _ := json.Marshal(reason)
	var b bytes.Buffer
	// codemode ends the object with session_reset: keep its order.
	body := bytes.TrimSuffix(bytes.TrimSuffix(bytes.TrimSpace(out), []byte("}")), []byte(`,"session_reset":false`))
	body = bytes.TrimSuffix(body, []byte(`,"session_reset":true`))
	b.Write(body)
	b.WriteString(`,"session_reset":true,"session_reset_reason":`)
	b.Write(r)
	b.WriteByte('}')
	if !json.Valid(b.Bytes()) {
		return out
	}
	return b.Bytes()
}

// progress sends ss progress notifications for tok every interval until
// the returned function is called.
func (s *Server) progress(ctx context.Context, ss *mcp.ServerSession, tok any) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		start := time.Now()
		tick := time.NewTicker(s.opts.ProgressInterval)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
				el := time.Since(start)
				limit := s.rt.Limits().Timeout
				_ = ss.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: tok,
					Progress: el.Seconds(), Total: limit.Seconds(),
					Message: fmt.Sprintf("running for %v (limit %v)", el.Round(100*time.Millisecond), limit)})
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// errorResult is an isError result for a failure the program never saw.
func errorResult(status, class, msg string) *mcp.CallToolResult {
	b, _ := json.Marshal(map[string]any{"status": status, "error": map[string]string{"class": class, "message": msg}})
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: render(b)}}, StructuredContent: json.RawMessage(b), IsError: true}
}
