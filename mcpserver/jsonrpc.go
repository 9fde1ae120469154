package mcpserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// JSON-RPC error codes the server answers malformed messages with, before
// the SDK sees them (JSON-RPC 2.0 section 5.1).
const (
	// CodeParseError: the message is not JSON.
	CodeParseError = -32700
	// CodeInvalidRequest: JSON, but not a valid JSON-RPC message for this
	// server (a bad id, a wrong "jsonrpc" member, a batch where the
	// session's protocol revision has none, a request before initialize,
	// a notification with an id, a response that answers no request).
	CodeInvalidRequest = -32600
	// CodeMethodNotFound: a request for a method the server does not have.
	CodeMethodNotFound = -32601
	// CodeInvalidParams: params that are not an object, missing required
	// params, arguments a tool's inputSchema forbids, an unknown tool.
	CodeInvalidParams = -32602
	// CodeInternalError: the server failed on its side.
	CodeInternalError = -32603
	// CodeServerBusy: the server holds as many MCP sessions as it may
	// (see [HTTPOptions].MaxSessions); sent with HTTP 503.
	CodeServerBusy = -32000
)

// batchlessVersion is the first protocol revision without JSON-RPC
// batches.
const batchlessVersion = "2025-06-18"

// maxExactID bounds integer ids: larger ones cannot be echoed exactly by
// peers that hold numbers as doubles (the SDK among them).
const maxExactID = 1<<53 - 1

// methodKind says how a client may send a method.
type methodKind int

const (
	request        methodKind = iota + 1 // needs an id; params optional
	requestParams                        // needs an id and params
	notification                         // must not have an id
	beforeInitOK                         // a request allowed before initialize
	initializeCall                       // initialize itself
	statelessOnly                        // a request of statelessVersion only, which has no initialize
)

// clientMethods are the methods a client may send this server, by the
// protocol revisions it speaks (2024-11-05 to 2026-07-28). Whether a
// method exists at the request's revision (initialize and ping have gone
// at statelessVersion, server/discover is new there) is the SDK's to say.
var clientMethods = map[string]methodKind{
	"initialize":                       initializeCall,
	"server/discover":                  statelessOnly,
	"subscriptions/listen":             statelessOnly,
	"ping":                             beforeInitOK,
	"tools/list":                       request,
	"tools/call":                       requestParams,
	"resources/list":                   request,
	"resources/templates/list":         request,
	"resources/read":                   requestParams,
	"resources/subscribe":              requestParams,
	"resources/unsubscribe":            requestParams,
	"prompts/list":                     request,
	"prompts/get":                      requestParams,
	"completion/complete":              requestParams,
	"logging/setLevel":                 requestParams,
	"tasks/get":                        requestParams, // the tasks extension (tasks.go)
	"tasks/update":                     requestParams,
	"tasks/cancel":                     requestParams,
	"tasks/result":                     requestParams, // 2025-11-25's experimental tasks (tasks2025.go)
	"tasks/list":                       request,
	"notifications/initialized":        notification,
	"notifications/cancelled":          notification,
	"notifications/progress":           notification,
	"notifications/roots/list_changed": notification,
}

// rpcError is the answer to one refused message; id is its id when it
// could be read (nil is sent as null).
type rpcError struct {
	id   json.RawMessage
	code int
	msg  string
}

func (e *rpcError) encode() []byte {
	id := e.id
	if id == nil {
		id = json.RawMessage("null")
	}
	b, _ := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}{JSONRPC: "2.0", ID: id, Error: struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{e.code, e.msg}})
	return b
}

// message is what the checker learned of one valid message.
type message struct {
	method string
	id     json.RawMessage // nil for a notification
	params json.RawMessage
	// version is initialize's params.protocolVersion.
	version string
	// stateless is set for a request whose params._meta names a protocol
	// revision from statelessVersion on: it needs no initialize.
	stateless bool
}

func (m message) isResponse() bool { return m.method == "" }

var integerRE = regexp.MustCompile(`^-?(0|[1-9][0-9]*)$`)

// checkID reports why raw is not an id the server can echo exactly, or "".
func checkID(raw json.RawMessage) string {
	switch {
	case len(raw) == 0:
		return ""
	case raw[0] == '"':
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return "the id is not a valid string"
		}
		return ""
	case string(raw) == "null":
		return "the id is null; a request's id must be a string or an integer"
	case raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9'):
		if !integerRE.Match(raw) || string(raw) == "-0" {
			return fmt.Sprintf("the id %s is not an integer; ids are strings or integers", raw)
		}
		n, err := strconv.ParseInt(string(raw), 10, 64)
		if err != nil || n > maxExactID || n < -maxExactID {
			return fmt.Sprintf("the id %s is outside ±(2^53-1), the integers every peer can echo exactly; use a smaller one or a string", raw)
		}
		return ""
	case raw[0] == 't' || raw[0] == 'f':
		return "the id is a boolean; ids are strings or integers"
	case raw[0] == '{':
		return "the id is an object; ids are strings or integers"
	case raw[0] == '[':
		return "the id is an array; ids are strings or integers"
	}
	return "the id is not a string or an integer"
}

// checkOne validates one JSON value as a message from the client. It
// returns the message, or the error to answer it with; a nil error with
// drop set means "ignore it" (an unknown notification, which JSON-RPC
// forbids answering).
func checkOne(raw json.RawMessage, initialized bool) (m message, drop bool, e *rpcError) {
	var f map[string]json.RawMessage
	if json.Unmarshal(raw, &f) != nil || f == nil {
		return m, false, &rpcError{code: CodeInvalidRequest, msg: "invalid request: a JSON-RPC message is a JSON object"}
	}
	id, hasID := f["id"]
	var idOK json.RawMessage // the id, when it can be echoed
	if hasID && checkID(id) == "" {
		idOK = id
	}
	if v := f["jsonrpc"]; string(v) != `"2.0"` {
		return m, false, &rpcError{id: idOK, code: CodeInvalidRequest, msg: `invalid request: "jsonrpc" must be "2.0"`}
	}
	if hasID {
		if why := checkID(id); why != "" {
			return m, false, &rpcError{code: CodeInvalidRequest, msg: "invalid request: " + why}
		}
	}
	rawMethod, hasMethod := f["method"]
	if !hasMethod {
		// A response to one of the server's requests.
		_, hasResult := f["result"]
		_, hasError := f["error"]
		if !hasID || hasResult == hasError {
			return m, false, &rpcError{code: CodeInvalidRequest, msg: `invalid request: a message without "method" is a response, which needs an id and exactly one of "result" and "error"`}
		}
		return message{id: id}, false, nil
	}
	if json.Unmarshal(rawMethod, &m.method) != nil || m.method == "" {
		return m, false, &rpcError{id: idOK, code: CodeInvalidRequest, msg: `invalid request: "method" must be a non-empty string`}
	}
	kind, known := clientMethods[m.method]
	params, hasParams := f["params"]
	if string(params) == "null" {
		hasParams = false
	}
	switch {
	case !hasID && (!known || kind == notification):
		if !known || (hasParams && params[0] != '{') {
			return m, true, nil // notifications are never answered
		}
		m.params = params
		return m, false, nil
	case !hasID:
		return m, false, &rpcError{code: CodeInvalidRequest, msg: fmt.Sprintf("invalid request: %s is a request and needs an id (a message without one is a notification)", m.method)}
	case !known:
		return m, false, &rpcError{id: id, code: CodeMethodNotFound, msg: fmt.Sprintf("method not found: %q; this server answers %s", m.method, strings.Join(requestMethods(), ", "))}
	case kind == notification:
		return m, false, &rpcError{id: id, code: CodeInvalidRequest, msg: fmt.Sprintf("invalid request: %s is a notification and must not carry an id", m.method)}
	case hasParams && params[0] != '{':
		return m, false, &rpcError{id: id, code: CodeInvalidParams, msg: fmt.Sprintf("invalid params: the params of %s must be a JSON object", m.method)}
	case !hasParams && (kind == requestParams || kind == initializeCall):
		return m, false, &rpcError{id: id, code: CodeInvalidParams, msg: fmt.Sprintf("invalid params: %s needs params (a JSON object)", m.method)}
	}
	m.stateless = hasParams && metaVersion(params) >= statelessVersion
	if !initialized && !m.stateless && kind != beforeInitOK && kind != initializeCall {
		if kind == statelessOnly {
			return m, false, &rpcError{id: id, code: CodeInvalidRequest, msg: fmt.Sprintf(`invalid request: %s is part of MCP %s and needs params._meta with "%s": "%s" (and the client's info and capabilities)`, m.method, statelessVersion, metaProtocolVersion, statelessVersion)}
		}
		return m, false, &rpcError{id: id, code: CodeInvalidRequest, msg: fmt.Sprintf(`invalid request: %s before initialize; a session starts with an initialize request, or, under MCP %s, every request carries params._meta with "%s": "%s" and needs no session`, m.method, statelessVersion, metaProtocolVersion, statelessVersion)}
	}
	m.id, m.params = id, params
	if kind == initializeCall {
		var p struct {
			ProtocolVersion string `json:"protocolVersion"`
		}
		if json.Unmarshal(params, &p) != nil {
			return m, false, &rpcError{id: id, code: CodeInvalidParams, msg: `invalid params: initialize's "protocolVersion" must be a string`}
		}
		m.version = p.ProtocolVersion
	}
	return m, false, nil
}

// metaProtocolVersion is the params._meta key in which a request names
// its protocol revision, from statelessVersion on (SEP-2575).
const metaProtocolVersion = "io.modelcontextprotocol/protocolVersion"

// metaVersion returns the protocol revision named in params._meta, or "".
func metaVersion(params json.RawMessage) string {
	var p struct {
		Meta map[string]json.RawMessage `json:"_meta"`
	}
	if json.Unmarshal(params, &p) != nil {
		return ""
	}
	var v string
	if json.Unmarshal(p.Meta[metaProtocolVersion], &v) != nil {
		return ""
	}
	return v
}

func requestMethods() []string {
	var out []string
	for name, k := range clientMethods {
		if k != notification {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// negotiated is the protocol revision the server answers an initialize
// asking for v with: v when the server speaks it and it has the
// handshake (before statelessVersion), else the newest revision that has.
func negotiated(v string) string {
	vs := protocolVersions()
	if v < statelessVersion && slices.Contains(vs, v) {
		return v
	}
	for _, s := range vs {
		if s < statelessVersion {
			return s
		}
	}
	return v
}

// checked is the verdict on one line or body: forward it (fwd), or
// answer it (reply, a message or a batch of them; empty for a dropped
// notification).
type checked struct {
	fwd   bool
	reply []byte
	msgs  []message // the valid messages of a forwarded line
}

// checkPayload validates a payload from the client: one message or, for
// a session speaking a revision before batchlessVersion, a batch. version
// is the session's protocol revision ("" before initialize);
// initialized says whether initialize has been received.
func checkPayload(b []byte, version string, initialized bool) checked {
	b = bytes.TrimSpace(b)
	if !json.Valid(b) {
		return checked{reply: (&rpcError{code: CodeParseError, msg: "parse error: the message is not valid JSON"}).encode()}
	}
	if b[0] != '[' {
		m, drop, e := checkOne(b, initialized)
		switch {
		case e != nil:
			return checked{reply: e.encode()}
		case drop:
			return checked{}
		}
		return checked{fwd: true, msgs: []message{m}}
	}
	if version == "" || version >= batchlessVersion {
		rev := version
		if rev == "" {
			rev = "none yet"
		}
		return checked{reply: (&rpcError{code: CodeInvalidRequest, msg: fmt.Sprintf("invalid request: JSON-RPC batches are not part of MCP since %s, and a session starts with a lone initialize (this session's revision: %s); send one message at a time", batchlessVersion, rev)}).encode()}
	}
	var elems []json.RawMessage
	_ = json.Unmarshal(b, &elems)
	if len(elems) == 0 {
		return checked{reply: (&rpcError{code: CodeInvalidRequest, msg: "invalid request: an empty batch"}).encode()}
	}
	var msgs []message
	var errs []*rpcError
	for _, el := range elems {
		m, drop, e := checkOne(el, initialized)
		switch {
		case e != nil:
			errs = append(errs, e)
		case !drop:
			msgs = append(msgs, m)
		}
	}
	rest := msgs[:0]
	for _, m := range msgs {
		if m.method == "initialize" {
			errs = append(errs, &rpcError{id: m.id, code: CodeInvalidRequest, msg: "invalid request: initialize must be sent alone, not in a batch"})
		} else {
			rest = append(rest, m)
		}
	}
	msgs = rest
	if len(errs) == 0 {
		return checked{fwd: true, msgs: msgs}
	}
	// A batch with an invalid member runs nothing: every request in it
	// is answered, the invalid ones with their error.
	for _, m := range msgs {
		if m.id != nil && !m.isResponse() {
			errs = append(errs, &rpcError{id: m.id, code: CodeInvalidRequest, msg: "not run: another message of this batch is invalid"})
		}
	}
	var out bytes.Buffer
	out.WriteByte('[')
	for i, e := range errs {
		if i > 0 {
			out.WriteByte(',')
		}
		out.Write(e.encode())
	}
	out.WriteByte(']')
	return checked{reply: out.Bytes()}
}
