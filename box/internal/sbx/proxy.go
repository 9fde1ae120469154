package sbx

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gloveboxhq/glovebox/box"
)

// DialFunc connects to the host and port of a URL, or refuses.
type DialFunc func(ctx context.Context, rawURL string) (net.Conn, error)

// HeaderCred is a header the egress proxy adds to the guest's plain
// http:// requests for one host (the credentials proxy mode): the guest
// never holds the value.
type HeaderCred struct {
	Header, Value string
	// TLS, when set, makes the proxy speak HTTPS to the host: the guest
	// asks for http://host/… and the proxy dials https://host:443/ (or the
	// URL's port) and wraps the connection in TLS with this config.
	TLS *tls.Config
}

// MaxProxyConns is how many egress-proxy connections one run serves at
// once; later ones wait in the listen backlog until one closes. Each holds
// a host file descriptor (two once dialled) and a goroutine, which the
// guest's own limits do not bound.
const MaxProxyConns = 64

// MaxProxyHeader bounds a request's line and headers as the guest sends
// them to the egress proxy: net/http's DefaultMaxHeaderBytes (1 MiB) plus
// the 4 KiB slack its server allows. A longer head is answered 431.
const MaxProxyHeader = 1<<20 + 4096

// ServeProxy is the egress proxy: an HTTP proxy on ln whose only way out
// is dial, serving at most MaxProxyConns connections at once. CONNECT host:port is dialled as https://host:port/; a plain
// request for http://… is dialled as its URL and forwarded (one request per
// connection; its line and headers at most MaxProxyHeader bytes). A refusal answers 403 with dial's message. creds, keyed by
// lower-case host name, adds a header to plain requests for that host
// (replacing any the guest sent); CONNECT to such a host is refused, since
// the header could not be added inside TLS, and so is TRACE, whose answer
// echoes the request's headers (the credential) back to the guest. It returns a stop function
// that closes ln and every open connection.
//
// inspect, when not nil, is asked about each request before it is dialled
// (box.Network.Inspect): a plain request with its body read whole (one
// over box.MaxInspectedBody bytes is answered 413), a CONNECT by its host
// and port; an error answers 403 with its message.
func ServeProxy(ctx context.Context, ln net.Listener, dial DialFunc, creds map[string]HeaderCred, inspect func(box.EgressRequest) error) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	track := func(c net.Conn, on bool) {
		mu.Lock()
		defer mu.Unlock()
		if on {
			open[c] = true
		} else {
			delete(open, c)
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		slots := make(chan struct{}, MaxProxyConns)
		for {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
			c, err := ln.Accept()
			if err != nil {
				return
			}
			track(c, true)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-slots }()
				defer track(c, false)
				proxyConn(ctx, c, dial, creds, inspect, track)
			}()
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			ln.Close()
			mu.Lock()
			for c := range open {
				c.Close()
			}
			mu.Unlock()
			wg.Wait()
		})
	}
}

func proxyConn(ctx context.Context, c net.Conn, dial DialFunc, creds map[string]HeaderCred, inspect func(box.EgressRequest) error, track func(net.Conn, bool)) {
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	refuse := func(code int, msg string) {
		resp := &http.Response{StatusCode: code, ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{"Content-Type": {"text/plain; charset=utf-8"}},
			Body: io.NopCloser(strings.NewReader(msg + "\n")), ContentLength: int64(len(msg) + 1), Close: true}
		resp.Write(c)
	}
	// http.ReadRequest reads a head of any length: bound it here, as
	// net/http's server does, and lift the bound for the body or tunnel.
	lr := &io.LimitedReader{R: c, N: MaxProxyHeader}
	br := bufio.NewReader(lr)
	req, err := http.ReadRequest(br)
	if err != nil {
		if lr.N <= 0 {
			refuse(http.StatusRequestHeaderFieldsTooLarge, fmt.Sprintf("egress proxy: request line and headers over %d bytes", MaxProxyHeader))
		}
		return
	}
	lr.N = math.MaxInt64
	c.SetReadDeadline(time.Time{})
	var target string
	var cred *HeaderCred
	if req.Method == http.MethodConnect {
		host, _, _ := net.SplitHostPort(req.Host)
		if _, ok := creds[strings.ToLower(host)]; ok {
			refuse(http.StatusForbidden, "egress proxy: "+host+" gets its credential from the proxy: ask for http://"+host+"/... (the proxy speaks HTTPS to it)")
			return
		}
		target = "https://" + req.Host + "/"
	} else if req.URL.Scheme == "http" {
		target = req.URL.String()
		if cr, ok := creds[strings.ToLower(req.URL.Hostname())]; ok {
			if strings.EqualFold(req.Method, http.MethodTrace) {
				refuse(http.StatusForbidden, "egress proxy: TRACE to "+req.URL.Hostname()+" would echo its credential")
				return
			}
			cred = &cr
			if cr.TLS != nil {
				u := *req.URL
				u.Scheme = "https"
				target = u.String()
			}
		}
	} else {
		refuse(http.StatusBadRequest, "egress proxy: want CONNECT or an absolute http:// URL")
		return
	}
	if inspect != nil {
		if code, msg := inspectRequest(req, inspect); code != 0 {
			refuse(code, msg)
			return
		}
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	up, err := dial(dctx, target)
	if err == nil && cred != nil && cred.TLS != nil {
		tc := tls.Client(up, cred.TLS)
		if err = tc.HandshakeContext(dctx); err != nil {
			up.Close()
			err = fmt.Errorf("TLS to %s: %w", req.URL.Hostname(), err)
		}
		up = tc
	}
	cancel()
	if err != nil {
		refuse(http.StatusForbidden, "egress proxy: "+err.Error())
		return
	}
	track(up, true)
	defer track(up, false)
	defer up.Close()
	if req.Method == http.MethodConnect {
		io.WriteString(c, "HTTP/1.1 200 Connection Established\r\n\r\n")
	} else {
		req.Header.Del("Proxy-Connection")
		req.Header.Del("Proxy-Authorization")
		if cred != nil {
			req.Header.Set(cred.Header, cred.Value)
		}
		req.Close = true
		req.RequestURI = ""
		if err := req.Write(up); err != nil {
			return
		}
	}
	if req.Method != http.MethodConnect {
		// req.Write sent the body; what else the guest wrote is a
		// pipelined request, which would reach the host unchecked (with
		// another Host header) and, for a credentialed host, over the
		// proxy's own TLS: one request per connection, so only the
		// answer goes back.
		io.Copy(c, up)
		return
	}
	// For CONNECT, the rest of br is the start of the tunnel.
	done := make(chan struct{}, 2)
	go func() { io.Copy(up, br); closeWrite(up); done <- struct{}{} }()
	go func() { io.Copy(c, up); closeWrite(c); done <- struct{}{} }()
	<-done
	<-done
}

// inspectRequest shows req to inspect, reading a plain request's body
// whole first (and putting it back for forwarding); it returns the status
// and message of a refusal, or 0.
func inspectRequest(req *http.Request, inspect func(box.EgressRequest) error) (int, string) {
	var r box.EgressRequest
	if req.Method == http.MethodConnect {
		r.Host, r.Port, _ = net.SplitHostPort(req.Host)
		r.Tunnel = true
	} else {
		r.Host, r.Port = req.URL.Hostname(), req.URL.Port()
		r.Method, r.URL, r.Header = req.Method, req.URL.String(), req.Header.Clone()
		if req.Body != nil {
			body, err := io.ReadAll(io.LimitReader(req.Body, box.MaxInspectedBody+1))
			if err != nil {
				return http.StatusBadRequest, "egress proxy: the request body could not be read: " + err.Error()
			}
			if len(body) > box.MaxInspectedBody {
				return http.StatusRequestEntityTooLarge, fmt.Sprintf("egress proxy: a request body over %d bytes is not sent: it could not be inspected", box.MaxInspectedBody)
			}
			r.Body = body
			req.Body = io.NopCloser(bytes.NewReader(body))
			req.ContentLength = int64(len(body))
			req.TransferEncoding = nil
		}
	}
	if err := inspect(r); err != nil {
		return http.StatusForbidden, "egress proxy: " + err.Error()
	}
	return 0, ""
}

func closeWrite(c net.Conn) {
	type cw interface{ CloseWrite() error }
	if x, ok := c.(cw); ok {
		x.CloseWrite()
	}
}

// ProxyCreds resolves c's Network.Credentials for ServeProxy, keyed by
// lower-case host. A Value error names the host only: it may hold the
// secret.
func ProxyCreds(ctx context.Context, c *box.Command) (map[string]HeaderCred, error) {
	if len(c.Network.Credentials) == 0 {
		return nil, nil
	}
	out := map[string]HeaderCred{}
	for _, hc := range c.Network.Credentials {
		v, err := hc.Value(ctx)
		if err != nil {
			return nil, fmt.Errorf("box: the credential for %s could not be resolved", hc.Host)
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			return nil, fmt.Errorf("box: the credential for %s holds a line break or NUL", hc.Host)
		}
		h := hc.Header
		if h == "" {
			h = "Authorization"
		}
		cr := HeaderCred{Header: h, Value: v}
		if hc.TLS {
			cr.TLS = &tls.Config{ServerName: hc.Host, MinVersion: tls.VersionTLS12}
		}
		out[strings.ToLower(hc.Host)] = cr
	}
	return out, nil
}
