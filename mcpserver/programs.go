package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/gloveboxhq/glovebox"
)

// program is one named program and its side file (see the package
// documentation, "Named programs").
type program struct {
	Kind        string                `json:"kind"`
	Description string                `json:"description"`
	Title       string                `json:"title"`
	InputSchema json.RawMessage       `json:"inputSchema"`
	Arguments   []*mcp.PromptArgument `json:"arguments"`
	URI         string                `json:"uri"`
	URITemplate string                `json:"uriTemplate"`
	MIMEType    string                `json:"mimeType"`
	// RequiresClientCapabilities are the client capabilities a tool
	// needs (for example {"sampling": {}}); a client that did not
	// declare one of them gets -32021 with the list.
	RequiresClientCapabilities map[string]json.RawMessage `json:"requiresClientCapabilities"`
	// LogStdout sends each line the tool's program printed as an MCP log
	// message (level info, logger NAME) before its result, at most
	// maxLogLines of them.
	LogStdout bool `json:"logStdout"`
	// Task lets the tool run as a task for a client that declares the
	// tasks extension (see [TasksExtension]), as run_ruby does: true (or
	// "optional"), "required" to refuse clients without it (-32021), or
	// "after_input" to ask in the foreground first (input_required
	// results) and run as a task from the retry that answers.
	Task taskSupport `json:"task"`

	name, code string
}

// loadPrograms reads the named programs of dir, sorted by name. Errors
// name the file: an unreadable folder or file, a side file that is not
// JSON or names an unknown kind, a resource without uri or uriTemplate,
// a program without its side file or the reverse.
func loadPrograms(dir string) ([]*program, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("mcpserver: programs: %w", err)
	}
	var out []*program
	for _, e := range ents {
		name, isRuby := strings.CutSuffix(e.Name(), ".rb")
		side, isSide := strings.CutSuffix(e.Name(), ".json")
		switch {
		case e.IsDir():
			continue
		case isSide:
			if _, err := os.Stat(filepath.Join(dir, side+".rb")); err != nil {
				return nil, fmt.Errorf("mcpserver: programs: %s has no program %s.rb beside it", e.Name(), side)
			}
			continue
		case !isRuby:
			continue
		}
		code, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("mcpserver: programs: %w", err)
		}
		meta, err := os.ReadFile(filepath.Join(dir, name+".json"))
		if err != nil {
			return nil, fmt.Errorf("mcpserver: programs: %s needs its side file %s.json (kind, description, inputSchema): %w", e.Name(), name, err)
		}
		p := &program{name: name, code: string(code)}
		if err := json.Unmarshal(meta, p); err != nil {
			return nil, fmt.Errorf("mcpserver: programs: %s.json: %w", name, err)
		}
		if p.Kind == "" {
			p.Kind = "tool"
		}
		switch {
		case !slices.Contains([]string{"tool", "prompt", "resource"}, p.Kind):
			return nil, fmt.Errorf("mcpserver: programs: %s.json: kind %q is not tool, prompt or resource", name, p.Kind)
		case p.Kind == "resource" && (p.URI == "") == (p.URITemplate == ""):
			return nil, fmt.Errorf("mcpserver: programs: %s.json: a resource needs exactly one of uri and uriTemplate", name)
		case p.Kind == "tool" && len(p.InputSchema) == 0:
			p.InputSchema = json.RawMessage(`{"type":"object"}`)
		}
		out = append(out, p)
	}
	return out, nil
}

// addPrograms serves the named programs of s.opts.Programs.
func (s *Server) addPrograms() error {
	if s.opts.Programs == "" {
		return nil
	}
	progs, err := loadPrograms(s.opts.Programs)
	if err != nil {
		return err
	}
	s.programs = progs
	for _, p := range progs {
		switch p.Kind {
		case "tool":
			if _, taken := s.schemas[p.name]; taken {
				return fmt.Errorf("mcpserver: programs: %s.rb: the tool name %s is taken", p.name, p.name)
			}
			ts, err := newToolSchema(p.InputSchema)
			if err != nil {
				return fmt.Errorf("mcpserver: programs: %s.json: inputSchema: %w", p.name, err)
			}
			s.schemas[p.name] = ts
			s.mcp.AddTool(&mcp.Tool{Name: p.name, Title: p.Title, Description: p.Description, InputSchema: p.InputSchema},
				s.guard(func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
					if err := missingCapabilities(p, req.ClientCapabilities()); err != nil {
						return nil, err
					}
					ctx = s.callContext(ctx, req)
					start := func() (*mcp.CallToolResult, error) {
						return s.programCall(ctx, req, p, func(ctx context.Context) (*glovebox.Result, error) {
							return s.evalProgram(ctx, p, req.Params.Arguments)
						})
					}
					if !isRetry(req.Params) {
						return start()
					}
					return s.retryCall(ctx, req, start, func(r *retry) (*mcp.CallToolResult, error) {
						return s.programCall(ctx, req, p, func(ctx context.Context) (*glovebox.Result, error) { return continueWith(ctx, r, s.continueProgram) })
					})
				}))
		case "prompt":
			s.mcp.AddPrompt(&mcp.Prompt{Name: p.name, Title: p.Title, Description: p.Description, Arguments: p.Arguments},
				func(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
					args, _ := json.Marshal(req.Params.Arguments)
					st := req.Params.RequestState
					var given mcp.InputResponseMap
					if st == "" {
						given = req.Params.InputResponses
					}
					ctx = withCall(ctx, req.Session, req, req.Params.GetProgressToken(), given)
					if st == "" {
						return s.promptCall(ctx, p, func(ctx context.Context) (*glovebox.Result, error) { return s.evalProgram(ctx, p, args) })
					}
					return resume(s, req, p.name, st, req.Params.InputResponses, func(asks mcp.InputRequestMap) *mcp.GetPromptResult {
						return &mcp.GetPromptResult{InputRequests: asks, RequestState: st}
					}, func(r *retry) (*mcp.GetPromptResult, error) {
						return s.promptCall(ctx, p, func(ctx context.Context) (*glovebox.Result, error) { return continueWith(ctx, r, s.continueProgram) })
					})
				})
		case "resource":
			read := func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
				args, _ := json.Marshal(map[string]string{"uri": req.Params.URI})
				return s.resourceProgram(ctx, p, req.Params.URI, args)
			}
			if p.URI != "" {
				s.mcp.AddResource(&mcp.Resource{URI: p.URI, Name: p.name, Title: p.Title, Description: p.Description, MIMEType: p.MIMEType}, read)
			} else {
				s.mcp.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: p.URITemplate, Name: p.name, Title: p.Title, Description: p.Description, MIMEType: p.MIMEType}, read)
			}
		}
	}
	return nil
}

// runProgram runs p with args (a JSON object, or empty) as ARGS and
// returns its result and its value as JSON.
func (s *Server) runProgram(ctx context.Context, p *program, args json.RawMessage) (*glovebox.Result, json.RawMessage, error) {
	return s.slotted(ctx, func(ctx context.Context) (*glovebox.Result, error) { return s.evalProgram(ctx, p, args) })
}

// slotted runs do when a sandbox slot is free, and returns its result
// and its value as JSON.
func (s *Server) slotted(ctx context.Context, do func(context.Context) (*glovebox.Result, error)) (*glovebox.Result, json.RawMessage, error) {
	select {
	case s.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	defer func() { <-s.slots }()
	res, err := do(ctx)
	if err != nil {
		return nil, nil, err
	}
	v, _ := json.Marshal(res.Value)
	return res, v, nil
}

// evalProgram runs p with args (a JSON object, or empty) as ARGS.
func (s *Server) evalProgram(ctx context.Context, p *program, args json.RawMessage) (*glovebox.Result, error) {
	if len(bytes.TrimSpace(args)) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	// The arguments arrive on stdin, so no quoting can turn them into code;
	// the prelude is one line, so the program's line numbers are off by one.
	code := `ARGS = (require "json"; JSON.parse($stdin.read).freeze)` + "\n" + p.code
	return s.rt.EvalWith(ctx, code, glovebox.WithStdin(bytes.NewReader(args)))
}

// programCall runs a named tool's program with do (a first run or a
// paused one continued) and makes its result: input_required when it
// paused in a question under statelessVersion, the program's answer
// otherwise, after its output as log messages when its side file asks.
func (s *Server) programCall(ctx context.Context, req *mcp.CallToolRequest, p *program, do func(context.Context) (*glovebox.Result, error)) (*mcp.CallToolResult, error) {
	res, v, err := s.slotted(ctx, do)
	if err == nil && res.Status == glovebox.StatusSuspended && callFrom(ctx).stateless() {
		return s.pausedResult(callFrom(ctx), req.Params.Name, res), nil
	}
	out, err := programResult(p, res, v, err)
	if p.LogStdout && res != nil && req.Session != nil {
		lines := strings.Split(strings.TrimSuffix(res.Stdout, "\n"), "\n")
		for _, l := range lines[:min(len(lines), maxLogLines)] {
			if l != "" {
				_ = req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Logger: p.name, Data: l})
			}
		}
	}
	return out, err
}

// runOK is runProgram for a prompt or resource, where a run that does
// not end with StatusOK is an error.
func (s *Server) runOK(ctx context.Context, p *program, args json.RawMessage) (*glovebox.Result, json.RawMessage, error) {
	res, v, err := s.runProgram(ctx, p, args)
	if err == nil && res.Status != glovebox.StatusOK {
		err = failed(p, res)
	}
	return res, v, err
}

// failed describes a program's run that did not end with StatusOK.
func failed(p *program, res *glovebox.Result) error {
	msg := string(res.Status)
	if res.Error != nil {
		msg += ": " + res.Error.Class + ": " + res.Error.Message
	}
	return fmt.Errorf("the program %s ended with %s", p.name, msg)
}

// maxLogLines bounds the log messages one named tool's call sends.
const maxLogLines = 100

// missingCapabilities returns the -32021 error for a tool whose side file
// requires client capabilities that have not all been declared, or nil.
func missingCapabilities(p *program, declared *mcp.ClientCapabilities) error {
	if len(p.RequiresClientCapabilities) == 0 {
		return nil
	}
	var have map[string]json.RawMessage
	b, _ := json.Marshal(declared)
	_ = json.Unmarshal(b, &have)
	var missing []string
	for k := range p.RequiresClientCapabilities {
		if _, ok := have[k]; !ok {
			missing = append(missing, k)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	slices.Sort(missing)
	data, _ := json.Marshal(map[string]any{"requiredCapabilities": p.RequiresClientCapabilities})
	return &jsonrpc.Error{Code: mcp.CodeMissingRequiredClientCapabilities, Data: data,
		Message: fmt.Sprintf("the tool %s needs the client capabilities %s, which this client did not declare", p.name, strings.Join(missing, ", "))}
}

// programResult is a named tool's result for its run's res (with its
// value v as JSON) or err.
func programResult(p *program, res *glovebox.Result, v json.RawMessage, err error) (*mcp.CallToolResult, error) {
	switch {
	case err != nil:
		return errorResult("sandbox_error", "Glovebox::SandboxError", err.Error()), nil
	case res.Status != glovebox.StatusOK:
		class := "Glovebox::SandboxError"
		if res.Error != nil {
			class = res.Error.Class
		}
		return errorResult(string(res.Status), class, failed(p, res).Error()), nil
	}
	if str, ok := res.Value.(string); ok {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: str}}}, nil
	}
	if m, ok := res.Value.(map[string]any); ok && m["content"] != nil {
		var out mcp.CallToolResult
		if err := json.Unmarshal(v, &out); err != nil {
			return errorResult("invalid_result", "Glovebox::InvalidResult", fmt.Sprintf("the program %s returned a Hash with \"content\" that is not an MCP tool result: %v", p.name, err)), nil
		}
		return &out, nil
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(v)}}}, nil
}

// promptCall runs a named prompt's program with do (a first run or a
// paused one continued) and makes its result: input_required when it
// paused in a question under statelessVersion.
func (s *Server) promptCall(ctx context.Context, p *program, do func(context.Context) (*glovebox.Result, error)) (*mcp.GetPromptResult, error) {
	res, v, err := s.slotted(ctx, do)
	if err == nil && res.Status == glovebox.StatusSuspended && callFrom(ctx).stateless() {
		asks, st, err := s.pause(callFrom(ctx), p.name, res)
		if err != nil {
			return nil, err
		}
		return &mcp.GetPromptResult{InputRequests: asks, RequestState: st}, nil
	}
	if err == nil && res.Status != glovebox.StatusOK {
		err = failed(p, res)
	}
	if err != nil {
		return nil, err
	}
	switch val := res.Value.(type) {
	case string:
		return &mcp.GetPromptResult{Description: p.Description, Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: val}}}}, nil
	case []any:
		v = append(append([]byte(`{"messages":`), v...), '}')
	}
	var out mcp.GetPromptResult
	if err := json.Unmarshal(v, &out); err != nil || out.Messages == nil {
		return nil, fmt.Errorf("the prompt program %s returned neither a String, an Array of messages nor a Hash with \"messages\" (%v)", p.name, err)
	}
	return &out, nil
}

func (s *Server) resourceProgram(ctx context.Context, p *program, uri string, args json.RawMessage) (*mcp.ReadResourceResult, error) {
	res, v, err := s.runOK(ctx, p, args)
	if err != nil {
		return nil, err
	}
	c := &mcp.ResourceContents{URI: uri, MIMEType: p.MIMEType}
	if str, ok := res.Value.(string); ok {
		c.Text = str
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{c}}, nil
	}
	var got struct {
		Text     *string `json:"text"`
		Blob     []byte  `json:"blob"`
		MIMEType string  `json:"mimeType"`
	}
	if err := json.Unmarshal(v, &got); err != nil || (got.Text == nil && got.Blob == nil) {
		return nil, errors.New("the resource program " + p.name + ` returned neither a String nor a Hash with "text" or "blob" (base64)`)
	}
	if got.Text != nil {
		c.Text = *got.Text
	}
	c.Blob = got.Blob
	if got.MIMEType != "" {
		c.MIMEType = got.MIMEType
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{c}}, nil
}

// completer is the SDK's completion handler: nil (no completions
// capability) without named programs.
func (s *Server) completer() func(context.Context, *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
	if s.opts.Programs == "" {
		return nil
	}
	return s.complete
}

// complete answers completion/complete: a named prompt's argument or a
// named resource template's variable has no suggestions (an empty list;
// the side file has no place for them yet); any other reference is
// refused with -32602 naming it.
func (s *Server) complete(ctx context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
	if req.Params != nil && req.Params.Ref != nil {
		ref := req.Params.Ref
		for _, p := range s.programs {
			if (ref.Type == "ref/prompt" && p.Kind == "prompt" && ref.Name == p.name) ||
				(ref.Type == "ref/resource" && p.URITemplate != "" && ref.URI == p.URITemplate) {
				return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: []string{}}}, nil
			}
		}
		return nil, &jsonrpc.Error{Code: CodeInvalidParams, Message: fmt.Sprintf("invalid params: nothing to complete for %s %s%s; completion is offered for the named programs' prompts and resource templates", ref.Type, ref.Name, ref.URI)}
	}
	return nil, &jsonrpc.Error{Code: CodeInvalidParams, Message: "invalid params: completion/complete needs a ref"}
}

// continueProgram continues a named program's paused run.
func (s *Server) continueProgram(ctx context.Context, state []byte, a glovebox.Answer) (*glovebox.Result, error) {
	return s.rt.Continue(ctx, state, a)
}
