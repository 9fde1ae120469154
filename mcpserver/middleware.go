package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// toolSchema is one tool's inputSchema, kept for checking arguments.
type toolSchema struct {
	props    []string // property names, sorted
	required []string
	closed   bool // additionalProperties is false
	resolved *jsonschema.Resolved
	each     map[string]*jsonschema.Resolved // each property's schema
}

func newToolSchema(raw json.RawMessage) (*toolSchema, error) {
	var sch jsonschema.Schema
	if err := json.Unmarshal(raw, &sch); err != nil {
		return nil, err
	}
	r, err := sch.Resolve(nil)
	if err != nil {
		return nil, err
	}
	ts := &toolSchema{required: sch.Required, resolved: r, each: map[string]*jsonschema.Resolved{}}
	for name, ps := range sch.Properties {
		ts.props = append(ts.props, name)
		if pr, err := ps.Resolve(nil); err == nil {
			ts.each[name] = pr
		}
	}
	slices.Sort(ts.props)
	if ap := sch.AdditionalProperties; ap != nil && ap.Not != nil {
		ts.closed = true // false is decoded as {"not": {}}
	}
	return ts, nil
}

// check says what is wrong with args for tool, naming the argument, or
// returns "".
func (ts *toolSchema) check(tool string, raw json.RawMessage) string {
	takes := "no arguments"
	if len(ts.props) > 0 {
		takes = "the arguments " + strings.Join(ts.props, ", ")
	}
	if len(raw) == 0 || string(raw) == "null" {
		raw = json.RawMessage("{}")
	}
	var args map[string]any
	if err := json.Unmarshal(raw, &args); err != nil || args == nil {
		return fmt.Sprintf("the arguments of %s must be a JSON object (%s takes %s)", tool, tool, takes)
	}
	if ts.closed {
		var extra []string
		for k := range args {
			if !slices.Contains(ts.props, k) {
				extra = append(extra, fmt.Sprintf("%q", k))
			}
		}
		if len(extra) > 0 {
			slices.Sort(extra)
			return fmt.Sprintf("unknown argument %s for %s, which takes %s", strings.Join(extra, ", "), tool, takes)
		}
	}
	for _, k := range ts.required {
		if _, ok := args[k]; !ok {
			return fmt.Sprintf("missing argument %q: %s needs it", k, tool)
		}
	}
	for _, k := range ts.props {
		if v, ok := args[k]; ok && ts.each[k] != nil {
			if err := ts.each[k].Validate(v); err != nil {
				return fmt.Sprintf("argument %q of %s does not match its schema: %v", k, tool, err)
			}
		}
	}
	if err := ts.resolved.Validate(args); err != nil {
		return fmt.Sprintf("the arguments of %s do not match its inputSchema: %v", tool, err)
	}
	return ""
}

// checkCalls is receiving middleware: a tools/call for an unknown tool is
// refused with the list of tools, one whose arguments break the tool's
// inputSchema with a message naming the argument (both -32602, invalid
// params); and every error without a JSON-RPC code leaves with one
// (-32603, internal error), never code 0.
func (s *Server) checkCalls(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if cr, ok := req.(*mcp.CallToolRequest); ok && cr.Params != nil {
			ts, known := s.schemas[cr.Params.Name]
			if !known {
				names := make([]string, 0, len(s.schemas))
				for n := range s.schemas {
					names = append(names, n)
				}
				slices.Sort(names)
				return nil, &jsonrpc.Error{Code: CodeInvalidParams, Message: fmt.Sprintf("unknown tool %q; the tools are %s", cr.Params.Name, strings.Join(names, ", "))}
			}
			if why := ts.check(cr.Params.Name, cr.Params.Arguments); why != "" {
				return nil, &jsonrpc.Error{Code: CodeInvalidParams, Message: "invalid params: " + why}
			}
		}
		res, err := next(ctx, method, req)
		if err != nil {
			var we *jsonrpc.Error
			if !errors.As(err, &we) || we.Code == 0 {
				return nil, &jsonrpc.Error{Code: CodeInternalError, Message: err.Error()}
			}
		}
		return res, err
	}
}
