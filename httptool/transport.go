package httptool

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// newTransport makes the tool's own transport: no proxy (environment
// proxies are ignored), connections only through dialContext, which dials
// the request's vetted addresses, HTTP/1.1 only (so MaxResponseHeader
// bounds every response), transparent gzip, TLS verification on.
func (t *Tool) newTransport() *http.Transport {
	return &http.Transport{
		Proxy:                  nil,
		DialContext:            t.dialContext,
		TLSClientConfig:        &tls.Config{MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:    t.cfg.RequestTimeout,
		MaxResponseHeaderBytes: int64(t.cfg.MaxResponseHeader),
		MaxIdleConns:           16,
		MaxIdleConnsPerHost:    2,
		IdleConnTimeout:        30 * time.Second,
		ForceAttemptHTTP2:      false,
		TLSNextProto:           map[string]func(string, *tls.Conn) http.RoundTripper{},
	}
}

// pin carries a request's vetted addresses to dialContext, and the
// request's context, whose end ends the dial.
type pin struct {
	hostport string // the URL's host:port, as the transport asks to dial it
	addrs    []netip.Addr
	req      context.Context
}

type pinKey struct{}

func hostPort(tg *target) string {
	return net.JoinHostPort(tg.host, strconv.Itoa(tg.port))
}

// blockedError is a refusal by the IP floor; detail, with the address,
// is for the audit hook, the message for the guest.
type blockedError struct {
	msg, detail string
}

func (e *blockedError) Error() string { return e.msg + " (" + e.detail + ")" }

// vet resolves the target's host (an IP literal stands for itself) and
// checks every address against the IP floor; one refused address refuses
// the request. It returns the addresses to dial.
func (t *Tool) vet(ctx context.Context, tg *target) ([]netip.Addr, error) {
	if tg.ip.IsValid() {
		if why := t.floor.check(tg.ip); why != "" {
			return nil, &blockedError{
				msg:    fmt.Sprintf("http: %s is %s; requests to it are refused to protect the host's network. If it is meant to be reachable, the operator must trust its network (%s)", tg.ip, why, setting("TrustedPrefixes")),
				detail: tg.ip.String(),
			}
		}
		return []netip.Addr{tg.ip}, nil
	}
	addrs, err := t.cfg.Resolver.LookupNetIP(ctx, "ip", tg.host)
	if err != nil {
		var dnsErr *net.DNSError
		if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
			return nil, fmt.Errorf("the host %s does not exist (no DNS records)", tg.host)
		}
		if errors.As(err, &dnsErr) { // without the resolver's own address
			return nil, fmt.Errorf("the host %s could not be resolved: %s", tg.host, dnsErr.Err)
		}
		return nil, fmt.Errorf("the host %s could not be resolved: %w", tg.host, err)
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("the host %s has no addresses", tg.host)
	}
	out := make([]netip.Addr, len(addrs))
	for i, a := range addrs {
		if a.Is4In6() && a.Zone() == "" {
			a = a.Unmap()
		}
		if why := t.floor.check(a); why != "" {
			return nil, &blockedError{
				// The guest does not learn the address: names it may not
				// reach must not become a map of the internal network.
				msg:    fmt.Sprintf("http: the host %s resolves to %s; requests to such addresses are refused to protect the host's network. If the service is meant to be reachable, the operator must trust its network (%s)", tg.host, strings.TrimPrefix(why, "the "), setting("TrustedPrefixes")),
				detail: a.String(),
			}
		}
		out[i] = a
	}
	return out, nil
}

// dialContext is the transport's only way to connect: it dials the
// addresses vetted for the request, never resolving the name again, so a
// resolver that answers differently the second time cannot swap them.
func (t *Tool) dialContext(ctx context.Context, network, address string) (net.Conn, error) {
	p, _ := ctx.Value(pinKey{}).(*pin)
	if p == nil || address != p.hostport {
		return nil, &blockedError{msg: "http: connection refused: no vetted address for " + address, detail: "no pin"}
	}
	// net/http dials with the request's values but neither its deadline
	// nor its cancellation, so that a dial may serve a later request. A
	// host that drops connection attempts would then keep a socket
	// connecting for minutes (the kernel's SYN retries) after every
	// request; here a dial ends with the request that asked for it.
	if d, ok := p.req.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d)
		defer cancel()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(p.req, cancel)()
	_, portStr, _ := net.SplitHostPort(address)
	port, _ := strconv.Atoi(portStr)
	dial := t.cfg.Dial
	if dial == nil {
		d := &net.Dialer{Control: t.floor.control}
		dial = d.DialContext
	}
	var errs []error
	var tried []string
	for _, a := range p.addrs {
		if why := t.floor.check(a); why != "" { // a second look; vet already refused these
			return nil, &blockedError{msg: "http: connection refused: the address is " + why, detail: a.String()}
		}
		ap := netip.AddrPortFrom(a, uint16(port))
		c, err := dial(ctx, "tcp", ap.String())
		if err == nil {
			return &vettedConn{Conn: c, addr: ap}, nil
		}
		errs = append(errs, hideAddrs(err))
		tried = append(tried, ap.String())
		if ctx.Err() != nil {
			break
		}
	}
	if ctx.Err() == context.DeadlineExceeded {
		// The request's deadline, seen first by this context's timer:
		// let the request's own context end too, so that the failure is
		// reported as the timeout it is.
		<-p.req.Done()
	}
	return nil, &dialError{err: errors.Join(errs...), tried: strings.Join(tried, ", ")}
}

// dialError is a failure to connect to any vetted address. Its message
// names no address (see hideAddrs); tried lists them for the audit.
type dialError struct {
	err   error
	tried string
}

func (e *dialError) Error() string { return e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// hideAddrs takes the addresses out of a *net.OpError, whose message
// otherwise names both ends ("read tcp 10.0.0.2:51234->93.184.216.34:443:
// connection reset by peer"): the guest's messages must tell neither the
// host's own address nor the one a name resolved to. The error's kind
// (errors.Is, Timeout) is kept.
func hideAddrs(err error) error {
	if oe, ok := err.(*net.OpError); ok && (oe.Source != nil || oe.Addr != nil) {
		c := *oe
		c.Source, c.Addr = nil, nil
		return &c
	}
	return err
}

// vettedConn remembers the vetted address it was dialed to, for the
// audit, and hides the addresses from its read and write errors.
type vettedConn struct {
	net.Conn
	addr netip.AddrPort
}

func (c *vettedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	return n, hideAddrs(err)
}

func (c *vettedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	return n, hideAddrs(err)
}

// withTrace records in e the address of the connection a request uses.
func withTrace(ctx context.Context, e *AuditEntry) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) {
			c := info.Conn
			if tc, ok := c.(*tls.Conn); ok {
				c = tc.NetConn()
			}
			if vc, ok := c.(*vettedConn); ok {
				e.Addr = vc.addr
			}
		},
	})
}

// errTooLarge marks a response over a cap.
type errTooLarge struct{ msg string }

func (e *errTooLarge) Error() string { return e.msg }

// classify turns a failure after the policy checks into the guest's error.
// ctx is the tool call's context, rctx the request's.
func (t *Tool) classify(ctx, rctx context.Context, err error, host string, budgetCut bool) error {
	var be *blockedError
	var tl *errTooLarge
	switch {
	case errors.As(err, &be):
		return fmt.Errorf("%w (%s)", toolError(ClassBlockedAddress, "%s", be.msg), be.detail)
	case errors.As(err, &tl):
		return toolError(ClassResponseTooLarge, "http: %s", tl.msg)
	case strings.Contains(err.Error(), "server response headers exceeded"):
		// net/http's message for MaxResponseHeaderBytes; it has no error type.
		return toolError(ClassResponseTooLarge, "http: the response headers from %s exceed %d bytes", host, t.cfg.MaxResponseHeader)
	case ctx.Err() != nil:
		return toolError(ClassTransport, "http: the request to %s was canceled: the eval is ending", host)
	case rctx.Err() != nil && budgetCut:
		return toolError(ClassBudget, "http: the time budget (%v of requests) ran out during the request to %s; no more requests can be made in this unit of work", t.cfg.MaxTime, host)
	case rctx.Err() != nil:
		return toolError(ClassTimeout, "http: the request to %s took longer than %v and was stopped; try again later or ask for less", host, t.cfg.RequestTimeout)
	}
	te := toolError(ClassTransport, "http: the request to %s failed: %v", host, err)
	var de *dialError
	if errors.As(err, &de) {
		return fmt.Errorf("%w (connecting to %s)", te, de.tried)
	}
	return te
}

// readResponse reads the body within MaxResponseBody and builds the
// guest's Hash. It returns the body size read.
func (t *Tool) readResponse(resp *http.Response) (map[string]any, int64, error) {
	limit := t.cfg.MaxResponseBody
	tooLarge := &errTooLarge{fmt.Sprintf("the response body is larger than %d bytes (after decompression), the most this sandbox accepts; ask for less (a page, a filter, a smaller format)", limit)}
	if resp.Request.Method != http.MethodHead && !resp.Uncompressed && resp.ContentLength > limit {
		return nil, 0, tooLarge
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	n := int64(len(body))
	if err != nil {
		return nil, n, err
	}
	if n > limit {
		return nil, n, tooLarge
	}
	headers := make(map[string]any, len(resp.Header))
	for k, v := range resp.Header {
		headers[strings.ToLower(k)] = strings.Join(v, ", ")
	}
	out := map[string]any{"status": int64(resp.StatusCode), "headers": headers}
	if isJSON(resp.Header.Get("Content-Type")) && len(body) > 0 {
		if v, ok := parseJSON(body); ok {
			out["body"], out["body_encoding"] = v, "json"
			return out, n, nil
		}
	}
	if isText(body) {
		out["body"], out["body_encoding"] = string(body), "text"
	} else {
		out["body"], out["body_encoding"] = base64.StdEncoding.EncodeToString(body), "base64"
	}
	return out, n, nil
}

// isText reports whether a body can go to the guest as a String: valid
// UTF-8 without control characters other than tab, LF and CR (which would
// grow sixfold in the encoding the answer crosses in).
func isText(b []byte) bool {
	for _, c := range b {
		if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f {
			return false
		}
	}
	return utf8.Valid(b)
}

// isJSON reports whether a Content-Type is JSON: application/json or a
// structured +json type.
func isJSON(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}

// maxJSONDepth is the deepest JSON body parsed for the guest; deeper ones
// come back as text. A tool's result may nest 64 levels on its way to the
// guest (the root package's limit); the response Hash takes one of them
// and the rest is margin.
const maxJSONDepth = 60

// parseJSON parses one JSON value, keeping numbers exact.
func parseJSON(b []byte) (any, bool) {
	if depth(b) > maxJSONDepth {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, false
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, false // trailing data
	}
	return v, true
}

// depth is the deepest bracket nesting in a JSON text, strings skipped.
func depth(b []byte) int {
	d, deepest, inStr := 0, 0, false
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case inStr && c == '\\':
			i++
		case c == '"':
			inStr = !inStr
		case inStr:
		case c == '[' || c == '{':
			d++
			deepest = max(deepest, d)
		case c == ']' || c == '}':
			d--
		}
	}
	return deepest
}
