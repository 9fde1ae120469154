package mcptools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/gloveboxhq/glovebox"
	"github.com/google/jsonschema-go/jsonschema"
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
	}
	return bt, nil
}

func toolErr(class, format string, args ...any) error {
	return &glovebox.ToolError{Class: class, Message: fmt.Sprintf(format, args...)}
}

// call is the glovebox.ToolFunc of the tool.
func (t *tool) call(ctx context.Context, args glovebox.Args) (any, error) {
	where := fmt.Sprintf("mcp %s/%s", t.c.srv.Name, t.tool.Name)
	kw := args.Keyword
	switch {
	case len(args.Positional) == 1 && kw == nil:
		m, ok := args.Positional[0].(map[string]any)
		if !ok {
			return nil, toolErr(ClassArgument, "%s: takes keyword arguments (or one Hash), got a positional %T", where, args.Positional[0])
		}
		kw = m
	case len(args.Positional) > 0:
		return nil, toolErr(ClassArgument, "%s: takes keyword arguments only, got %d positional", where, len(args.Positional))
	}
	if kw == nil {
		kw = map[string]any{}
	}
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
	cs, err := t.c.live(ctx)
	if err != nil {
		return nil, toolErr(ClassTransport, "%s: server unavailable (the request was not sent): %v", where, err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: t.tool.Name, Arguments: json.RawMessage(raw)})
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return nil, toolErr(ClassTimeout, "%s: the call ran out of time and was cancelled (in doubt: the server may have run it): %v", where, context.Cause(ctx))
		case errors.Is(err, mcp.ErrConnectionClosed), t.c.isDead():
			return nil, toolErr(ClassCrash, "%s: the server's connection ended during the call (in doubt: the server may have run it); it will be restarted: %v", where, err)
		}
		var werr interface{ Error() string }
		werr = err
		if isRPCError(err) {
			return nil, toolErr(ClassProtocol, "%s: the server answered with an error: %v", where, werr)
		}
		return nil, toolErr(ClassTransport, "%s: the call failed (in doubt: the server may have run it): %v", where, err)
	}
	t.c.ok()
	return t.result(res), nil
}

func (c *conn) isDead() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dead
}

// result converts a CallToolResult into the guest's Hash.
func (t *tool) result(res *mcp.CallToolResult) map[string]any {
	var texts []string
	var other []any
	inline := func(m map[string]any, data []byte) map[string]any {
		m["size"] = int64(len(data))
		if t.c.b.cfg.MaxInlineBytes >= 0 && len(data) <= t.c.b.cfg.MaxInlineBytes {
			m["data"] = string(data)
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

func isRPCError(err error) bool {
	var w interface{ Unwrap() error }
	for e := err; e != nil; {
		if strings.HasPrefix(fmt.Sprintf("%T", e), "*jsonrpc") {
			return true
		}
		if !errors.As(e, &w) {
			break
		}
		e = w.Unwrap()
	}
	return false
}

// doc is what the model reads about the tool.
func (t *tool) doc() glovebox.ToolDoc {
	d := t.tool.Description
	if t.tool.Title != "" && !strings.Contains(d, t.tool.Title) {
		d = t.tool.Title + ". " + d
	}
	d = strings.TrimSpace(d)
	d += fmt.Sprintf(" (MCP tool %q of server %q; call with keyword arguments", t.tool.Name, t.c.srv.Name)
	if t.tool.InputSchema != nil {
		if b, err := json.Marshal(t.tool.InputSchema); err == nil {
			d += "; arguments schema: " + string(b)
		}
	}
	d += ")"
	ex := t.guest + "(" + exampleArgs(t.tool.InputSchema) + ")"
	return glovebox.ToolDoc{
		Description: strings.TrimSpace(d),
		Returns:     `Hash: "text" (String), "structured" (parsed structuredContent or nil), "error" (true when the tool reported an error), "content" (other items: type, mime_type, size, data when small)`,
		Example:     ex,
	}
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
