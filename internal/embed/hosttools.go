package embed

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/httptool"
	"github.com/gloveboxhq/glovebox/internal/clientwire"
	"github.com/gloveboxhq/glovebox/mcptools"
)

// Host tools are Go tools the child runs for the parent: an HTTP tool
// (httptool, Glovebox::HttpTool) or a set of MCP servers (mcptools, a
// Sandbox's mcp:). The parent binds them once (the bind op) and exposes
// their functions in its sandboxes like its own methods; a guest's call
// of one comes back to the parent as any tool call does (so the parent's
// hooks, approval, budgets and transcript see it), and the parent asks
// the child to run it (the call op). So the guest's calls reach the
// network from the child, under httptool's and mcptools' rules, never
// from the guest, and never with the parent's net/http.
//
// A handle lives in the child: an HTTP tool's lifetime budgets span
// every call under its handle until http_reset; an MCP binding's
// servers run until the binding is dropped (unbind, idle for
// SessionIdle, or the child's end, which stops them: mcptools kills
// each server's process group).

// bindSpec is the bind op's body: exactly one of HTTP and MCP.
type bindSpec struct {
	HTTP *httpSpec  `json:"http,omitempty"`
	MCP  []mcpSpec  `json:"mcp,omitempty"`
	Opts *mcpConfig `json:"mcp_options,omitempty"`
}

// httpSpec is Glovebox::HttpTool's settings (httptool.Config's fields,
// durations in milliseconds).
type httpSpec struct {
	// ID names the parent's HttpTool: the same ID binds to the same
	// handle, so the tool's budgets span every sandbox exposing it.
	ID                string   `json:"id"`
	Allow             []string `json:"allow,omitempty"`
	AnyHost           bool     `json:"any_host,omitempty"`
	AllowIPLiterals   bool     `json:"allow_ip_literals,omitempty"`
	Ports             []int    `json:"ports,omitempty"`
	Trust             []string `json:"trust,omitempty"` // CIDR prefixes
	MaxRequests       int      `json:"max_requests,omitempty"`
	MaxTimeMS         int64    `json:"max_time_ms,omitempty"`
	RequestTimeoutMS  int64    `json:"request_timeout_ms,omitempty"`
	MaxResponseBytes  int64    `json:"max_response_bytes,omitempty"`
	MaxResponseHeader int      `json:"max_response_header,omitempty"`
	// Prefix starts the guest functions' names: "" gives request, get,
	// ...; "http_" httptool's own names.
	Prefix string `json:"prefix,omitempty"`
}

// mcpSpec is one MCP server of a Sandbox's mcp: (mcptools.Server's
// fields): Command (stdio) or URL (Streamable HTTP) with Headers.
type mcpSpec struct {
	Name            string            `json:"name"`
	Command         []string          `json:"command,omitempty"`
	Env             map[string]string `json:"env,omitempty"`
	PassEnv         []string          `json:"pass_env,omitempty"`
	Dir             string            `json:"dir,omitempty"`
	URL             string            `json:"url,omitempty"`
	Headers         map[string]string `json:"headers,omitempty"`
	ProtocolVersion string            `json:"protocol_version,omitempty"`
}

// mcpConfig is the binding's mcptools.Config (milliseconds).
type mcpConfig struct {
	StartTimeoutMS int64 `json:"start_timeout_ms,omitempty"`
	CallTimeoutMS  int64 `json:"call_timeout_ms,omitempty"`
}

// hostTools is one bound handle.
type hostTools struct {
	id    string
	print string // the spec's fingerprint
	kind  string // "http" or "mcp"
	rt    *glovebox.Runtime
	http  *httptool.Tool
	mcp   *mcptools.Binding
	docs  []clientwire.CodeModeTool
	notes []clientwire.CodeModeServer
	names map[string]string // guest name → "server/tool" (MCP)
	// httpID is an HTTP tool's parent ID (httpSpec.ID).
	httpID string

	busy int       // calls running (s.mu)
	used time.Time // the last call's end (s.mu)
}

// bindAnswer is the bind op's answer.
type bindAnswer struct {
	Handle  string                      `json:"handle"`
	Tools   []clientwire.CodeModeTool   `json:"tools"`
	Servers []clientwire.CodeModeServer `json:"servers,omitempty"`
	Names   map[string]string           `json:"names,omitempty"`
}

// auditKey carries a call's audit collector in its context.
type auditKey struct{}

// audits collects the HTTP tool's audit entries of one call.
type audits struct {
	mu  sync.Mutex
	out []auditEntry
}

// auditEntry is httptool.AuditEntry's wire form for the parent's
// on_request.
type auditEntry struct {
	Method     string  `json:"method"`
	URL        string  `json:"url"`
	Host       string  `json:"host,omitempty"`
	Address    string  `json:"address,omitempty"`
	Status     int     `json:"status,omitempty"`
	BodyBytes  int64   `json:"body_bytes"`
	DurationMS float64 `json:"duration_ms"`
	Error      string  `json:"error,omitempty"`
	Class      string  `json:"class,omitempty"`
}

// Bounds of the handles one parent keeps. Our choices: an app has a few
// HTTP tools alive at once and a few MCP server sets; past these the
// least recently used idle one is dropped (a later call of it is
// refused unknown_handle, and the gem binds it again).
const (
	maxHTTPHandles = 256
	maxMCPHandles  = 16
)

// hostCallMax bounds a host tool's call when the guest's eval gave it
// no deadline; an eval's own timeout is far below it.
const hostCallMax = time.Hour

// bind binds the spec (or finds its handle) and answers its tools.
func (s *server) bind(ctx context.Context, spec *bindSpec) (*bindAnswer, *refusal) {
	if spec == nil || (spec.HTTP == nil) == (len(spec.MCP) == 0) {
		return nil, refusef(codeBadRequest, "bind: give exactly one of http and mcp")
	}
	if spec.HTTP != nil && spec.Opts != nil {
		return nil, refusef(codeBadRequest, "bind: mcp_options go with mcp")
	}
	b, _ := json.Marshal(spec)
	sum := sha256.Sum256(b)
	print := hex.EncodeToString(sum[:])
	s.mu.Lock()
	if s.handles == nil {
		s.handles, s.byHandlePrint, s.byHTTPID = map[string]*hostTools{}, map[string]*hostTools{}, map[string]*hostTools{}
	}
	if h := s.byHandlePrint[print]; h != nil {
		h.used = time.Now()
		s.mu.Unlock()
		return h.answer(), nil
	}
	if spec.HTTP != nil && s.byHTTPID[spec.HTTP.ID] != nil {
		s.mu.Unlock()
		return nil, refusef(codeBadRequest, "bind: the HTTP tool %q is bound already, with other settings", spec.HTTP.ID)
	}
	s.mu.Unlock()
	var h *hostTools
	var rf *refusal
	if spec.HTTP != nil {
		h, rf = s.bindHTTP(ctx, spec.HTTP)
	} else {
		h, rf = s.bindMCP(ctx, spec.MCP, spec.Opts)
	}
	if rf != nil {
		return nil, rf
	}
	h.print = print
	s.mu.Lock()
	if old := s.byHandlePrint[print]; old != nil { // bound meanwhile
		s.mu.Unlock()
		h.close()
		return old.answer(), nil
	}
	s.nextHandle++
	h.id = "h" + strconv.FormatUint(s.nextHandle, 10)
	h.used = time.Now()
	s.handles[h.id] = h
	s.byHandlePrint[print] = h
	if h.httpID != "" {
		s.byHTTPID[h.httpID] = h
	}
	drop := s.evictHandlesLocked(h.kind)
	s.mu.Unlock()
	for _, x := range drop {
		x.close()
	}
	return h.answer(), nil
}

func (h *hostTools) answer() *bindAnswer {
	a := &bindAnswer{Handle: h.id, Tools: h.docs, Servers: h.notes}
	if h.kind == "mcp" {
		a.Names = h.names
	}
	return a
}

// bindHTTP makes an HTTP tool handle.
func (s *server) bindHTTP(ctx context.Context, sp *httpSpec) (*hostTools, *refusal) {
	if sp.ID == "" {
		return nil, refusef(codeBadRequest, "bind: http.id: missing")
	}
	cfg := httptool.Config{AllowHosts: sp.Allow, AnyHost: sp.AnyHost, AllowIPLiterals: sp.AllowIPLiterals, Ports: sp.Ports,
		MaxRequests: sp.MaxRequests, MaxTime: time.Duration(sp.MaxTimeMS) * time.Millisecond,
		RequestTimeout:  time.Duration(sp.RequestTimeoutMS) * time.Millisecond,
		MaxResponseBody: sp.MaxResponseBytes, MaxResponseHeader: sp.MaxResponseHeader}
	for _, p := range sp.Trust {
		pf, err := netip.ParsePrefix(p)
		if err != nil {
			return nil, refusef(codeBadRequest, "trust: %q is not a CIDR prefix (such as 10.1.0.0/16): %v", p, err)
		}
		cfg.TrustedPrefixes = append(cfg.TrustedPrefixes, pf)
	}
	if cfg.MaxRequests < 0 || cfg.MaxTime < 0 || cfg.RequestTimeout < 0 || cfg.MaxResponseBody < 0 || cfg.MaxResponseHeader < 0 {
		return nil, refusef(codeBadRequest, "a budget or cap is negative")
	}
	cfg.Audit = func(ctx context.Context, e httptool.AuditEntry) {
		a, _ := ctx.Value(auditKey{}).(*audits)
		if a == nil {
			return
		}
		w := auditEntry{Method: e.Method, URL: e.URL, Host: e.Host, Status: e.Status, BodyBytes: e.BodyBytes,
			DurationMS: float64(e.Duration.Microseconds()) / 1000}
		if e.Addr.IsValid() {
			w.Address = e.Addr.String()
		}
		if e.Err != nil {
			var te *glovebox.ToolError
			if errors.As(e.Err, &te) {
				w.Class, w.Error = te.Class, te.Message
			} else {
				w.Error = e.Err.Error()
			}
		}
		a.mu.Lock()
		a.out = append(a.out, w)
		a.mu.Unlock()
	}
	tool, err := httptool.New(cfg)
	if err != nil {
		return nil, refusef(codeBadRequest, "%v", err)
	}
	var ts glovebox.Toolset
	if err := tool.RegisterAs(&ts, sp.Prefix); err != nil {
		return nil, refusef(codeBadRequest, "prefix %q: %v", sp.Prefix, err)
	}
	h := &hostTools{kind: "http", http: tool, httpID: sp.ID}
	if rf := s.hostRuntime(ctx, h, &ts); rf != nil {
		tool.Close()
		return nil, rf
	}
	return h, nil
}

// bindMCP starts the servers and makes their handle.
func (s *server) bindMCP(ctx context.Context, specs []mcpSpec, opts *mcpConfig) (*hostTools, *refusal) {
	cfg := mcptools.Config{Logger: s.log}
	if opts != nil {
		if opts.StartTimeoutMS < 0 || opts.CallTimeoutMS < 0 {
			return nil, refusef(codeBadRequest, "mcp_options: a timeout is negative")
		}
		cfg.StartTimeout = time.Duration(opts.StartTimeoutMS) * time.Millisecond
		cfg.CallTimeout = time.Duration(opts.CallTimeoutMS) * time.Millisecond
	}
	var servers []mcptools.Server
	for _, m := range specs {
		srv := mcptools.Server{Name: m.Name, Command: m.Command, PassEnv: m.PassEnv, Dir: m.Dir, URL: m.URL,
			ProtocolVersion: m.ProtocolVersion}
		names := make([]string, 0, len(m.Env))
		for k := range m.Env {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			srv.Env = append(srv.Env, k+"="+m.Env[k])
		}
		if len(m.Headers) > 0 {
			srv.Header = http.Header{}
			for k, v := range m.Headers {
				srv.Header.Set(k, v)
			}
		}
		servers = append(servers, srv)
	}
	var ts glovebox.Toolset
	b, err := mcptools.Bind(ctx, &ts, cfg, servers...)
	if err != nil {
		return nil, refusef(codeBadRequest, "%v", err)
	}
	h := &hostTools{kind: "mcp", mcp: b, names: b.Names()}
	for _, n := range b.Notes() {
		h.notes = append(h.notes, clientwire.CodeModeServer{Name: n.Name, Tools: n.Tools, Instructions: n.Instructions})
	}
	if rf := s.hostRuntime(ctx, h, &ts); rf != nil {
		b.Close()
		return nil, rf
	}
	return h, nil
}

// hostRuntime gives h a Runtime holding ts (no VMs: it serves calls
// through ToolSessions only) and the docs of its tools.
func (s *server) hostRuntime(ctx context.Context, h *hostTools, ts *glovebox.Toolset) *refusal {
	// Each call's own timeout bounds it (hostCall); the Runtime's
	// limits must not cut it shorter.
	rt, err := glovebox.New(ctx, glovebox.Config{Tools: ts, PoolSize: -1, Logger: s.log,
		Limits: glovebox.Limits{Timeout: hostCallMax}})
	if err != nil {
		return refusef(codeUnavailable, "%v", err)
	}
	h.rt = rt
	h.docs = clientwire.FromDocs(rt.ToolDocs())
	return nil
}

// close releases the handle's tools (stopping MCP servers).
func (h *hostTools) close() {
	if h.rt != nil {
		h.rt.Close()
	}
	if h.http != nil {
		h.http.Close()
	}
	if h.mcp != nil {
		h.mcp.Close()
	}
}

// evictHandlesLocked drops the least recently used idle handles of kind
// past its bound; the caller closes what it returns.
func (s *server) evictHandlesLocked(kind string) []*hostTools {
	limit := maxHTTPHandles
	if kind == "mcp" {
		limit = maxMCPHandles
	}
	var drop []*hostTools
	for {
		var n int
		var oldest *hostTools
		for _, h := range s.handles {
			if h.kind != kind {
				continue
			}
			n++
			if h.busy == 0 && (oldest == nil || h.used.Before(oldest.used)) {
				oldest = h
			}
		}
		if n <= limit || oldest == nil {
			return drop
		}
		s.dropHandleLocked(oldest)
		drop = append(drop, oldest)
	}
}

func (s *server) dropHandleLocked(h *hostTools) {
	delete(s.handles, h.id)
	delete(s.byHandlePrint, h.print)
	if s.byHTTPID[h.httpID] == h {
		delete(s.byHTTPID, h.httpID)
	}
}

// useHandle finds a handle and marks a call running.
func (s *server) useHandle(id string) (*hostTools, *refusal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.handles[id]
	if h == nil {
		return nil, refusef(codeUnknownHandle, "no host tools %q in this child (never bound here, or dropped): bind them again", id)
	}
	h.busy++
	return h, nil
}

func (s *server) doneHandle(h *hostTools) {
	s.mu.Lock()
	h.busy--
	h.used = time.Now()
	s.mu.Unlock()
}

// callSpec is the call op's body: one guest call of a bound tool.
type callSpec struct {
	Handle string `json:"handle"`
	Name   string `json:"name"`
	// Args are the guest's arguments, [positional, keyword] in glovebox's
	// value format (a tool call frame's), as text.
	Args string `json:"args,omitempty"`
	// TimeoutUS is the microseconds the call may take (the tool call
	// frame's time left); absent or -1: no deadline but hostCallMax.
	TimeoutUS *int64 `json:"timeout_us,omitempty"`
}

// callAnswer is the call op's answer: the tool's reply frame (the tool
// wire's: n, t, f, s, i, j, err, abort) and, for an HTTP tool, the
// requests it made, for the parent's on_request.
type callAnswer struct {
	Reply    string       `json:"reply"`
	Requests []auditEntry `json:"requests,omitempty"`
}

// hostCall runs one call of a host tool for the parent. timeoutUS is the
// microseconds left before the guest's call must end (-1 or absent:
// none, then hostCallMax bounds it).
func (s *server) hostCall(ctx context.Context, q *callSpec) (*callAnswer, *refusal) {
	if q == nil || q.Name == "" {
		return nil, refusef(codeBadRequest, "call: name: missing")
	}
	h, rf := s.useHandle(q.Handle)
	if rf != nil {
		return nil, rf
	}
	defer s.doneHandle(h)
	timeout := hostCallMax
	if q.TimeoutUS != nil && *q.TimeoutUS >= 0 {
		timeout = time.Duration(*q.TimeoutUS) * time.Microsecond
		if timeout <= 0 {
			return &callAnswer{Reply: "abort\n" + string(glovebox.StatusTimeout) + "\nthe eval's time ran out before the call could start"}, nil
		}
	}
	if !slices.ContainsFunc(h.docs, func(d clientwire.CodeModeTool) bool { return d.Name == q.Name }) {
		return &callAnswer{Reply: fmt.Sprintf("err\nUnknownToolError\nno tool named %q", q.Name)}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var a audits
	ctx = context.WithValue(ctx, auditKey{}, &a)
	reply := h.rt.ToolSession(timeout).Call(ctx, q.Name, []byte(q.Args))
	return &callAnswer{Reply: string(reply), Requests: a.out}, nil
}

// httpReset starts an HTTP tool's lifetime budgets afresh.
func (s *server) httpReset(id string) *refusal {
	h, rf := s.useHandle(id)
	if rf != nil {
		return rf
	}
	defer s.doneHandle(h)
	if h.http == nil {
		return refusef(codeBadRequest, "http_reset: %s is not an HTTP tool", id)
	}
	h.http.Reset()
	return nil
}

// unbind drops a handle (stopping its MCP servers); false when none.
func (s *server) unbind(id string) bool {
	s.mu.Lock()
	h := s.handles[id]
	if h != nil {
		s.dropHandleLocked(h)
	}
	s.mu.Unlock()
	if h == nil {
		return false
	}
	go h.close() // a call still running ends with its tools closed
	return true
}

// idleHandles drops MCP bindings unused for longer than idle, so their
// servers do not run for a sandbox nobody uses; HTTP tools are kept (they
// hold no process, and their budgets must span the tool's life).
func (s *server) idleHandles(now time.Time, idle time.Duration) {
	s.mu.Lock()
	var drop []*hostTools
	for _, h := range s.handles {
		if h.kind == "mcp" && h.busy == 0 && now.Sub(h.used) > idle {
			s.dropHandleLocked(h)
			drop = append(drop, h)
		}
	}
	s.mu.Unlock()
	for _, h := range drop {
		s.log.Info("glovebox: MCP servers stopped after idling", "handle", h.id, "idle", idle.String())
		h.close()
	}
}

// closeHandles closes every handle (the child's end).
func (s *server) closeHandles() {
	s.mu.Lock()
	hs := s.handles
	s.handles, s.byHandlePrint, s.byHTTPID = nil, nil, nil
	s.mu.Unlock()
	for _, h := range hs {
		h.close()
	}
}
