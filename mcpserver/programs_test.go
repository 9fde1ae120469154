package mcpserver_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/mcpserver"
)

// writeProgram writes NAME.rb and, when meta is not empty, NAME.json.
func writeProgram(t *testing.T, dir, name, code, meta string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name+".rb"), []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	if meta != "" {
		if err := os.WriteFile(filepath.Join(dir, name+".json"), []byte(meta), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// Named programs are served as tools (their arguments as ARGS, checked
// against their inputSchema), prompts and resources (fixed and templated),
// each run in the sandbox; a failing program is an isError result.
func TestNamedPrograms(t *testing.T) {
	dir := t.TempDir()
	writeProgram(t, dir, "greet", `"Hello, #{ARGS["who"]}! balance #{balance}"`,
		`{"description": "Greets", "inputSchema": {"type": "object", "properties": {"who": {"type": "string"}}, "required": ["who"]}}`)
	writeProgram(t, dir, "boom", `raise "no luck"`, `{"description": "Fails"}`)
	writeProgram(t, dir, "escape", `File.read("/etc/passwd")`, `{"description": "Tries to read a host file"}`)
	writeProgram(t, dir, "topic", `"Write about #{ARGS["topic"]}"`,
		`{"kind": "prompt", "description": "A prompt", "arguments": [{"name": "topic", "required": true}]}`)
	writeProgram(t, dir, "item", `id = ARGS["uri"].split("/").last; { "text" => "item #{id}", "mimeType" => "text/plain" }`,
		`{"kind": "resource", "uriTemplate": "item://{id}"}`)
	s, _ := newServer(t, glovebox.Limits{}, mcpserver.Options{Programs: dir})
	cs := connect(t, s, nil)
	ctx := context.Background()

	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "greet", Arguments: map[string]any{"who": "Ada"}})
	if err != nil || res.IsError || text(res) != "Hello, Ada! balance 10" {
		t.Fatalf("greet: %v %q", err, text(res))
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "greet", Arguments: map[string]any{}}); err == nil || !strings.Contains(err.Error(), `missing argument "who"`) {
		t.Fatalf("greet without who: %v", err)
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "boom"})
	if err != nil || !res.IsError || !strings.Contains(text(res), "no luck") {
		t.Fatalf("boom: %v %q", err, text(res))
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "escape"})
	if err != nil || !res.IsError || strings.Contains(text(res), "root:") {
		t.Fatalf("escape: %v %q", err, text(res))
	}
	pr, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "topic", Arguments: map[string]string{"topic": "owls"}})
	if err != nil || len(pr.Messages) != 1 || pr.Messages[0].Content.(*mcp.TextContent).Text != "Write about owls" {
		t.Fatalf("prompt: %v %+v", err, pr)
	}
	rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "item://7"})
	if err != nil || len(rr.Contents) != 1 || rr.Contents[0].Text != "item 7" || rr.Contents[0].URI != "item://7" {
		t.Fatalf("resource: %v %+v", err, rr)
	}
}

// A malformed programs folder fails New with the file named.
func TestNamedProgramsRefused(t *testing.T) {
	for _, tc := range []struct{ name, code, meta, want string }{
		{"nometa", `1`, ``, "nometa.rb needs its side file nometa.json"},
		{"badkind", `1`, `{"kind": "widget"}`, `kind "widget" is not tool, prompt or resource`},
		{"nouri", `1`, `{"kind": "resource"}`, "exactly one of uri and uriTemplate"},
		{"run_ruby", `1`, `{}`, "the tool name run_ruby is taken"},
		{"badjson", `1`, `{`, "badjson.json"},
	} {
		dir := t.TempDir()
		writeProgram(t, dir, tc.name, tc.code, tc.meta)
		rt, _ := newRuntime(t, glovebox.Limits{})
		_, err := mcpserver.New(mcpserver.Options{Runtime: rt, Programs: dir})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// A named tool whose side file requires a client capability is refused
// with -32021 when the client did not declare it, and one with logStdout
// sends each printed line as a log message to a client that set a level.
func TestNamedProgramsCapabilitiesAndLogs(t *testing.T) {
	dir := t.TempDir()
	writeProgram(t, dir, "needs_sampling", `"ran"`, `{"requiresClientCapabilities": {"sampling": {}}}`)
	writeProgram(t, dir, "chatty", "puts 'one'\nputs 'two'\n:done", `{"logStdout": true}`)
	s, _ := newServer(t, glovebox.Limits{}, mcpserver.Options{Programs: dir})
	logs := make(chan string, 10)
	cs := connect(t, s, &mcp.ClientOptions{LoggingMessageHandler: func(_ context.Context, r *mcp.LoggingMessageRequest) {
		if r.Params.Logger == "chatty" {
			logs <- r.Params.Data.(string)
		}
	}})
	ctx := context.Background()
	_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "needs_sampling"})
	var we *jsonrpc.Error
	if !errors.As(err, &we) || we.Code != mcp.CodeMissingRequiredClientCapabilities || !strings.Contains(we.Message, "needs the client capabilities sampling") {
		t.Fatalf("needs_sampling without sampling: %v", err)
	}
	if err := cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
		t.Fatal(err)
	}
	if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "chatty"}); err != nil || res.IsError {
		t.Fatalf("chatty: %v", err)
	}
	for _, want := range []string{"one", "two"} {
		select {
		case got := <-logs:
			if got != want {
				t.Fatalf("log %q, want %q", got, want)
			}
		case <-time.After(time.Minute): // a hang guard, not a measure
			t.Fatalf("no log message %q", want)
		}
	}
}
