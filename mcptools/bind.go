package mcptools

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/codemode"
	"github.com/gloveboxhq/glovebox/internal/spawn"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Server says how to reach one MCP server. Exactly one of Command and URL
// is set.
type Server struct {
	// Name identifies the server in descriptions, errors, logs and
	// collision prefixes: [a-z][a-z0-9_]*, at most 32 bytes.
	Name string
	// Command is the argv of a stdio server (Command[0] is looked up in
	// the host's PATH). Dir is its working directory
	// ("" = the host's).
	//
	// The server does not inherit the host's environment: it gets only
	// the host's values of the variables [BaseEnv] names (what a server
	// started through npx needs: PATH, HOME, the locale, TMPDIR), then
	// the host's values of the names in PassEnv (those the host has set),
	// then Env's entries ("NAME=value"); a later entry for a name
	// replaces an earlier one. A token or API key in the host's
	// environment reaches a server only when named here.
	Command []string
	Env     []string
	PassEnv []string
	Dir     string
	// URL is the endpoint of a Streamable HTTP server. Header is sent with
	// every request (an Authorization, say); the guest never sees it.
	URL    string
	Header http.Header
	// OAuth authorizes the HTTP server with OAuth 2.1 when it asks (a 401
	// or a 403 insufficient_scope); see [OAuth]. TokenSource instead
	// supplies the host's own tokens, per request. At most one is set,
	// only with URL, and not with an Authorization in Header.
	OAuth       *OAuth
	TokenSource TokenSource
	// ProtocolVersion is the MCP revision to ask for: "" asks for the
	// newest the Go SDK speaks (2026-07-28: server/discover, stateless),
	// falling back to the initialize handshake at 2025-11-25 when the
	// server does not answer server/discover; "2025-11-25",
	// "2025-06-18", "2025-03-26" or "2024-11-05" starts with initialize
	// at that revision (the server may answer with an older one). The
	// revision spoken is [Binding.ProtocolVersions]'.
	ProtocolVersion string
	// Labels mark sensitive values in the results of every tool of the
	// server, and ToolLabels (keyed by the server's own tool name) in
	// one tool's; see glovebox.Toolset.Label. Results arrive in the
	// guest as this package describes them (content blocks, structured
	// content), so a glovebox.Label Find function such as
	// glovebox.FindEmails usually fits better than a Path. Nil labels
	// nothing.
	Labels     []glovebox.Label
	ToolLabels map[string][]glovebox.Label
	// Sinks sets which labelled kinds a tool's arguments may carry, keyed
	// by the server's own tool name, "*" for every tool without its own
	// entry (see glovebox.Toolset.Sink). Once any tool of the Toolset is
	// labelled, a tool with no entry accepts no labelled kind.
	Sinks map[string]glovebox.SinkPolicy
}

// flow sets the data-flow policy of the server's tool mcpName, bound as
// gname in ts.
func (s Server) flow(ts *glovebox.Toolset, gname, mcpName string) error {
	if l := append(slices.Clone(s.Labels), s.ToolLabels[mcpName]...); len(l) > 0 {
		if err := ts.Label(gname, l...); err != nil {
			return err
		}
	}
	p, ok := s.Sinks[mcpName]
	if !ok {
		p, ok = s.Sinks["*"]
	}
	if ok {
		return ts.Sink(gname, p)
	}
	return nil
}

// BaseEnv returns the names of the host variables every stdio server
// gets (when the host has them set): PATH, HOME, USER, LOGNAME, SHELL,
// TMPDIR, TZ, TERM, LANG, LANGUAGE and the LC_* locale variables. Each
// call returns a new slice.
func BaseEnv() []string {
	return []string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "TMPDIR", "TZ", "TERM", "LANG", "LANGUAGE",
		"LC_ALL", "LC_CTYPE", "LC_COLLATE", "LC_MESSAGES", "LC_NUMERIC", "LC_TIME", "LC_MONETARY"}
}

// environ is the environment s's process gets (see [Server]).
func (s Server) environ() []string {
	var order []string
	val := map[string]string{}
	set := func(name, v string) {
		if _, ok := val[name]; !ok {
			order = append(order, name)
		}
		val[name] = v
	}
	for _, names := range [][]string{BaseEnv(), s.PassEnv} {
		for _, n := range names {
			if v, ok := os.LookupEnv(n); ok {
				set(n, v)
			}
		}
	}
	for _, kv := range s.Env {
		n, v, _ := strings.Cut(kv, "=")
		set(n, v)
	}
	out := make([]string, 0, len(order))
	for _, n := range order {
		out = append(out, n+"="+val[n])
	}
	return out
}

// Config tunes a [Bind]. The zero value uses the defaults below.
type Config struct {
	// Logger receives the servers' stderr lines (bounded: see
	// MaxStderrLine and MaxStderrLines) and restart reports. Nil
	// discards them.
	Logger *slog.Logger
	// StartTimeout bounds starting one server and listing its tools.
	// Zero means 30s (npx may install a package on first use).
	StartTimeout time.Duration
	// RestartBackoff is the least time between two restarts of a
	// crashed server; it doubles after each restart up to a minute and
	// resets after a call succeeds. Zero means 1s.
	RestartBackoff time.Duration
	// MaxInlineBytes is the largest content item (image, audio, blob)
	// whose bytes reach the guest; larger items are described only.
	// Zero means 64 KiB; negative never inlines.
	MaxInlineBytes int
	// MaxStderrLine bounds each logged stderr line (bytes, longer ones
	// are cut) and MaxStderrLines the lines logged per server per minute
	// (the rest are counted and reported). Zero means 2048 and 100.
	MaxStderrLine  int
	MaxStderrLines int
	// CallTimeout bounds one tool call, from the guest's call to the
	// server's answer (a restart included). Whatever it is, a call also
	// ends a little before the eval's deadline or tool-time budget (a
	// tenth of the time left, at most a second), so the guest can
	// rescue the MCPTimeoutError it raises. Zero means no bound but that.
	CallTimeout time.Duration
	// Roots are what every server is told when it asks for the client's
	// roots (roots/list), over stdio and HTTP alike. Nil answers with an
	// empty list.
	Roots []Root
	// Elicit answers a server's elicitation/create request (a question
	// for the user, asked while a tool call runs), with the name of the
	// server that asked. Nil refuses elicitation: the client does not
	// offer it, and a server that asks anyway gets a JSON-RPC error at
	// once. An Elicit that ignores its context still cannot hold the call
	// past the eval's deadline. Under 2026-07-28 the question arrives in an
	// input_required result and ctx is the tool call's (it carries the
	// values of the eval's context); the call is retried with the answer.
	// Under older revisions it arrives as a request of the server's own;
	// ctx is then the connection's, with the values of the call's context
	// when exactly one call is under way on that server (the question is
	// taken to be that call's). [AcceptDefaults] answers unattended.
	// An error wrapping glovebox.ErrSuspend ([glovebox.SuspendCall])
	// suspends the guest's call instead: the server's request gets an
	// error (2025-11-25) or is not retried (2026-07-28), the call is
	// stopped, and it returns that error, so the eval suspends in it;
	// continuing it with Answer.Approved makes the call again (how
	// mcpserver.ForwardElicit asks a client that is not there during the
	// call). The same holds for Sample.
	Elicit func(ctx context.Context, server string, req *mcp.ElicitParams) (*mcp.ElicitResult, error)
	// Sample answers a server's sampling/createMessage request (also in
	// an input_required result), for a host that has a model to offer.
	// Nil refuses sampling, as for Elicit: the guest's call raises
	// MCPProtocolError naming this option.
	Sample func(ctx context.Context, server string, req *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error)
	// MaxMessageBytes caps one message a server sends: an HTTP response
	// body (JSON, or an error page), one SSE event (and so each of its
	// lines), one stdio line. MaxResponseBytes caps all that one HTTP
	// response carries (the SSE stream answering a request: its progress
	// and log events, the server's own requests, the result); the
	// standalone stream of a 2025-11-25 session lives as long as the
	// session and has only the per-event cap. A server that passes a cap
	// is read no further: the call fails with MCPProtocolError naming
	// the server and the cap (or Bind fails so), the connection is
	// closed, and the server is restarted at the next call. Zero means
	// DefaultMaxMessageBytes, and for MaxResponseBytes four times
	// MaxMessageBytes, at least DefaultMaxResponseBytes.
	MaxMessageBytes  int
	MaxResponseBytes int64
	// MaxListTools and MaxListBytes cap a server's tool listing
	// (tools/list, all its pages, at most 100 of them): its tools, and
	// the bytes the server sends while it lists them; past either, Bind
	// fails naming the server and the cap. Zero means
	// DefaultMaxListTools and DefaultMaxListBytes.
	MaxListTools int
	MaxListBytes int64
}

// Root is one of the client's roots (see [Config].Roots): a URI, usually
// file:///..., and an optional display name.
type Root struct {
	URI  string
	Name string
}

func (c *Config) defaults() {
	if c.StartTimeout <= 0 {
		c.StartTimeout = 30 * time.Second
	}
	if c.RestartBackoff <= 0 {
		c.RestartBackoff = time.Second
	}
	if c.MaxInlineBytes == 0 {
		c.MaxInlineBytes = 64 << 10
	}
	if c.MaxStderrLine <= 0 {
		c.MaxStderrLine = 2048
	}
	if c.MaxStderrLines <= 0 {
		c.MaxStderrLines = 100
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.MaxMessageBytes <= 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if c.MaxResponseBytes <= 0 {
		c.MaxResponseBytes = max(DefaultMaxResponseBytes, 4*int64(c.MaxMessageBytes))
	}
	if c.MaxListTools <= 0 {
		c.MaxListTools = DefaultMaxListTools
	}
	if c.MaxListBytes <= 0 {
		c.MaxListBytes = DefaultMaxListBytes
	}
}

// ErrBind wraps every failure of [Bind].
var ErrBind = errors.New("mcptools: bind failed")

// Binding is the set of servers one [Bind] started. Its methods are safe
// for concurrent use.
type Binding struct {
	cfg     Config
	servers []*conn
	names   map[string]string // guest name → "server/tool"
	keyed   *keyed            // per-key servers (BindKeyed); nil otherwise
}

var serverName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)

// checkEnv refuses Env entries without "=" and names that cannot be
// variables.
func (s Server) checkEnv() error {
	for _, kv := range s.Env {
		n, _, ok := strings.Cut(kv, "=")
		if !ok || n == "" || strings.ContainsRune(n, 0) {
			return fmt.Errorf("Env entry %q: want NAME=value", kv)
		}
	}
	for _, n := range s.PassEnv {
		if n == "" || strings.ContainsAny(n, "=\x00") {
			return fmt.Errorf("PassEnv name %q: want a variable name", n)
		}
	}
	return nil
}

// knownVersions are the revisions Server.ProtocolVersion may name.
var knownVersions = []string{"2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}

// checkAuth refuses OAuth and TokenSource together, either one on a
// stdio server or beside a Header Authorization, and an unknown
// ProtocolVersion.
func (s Server) checkAuth() error {
	if s.OAuth != nil && s.TokenSource != nil {
		return errors.New("set at most one of OAuth and TokenSource")
	}
	if (s.OAuth != nil || s.TokenSource != nil) && s.URL == "" {
		return errors.New("OAuth and TokenSource apply to HTTP servers (URL) only")
	}
	if (s.OAuth != nil || s.TokenSource != nil) && s.Header.Get("Authorization") != "" {
		return errors.New("Header sets an Authorization, and so would OAuth or TokenSource: keep one")
	}
	if s.ProtocolVersion != "" && !slices.Contains(knownVersions, s.ProtocolVersion) {
		return fmt.Errorf("ProtocolVersion %q: want one of %s", s.ProtocolVersion, strings.Join(knownVersions, ", "))
	}
	return nil
}

// Bind starts the servers, lists their tools and registers each in ts (see
// the package documentation for names, calls and lifecycle). On any error
// it returns one wrapping [ErrBind], saying which server and why, and
// leaves ts unchanged with no server running. The Binding must be closed.
func Bind(ctx context.Context, ts *glovebox.Toolset, cfg Config, servers ...Server) (*Binding, error) {
	cfg.defaults()
	b := &Binding{cfg: cfg, names: map[string]string{}}
	if len(servers) == 0 {
		return nil, fmt.Errorf("%w: no servers", ErrBind)
	}
	seen := map[string]bool{}
	for _, s := range servers {
		if !serverName.MatchString(s.Name) {
			return nil, fmt.Errorf("%w: server name %q: want [a-z][a-z0-9_]*, at most 32 bytes", ErrBind, s.Name)
		}
		if seen[s.Name] {
			return nil, fmt.Errorf("%w: server name %q given twice", ErrBind, s.Name)
		}
		seen[s.Name] = true
		if (len(s.Command) == 0) == (s.URL == "") {
			return nil, fmt.Errorf("%w: server %q: set exactly one of Command and URL", ErrBind, s.Name)
		}
		if err := s.checkEnv(); err != nil {
			return nil, fmt.Errorf("%w: server %q: %v", ErrBind, s.Name, err)
		}
		if err := s.checkAuth(); err != nil {
			return nil, fmt.Errorf("%w: server %q: %v", ErrBind, s.Name, err)
		}
	}
	var staged glovebox.Toolset
	taken := map[string]bool{}
	for _, n := range ts.Names() {
		taken[n] = true
	}
	fail := func(err error) (*Binding, error) {
		b.Close()
		for _, c := range b.servers { // the server's URL stays out of the host's errors too
			err = fmt.Errorf("%w%s", ErrBind, c.scrub.forHost(strings.TrimPrefix(err.Error(), ErrBind.Error())))
		}
		return nil, err
	}
	for _, s := range servers {
		c := &conn{b: b, srv: s, backoff: cfg.RestartBackoff, scrub: newScrubber(s)}
		b.servers = append(b.servers, c)
		sctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
		tools, err := c.start(sctx)
		cancel()
		if err != nil {
			return fail(fmt.Errorf("%w: server %q: %v", ErrBind, s.Name, err))
		}
		for _, t := range tools {
			gname, err := guestName(s.Name, t.Name, taken)
			if err != nil {
				return fail(fmt.Errorf("%w: server %q: %v", ErrBind, s.Name, err))
			}
			taken[gname] = true
			bt, err := newTool(c, gname, t)
			if err != nil {
				return fail(fmt.Errorf("%w: server %q: tool %q: %v", ErrBind, s.Name, t.Name, err))
			}
			c.tools = append(c.tools, bt)
			b.names[gname] = s.Name + "/" + t.Name
			if err := staged.Add(gname, bt.call); err != nil {
				return fail(fmt.Errorf("%w: server %q: %v", ErrBind, s.Name, err))
			}
			doc, err := bt.doc()
			if err == nil {
				err = staged.Describe(gname, doc)
			}
			if err == nil {
				err = s.flow(&staged, gname, t.Name)
			}
			if err != nil {
				return fail(fmt.Errorf("%w: server %q: %v", ErrBind, s.Name, err))
			}
		}
	}
	if err := ts.Merge(&staged); err != nil { // cannot collide: names were checked against ts
		return fail(fmt.Errorf("%w: %v", ErrBind, err))
	}
	return b, nil
}

var nonName = regexp.MustCompile(`[^a-z0-9_]+`)

// mapName maps an MCP tool name to a Ruby-callable one (see the package
// documentation).
func mapName(name string) string {
	if glovebox.ValidToolName(name) == nil {
		return name
	}
	m := nonName.ReplaceAllString(strings.ToLower(name), "_")
	if m == "" || (m[0] >= '0' && m[0] <= '9') {
		m = "t_" + m
	}
	return m
}

func guestName(server, tool string, taken map[string]bool) (string, error) {
	if tool == "" {
		return "", errors.New("a tool has an empty name")
	}
	m := mapName(tool)
	if glovebox.ValidToolName(m) == nil && !taken[m] {
		return m, nil
	}
	p := server + "_" + m
	if err := glovebox.ValidToolName(p); err != nil {
		return "", fmt.Errorf("tool %q: no usable name: %v", tool, err)
	}
	if taken[p] {
		return "", fmt.Errorf("tool %q: %q and %q are both taken", tool, m, p)
	}
	return p, nil
}

// Names returns the bound tools: guest name → "server/mcp-tool-name".
func (b *Binding) Names() map[string]string {
	out := make(map[string]string, len(b.names))
	for k, v := range b.names {
		out[k] = v
	}
	return out
}

// ProtocolVersions returns the MCP revision each server (by name) spoke
// at its last start: "2026-07-28" for a stateless server found by
// server/discover, else the revision its initialize answered with. A
// server that offers no tools still has an entry.
func (b *Binding) ProtocolVersions() map[string]string {
	out := map[string]string{}
	for _, c := range b.servers {
		c.mu.Lock()
		out[c.srv.Name] = c.version
		c.mu.Unlock()
	}
	return out
}

// Notes describes the bound servers for a model, in Bind's order: name,
// guest tool names (sorted) and the instructions each server gave at
// initialize. Pass them as [codemode.Config].Servers.
func (b *Binding) Notes() []codemode.Server {
	var out []codemode.Server
	for _, c := range b.servers {
		s := codemode.Server{Name: c.srv.Name, Instructions: c.instructions}
		for _, t := range c.tools {
			s.Tools = append(s.Tools, t.guest)
		}
		sort.Strings(s.Tools)
		out = append(out, s)
	}
	return out
}

// Close stops every server and waits for its process to exit. Later calls
// of the bound tools raise MCPTransportError. Close is idempotent and
// returns nil.
func (b *Binding) Close() error {
	if b.keyed != nil {
		b.keyed.close()
	}
	for _, c := range b.servers {
		c.close()
	}
	return nil
}

// conn is one server's live session, restarted after a crash.
type conn struct {
	b            *Binding
	srv          Server
	instructions string
	tools        []*tool
	version      string // the revision the server answered with at the last start
	scrub        *scrubber

	mu       sync.Mutex
	session  *mcp.ClientSession
	cmd      *proc
	tap      *rawTap // the stdio stream's tap; nil for HTTP
	guard    *guard  // caps what the current session reads from the server
	dead     bool    // the session ended without Close
	closed   bool
	backoff  time.Duration
	nextTry  time.Time
	restarts int
	stderr   *stderrLog
	oauth    *oauthState                // the server's OAuth flow and tokens, kept across restarts; nil without OAuth
	excluded []string                   // listing entries the SDK dropped
	inflight map[uint64]context.Context // the calls under way, by a number of enter's
	nextCall uint64
	done     chan struct{} // closed when the current session ends
	starting chan struct{} // non-nil while a call (re)starts the server
}

// client is the SDK client of one session: it answers the server's
// requests (roots/list, and elicitation and sampling when the host offers
// them; see Config).
func (c *conn) client() *mcp.Client {
	cfg := &c.b.cfg
	opts := &mcp.ClientOptions{Logger: slog.New(&sdkLog{c: c, next: cfg.Logger.Handler()})}
	if f := cfg.Elicit; f != nil {
		opts.ElicitationHandler = func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			ctx = c.askContext(ctx)
			res, err := f(ctx, c.srv.Name, req.Params)
			return res, suspendCall(ctx, err)
		}
	}
	if f := cfg.Sample; f != nil {
		opts.CreateMessageHandler = func(ctx context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			ctx = c.askContext(ctx)
			res, err := f(ctx, c.srv.Name, req.Params)
			return res, suspendCall(ctx, err)
		}
	}
	cl := mcp.NewClient(&mcp.Implementation{Name: "glovebox-mcptools", Version: "1"}, opts)
	var roots []*mcp.Root
	for _, r := range cfg.Roots {
		roots = append(roots, &mcp.Root{URI: r.URI, Name: r.Name})
	}
	cl.AddRoots(roots...)
	return cl
}

// callKey marks the context of a tool call (its value: the *call).
type callKey struct{}

// call is a tool call under way: a question of its server's that asks to
// suspend the guest's call (an answerer's error wrapping
// glovebox.ErrSuspend) ends it, and the call returns that error.
type call struct {
	stop    context.CancelCauseFunc
	mu      sync.Mutex
	suspend error
}

// suspended is the suspension a question of the call asked for, or nil.
func (k *call) suspended() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.suspend
}

// suspendCall passes err on, and when it asks to suspend the guest's call
// (it wraps glovebox.ErrSuspend) and ctx is a call's, notes it in the call
// and stops the call: under 2025-11-25 the server only gets a JSON-RPC
// error for its question, and the call must not wait on what it does
// next.
func suspendCall(ctx context.Context, err error) error {
	if err == nil || !errors.Is(err, glovebox.ErrSuspend) {
		return err
	}
	if k, ok := ctx.Value(callKey{}).(*call); ok {
		k.mu.Lock()
		if k.suspend == nil {
			k.suspend = err
		}
		k.mu.Unlock()
		k.stop(err)
	}
	return err
}

// enter notes a call under way on c, returning its context (marked,
// and stopped when one of its questions suspends it), the call, and the
// function that forgets it.
func (c *conn) enter(ctx context.Context) (context.Context, *call, func()) {
	ctx, stop := context.WithCancelCause(ctx)
	k := &call{stop: stop}
	ctx = context.WithValue(ctx, callKey{}, k)
	c.mu.Lock()
	id := c.nextCall
	c.nextCall++
	if c.inflight == nil {
		c.inflight = map[uint64]context.Context{}
	}
	c.inflight[id] = ctx
	c.mu.Unlock()
	return ctx, k, func() {
		c.mu.Lock()
		delete(c.inflight, id)
		c.mu.Unlock()
		stop(nil)
	}
}

// askContext is the context a server's question (elicitation, sampling)
// is answered with: ctx itself when it descends from a call (an
// input_required result, answered inside CallTool); else, when exactly
// one call is under way on c, the question is taken to be that call's and
// ctx gets its values (the eval's context: a user, an MCP session), keeping
// its own deadline and cancellation; else ctx as it is.
func (c *conn) askContext(ctx context.Context) context.Context {
	if ctx.Value(callKey{}) != nil {
		return ctx
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.inflight) != 1 {
		return ctx
	}
	for _, call := range c.inflight {
		return withValuesOf{ctx, call}
	}
	return ctx
}

// withValuesOf is a Context with the values of call before its own.
type withValuesOf struct {
	context.Context
	call context.Context
}

func (w withValuesOf) Value(k any) any {
	if v := w.call.Value(k); v != nil {
		return v
	}
	return w.Context.Value(k)
}

// sdkLog passes the SDK client's log to the host logger (a tool the SDK
// leaves out of a listing for bad x-mcp-header annotations is logged
// there and not bound) and notes the null entries it drops, so Bind can
// refuse such a listing instead of binding part of it.
type sdkLog struct {
	c    *conn
	next slog.Handler
}

func (h *sdkLog) Enabled(ctx context.Context, l slog.Level) bool { return true }
func (h *sdkLog) Handle(ctx context.Context, r slog.Record) error {
	// A tool whose x-mcp-header annotations break the rules is left out
	// by the SDK, and the spec (SEP-2243) wants the others kept: that
	// one is only logged. A null entry is a broken listing.
	if strings.HasPrefix(r.Message, "excluding nil tool") {
		msg := r.Message
		r.Attrs(func(a slog.Attr) bool { msg += fmt.Sprintf(" %s=%v", a.Key, a.Value); return true })
		h.c.mu.Lock()
		if len(h.c.excluded) < 10 {
			h.c.excluded = append(h.c.excluded, msg)
		}
		h.c.mu.Unlock()
	}
	if h.next.Enabled(ctx, r.Level) {
		// The SDK's messages may quote the server's URL: its secret
		// parts stay out of the host's log.
		out := slog.NewRecord(r.Time, r.Level, h.c.scrub.forHost(r.Message), r.PC)
		r.Attrs(func(a slog.Attr) bool {
			if a.Value.Kind() == slog.KindString || a.Value.Kind() == slog.KindAny {
				a.Value = slog.StringValue(h.c.scrub.forHost(a.Value.String()))
			}
			out.AddAttrs(a)
			return true
		})
		return h.next.Handle(ctx, out)
	}
	return nil
}
func (h *sdkLog) WithAttrs(as []slog.Attr) slog.Handler {
	return &sdkLog{c: h.c, next: h.next.WithAttrs(as)}
}
func (h *sdkLog) WithGroup(n string) slog.Handler { return &sdkLog{c: h.c, next: h.next.WithGroup(n)} }

// start connects and lists the tools.
func (c *conn) start(ctx context.Context) ([]*mcp.Tool, error) {
	cs, err := c.connect(ctx)
	if err != nil {
		return nil, err
	}
	if ir := cs.InitializeResult(); ir != nil {
		c.instructions = ir.Instructions
	}
	var tools []*mcp.Tool
	if ir := cs.InitializeResult(); ir == nil || ir.Capabilities == nil || ir.Capabilities.Tools == nil {
		// Nothing to bind (a server of prompts or resources only), which
		// is no reason to fail the host's other servers.
		c.b.cfg.Logger.Warn("mcptools: the server offers no tools; none bound", "server", c.srv.Name)
		return nil, nil
	}
	cfg := &c.b.cfg
	c.mu.Lock()
	g := c.guard
	c.mu.Unlock()
	before := g.received.Load()
	cursor := ""
	for page := 0; ; page++ {
		if page >= maxListPages {
			return nil, fmt.Errorf("tools/list: server %q listed its tools in more than %d pages, the cap; a listing that long does not end", c.srv.Name, maxListPages)
		}
		res, err := cs.ListTools(ctx, &mcp.ListToolsParams{Cursor: cursor})
		if err := g.tripped(); err != nil {
			return nil, fmt.Errorf("tools/list: %v", err)
		}
		if err != nil {
			return nil, fmt.Errorf("tools/list: %v", err)
		}
		if n := g.received.Load() - before; n > cfg.MaxListBytes {
			return nil, fmt.Errorf("tools/list: server %q sent more than %d bytes listing its tools, the cap (mcptools.Config.MaxListBytes)", c.srv.Name, cfg.MaxListBytes)
		}
		for i, t := range res.Tools {
			if t == nil {
				return nil, fmt.Errorf("tools/list: entry %d of page %d is null", i, page)
			}
			tools = append(tools, t)
		}
		if len(tools) > cfg.MaxListTools {
			return nil, fmt.Errorf("tools/list: server %q listed more than %d tools, the cap (mcptools.Config.MaxListTools)", c.srv.Name, cfg.MaxListTools)
		}
		if res.NextCursor == "" {
			break
		}
		cursor = res.NextCursor
	}
	c.mu.Lock()
	excluded := c.excluded
	c.mu.Unlock()
	if len(excluded) > 0 {
		return nil, fmt.Errorf("tools/list: malformed entries: %s", strings.Join(excluded, "; "))
	}
	seen := map[string]bool{}
	for _, t := range tools {
		if seen[t.Name] {
			return nil, fmt.Errorf("tools/list: tool %q listed twice", t.Name)
		}
		seen[t.Name] = true
	}
	sort.SliceStable(tools, func(i, j int) bool { return tools[i].Name < tools[j].Name })
	return tools, nil
}

// connect starts the server (or opens the HTTP session) and initializes.
func (c *conn) connect(ctx context.Context) (*mcp.ClientSession, error) {
	var t mcp.Transport
	var pr *proc
	var tap *rawTap
	cfg := &c.b.cfg
	g := &guard{server: c.srv.Name, cfg: cfg}
	g.onTrip = func() {
		c.mu.Lock()
		var cs *mcp.ClientSession
		if c.guard == g {
			cs, c.dead = c.session, true
		}
		c.mu.Unlock()
		if cs != nil {
			go cs.Close()
		}
	}
	c.mu.Lock()
	c.guard = g
	c.mu.Unlock()
	// The SDK's own caps stay as a backstop, above the guard's, so that
	// the guard, which names the server and the cap, trips first.
	backstop := 2*cfg.MaxMessageBytes + 64<<10
	if len(c.srv.Command) > 0 {
		c.stderr = newStderrLog(c.b.cfg, c.srv.Name)
		var out io.ReadCloser
		var in io.WriteCloser
		var err error
		pr, out, in, err = startProc(c.srv, c.stderr)
		if err != nil {
			return nil, fmt.Errorf("cannot start: %v", err)
		}
		tap = newRawTap(g)
		t = &mcp.IOTransport{Reader: tapReader{out, tap}, Writer: tapWriter{in, tap, new(sync.Mutex)}, MaxLineLength: backstop}
	} else {
		var rt http.RoundTripper = headerTransport{c.srv.Header, c.srv.URL, capTransport{g, http.DefaultTransport}}
		if c.srv.TokenSource != nil {
			rt = tokenTransport{c.srv.TokenSource, c.srv.URL, rt}
		}
		hc := &http.Client{Transport: rt}
		// The standalone stream carries the server's requests that belong
		// to no call of ours (server-everything asks for roots there);
		// without it they wait for an answer that never comes. A dropped
		// stream is resumed (MaxRetries 0: the SDK's default of 5 tries,
		// honouring the server's retry field and Last-Event-ID).
		st := &mcp.StreamableClientTransport{Endpoint: c.srv.URL, HTTPClient: hc, MaxEventSize: backstop}
		if c.srv.OAuth != nil {
			c.mu.Lock()
			if c.oauth == nil {
				o, err := newOAuthState(c.srv, &c.b.cfg)
				if err != nil {
					c.mu.Unlock()
					return nil, err
				}
				c.oauth = o
			}
			st.OAuthHandler = c.oauth
			c.mu.Unlock()
		}
		t = st
	}
	cs, err := c.client().Connect(ctx, t, &mcp.ClientSessionOptions{ProtocolVersion: c.srv.ProtocolVersion})
	if err != nil {
		pr.stop()
		return nil, fmt.Errorf("cannot start or initialize: %v", err)
	}
	c.mu.Lock()
	if ir := cs.InitializeResult(); ir != nil {
		c.version = ir.ProtocolVersion
	}
	c.session, c.cmd, c.tap, c.dead = cs, pr, tap, false
	closed := c.closed
	c.mu.Unlock()
	if closed {
		cs.Close()
		pr.stop()
		return nil, errClosed
	}
	var version string
	if ir := cs.InitializeResult(); ir != nil {
		version = ir.ProtocolVersion
	}
	c.b.cfg.Logger.Info("mcptools: connected", "server", c.srv.Name, "protocol", version)
	done := make(chan struct{})
	c.mu.Lock()
	c.done = done
	c.mu.Unlock()
	go func() {
		cs.Wait()
		close(done)
		c.mu.Lock()
		if c.session == cs {
			c.dead = true
		}
		c.mu.Unlock()
	}()
	return cs, nil
}

var errClosed = errors.New("the binding is closed")

// live returns a working session, restarting a dead server when its
// backoff allows.
func (c *conn) live(ctx context.Context) (*mcp.ClientSession, error) {
	c.mu.Lock()
	for c.starting != nil { // another call is (re)starting the server: wait for it
		ch := c.starting
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("gave up waiting for the server to start: %v", context.Cause(ctx))
		}
		c.mu.Lock()
	}
	if c.closed {
		c.mu.Unlock()
		return nil, errClosed
	}
	if !c.dead && c.session != nil {
		cs := c.session
		c.mu.Unlock()
		return cs, nil
	}
	if wait := time.Until(c.nextTry); wait > 0 {
		c.mu.Unlock()
		return nil, fmt.Errorf("the server stopped; the next restart is allowed in %v", wait.Round(time.Millisecond))
	}
	old, oldCmd := c.session, c.cmd
	c.session, c.cmd = nil, nil
	verb := "starting"
	if old != nil || c.restarts > 0 {
		verb = "restarting"
		c.nextTry = time.Now().Add(c.backoff)
		c.backoff = min(2*c.backoff, time.Minute)
		c.restarts++
	}
	n := c.restarts
	starting := make(chan struct{})
	c.starting = starting
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.starting = nil
		c.mu.Unlock()
		close(starting)
	}()
	if old != nil {
		old.Close()
	}
	oldCmd.stop()
	c.b.cfg.Logger.Warn("mcptools: "+verb+" server", "server", c.srv.Name, "restarts", n)
	sctx, cancel := context.WithTimeout(ctx, c.b.cfg.StartTimeout)
	defer cancel()
	cs, err := c.connect(sctx)
	if err != nil {
		c.mu.Lock()
		c.dead = true
		if c.restarts == 0 { // a first start that failed counts as a crash
			c.restarts = 1
			c.nextTry = time.Now().Add(c.backoff)
		}
		c.mu.Unlock()
		return nil, fmt.Errorf("%s failed: %v", verb, err)
	}
	return cs, nil
}

// ok resets the backoff after a successful call.
func (c *conn) ok() {
	c.mu.Lock()
	c.backoff = c.b.cfg.RestartBackoff
	c.mu.Unlock()
}

func (c *conn) close() {
	c.mu.Lock()
	c.closed = true
	cs, cmd, o := c.session, c.cmd, c.oauth
	c.session, c.cmd = nil, nil
	c.mu.Unlock()
	if cs != nil {
		cs.Close()
	}
	cmd.stop()
	o.close()
}

// proc is a stdio server's process: the watchdog shell and, below it,
// the server.
type proc struct {
	cmd      *exec.Cmd
	lifeline *os.File      // the write end of the watchdog's lifeline
	exited   chan struct{} // closed when Wait has returned
}

// watchdog is the shell script that runs a stdio server (its argv follows
// the script) so that no part of the server outlives the host, even one
// killed with SIGKILL. The shell, its own process group's leader, starts
// the server in the background on the shell's stdin, stdout and stderr,
// lets go of stdin and stdout (the server's exit must close them), and
// waits. A watcher subshell reads the lifeline, fd 3, whose only write end
// the host holds: when the host exits, however it exits, the read ends
// and the watcher kills the whole group, the server and anything it
// started (npx runs node through a shell: a grandchild) included. When
// the server exits first, the shell stops the watcher and exits with the
// server's status. (A non-interactive shell runs a background command on
// /dev/null, hence the copy of stdin on fd 4.)
const watchdog = `exec 4<&0
"$@" <&4 4<&- 3<&- &
pid=$!
exec </dev/null >/dev/null 4<&-
( read -r _ <&3; kill -KILL 0 ) &
w=$!
exec 3<&-
wait "$pid"
s=$?
kill "$w" 2>/dev/null
exit "$s"`

// startProc starts s's command under the [watchdog] shell in a process
// group of its own (so stop can end the whole tree) with plain pipes, so
// nothing but the session closes the server's stdout before it is read
// to the end. On Linux the shell also gets SIGKILL when the host dies
// (Pdeathsig); it is started from one OS thread that never exits (see
// forkThread), since the signal fires when the forking thread exits.
func startProc(s Server, stderr io.Writer) (*proc, io.ReadCloser, io.WriteCloser, error) {
	path, err := exec.LookPath(s.Command[0])
	if err != nil {
		return nil, nil, nil, err
	}
	cmd := exec.Command("/bin/sh", append([]string{"-c", watchdog, "mcptools-watchdog", path}, s.Command[1:]...)...)
	cmd.Env, cmd.Dir, cmd.Stderr = s.environ(), s.Dir, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setDeathSignal(cmd.SysProcAttr)
	cmd.WaitDelay = time.Second // a child escaping the group cannot hold stderr open forever
	var files []*os.File
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	pipe := func() (r, w *os.File) {
		if err == nil {
			if r, w, err = os.Pipe(); err == nil {
				files = append(files, r, w)
			}
		}
		return r, w
	}
	outR, outW := pipe()
	inR, inW := pipe()
	lifeR, lifeW := pipe()
	if err != nil {
		closeAll()
		return nil, nil, nil, err
	}
	cmd.Stdin, cmd.Stdout, cmd.ExtraFiles = inR, outW, []*os.File{lifeR}
	err = onForkThread(func() error { return spawn.Start(cmd) })
	inR.Close()
	outW.Close()
	lifeR.Close()
	if err != nil {
		closeAll()
		return nil, nil, nil, err
	}
	p := &proc{cmd: cmd, lifeline: lifeW, exited: make(chan struct{})}
	go func() {
		cmd.Wait()
		close(p.exited)
	}()
	return p, outR, inW, nil
}

// forkJobs carries process starts to the fork thread.
var (
	forkOnce sync.Once
	forkJobs chan func()
)

// onForkThread runs start on a goroutine locked to its OS thread for the
// life of the process, so a child's Pdeathsig fires only when the host
// dies, not when the thread of whichever goroutine started it ends (an
// eval's goroutine may hold a locked thread that exits after the eval).
func onForkThread(start func() error) error {
	forkOnce.Do(func() {
		forkJobs = make(chan func())
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for job := range forkJobs {
				job()
			}
		}()
	})
	done := make(chan error, 1)
	forkJobs <- func() { done <- start() }
	return <-done
}

// stop waits up to 2s for the server to exit after its stdin closed (the
// session's Close closes it), then sends SIGTERM to its process group, and
// after another second SIGKILL; it returns when the process is reaped. A
// nil p does nothing.
func (p *proc) stop() {
	if p == nil {
		return
	}
	pgid := p.cmd.Process.Pid
	select {
	case <-p.exited:
	case <-time.After(2 * time.Second):
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(time.Second):
		}
	}
	// Whatever is left of the group (a wrapper's children) goes too.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	<-p.exited
	p.lifeline.Close()
}

// headerTransport sets the server's headers (credentials, often) on the
// requests to the server's own origin only: a redirect elsewhere gets
// none, as net/http drops the Authorization of a request it redirects to
// another host.
type headerTransport struct {
	h   http.Header
	url string // the server's
	rt  http.RoundTripper
}

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if len(t.h) > 0 && sameOrigin(r.URL, t.url) {
		r = r.Clone(r.Context())
		for k, vs := range t.h {
			r.Header[http.CanonicalHeaderKey(k)] = append([]string(nil), vs...)
		}
	}
	return t.rt.RoundTrip(r)
}

// sameOrigin reports whether u has the scheme, host and port of the URL
// server (a default port written or not).
func sameOrigin(u *url.URL, server string) bool {
	su, err := url.Parse(server)
	if err != nil {
		return false
	}
	origin := func(u *url.URL) string {
		scheme, host, port := strings.ToLower(u.Scheme), strings.ToLower(u.Hostname()), u.Port()
		if port == "" || (scheme == "http" && port == "80") || (scheme == "https" && port == "443") {
			port = ""
		}
		return scheme + "://" + host + ":" + port
	}
	return origin(u) == origin(su)
}

// stderrLog forwards a child's stderr to the logger a line at a time,
// bounded in line length and lines per minute.
type stderrLog struct {
	cfg     Config
	server  string
	mu      sync.Mutex
	buf     []byte
	window  time.Time
	lines   int
	dropped int
}

func newStderrLog(cfg Config, server string) *stderrLog {
	return &stderrLog{cfg: cfg, server: server}
}

var _ io.Writer = (*stderrLog)(nil)

func (l *stderrLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := strings.IndexByte(string(p), '\n')
		if i < 0 {
			room := l.cfg.MaxStderrLine - len(l.buf)
			if room > 0 {
				l.buf = append(l.buf, p[:min(room, len(p))]...)
			}
			break
		}
		room := l.cfg.MaxStderrLine - len(l.buf)
		if room > 0 {
			l.buf = append(l.buf, p[:min(room, i)]...)
		}
		l.emit()
		p = p[i+1:]
	}
	return n, nil
}

func (l *stderrLog) emit() {
	now := time.Now()
	if now.Sub(l.window) > time.Minute {
		if l.dropped > 0 {
			l.cfg.Logger.Warn("mcptools: server stderr lines dropped", "server", l.server, "dropped", l.dropped)
		}
		l.window, l.lines, l.dropped = now, 0, 0
	}
	if l.lines < l.cfg.MaxStderrLines {
		l.lines++
		l.cfg.Logger.Info("mcptools: server stderr", "server", l.server, "line", string(l.buf))
	} else {
		l.dropped++
	}
	l.buf = l.buf[:0]
}
