package mcptools

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gloveboxhq/glovebox"
	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The Glovebox::ToolError subclasses a bound tool raises (the Class of the
// [glovebox.ToolError] it returns).
const (
	// ClassArgument: the arguments are not a keyword Hash, have no JSON
	// form, or break the tool's inputSchema; the message names the field.
	// The request was not sent.
	ClassArgument = "MCPArgumentError"
	// ClassTransport: the server could not be reached, or the binding is
	// closed.
	ClassTransport = "MCPTransportError"
	// ClassCrash: the server's connection ended during the call (its
	// process exited); the server is restarted on a later call.
	ClassCrash = "MCPServerCrashError"
	// ClassTimeout: the eval's deadline or tool-time budget ended the
	// call; notifications/cancelled was sent to the server.
	ClassTimeout = "MCPTimeoutError"
	// ClassProtocol: the server answered with a JSON-RPC error or a
	// malformed result.
	ClassProtocol = "MCPProtocolError"
)

// tool is one bound MCP tool.
type tool struct {
	c      *conn
	guest  string
	tool   *mcp.Tool
	schema *jsonschema.Resolved // nil when the tool has no inputSchema
	noNull map[string]bool      // optional properties whose schema does not accept null
}

func newTool(c *conn, guest string, t *mcp.Tool) (*tool, error) {
	bt := &tool{c: c, guest: guest, tool: t}
	if t.InputSchema != nil {
		raw, err := json.Marshal(t.InputSchema)
		if err != nil {
			return nil, fmt.Errorf("inputSchema: %v", err)
		}
		var s jsonschema.Schema
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("inputSchema: %v", err)
		}
		r, err := s.Resolve(nil)
		if err != nil {
			return nil, fmt.Errorf("inputSchema: %v", err)
		}
		bt.schema = r
		for name, p := range s.Properties {
			if p != nil && (p.Type != "" || len(p.Types) > 0) && p.Type != "null" && !slices.Contains(p.Types, "null") && !slices.Contains(s.Required, name) {
				if bt.noNull == nil {
					bt.noNull = map[string]bool{}
				}
				bt.noNull[name] = true
			}
		}
	}
	return bt, nil
}

// omitNulls returns kw without the nil values of the properties in
// t.noNull, copied when it drops any (kw belongs to the caller).
func (t *tool) omitNulls(kw map[string]any) map[string]any {
	var out map[string]any
	for k, v := range kw {
		if v == nil && t.noNull[k] {
			if out == nil {
				out = maps.Clone(kw)
			}
			delete(out, k)
		}
	}
	if out == nil {
		return kw
	}
	return out
}

// call is the glovebox.ToolFunc of the tool. Every message it returns
// is scrubbed of the server's URL (see scrubber.forGuest): the guest
// learns the server's name, nothing of where it is.
func (t *tool) call(ctx context.Context, args glovebox.Args) (any, error) {
	sc := t.c.scrub
	toolErr := func(class, format string, args ...any) error {
		return &glovebox.ToolError{Class: class, Message: sc.forGuest(fmt.Sprintf(format, args...))}
	}
	where := fmt.Sprintf("mcp %s/%s", t.c.srv.Name, t.tool.Name)
	kw := args.Keyword
	switch {
	case len(args.Positional) == 1 && kw == nil:
		m, ok := args.Positional[0].(map[string]any)
		if !ok {
			return nil, toolErr(ClassArgument, "%s: takes keyword arguments (or one Hash), got a positional %s", where, rubyClass(args.Positional[0]))
		}
		kw = m
	case len(args.Positional) > 0:
		return nil, toolErr(ClassArgument, "%s: takes keyword arguments only, got %d positional", where, len(args.Positional))
	}
	if kw == nil {
		kw = map[string]any{}
	}
	// nil for an optional property whose type excludes null is Ruby's
	// "not given" (verbose: nil): the property is left out, as a client
	// omits it, rather than refused.
	kw = t.omitNulls(kw)
	raw, err := json.Marshal(kw)
	if err != nil {
		return nil, toolErr(ClassArgument, "%s: the arguments have no JSON form: %v", where, err)
	}
	if t.schema != nil {
		var inst any
		if err := json.Unmarshal(raw, &inst); err != nil {
			return nil, toolErr(ClassArgument, "%s: %v", where, err)
		}
		if err := t.schema.Validate(inst); err != nil {
			return nil, toolErr(ClassArgument, "%s: arguments break the tool's inputSchema: %v", where, err)
		}
	}
	ctx, cancel := callContext(ctx, t.c.b.cfg.CallTimeout)
	defer cancel()
	c, err := t.target(ctx)
	if err != nil {
		return nil, toolErr(ClassTransport, "%s: server unavailable (the request was not sent): %v", where, err)
	}
	sc = c.scrub
	cs, err := c.live(ctx)
	if err != nil {
		return nil, toolErr(ClassTransport, "%s: server unavailable (the request was not sent): %v", where, err)
	}
	ctx, k, leave := c.enter(ctx)
	defer leave()
	params := &mcp.CallToolParams{Name: t.tool.Name, Arguments: json.RawMessage(raw)}
	c.mu.Lock()
	tap, g := c.tap, c.guard
	c.mu.Unlock()
	var mark string
	if tap != nil {
		mark = tap.mark()
		params.Meta = mcp.Meta{callMarker: mark}
	}
	res, err := cs.CallTool(ctx, params)
	var rawRes json.RawMessage
	if tap != nil {
		rawRes = tap.take(mark)
	}
	if err := k.suspended(); err != nil {
		// The host's answerer suspends the guest's call to ask someone
		// (glovebox mcp asking its own client under 2026-07-28): the
		// call is made again when the eval is continued.
		return nil, err
	}
	if err != nil {
		var rpc *jsonrpc.Error
		var refused refusedError
		switch {
		case g.tripped() != nil:
			return nil, toolErr(ClassProtocol, "%s: the call failed (in doubt: the server may have run it): %v", where, g.tripped())
		case errors.As(err, &refused):
			return nil, toolErr(ClassTransport, "%s: the call did not run: %v", where, refused)
		case strings.Contains(err.Error(), "multi round-trip"):
			// The SDK's answer to an input_required result failed
			// (untyped): a question this host does not take, such as
			// sampling without Config.Sample.
			return nil, toolErr(ClassProtocol, "%s: the server asked a question the host does not answer (elicitation needs Config.Elicit, sampling Config.Sample), so the call was not retried: %v", where, err)
		case ctx.Err() != nil:
			return nil, toolErr(ClassTimeout, "%s: the call ran out of time and was cancelled (in doubt: the server may have run it): %v", where, context.Cause(ctx))
		case errors.As(err, &rpc) && rpc.Code == codeRejected:
			return nil, toolErr(ClassTransport, "%s: the request did not reach the server, or the server refused it with an HTTP error (in doubt then: it may have run): %v", where, err)
		case errors.As(err, &rpc):
			return nil, toolErr(ClassProtocol, "%s: the server answered with an error: %v", where, err)
		case c.ended(cs):
			return nil, toolErr(ClassCrash, "%s: the server's connection ended during the call (in doubt: the server may have run it); it will be restarted: %v", where, err)
		}
		return nil, toolErr(ClassTransport, "%s: the call failed (in doubt: the server may have run it): %v", where, err)
	}
	c.ok()
	out := t.result(res)
	if v, ok := exactStructured(rawRes); ok {
		out["structured"] = v
	}
	return out, nil
}

// codeRejected is the code of the go-sdk's "rejected by transport"
// error: a request that was not sent, or that the server answered with
// an HTTP error and no JSON-RPC error of its own.
const codeRejected = -32005

// errCallTimeout and errNearDeadline are the causes of a call's end by
// callContext.
var (
	errCallTimeout  = errors.New("Config.CallTimeout passed")
	errNearDeadline = errors.New("the eval's deadline (or tool-time budget) is near")
)

// callContext bounds one call: by timeout (when positive) and by the
// parent's deadline less a tenth of the time left (at most a second), so
// the guest has time to handle the timeout error.
func callContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	d, cause := time.Duration(-1), errCallTimeout
	if timeout > 0 {
		d = timeout
	}
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		if near := left - min(left/10, time.Second); d < 0 || near < d {
			d, cause = near, errNearDeadline
		}
	}
	if d < 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeoutCause(ctx, d, cause)
}

// ended reports whether the session cs has ended (waiting up to
// crashGrace for the SDK to notice: a call can fail with EOF a moment
// before the session's Wait returns).
func (c *conn) ended(cs *mcp.ClientSession) bool {
	c.mu.Lock()
	done, cur := c.done, c.session
	c.mu.Unlock()
	if cur != cs {
		return true // already replaced or closed
	}
	select {
	case <-done:
		return true
	case <-time.After(crashGrace):
		return false
	}
}

// crashGrace bounds the wait in ended; a session's end is noticed within
// microseconds of its pipe closing, so a second is generous.
const crashGrace = time.Second

// result converts a CallToolResult into the guest's Hash.
func (t *tool) result(res *mcp.CallToolResult) map[string]any {
	var texts []string
	var other []any
	inline := func(m map[string]any, data []byte) map[string]any {
		m["size"] = int64(len(data))
		if t.c.b.cfg.MaxInlineBytes >= 0 && len(data) <= t.c.b.cfg.MaxInlineBytes {
			// Base64, as MCP sends it: a String of ASCII crosses every
			// boundary (guest, Go, JSON) exactly, where raw bytes would be
			// read as UTF-8 and lose every invalid sequence.
			m["data"] = base64.StdEncoding.EncodeToString(data)
			m["encoding"] = "base64"
			m["bytes"] = data
		}
		return m
	}
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			texts = append(texts, c.Text)
		case *mcp.ImageContent:
			other = append(other, inline(map[string]any{"type": "image", "mime_type": c.MIMEType}, c.Data))
		case *mcp.AudioContent:
			other = append(other, inline(map[string]any{"type": "audio", "mime_type": c.MIMEType}, c.Data))
		case *mcp.ResourceLink:
			m := map[string]any{"type": "resource_link", "uri": c.URI, "name": c.Name, "mime_type": c.MIMEType}
			if c.Size != nil {
				m["size"] = *c.Size
			}
			other = append(other, m)
		case *mcp.EmbeddedResource:
			m := map[string]any{"type": "resource"}
			if r := c.Resource; r != nil {
				m["uri"], m["mime_type"] = r.URI, r.MIMEType
				if r.Blob != nil {
					inline(m, r.Blob)
				} else {
					m["text"], m["size"] = r.Text, int64(len(r.Text))
				}
			}
			other = append(other, m)
		default:
			other = append(other, map[string]any{"type": fmt.Sprintf("%T", c)})
		}
	}
	out := map[string]any{
		"text":       strings.Join(texts, "\n"),
		"structured": nil,
		"error":      res.IsError,
		"content":    other,
	}
	if other == nil {
		out["content"] = []any{}
	}
	if res.StructuredContent != nil {
		// Re-decoded with UseNumber so integers reach the guest as Integers.
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			d := json.NewDecoder(strings.NewReader(string(b)))
			d.UseNumber()
			var v any
			if d.Decode(&v) == nil {
				out["structured"] = v
			}
		}
	}
	return out
}

// doc is what the model reads about the tool: its description, its
// inputSchema as one keyword-arguments parameter, and the result Hash's
// schema with the tool's outputSchema as "structured".
func (t *tool) doc() (glovebox.ToolDoc, error) {
	d := strings.TrimSpace(t.tool.Description)
	if t.tool.Title != "" && !strings.Contains(d, t.tool.Title) {
		d = strings.TrimSpace(t.tool.Title + ". " + d)
	}
	if t.guest != t.tool.Name {
		d += fmt.Sprintf(" (MCP tool %q of server %q.)", t.tool.Name, t.c.srv.Name)
	} else {
		d += fmt.Sprintf(" (MCP server %q.)", t.c.srv.Name)
	}
	in := json.RawMessage(`{"type":"object"}`)
	if t.tool.InputSchema != nil {
		b, err := json.Marshal(t.tool.InputSchema)
		if err != nil {
			return glovebox.ToolDoc{}, err
		}
		in = b
	}
	structured := json.RawMessage(`{}`)
	if t.tool.OutputSchema != nil {
		if b, err := json.Marshal(t.tool.OutputSchema); err == nil && len(b) > 0 && b[0] == '{' {
			structured = b
		}
	}
	result := `{"type":"object","properties":{"text":{"type":"string"},"structured":` + string(structured) +
		`,"error":{"type":"boolean"},"content":{"type":"array","items":{"type":"object"}}}}`
	return glovebox.ToolDoc{
		Description: strings.TrimSpace(d),
		Params:      []glovebox.Param{{Name: "arguments", Schema: in, Required: true, Keywords: true, Description: "the tool's arguments, as keyword arguments"}},
		Returns:     `a Hash: "text" (the text content joined), "structured" (structuredContent, or nil), "error" (true when the tool reported a failure: data, not an exception), "content" (other items: type, mime_type, size, and when small "data" in base64 and "bytes", a binary String)`,
		Result:      json.RawMessage(result),
		Example:     t.guest + "(" + exampleArgs(t.tool.InputSchema) + ")",
	}, nil
}

func exampleArgs(schema any) string {
	b, _ := json.Marshal(schema)
	var s struct {
		Properties map[string]struct {
			Type any `json:"type"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	if json.Unmarshal(b, &s) != nil || len(s.Required) == 0 {
		return ""
	}
	req := append([]string(nil), s.Required...)
	sort.Strings(req)
	var parts []string
	for _, r := range req {
		v := "..."
		switch s.Properties[r].Type {
		case "string":
			v = `"..."`
		case "integer", "number":
			v = "1"
		case "boolean":
			v = "true"
		case "array":
			v = "[]"
		case "object":
			v = "{}"
		}
		parts = append(parts, r+": "+v)
	}
	return strings.Join(parts, ", ")
}

// rubyClass names the guest class a tool argument came from (see Values
// in glovebox's package doc), for messages the guest reads.
func rubyClass(v any) string {
	switch v.(type) {
	case nil:
		return "nil"
	case bool:
		return "true or false"
	case int64, *big.Int:
		return "Integer"
	case float64:
		return "Float"
	case string:
		return "String (or Symbol)"
	case []byte:
		return "binary String"
	case []any:
		return "Array"
	case map[string]any:
		return "Hash"
	}
	return fmt.Sprintf("%T", v)
}
