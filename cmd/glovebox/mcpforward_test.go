package main

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/gloveboxhq/glovebox/internal/npmtest"
)

// A bound MCP server's elicitation reaches the MCP client of glovebox mcp:
// during the call at 2025-11-25, as an input_required round at
// 2026-07-28 (the program suspended, continued by the retry, the bound
// tool called again and its question answered). The bound servers ask at
// both revisions: server-everything (2025-11-25, a request during the
// call) and a second glovebox mcp whose program calls mcp_ask
// (2026-07-28, an input_required result to glovebox's own binding).
func TestMCPForwardsBoundServersElicitation(t *testing.T) {
	every := npmtest.Bin(t, "@modelcontextprotocol/server-everything", "mcp-server-everything")
	bound := []struct {
		name, flag, code, want string
	}{
		{"server-everything", "every=" + every, `trigger_elicitation_request["text"]`, "- Name: Ada"},
		{"glovebox mcp", "inner=" + bin + " mcp", `run_ruby(code: %q(mcp_ask({"n" => {"method" => "elicitation/create", "params" => {"message" => "Your name?", "requestedSchema" => {"type" => "object", "properties" => {"name" => {"type" => "string"}}}}}})["n"]["content"]["name"]))["structured"]["value"]`, "Ada"},
	}
	for _, b := range bound {
		for _, rev := range []string{"2025-11-25", "2026-07-28"} {
			t.Run(b.name+" to a client at "+rev, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				var asked atomic.Int32
				opts := &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{Form: &mcp.FormElicitationCapabilities{}}}}
				answer := &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada"}}
				var so *mcp.ClientSessionOptions
				if rev == "2025-11-25" {
					so = &mcp.ClientSessionOptions{ProtocolVersion: rev}
					opts.ElicitationHandler = func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
						asked.Add(1)
						return answer, nil
					}
				} else {
					opts.MultiRoundTrip = &mcp.MultiRoundTripOptions{Disabled: true}
				}
				cmd := exec.Command(bin, "mcp", "--mcp-server", b.flag)
				cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "0"}, opts).Connect(ctx, &mcp.CommandTransport{Command: cmd}, so)
				if err != nil {
					t.Fatal(err)
				}
				defer cs.Close()
				p := &mcp.CallToolParams{Name: "run_ruby", Arguments: map[string]any{"code": b.code}}
				res, err := cs.CallTool(ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				if rev == "2026-07-28" {
					q, ok := res.InputRequests["elicitation"].(*mcp.ElicitParams)
					if !res.NeedsInput() || !ok || res.RequestState == "" || q.Message == "" {
						t.Fatalf("want input_required with the server's question under \"elicitation\", got %+v", res)
					}
					asked.Add(1)
					// A retry without the answer is asked again, with the same state.
					p.RequestState = res.RequestState
					again, err := cs.CallTool(ctx, p)
					if err != nil || !again.NeedsInput() || again.RequestState != res.RequestState {
						t.Fatalf("a retry lacking the answer: %+v, %v", again, err)
					}
					p.InputResponses = mcp.InputResponseMap{"elicitation": answer}
					if res, err = cs.CallTool(ctx, p); err != nil {
						t.Fatal(err)
					}
				}
				if res.IsError || res.NeedsInput() || asked.Load() != 1 {
					t.Fatalf("asked %d times; result %+v", asked.Load(), res)
				}
				text := res.Content[0].(*mcp.TextContent).Text
				if !strings.Contains(text, b.want) {
					t.Fatalf("the server did not get the client's answer: %s", text)
				}
			})
		}
	}
}

// --mcp-elicit decline answers the bound server itself: the client is
// not asked.
func TestMCPElicitFlagOverridesForwarding(t *testing.T) {
	every := npmtest.Bin(t, "@modelcontextprotocol/server-everything", "mcp-server-everything")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts := &mcp.ClientOptions{ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		t.Error("the client was asked")
		return &mcp.ElicitResult{Action: "cancel"}, nil
	}}
	cmd := exec.Command(bin, "mcp", "--mcp-server", "every="+every, "--mcp-elicit", "decline")
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "0"}, opts).Connect(ctx, &mcp.CommandTransport{Command: cmd}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_ruby", Arguments: map[string]any{"code": `trigger_elicitation_request["text"]`}})
	if err != nil {
		t.Fatal(err)
	}
	if text := res.Content[0].(*mcp.TextContent).Text; res.IsError || !strings.Contains(text, "declined") {
		t.Fatalf("want the server's decline text, got %s", text)
	}
}

// A bound tool that asks twice takes two input_required rounds at
// 2026-07-28; the second retry answers the first question from the state
// and the second from the client.
func TestMCPForwardsTwoQuestions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts := &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{}},
		MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true}}
	cmd := exec.Command(bin, "mcp", "--mcp-server", "inner="+bin+" mcp")
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "0"}, opts).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	inner := `ask = ->(q) { mcp_ask({"q" => {"method" => "elicitation/create", "params" => {"message" => q, "requestedSchema" => {"type" => "object", "properties" => {"v" => {"type" => "string"}}}}}})["q"]["content"]["v"] }; [ask.("First?"), ask.("Second?")].join("+")`
	p := &mcp.CallToolParams{Name: "run_ruby", Arguments: map[string]any{"code": `run_ruby(code: ` + strconv.Quote(inner) + `)["structured"]["value"]`}}
	var msgs []string
	for round := 0; ; round++ {
		res, err := cs.CallTool(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if !res.NeedsInput() {
			if text := res.Content[0].(*mcp.TextContent).Text; res.IsError || !strings.Contains(text, `"answer 0+answer 1"`) {
				t.Fatalf("after %v: %s", msgs, text)
			}
			break
		}
		if round == 2 {
			t.Fatalf("a third round: %v", msgs)
		}
		q := res.InputRequests["elicitation"].(*mcp.ElicitParams)
		msgs = append(msgs, q.Message)
		p.RequestState = res.RequestState
		p.InputResponses = mcp.InputResponseMap{"elicitation": &mcp.ElicitResult{Action: "accept", Content: map[string]any{"v": "answer " + strconv.Itoa(round)}}}
	}
	if strings.Join(msgs, ",") != "First?,Second?" {
		t.Fatalf("asked %v", msgs)
	}
}

// A client that did not declare elicitation is not asked: the bound
// server's question gets an error saying so, and the program goes on.
func TestMCPForwardNeedsElicitation(t *testing.T) {
	every := npmtest.Bin(t, "@modelcontextprotocol/server-everything", "mcp-server-everything")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.Command(bin, "mcp", "--mcp-server", "every="+every)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "0"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_ruby", Arguments: map[string]any{"code": `r = trigger_elicitation_request; [r["error"], r["text"]]`}})
	if err != nil {
		t.Fatal(err)
	}
	if text := res.Content[0].(*mcp.TextContent).Text; res.NeedsInput() || !strings.Contains(text, "did not declare elicitation") {
		t.Fatalf("want the refusal in the server's answer, got %+v: %s", res, text)
	}
}
