package mcpserver

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const sessionHeader = "Mcp-Session-Id"

// Defaults for zero [HTTPOptions] fields.
const (
	// DefaultMaxRequestBytes bounds one HTTP request body: a program of
	// up to a few MiB fits (4 MiB).
	DefaultMaxRequestBytes = 4 << 20
	// DefaultMaxConnections bounds the HTTP requests served at once (a
	// session's event stream counts as one while it is open).
	DefaultMaxConnections = 64
	// DefaultMaxHTTPSessions bounds the MCP sessions open over HTTP at
	// once. Each costs about 13 KiB while it lives (more once it holds a
	// ruby_session VM, which Options.MaxSessions bounds); 256 of them are
	// a few MiB, room for many clients of a local server.
	DefaultMaxHTTPSessions = 256
	// DefaultPressureIdle is how long a session must have been idle to be
	// closed for a new one when the server holds MaxSessions (1 minute,
	// against SessionIdle's 30 for a server with room).
	DefaultPressureIdle = time.Minute
	// DefaultNewSessionGrace is how long a session that has made no
	// request since its initialize is kept (30 seconds: a client lists
	// the tools, or calls one, right after it connects; a flood of
	// initialize requests that never come back holds its sessions no
	// longer).
	DefaultNewSessionGrace = 30 * time.Second
	// EnvToken names the environment variable `glovebox mcp` reads the
	// bearer token from when --token is not given.
	EnvToken = "GLOVEBOX_MCP_TOKEN"
)

// HTTPOptions configure [Server.HTTPHandler].
type HTTPOptions struct {
	// Addr is the address the handler is served on (host:port), used to
	// check Host headers. A non-loopback host requires Token.
	Addr string
	// Token, if set, is the bearer token every request must carry
	// (Authorization: Bearer TOKEN); other requests get 401.
	Token string
	// AllowedOrigins are the origins (scheme://host[:port]) whose
	// browsers may call the server; requests with any other Origin get
	// 403. Requests without an Origin (not from a browser) pass. Origins
	// on a loopback host are allowed when Addr is loopback.
	AllowedOrigins []string
	// AllowedHosts are extra Host header values accepted besides Addr's
	// host and, for a loopback Addr, localhost, 127.0.0.1 and [::1].
	AllowedHosts []string
	// MaxRequestBytes bounds a request body; larger ones get 413. Zero
	// means DefaultMaxRequestBytes.
	MaxRequestBytes int64
	// MaxConnections bounds concurrent requests; more get 503. Zero means
	// DefaultMaxConnections.
	MaxConnections int
	// MaxSessions bounds the MCP sessions open at once. An initialize
	// that would pass it closes the oldest session that has made no
	// request since its initialize (notifications/initialized aside), so
	// a flood of initialize requests never locks the next client out;
	// else the least recently used session idle for PressureIdle or
	// longer (its client's next request gets 404 and starts a new
	// session, as the protocol has it); when none is, it is refused with
	// HTTP 503, Retry-After and a JSON-RPC error [CodeServerBusy] whose
	// message names the limit. Zero means DefaultMaxHTTPSessions.
	MaxSessions int
	// PressureIdle is the idle time after which a session may be closed
	// for a new one while MaxSessions are open. Zero means
	// DefaultPressureIdle.
	PressureIdle time.Duration
	// NewSessionGrace is how long a session that has made no request
	// since its initialize (notifications/initialized aside) is kept:
	// then it is closed, whether the server is full or not. Zero means
	// DefaultNewSessionGrace.
	NewSessionGrace time.Duration
}

// ErrTokenRequired is returned by [Server.HTTPHandler] for a
// non-loopback address without a token.
var ErrTokenRequired = errors.New("mcpserver: serving on a non-loopback address requires a bearer token")

// IsLoopback reports whether addr's host is a loopback IP address or
// "localhost".
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// HTTPHandler returns the Streamable HTTP handler for the server, to
// mount at /mcp. Sessions idle for the server's SessionIdle are closed,
// those that made no request after their initialize after
// NewSessionGrace, and at most MaxSessions are open (see [HTTPOptions]).
//
// Every POST body is checked before the SDK sees it, as [Server.ServeIO]
// checks lines: a malformed message gets HTTP 400 with a JSON-RPC error
// (the same codes and messages as over stdio); a batch is accepted only
// under a revision before 2025-06-18 (the Mcp-Protocol-Version header,
// 2025-03-26 when absent, as the protocol says). A POST without an
// Mcp-Session-Id must be an initialize, except at MCP 2026-07-28 (an
// Mcp-Protocol-Version header of 2026-07-28 or later): such a request
// needs no session and is served on its own (stateless, so several
// processes behind one address can serve one client), it must carry
// params._meta with the revision, client info and capabilities (else
// -32602), an unknown method gets HTTP 404 with -32601, and the SDK
// checks its Mcp-Method and Mcp-Name headers. Refusals by the checks here
// (token, Origin, Host, size, load) carry a JSON-RPC error body too.
//
// A call whose client drops its connection is canceled: the server keeps
// no event store, so no later request could receive its result.
//
// It fails with [ErrTokenRequired] when Addr is not loopback and Token is
// empty.
func (s *Server) HTTPHandler(o HTTPOptions) (http.Handler, error) {
	loop := IsLoopback(o.Addr)
	if !loop && o.Token == "" {
		return nil, ErrTokenRequired
	}
	o.MaxRequestBytes = cmp.Or(o.MaxRequestBytes, DefaultMaxRequestBytes)
	o.MaxConnections = cmp.Or(o.MaxConnections, DefaultMaxConnections)
	o.MaxSessions = cmp.Or(o.MaxSessions, DefaultMaxHTTPSessions)
	o.PressureIdle = cmp.Or(o.PressureIdle, DefaultPressureIdle)
	o.NewSessionGrace = cmp.Or(o.NewSessionGrace, DefaultNewSessionGrace)
	if o.MaxRequestBytes < 0 || o.MaxConnections < 0 || o.MaxSessions < 0 || o.PressureIdle < 0 || o.NewSessionGrace < 0 {
		return nil, errors.New("mcpserver: negative HTTPOptions field")
	}
	hosts := slices.Clone(o.AllowedHosts)
	if h, p, err := net.SplitHostPort(o.Addr); err == nil {
		hosts = append(hosts, net.JoinHostPort(h, p))
		if loop {
			for _, n := range []string{"localhost", "127.0.0.1", "::1"} {
				hosts = append(hosts, net.JoinHostPort(n, p))
			}
		}
	}
	mh := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.mcp },
		&mcp.StreamableHTTPOptions{SessionTimeout: s.opts.SessionIdle, MaxRequestBodyBytes: o.MaxRequestBytes})
	// Requests at statelessVersion have no session: each is served on its
	// own, so any process behind the address can take any of them.
	stateless := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.mcp },
		&mcp.StreamableHTTPOptions{Stateless: true, MaxRequestBodyBytes: o.MaxRequestBytes})
	slots := make(chan struct{}, o.MaxConnections)
	book := &sessionBook{srv: s, max: o.MaxSessions, pressureIdle: o.PressureIdle, grace: o.NewSessionGrace, open: map[string]*httpSession{}}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				s.log.Error("mcpserver: HTTP handler panicked", "panic", p, "stack", string(debug.Stack()))
				httpRefuse(w, http.StatusInternalServerError, nil, CodeInternalError, "internal error")
			}
		}()
		if !slices.Contains(hosts, r.Host) {
			httpRefuse(w, http.StatusForbidden, nil, CodeInvalidRequest, fmt.Sprintf("Host %q is not served here", r.Host))
			return
		}
		if origin := r.Header.Get("Origin"); origin != "" && !originAllowed(origin, loop, o.AllowedOrigins) {
			httpRefuse(w, http.StatusForbidden, nil, CodeInvalidRequest, fmt.Sprintf("Origin %q is not allowed", origin))
			return
		}
		if o.Token != "" {
			got, ok := bearerToken(r.Header.Get("Authorization"))
			if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(o.Token)) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="glovebox"`)
				httpRefuse(w, http.StatusUnauthorized, nil, CodeInvalidRequest, "missing or wrong bearer token")
				return
			}
		}
		if r.ContentLength > o.MaxRequestBytes {
			httpRefuse(w, http.StatusRequestEntityTooLarge, nil, CodeInvalidRequest, fmt.Sprintf("request body over %d bytes", o.MaxRequestBytes))
			return
		}
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
		default:
			w.Header().Set("Retry-After", "1")
			httpRefuse(w, http.StatusServiceUnavailable, nil, CodeServerBusy, fmt.Sprintf("too many concurrent requests (the limit is %d); try again", o.MaxConnections))
			return
		}
		r.Header.Del(callHeader)
		r.Header.Del(ownerHeader)
		if a := clientAddr(r.RemoteAddr); a != "" {
			r.Header.Set(ownerHeader, a) // whose share of the state directory its records take
		}
		version := r.Header.Get("Mcp-Protocol-Version")
		if version >= statelessVersion {
			s.serveStateless(w, r, stateless, o.MaxRequestBytes)
			return
		}
		sid := r.Header.Get(sessionHeader)
		if sid != "" {
			w = &sniffWriter{ResponseWriter: w, sent: func(id json.RawMessage) { book.sent(sid, id) }}
		}
		if r.Method != http.MethodPost {
			if sid != "" {
				defer book.use(sid, true)()
			}
			mh.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, o.MaxRequestBytes))
		if err != nil {
			httpRefuse(w, http.StatusRequestEntityTooLarge, nil, CodeInvalidRequest, fmt.Sprintf("request body over %d bytes", o.MaxRequestBytes))
			return
		}
		if version == "" && sid != "" {
			version = book.version(sid) // the revision the session's initialize asked for
		}
		if version == "" {
			version = "2025-03-26" // what a server assumes without the header
		}
		c := checkPayload(body, version, sid != "")
		if !c.fwd && len(c.reply) == 0 {
			w.WriteHeader(http.StatusAccepted) // an ignored notification
			return
		}
		if !c.fwd {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			w.Write(c.reply)
			return
		}
		for _, m := range c.msgs {
			if m.isResponse() && !book.answered(sid, m.id) {
				httpRefuse(w, http.StatusBadRequest, nil, CodeInvalidRequest, fmt.Sprintf("invalid request: the response with id %s answers no request of this server in this session", m.id))
				return
			}
		}
		init := slices.ContainsFunc(c.msgs, func(m message) bool { return m.method == "initialize" })
		if sid == "" && !init {
			var id json.RawMessage
			if len(c.msgs) == 1 {
				id = c.msgs[0].id
			}
			msg := "invalid request: no Mcp-Session-Id header; a session starts with an initialize request, and later requests carry the Mcp-Session-Id its answer gave"
			if slices.ContainsFunc(c.msgs, func(m message) bool { return m.stateless }) {
				msg = fmt.Sprintf("invalid request: the request's _meta names MCP %s, which needs the header Mcp-Protocol-Version: %s (and Mcp-Method, and Mcp-Name for a call) and no session", statelessVersion, statelessVersion)
			}
			httpRefuse(w, http.StatusBadRequest, id, CodeInvalidRequest, msg)
			return
		}
		if sid != "" { // the experimental tasks of 2025-11-25 (tasks2025.go)
			if reply, status, ok := s.taskMessage(r.Context(), c.msgs, version, nil, "session:"+sid); ok {
				defer book.use(sid, true)()
				writeJSON(w, status, reply)
				return
			}
			body = liftTask(body, c.msgs, version)
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		if sid == "" {
			if ok, why := book.admit(); !ok {
				w.Header().Set("Retry-After", "10")
				httpRefuse(w, http.StatusServiceUnavailable, c.msgs[0].id, CodeServerBusy, why)
				return
			}
			var asked string
			if len(c.msgs) == 1 {
				asked = c.msgs[0].version
			}
			defer book.added(w, asked)
		} else {
			// notifications/initialized alone does not use the session:
			// a flood of initialize requests sends it too.
			defer book.use(sid, slices.ContainsFunc(c.msgs, func(m message) bool { return m.method != "notifications/initialized" }))()
		}
		s.serveCalls(w, r, c.msgs, mh)
	}), nil
}

// serveStateless serves a request at statelessVersion or later: its body
// is checked as any other, a call's HTTP context is handed to the call
// (so that a dropped client stops it), and the SDK serves it without a
// session (checking the Mcp-Method and Mcp-Name headers).
func (s *Server) serveStateless(w http.ResponseWriter, r *http.Request, h http.Handler, max int64) {
	if r.Method != http.MethodPost {
		h.ServeHTTP(w, r) // refused by the SDK: 405 with Allow: POST
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	if err != nil {
		httpRefuse(w, http.StatusRequestEntityTooLarge, nil, CodeInvalidRequest, fmt.Sprintf("request body over %d bytes", max))
		return
	}
	c := checkPayload(body, statelessVersion, true)
	if !c.fwd && len(c.reply) == 0 {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	if !c.fwd {
		status := http.StatusBadRequest
		if bytes.Contains(c.reply, []byte(fmt.Sprintf(`"code":%d`, CodeMethodNotFound))) {
			status = http.StatusNotFound // as SEP-2575 has it for an unknown method
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		w.Write(c.reply)
		return
	}
	for _, m := range c.msgs {
		switch {
		case m.isResponse():
			httpRefuse(w, http.StatusBadRequest, nil, CodeInvalidRequest, fmt.Sprintf("invalid request: the response with id %s answers no request of this server; under MCP %s a server asks nothing during a request", m.id, statelessVersion))
			return
		case m.id != nil && !m.stateless:
			httpRefuse(w, http.StatusBadRequest, m.id, CodeInvalidParams, fmt.Sprintf(`invalid params: under MCP %s (the Mcp-Protocol-Version header) every request carries params._meta with "%s": "%s", the client's info and its capabilities`, statelessVersion, metaProtocolVersion, statelessVersion))
			return
		}
	}
	if reply, status, ok := s.taskMessage(r.Context(), c.msgs, statelessVersion, r.Header, ""); ok {
		writeJSON(w, status, reply)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	s.serveCalls(w, r, c.msgs, h)
}

func writeJSON(w http.ResponseWriter, status int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}

// serveCalls passes r to h; when r carries a tools/call, the call gets
// r's context through callHeader, so that it stops when the client drops
// the connection.
func (s *Server) serveCalls(w http.ResponseWriter, r *http.Request, msgs []message, h http.Handler) {
	if slices.ContainsFunc(msgs, func(m message) bool { return m.method == "tools/call" }) {
		tok := rand.Text()
		s.calls.Store(tok, r.Context())
		defer s.calls.Delete(tok)
		r.Header.Set(callHeader, tok)
	}
	h.ServeHTTP(w, r)
}

// httpRefuse answers a request with status and a JSON-RPC error.
func httpRefuse(w http.ResponseWriter, status int, id json.RawMessage, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write((&rpcError{id: id, code: code, msg: msg}).encode())
}

// sessionBook counts the HTTP sessions and when each was last used.
type sessionBook struct {
	srv          *Server
	max          int
	pressureIdle time.Duration
	grace        time.Duration // a never-used session's life
	mu           sync.Mutex
	open         map[string]*httpSession
	pending      int // initializes admitted, not yet answered
}

type httpSession struct {
	made    time.Time
	last    time.Time
	used    bool            // it made a request after its initialize (notifications/initialized aside)
	version string          // the protocolVersion its initialize asked for
	active  int             // requests in progress
	pending map[string]bool // ids of the server's requests awaiting an answer
}

// sent records a request the server sent in session sid.
func (b *sessionBook) sent(sid string, id json.RawMessage) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if hs := b.open[sid]; hs != nil {
		if hs.pending == nil {
			hs.pending = map[string]bool{}
		}
		hs.pending[string(id)] = true
	}
}

// answered reports whether id names a request the server sent in
// session sid that awaits an answer, and forgets it.
func (b *sessionBook) answered(sid string, id json.RawMessage) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	hs := b.open[sid]
	if hs == nil || !hs.pending[string(id)] {
		return false
	}
	delete(hs.pending, string(id))
	return true
}

// sniffWriter passes an event stream through, telling sent the id of
// each request the server sends in it (the SDK writes one event a Write).
type sniffWriter struct {
	http.ResponseWriter
	sent func(id json.RawMessage)
}

func (w *sniffWriter) Write(p []byte) (int, error) {
	if i := bytes.Index(p, []byte("data: ")); i >= 0 && bytes.Contains(p, []byte(`"method":`)) {
		data, _, _ := bytes.Cut(p[i+len("data: "):], []byte("\n"))
		if id, ok, _ := outgoing(data); ok {
			w.sent(id)
		}
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection (to flush).
func (w *sniffWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// use records a request of session sid, one that uses it when uses is
// set; the returned function ends it.
func (b *sessionBook) use(sid string, uses bool) func() {
	b.mu.Lock()
	hs := b.open[sid]
	if hs != nil {
		hs.active++
		hs.last = time.Now()
		hs.used = hs.used || uses
	}
	b.mu.Unlock()
	return func() {
		if hs == nil {
			return
		}
		b.mu.Lock()
		hs.active--
		hs.last = time.Now()
		b.mu.Unlock()
	}
}

// added records the session an initialize answer made, and the revision
// its initialize asked for; the session is closed after the grace if it
// has not been used by then.
func (b *sessionBook) added(w http.ResponseWriter, version string) {
	sid := w.Header().Get(sessionHeader)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pending--
	if sid != "" && b.open[sid] == nil {
		now := time.Now()
		hs := &httpSession{made: now, last: now, version: version}
		b.open[sid] = hs
		time.AfterFunc(b.grace, func() { b.expire(sid, hs) })
	}
}

// expire closes session sid, hs in the book, when it has made no request
// since its initialize and has none under way.
func (b *sessionBook) expire(sid string, hs *httpSession) {
	b.mu.Lock()
	if b.open[sid] != hs || hs.used || hs.active > 0 {
		b.mu.Unlock()
		return
	}
	delete(b.open, sid)
	b.mu.Unlock()
	for ss := range b.srv.mcp.Sessions() {
		if ss.ID() == sid {
			ss.Close()
			return
		}
	}
}

// version is the revision session sid's initialize asked for, "" when it
// is not known. A request without the Mcp-Protocol-Version header is read
// under it: only a session that began at a revision before the header
// (2025-03-26 and older) sends none legitimately.
func (b *sessionBook) version(sid string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if hs := b.open[sid]; hs != nil {
		return hs.version
	}
	return ""
}

// admit makes room for a new session: when max are open, the least
// recently used one idle for pressureIdle is closed. It reports false,
// with the reason, when none can be.
func (b *sessionBook) admit() (bool, string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.open)+b.pending < b.max {
		b.pending++
		return true, ""
	}
	live := map[string]*mcp.ServerSession{}
	for ss := range b.srv.mcp.Sessions() {
		live[ss.ID()] = ss
	}
	for sid := range b.open {
		if live[sid] == nil {
			delete(b.open, sid) // ended: closed by its client or for idleness
		}
	}
	if len(b.open)+b.pending < b.max {
		b.pending++
		return true, ""
	}
	// The oldest session never used goes first, so that a flood of
	// initialize requests takes only its own slots; else the least
	// recently used one idle for pressureIdle.
	var victim string
	var oldest time.Time
	unused := false
	for sid, hs := range b.open {
		switch {
		case hs.active > 0:
		case !hs.used && (!unused || hs.made.Before(oldest)):
			victim, oldest, unused = sid, hs.made, true
		case !unused && hs.used && time.Since(hs.last) >= b.pressureIdle && (victim == "" || hs.last.Before(oldest)):
			victim, oldest = sid, hs.last
		}
	}
	if victim == "" {
		return false, fmt.Sprintf("the server holds %d MCP sessions, its limit (--max-http-sessions), each of them in use and none idle for %v; try again later, or end unused sessions (HTTP DELETE with their Mcp-Session-Id)", len(b.open)+b.pending, b.pressureIdle)
	}
	delete(b.open, victim)
	if unused { // a flood's: one line each would flood the log too
		b.srv.log.Debug("mcpserver: closed the oldest session never used since its initialize for a new one", "session", victim, "age", time.Since(oldest).Round(time.Second), "limit", b.max)
	} else {
		b.srv.log.Info("mcpserver: closed the least recently used idle session for a new one", "session", victim, "idle", time.Since(oldest).Round(time.Second), "limit", b.max)
	}
	if ss := live[victim]; ss != nil {
		go ss.Close()
	}
	b.pending++
	return true, ""
}

func originAllowed(origin string, loop bool, allowed []string) bool {
	if slices.Contains(allowed, origin) {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	return loop && IsLoopback(u.Hostname())
}

// bearerToken returns the credentials of an Authorization header that uses
// the Bearer scheme. The scheme name is matched case-insensitively, as RFC
// 9110 section 11.1 requires of authentication schemes; surrounding blanks
// are ignored.
func bearerToken(h string) (string, bool) {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}
