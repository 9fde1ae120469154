package mcptools_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The test binary doubles as the MCP servers the edge tests drive: with
// MCPTOOLS_TEST_SERVER set it serves over stdio instead of running tests.
func TestMain(m *testing.M) {
	switch os.Getenv("MCPTOOLS_TEST_SERVER") {
	case "":
		os.Exit(m.Run())
	case "conformance-client":
		os.Exit(conformanceClient())
	case "raw":
		rawServer(os.Getenv("MCPTOOLS_TEST_LISTING"))
	case "binder":
		binder()
	case "notools":
		s := mcp.NewServer(&mcp.Implementation{Name: "notools", Version: "1"}, nil)
		s.AddPrompt(&mcp.Prompt{Name: "p"}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{}, nil
		})
		s.Run(context.Background(), &mcp.StdioTransport{})
	default:
		sdkServer(os.Getenv("MCPTOOLS_TEST_SERVER"))
	}
	os.Exit(0)
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

// sdkServer is a go-sdk server with one tool per edge case.
func sdkServer(name string) {
	s := mcp.NewServer(&mcp.Implementation{Name: name, Version: "1"}, &mcp.ServerOptions{Instructions: "Edge-case server " + name + "."})
	obj := func(props string, req ...string) json.RawMessage {
		r, _ := json.Marshal(req)
		if req == nil {
			r = []byte("[]")
		}
		return json.RawMessage(`{"type":"object","properties":{` + props + `},"required":` + string(r) + `}`)
	}
	s.AddTool(&mcp.Tool{Name: "echo", Description: "Echoes n and s.", InputSchema: obj(`"n":{"type":"integer"},"s":{"type":"string"}`, "n")},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			// Decode n exactly: it may exceed 2^53.
			var a struct {
				N json.Number `json:"n"`
				S string      `json:"s"`
			}
			d := json.NewDecoder(strings.NewReader(string(req.Params.Arguments)))
			d.UseNumber()
			if err := d.Decode(&a); err != nil {
				return nil, err
			}
			n, ok := new(big.Int).SetString(string(a.N), 10)
			if !ok {
				return nil, fmt.Errorf("n %q is not an integer", a.N)
			}
			n.Add(n, big.NewInt(1))
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: n.String()}},
				StructuredContent: map[string]any{"s": a.S, "len": len(a.S), "n": json.Number(n.String())}}, nil
		})
	s.AddTool(&mcp.Tool{Name: "get-Weather.v2", Description: "A name Ruby cannot call.", InputSchema: obj(`"city":{"type":"string"}`, "city")},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var a struct{ City string }
			json.Unmarshal(req.Params.Arguments, &a)
			return text("sunny in " + a.City), nil
		})
	s.AddTool(&mcp.Tool{Name: "big", InputSchema: obj(``)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return text(strings.Repeat("x", 10<<20)), nil
		})
	s.AddTool(&mcp.Tool{Name: "refuse", InputSchema: obj(``)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			r := text("no such order")
			r.IsError = true
			return r, nil
		})
	s.AddTool(&mcp.Tool{Name: "image", InputSchema: obj(``)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{
				&mcp.ImageContent{Data: []byte("PNG1"), MIMEType: "image/png"},
				&mcp.ImageContent{Data: make([]byte, 1<<20), MIMEType: "image/png"},
			}}, nil
		})
	s.AddTool(&mcp.Tool{Name: "slow", InputSchema: obj(``)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			<-ctx.Done()
			// The request was cancelled (notifications/cancelled): leave a mark.
			if f := os.Getenv("MCPTOOLS_TEST_MARK"); f != "" {
				os.WriteFile(f, []byte("cancelled"), 0o600)
			}
			return nil, ctx.Err()
		})
	s.AddTool(&mcp.Tool{Name: "crash", InputSchema: obj(``)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			fmt.Fprintln(os.Stderr, "crashing on purpose")
			os.Exit(3)
			return nil, nil
		})
	s.AddTool(&mcp.Tool{Name: "pid", InputSchema: obj(``)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return text(fmt.Sprint(os.Getpid())), nil
		})
	s.AddTool(&mcp.Tool{Name: "whoami", Description: "The user whose credentials started this server.", InputSchema: obj(``)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return text(os.Getenv("MCPTOOLS_TEST_USER")), nil
		})
	fmt.Fprintln(os.Stderr, "edge server", name, "ready")
	s.Run(context.Background(), &mcp.StdioTransport{})
}

// rawServer answers initialize, then tools/list with listing verbatim;
// with MCPTOOLS_TEST_ENDLESS set, it answers a tools/call with a line
// that does not end (hostileBytes of it).
func rawServer(listing string) {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(nil, 1<<20)
	for in.Scan() {
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if json.Unmarshal(in.Bytes(), &msg) != nil || msg.ID == nil {
			continue
		}
		var result string
		switch msg.Method {
		case "initialize":
			result = `{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"raw","version":"1"}}`
		case "tools/list":
			result = listing
		case "tools/call":
			if os.Getenv("MCPTOOLS_TEST_ENDLESS") == "" {
				fmt.Printf(`{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"no"}}`+"\n", msg.ID)
				continue
			}
			fmt.Printf(`{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"`, msg.ID)
			chunk := strings.Repeat("a", 32<<10)
			for n := 0; n < hostileBytes; n += len(chunk) {
				if _, err := os.Stdout.WriteString(chunk); err != nil {
					return
				}
			}
			return
		default:
			fmt.Printf(`{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"no"}}`+"\n", msg.ID)
			continue
		}
		fmt.Printf(`{"jsonrpc":"2.0","id":%s,"result":%s}`+"\n", msg.ID, result)
	}
}
