package httptool

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/internal/wire"
)

// Tool is the HTTP tool: the guest functions that make requests, and the
// budgets they share. It is safe for concurrent use, so one Tool may serve
// many evals; its budgets then span them all. It keeps a few idle
// connections for reuse, each closed after 30 s unused.
type Tool struct {
	cfg       Config
	policy    *policy
	floor     *floor
	transport *http.Transport

	mu       sync.Mutex
	requests int           // attempted since the last Reset
	spent    time.Duration // time taken by finished requests since the last Reset
	unit     uint64        // Resets so far: a request charges its time to its own unit
}

// New checks cfg and makes a Tool. It fails with an error wrapping
// ErrInvalidConfig that says which field is wrong.
func New(cfg Config) (*Tool, error) {
	cfg.AllowHosts = append([]string(nil), cfg.AllowHosts...)
	p, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	t := &Tool{cfg: cfg, policy: p, floor: newFloor(cfg.TrustedPrefixes, cfg.Ports)}
	t.transport = t.newTransport()
	return t, nil
}

// Close closes the tool's idle connections (it keeps up to 16, 2 per
// host, for 30 seconds between requests). Call it when the tool's unit of work
// is over, for example with the session it served; a tool still used
// after Close simply opens new connections.
func (t *Tool) Close() { t.transport.CloseIdleConnections() }

// Reset starts the lifetime budgets (MaxRequests, MaxTime) afresh, for
// the next unit of work. A request still in flight keeps running, and its
// time stays with the unit that made it. It is host-only: no guest
// function reaches it.
func (t *Tool) Reset() {
	t.mu.Lock()
	t.requests, t.spent = 0, 0
	t.unit++
	t.mu.Unlock()
}

// verbs are the guest functions' names after their prefix: "request"
// takes the method as an argument, the others are that method.
var verbs = []string{"request", "get", "head", "delete", "post", "put", "patch"}

// Register adds the guest functions to ts:
//
//	http_request(method, url, headers = {}, body = nil)
//	http_get(url, headers = {})     http_head(url, headers = {})
//	http_delete(url, headers = {})
//	http_post(url, body = nil, headers = {})   (http_put, http_patch alike)
//
// headers and body (where a function takes one) may also be given as the
// keyword arguments headers: and body:.
// method is one of GET, HEAD, POST, PUT, PATCH, DELETE and OPTIONS (any
// case); headers is a Hash of name to String; a String body (a binary
// one included, byte for byte) is sent as it is, any other body (Hash, Array, number, true/false) as JSON with
// Content-Type application/json unless the headers set one.
//
// Each returns a Hash: "status" (Integer), "headers" (Hash of lower-case
// name to String, repeated fields joined with ", "), "body" and
// "body_encoding": "json" with the parsed value for a JSON response
// (Content-Type application/json or */*+json) that parses, "text" with a
// String for other UTF-8 bodies without control characters (tab, LF and
// CR allowed), "base64" with the body in base64 for the rest. A redirect is returned like any response, with its Location
// header, and never followed.
//
// Failures raise the Glovebox::HTTP...Error classes named by the Class
// constants. Each function is documented for a model ([glovebox.ToolDoc]:
// its parameters, what it returns, the hosts it reaches). Register fails,
// adding nothing, if ts already has one of the names.
func (t *Tool) Register(ts *glovebox.Toolset) error { return t.RegisterAs(ts, "http_") }

// RegisterAs is [Tool.Register] with the functions named prefix + verb:
// prefix "http_" gives Register's names; "" gives request, get, head,
// delete, post, put and patch (the names Enclave's HttpTool gives its
// guest). The prefix must make valid tool names
// ([glovebox.ValidToolName]). It fails, adding nothing, if ts already
// has one of the names.
func (t *Tool) RegisterAs(ts *glovebox.Toolset, prefix string) error {
	var staged glovebox.Toolset
	taken := ts.Names()
	for _, verb := range verbs {
		if slices.Contains(taken, prefix+verb) {
			return fmt.Errorf("%w: %q is registered already", glovebox.ErrInvalidTool, prefix+verb)
		}
	}
	for _, verb := range verbs {
		name, method := prefix+verb, strings.ToUpper(verb)
		if verb == "request" {
			method = ""
		}
		fn := func(ctx context.Context, a glovebox.Args) (any, error) { return t.call(ctx, name, method, a) }
		if err := staged.Add(name, fn); err != nil {
			return err
		}
		if err := staged.Describe(name, t.doc(name, method)); err != nil {
			return err
		}
	}
	return ts.Merge(&staged)
}

// Parameter schemas of the guest functions' docs.
var (
	urlSchema     = json.RawMessage(`{"type":"string","format":"uri"}`)
	headersSchema = json.RawMessage(`{"type":"object","additionalProperties":{"type":"string"}}`)
	bodySchema    = json.RawMessage(`{"type":["string","object","array","number","boolean","null"]}`)
	methodSchema  = json.RawMessage(`{"type":"string","enum":["GET","HEAD","POST","PUT","PATCH","DELETE","OPTIONS"]}`)
)

// doc documents the guest function name (HTTP method, "" for the
// request function) for a model, with the hosts the tool reaches.
func (t *Tool) doc(name, method string) glovebox.ToolDoc {
	reach := "any public host"
	if !t.policy.anyHost {
		reach = strings.Join(t.policy.hosts, ", ")
	}
	ports := make([]string, len(t.policy.ports))
	for i, p := range t.policy.ports {
		ports[i] = strconv.Itoa(p)
	}
	what := "Sends an HTTP " + method + " request"
	if method == "" {
		what = "Sends an HTTP request"
	}
	d := glovebox.ToolDoc{
		Description: fmt.Sprintf("%s from the host, to %s only (ports %s); private, loopback and metadata addresses are refused, redirects are returned and never followed.", what, reach, strings.Join(ports, ", ")),
		Returns:     `a Hash: "status" (Integer), "headers" (Hash of lower-case name to String), "body" (the parsed JSON, a String, or base64 text) and "body_encoding" ("json", "text" or "base64")`,
		Example:     name + `("https://` + exampleHost(t.policy.hosts) + `/")`,
	}
	hdr := glovebox.Param{Name: "headers", Schema: headersSchema, Description: "request headers (also as headers: {...})"}
	body := glovebox.Param{Name: "body", Schema: bodySchema, Description: "a String sent as it is, or data sent as JSON (also as body: ...)"}
	urlP := glovebox.Param{Name: "url", Schema: urlSchema, Required: true}
	switch method {
	case "":
		d.Params = []glovebox.Param{{Name: "method", Schema: methodSchema, Required: true}, urlP, hdr, body}
		d.Example = name + `("GET", "https://` + exampleHost(t.policy.hosts) + `/")`
	case "POST", "PUT", "PATCH":
		d.Params = []glovebox.Param{urlP, body, hdr}
	default:
		d.Params = []glovebox.Param{urlP, hdr}
	}
	return d
}

// exampleHost is a host an example call may name: the first allowed
// name (a wildcard's domain with "api." in front), else example.com.
func exampleHost(hosts []string) string {
	if len(hosts) == 0 {
		return "example.com"
	}
	if h, ok := strings.CutPrefix(hosts[0], "*."); ok {
		return "api." + h
	}
	return hosts[0]
}

var methods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}

// call unpacks a guest call and makes the request. method is "" for
// http_request, which takes it as its first argument.
func (t *Tool) call(ctx context.Context, fname, method string, a glovebox.Args) (any, error) {
	pos := a.Positional
	argErr := func(format string, args ...any) (any, error) {
		// No request was made, but the hook still hears of the attempt.
		err := toolError(ClassArgument, "http: "+fname+": "+format, args...)
		t.audit(ctx, AuditEntry{Time: time.Now(), Method: method, Err: err})
		return nil, err
	}
	// The positional parameters after url, in order.
	params := []string{"headers"}
	switch method {
	case "":
		params = []string{"headers", "body"}
	case "POST", "PUT", "PATCH":
		params = []string{"body", "headers"}
	}
	first := 1
	if method == "" {
		first = 2
	}
	if len(pos) < first || len(pos) > first+len(params) {
		sig := "url"
		if method == "" {
			sig = "method, url"
		}
		return argErr("wrong number of arguments (given %d, expected %d to %d: %s, %s)", len(pos), first, first+len(params), sig, strings.Join(params, ", "))
	}
	if method == "" {
		m, ok := pos[0].(string)
		if !ok {
			return argErr("the method is %s; give a String such as \"GET\"", guestType(pos[0]))
		}
		method = strings.ToUpper(m)
		if !slices.Contains(methods, method) {
			return argErr("the method %q is not supported; use one of %s", truncate(m), strings.Join(methods, ", "))
		}
	}
	rawURL, ok := pos[first-1].(string)
	if !ok {
		return argErr("the url is %s; give a String", guestType(pos[first-1]))
	}
	vals := map[string]any{}
	given := map[string]bool{}
	for i, v := range pos[first:] {
		vals[params[i]], given[params[i]] = v, true
	}
	keys := make([]string, 0, len(a.Keyword))
	for k := range a.Keyword {
		keys = append(keys, k)
	}
	slices.Sort(keys) // the first bad keyword reported is always the same
	for _, k := range keys {
		if !slices.Contains(params, k) {
			return argErr("unknown keyword %q; %s takes %s: as keywords, headers as a Hash in braces or as headers: {\"Name\" => \"value\"}", truncate(k), fname, strings.Join(params, ": and "))
		}
		if given[k] {
			return argErr("%s given both by position and as a keyword", k)
		}
		vals[k], given[k] = a.Keyword[k], true
	}
	var headers map[string]any
	if h := vals["headers"]; h != nil {
		headers, ok = h.(map[string]any)
		if !ok {
			return argErr("headers is %s; give a Hash of name => String", guestType(h))
		}
	}
	return t.do(ctx, method, rawURL, headers, vals["body"])
}

// admit checks the lifetime budgets and counts the request. It returns
// the time left in the time budget and the unit of work (see Reset) the
// request belongs to.
func (t *Tool) admit() (time.Duration, uint64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.requests >= t.cfg.MaxRequests {
		return 0, 0, toolError(ClassBudget, "http: the request budget is spent (%d requests); no more requests can be made in this unit of work", t.cfg.MaxRequests)
	}
	left := t.cfg.MaxTime - t.spent
	if left <= 0 {
		return 0, 0, toolError(ClassBudget, "http: the time budget is spent (%v of requests); no more requests can be made in this unit of work", t.cfg.MaxTime)
	}
	t.requests++
	return left, t.unit, nil
}

// do makes one request and reports it to the audit hook.
func (t *Tool) do(ctx context.Context, method, rawURL string, headers map[string]any, body any) (any, error) {
	e := AuditEntry{Time: time.Now(), Method: method, URL: rawURL}
	if len(e.URL) > MaxURL {
		e.URL = e.URL[:MaxURL]
	}
	res, err := t.request(ctx, &e, method, rawURL, headers, body)
	e.Duration = time.Since(e.Time)
	e.Err = err
	t.audit(ctx, e)
	if err != nil {
		return nil, err
	}
	return res, nil
}

func (t *Tool) audit(ctx context.Context, e AuditEntry) {
	if t.cfg.Audit != nil {
		t.cfg.Audit(ctx, e)
	}
}

// request applies the checks in order (budgets, URL, host allowlist,
// headers, body, IP floor), then sends the request and reads the response.
func (t *Tool) request(ctx context.Context, e *AuditEntry, method, rawURL string, headers map[string]any, body any) (map[string]any, error) {
	left, unit, err := t.admit()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	defer func() {
		t.mu.Lock()
		if t.unit == unit { // after a Reset, the time was the previous unit's
			t.spent += time.Since(start)
		}
		t.mu.Unlock()
	}()
	tg, err := t.policy.checkURL(rawURL)
	if err != nil {
		return nil, err
	}
	e.Host = tg.host
	if err := t.policy.checkHost(tg); err != nil {
		return nil, err
	}
	hdr, err := checkHeaders(headers)
	if err != nil {
		return nil, err
	}
	payload, ctype, err := encodeBody(body)
	if err != nil {
		return nil, err
	}
	if ctype != "" && hdr.Get("Content-Type") == "" {
		hdr.Set("Content-Type", ctype)
	}
	if hdr.Get("User-Agent") == "" {
		hdr.Set("User-Agent", "glovebox-httptool")
	}

	timeout, budgetCut := t.cfg.RequestTimeout, false
	if left < timeout {
		timeout, budgetCut = left, true
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	fail := func(err error) error {
		return t.classify(ctx, rctx, err, tg.host, budgetCut)
	}

	addrs, err := t.vet(rctx, tg)
	if err != nil {
		return nil, fail(err)
	}
	rctx = context.WithValue(rctx, pinKey{}, &pin{hostport: hostPort(tg), addrs: addrs, req: rctx})
	var rbody io.Reader
	if payload != nil {
		rbody = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(withTrace(rctx, e), method, tg.url.String(), rbody)
	if err != nil {
		return nil, toolError(ClassURL, "http: %v", err)
	}
	req.Header = hdr
	resp, err := t.transport.RoundTrip(req)
	if err != nil {
		return nil, fail(err)
	}
	defer resp.Body.Close()
	e.Status = resp.StatusCode
	out, n, err := t.readResponse(resp)
	e.BodyBytes = n
	if err != nil {
		return nil, fail(err)
	}
	return out, nil
}

// encodeBody turns the guest's body into bytes and a default Content-Type.
func encodeBody(body any) ([]byte, string, error) {
	switch b := body.(type) {
	case nil:
		return nil, "", nil
	case string:
		return []byte(b), "", nil
	case []byte: // a binary String: its bytes exactly
		return b, "", nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(body); err != nil {
		return nil, "", toolError(ClassArgument, "http: the body has no JSON form (%v); send a String, or a Hash or Array of data", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), "application/json", nil
}

// guestType names the Ruby type of guest data, for messages.
func guestType(x any) string { return wire.TypeName(x) }
