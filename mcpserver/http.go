package mcpserver

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Defaults for zero [HTTPOptions] fields.
const (
	// DefaultMaxRequestBytes bounds one HTTP request body: a program of
	// up to a few MiB fits (4 MiB).
	DefaultMaxRequestBytes = 4 << 20
	// DefaultMaxConnections bounds the HTTP requests served at once (a
	// session's event stream counts as one while it is open).
	DefaultMaxConnections = 64
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
// mount at /mcp. Sessions idle for the server's SessionIdle are closed.
// It fails with [ErrTokenRequired] when Addr is not loopback and Token
// is empty.
func (s *Server) HTTPHandler(o HTTPOptions) (http.Handler, error) {
	loop := IsLoopback(o.Addr)
	if !loop && o.Token == "" {
		return nil, ErrTokenRequired
	}
	if o.MaxRequestBytes == 0 {
		o.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if o.MaxConnections == 0 {
		o.MaxConnections = DefaultMaxConnections
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
	slots := make(chan struct{}, o.MaxConnections)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				s.log.Error("mcpserver: HTTP handler panicked", "panic", p, "stack", string(debug.Stack()))
				http.Error(w, "internal error", http.StatusInternalServerError)
			}
		}()
		if !slices.Contains(hosts, r.Host) {
			http.Error(w, fmt.Sprintf("Host %q is not served here", r.Host), http.StatusForbidden)
			return
		}
		if origin := r.Header.Get("Origin"); origin != "" && !originAllowed(origin, loop, o.AllowedOrigins) {
			http.Error(w, fmt.Sprintf("Origin %q is not allowed", origin), http.StatusForbidden)
			return
		}
		if o.Token != "" {
			got, ok := bearerToken(r.Header.Get("Authorization"))
			if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(o.Token)) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="glovebox"`)
				http.Error(w, "missing or wrong bearer token", http.StatusUnauthorized)
				return
			}
		}
		if r.ContentLength > o.MaxRequestBytes {
			http.Error(w, fmt.Sprintf("request body over %d bytes", o.MaxRequestBytes), http.StatusRequestEntityTooLarge)
			return
		}
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
		default:
			w.Header().Set("Retry-After", "1")
			http.Error(w, "too many concurrent requests", http.StatusServiceUnavailable)
			return
		}
		mh.ServeHTTP(w, r)
	}), nil
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
