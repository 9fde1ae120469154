package mcpserver_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/mcpserver"
)

// twoServers makes two Servers as two `glovebox mcp --http` processes
// would be: separate Runtimes, one state key, one state directory (opts
// gives the rest). It returns their URLs.
func twoServers(t *testing.T, opts mcpserver.Options) []string {
	t.Helper()
	if opts.StateKey == nil {
		opts.StateKey = make([]byte, 32)
		rand.Read(opts.StateKey)
	}
	if opts.StateDir == "" {
		opts.StateDir = t.TempDir()
	}
	var urls []string
	for range 2 {
		s, _ := newServer(t, glovebox.Limits{}, opts)
		u, _ := serveHTTP(t, s, "secret")
		urls = append(urls, u)
	}
	return urls
}

// connect2026 connects a go-sdk client at 2026-07-28 to urls, each HTTP
// request going to the next of them; elicit, when set, answers
// elicitations (and declares the capability). The SDK's client answers
// input_required results itself and retries.
func connect2026(t *testing.T, urls []string, elicit func(*mcp.ElicitRequest) *mcp.ElicitResult) (*mcp.ClientSession, *alternate) {
	t.Helper()
	lb := &alternate{urls: urls, hits: make([]atomic.Int32, len(urls))}
	var o mcp.ClientOptions
	if elicit != nil {
		o.ElicitationHandler = func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) { return elicit(r), nil }
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, &o).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: urls[0], HTTPClient: &http.Client{Transport: lb}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs, lb
}

// At 2026-07-28 a call needing approval ends in an input_required result
// whose elicitation the client answers; the retry, served by the other
// process, runs the tool once on accept and raises Glovebox::ToolDenied
// on refusal, decline or cancel. A client without elicitation gets the
// call denied with the reason.
func TestStatelessApproval(t *testing.T) {
	urls := twoServers(t, mcpserver.Options{})
	for _, c := range []struct {
		name   string
		answer *mcp.ElicitResult
		want   string
		runs   int32
	}{
		{"accept", &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}, "=> 5\ncalled transfer", 1},
		{"refuse", &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": false}}, "the user did not approve the call", 0},
		{"decline", &mcp.ElicitResult{Action: "decline"}, "the user declined the call", 0},
		{"cancel", &mcp.ElicitResult{Action: "cancel"}, "the user dismissed the approval request", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			var asked atomic.Int32
			cs, _ := connect2026(t, urls, func(r *mcp.ElicitRequest) *mcp.ElicitResult {
				asked.Add(1)
				if !strings.Contains(r.Params.Message, "transfer") {
					t.Errorf("approval question: %q", r.Params.Message)
				}
				return c.answer
			})
			before := transfers.Load()
			got := text(call(t, cs, mcpserver.ToolRun, `begin; transfer(5); rescue Glovebox::ToolDenied => e; e.message; end`))
			if c.runs == 1 {
				got = text(call(t, cs, mcpserver.ToolRun, "transfer(5)"))
				before++ // the first call ran it too
			}
			if !strings.Contains(got, c.want) || transfers.Load()-before != c.runs || asked.Load() == 0 {
				t.Fatalf("%s: %q, ran %d times, asked %d", c.name, got, transfers.Load()-before, asked.Load())
			}
		})
	}
	t.Run("no elicitation", func(t *testing.T) {
		cs, _ := connect2026(t, urls, nil)
		before := transfers.Load()
		got := text(call(t, cs, mcpserver.ToolRun, "transfer(5)"))
		if !strings.Contains(got, "does not support elicitation") || transfers.Load() != before {
			t.Fatalf("without elicitation: %q", got)
		}
	})
}

// rawCall sends a tools/call at 2026-07-28 with extra params and returns
// its result or error object.
func rawCall(t *testing.T, url, tool string, params string) (res, rpcErr map[string]any) {
	t.Helper()
	hdr := map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": tool}
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"},"io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}`
	_, _, msgs := raw(t, url, "", hdr, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"`+tool+`",`+params+`,`+meta+`}}`)
	if len(msgs) != 1 {
		t.Fatalf("tools/call %s: %v", tool, msgs)
	}
	res, _ = msgs[0]["result"].(map[string]any)
	rpcErr, _ = msgs[0]["error"].(map[string]any)
	return res, rpcErr
}

// A request state continues its program once: the retry runs the tool,
// a replay of it (to either process) gets the recorded outcome without
// running anything, an altered one is refused with -32602, a retry
// lacking the answer is asked again, and an expired one is refused
// saying so.
func TestRequestStateOnce(t *testing.T) {
	key := make([]byte, 32)
	rand.Read(key)
	dir := t.TempDir()
	urls := twoServers(t, mcpserver.Options{StateKey: key, StateDir: dir})
	res, _ := rawCall(t, urls[0], mcpserver.ToolRun, `"arguments":{"code":"transfer(7) + 1"}`)
	if res["resultType"] != "input_required" || res["requestState"] == nil {
		t.Fatalf("first call: %v", res)
	}
	state, _ := res["requestState"].(string)
	reqs, _ := json.Marshal(res["inputRequests"])
	if !strings.Contains(string(reqs), `"approval":{"method":"elicitation/create"`) {
		t.Fatalf("input requests: %s", reqs)
	}
	stateJSON, _ := json.Marshal(state)
	retry := `"arguments":{"code":"transfer(7) + 1"},"requestState":` + string(stateJSON)
	accept := `,"inputResponses":{"approval":{"action":"accept","content":{"approve":true}}}`

	if again, _ := rawCall(t, urls[1], mcpserver.ToolRun, retry+`,"inputResponses":{"other":{"action":"accept","content":{}}}`); again["resultType"] != "input_required" || again["requestState"] != state {
		t.Fatalf("retry without the answer: %v", again)
	}
	before := transfers.Load()
	done, _ := rawCall(t, urls[1], mcpserver.ToolRun, retry+accept)
	if done["resultType"] != "complete" || !strings.Contains(mustJSON(done), `"value":8`) || transfers.Load() != before+1 {
		t.Fatalf("retry: %v (ran %d)", done, transfers.Load()-before)
	}
	for _, u := range urls {
		replay, _ := rawCall(t, u, mcpserver.ToolRun, retry+accept)
		if !strings.Contains(mustJSON(replay), `"value":8`) || transfers.Load() != before+1 {
			t.Fatalf("replay: %v (ran %d)", replay, transfers.Load()-before)
		}
	}
	tampered, _ := json.Marshal(state[:len(state)-3] + "AAA")
	if _, e := rawCall(t, urls[0], mcpserver.ToolRun, `"arguments":{"code":"transfer(7) + 1"},"requestState":`+string(tampered)+accept); e == nil || e["code"] != json.Number("-32602") || !strings.Contains(e["message"].(string), "altered") {
		t.Fatalf("tampered: %v", e)
	}
	if _, e := rawCall(t, urls[0], mcpserver.ToolRun, `"arguments":{"code":"1"},"requestState":"gb1.bm9wZQ.bm9wZQ"`+accept); e == nil || e["code"] != json.Number("-32602") {
		t.Fatalf("forged: %v", e)
	}
	// A process with a shorter TTL sees the same state as expired.
	short, _ := newServer(t, glovebox.Limits{}, mcpserver.Options{StateKey: key, StateDir: dir, StateTTL: time.Nanosecond})
	shortURL, _ := serveHTTP(t, short, "secret")
	if _, e := rawCall(t, shortURL, mcpserver.ToolRun, retry+accept); e == nil || !strings.Contains(e["message"].(string), "expired") {
		t.Fatalf("expired: %v", e)
	}
}

// A program paused inside Timeout.timeout, after a loop and a mounted
// file read, continues from its request state. A retry that cannot
// replay it (the file changed meanwhile) is an error result that does
// not use the state up: once the file is back the same retry continues
// it, the tool running once, and a replay after that gets the outcome.
func TestRequestStateRetryAfterDivergence(t *testing.T) {
	s, dir := newServer(t, glovebox.Limits{}, mcpserver.Options{})
	url, _ := serveHTTP(t, s, "secret")
	file := filepath.Join(dir, "notes.txt")
	orig, _ := os.ReadFile(file)
	code := `require \"timeout\"; Timeout.timeout(5) { s = 0; 1000.times { |i| s += i }; transfer(File.read(\"/data/notes.txt\").size) + s }`
	res, _ := rawCall(t, url, mcpserver.ToolRun, `"arguments":{"code":"`+code+`"}`)
	state, _ := res["requestState"].(string)
	if res["resultType"] != "input_required" || state == "" {
		t.Fatalf("first call: %v", res)
	}
	stateJSON, _ := json.Marshal(state)
	retry := `"arguments":{"code":"` + code + `"},"requestState":` + string(stateJSON) + `,"inputResponses":{"approval":{"action":"accept","content":{"approve":true}}}`
	before := transfers.Load()
	os.WriteFile(file, []byte("changed"), 0o644)
	for range 2 {
		got, e := rawCall(t, url, mcpserver.ToolRun, retry)
		if e != nil || got["isError"] != true || !strings.Contains(mustJSON(got), "did not replay") || transfers.Load() != before {
			t.Fatalf("file changed: %v %v (ran %d)", got, e, transfers.Load()-before)
		}
	}
	os.WriteFile(file, orig, 0o644)
	want := `"value":` + strconv.Itoa(len(orig)+499500)
	for range 2 {
		got, e := rawCall(t, url, mcpserver.ToolRun, retry)
		if e != nil || got["resultType"] != "complete" || !strings.Contains(mustJSON(got), want) || transfers.Load() != before+1 {
			t.Fatalf("file back: %v %v (ran %d)", got, e, transfers.Load()-before)
		}
	}
}

// ruby_session at 2026-07-28 over HTTP carries its state in a handle:
// the variables of one call are there in the next, whichever process
// takes it; a replayed handle gets the result its first use gave; no
// handle is a fresh session.
func TestSessionHandle(t *testing.T) {
	urls := twoServers(t, mcpserver.Options{})
	cs, lb := connect2026(t, urls, nil)
	sess := func(code, handle string) (*mcp.CallToolResult, string) {
		t.Helper()
		args := map[string]any{"code": code}
		if handle != "" {
			args["session"] = handle
		}
		r, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: mcpserver.ToolSession, Arguments: args})
		if err != nil {
			t.Fatalf("%q: %v", code, err)
		}
		h, _ := structured(t, r)["session"].(string)
		return r, h
	}
	r, h1 := sess("x = 41; def twice(n) = n * 2; x", "")
	if r.IsError || h1 == "" {
		t.Fatalf("first: %q", text(r))
	}
	r, h2 := sess("twice(x + 1) / 2", h1)
	if r.IsError || !strings.HasPrefix(text(r), "=> 42") || h2 == "" || h2 == h1 {
		t.Fatalf("second: %q", text(r))
	}
	r, _ = sess("x = 0", h1)
	if !strings.HasPrefix(text(r), "=> 42") {
		t.Fatalf("replayed handle: %q", text(r))
	}
	r, _ = sess("x", "")
	if !r.IsError || !strings.Contains(text(r), "NameError") {
		t.Fatalf("no handle: %q", text(r))
	}
	if lb.hits[0].Load() == 0 || lb.hits[1].Load() == 0 {
		t.Fatalf("requests per server: %d, %d", lb.hits[0].Load(), lb.hits[1].Load())
	}
}

// mcp_ask asks the client: during the call under 2025-11-25, as an
// input_required round (answered by the SDK's client) under 2026-07-28.
// A client without the capability gets Glovebox::ToolError naming it.
func TestProgramAsks(t *testing.T) {
	prog := `mcp_ask({"who" => {"method" => "elicitation/create", "params" => {"message" => "Name?", "requestedSchema" => {"type" => "object", "properties" => {"name" => {"type" => "string"}}}}}})["who"]["content"]["name"]`
	elicit := func(r *mcp.ElicitRequest) *mcp.ElicitResult {
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada"}}
	}
	s, _ := newServer(t, glovebox.Limits{}, mcpserver.Options{})
	old := connect(t, s, &mcp.ClientOptions{ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) { return elicit(r), nil }})
	if got := text(call(t, old, mcpserver.ToolRun, prog)); !strings.HasPrefix(got, `=> "Ada"`) {
		t.Fatalf("2025-11-25: %q", got)
	}
	cs, _ := connect2026(t, twoServers(t, mcpserver.Options{}), elicit)
	if got := text(call(t, cs, mcpserver.ToolRun, prog)); !strings.HasPrefix(got, `=> "Ada"`) {
		t.Fatalf("2026-07-28: %q", got)
	}
	bare := connect(t, s, nil)
	if got := text(call(t, bare, mcpserver.ToolRun, prog)); !strings.Contains(got, "did not declare the capabilities elicitation") {
		t.Fatalf("no capability: %q", got)
	}
}

// Over stdio at 2026-07-28 the connection keeps ruby_session's VM, and
// an approval inside it is an input_required round too: the retry
// continues the paused VM, whose variables survive into the next call.
func TestStdioSessionApproval(t *testing.T) {
	s, _ := newServer(t, glovebox.Limits{}, mcpserver.Options{})
	c := serveStdio(t, s)
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"},"io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}`
	c.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ruby_session","arguments":{"code":"x = 1; transfer(5) + x"},` + meta + `}}`)
	res, _ := c.next()["result"].(map[string]any)
	st, _ := res["requestState"].(string)
	if res["resultType"] != "input_required" || st == "" {
		t.Fatalf("first call: %v", res)
	}
	before := transfers.Load()
	c.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"ruby_session","arguments":{"code":"x = 1; transfer(5) + x"},"requestState":` + mustJSON(st) + `,"inputResponses":{"approval":{"action":"accept","content":{"approve":true}}},` + meta + `}}`)
	if m := c.next(); !strings.Contains(mustJSON(m), `"value":6`) || transfers.Load() != before+1 {
		t.Fatalf("retry: %v", m)
	}
	c.send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"ruby_session","arguments":{"code":"x + 1"},` + meta + `}}`)
	if m := c.next(); !strings.Contains(mustJSON(m), `"value":2`) {
		t.Fatalf("next call: %v", m)
	}
}
