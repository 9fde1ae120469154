package mcpserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/mcpserver"
)

// meta2026 is the per-request _meta of MCP 2026-07-28: the revision, the
// client's info and its capabilities, in place of an initialize.
const meta2026 = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}`

// Over stdio, server/discover names 2026-07-28 among the revisions, and a
// tools/call carrying its _meta runs without any initialize; the result
// says resultType "complete".
func TestStdioStateless(t *testing.T) {
	s, _ := newServer(t, glovebox.Limits{}, mcpserver.Options{})
	c := serveStdio(t, s)
	c.send(`{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{` + meta2026 + `}}`)
	m := c.next()
	res, _ := m["result"].(map[string]any)
	vs, _ := json.Marshal(res["supportedVersions"])
	if !strings.Contains(string(vs), `"2026-07-28"`) || !strings.Contains(string(vs), `"2025-11-25"`) {
		t.Fatalf("server/discover: %v", m)
	}
	c.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run_ruby","arguments":{"code":"6*7"},` + meta2026 + `}}`)
	m = c.next()
	res, _ = m["result"].(map[string]any)
	if m["id"] != json.Number("2") || res == nil || res["resultType"] != "complete" ||
		res["structuredContent"].(map[string]any)["value"] != json.Number("42") {
		t.Fatalf("stateless tools/call: %v", m)
	}
	// server/discover without the _meta is not a request of any revision
	// this client could be speaking yet.
	c.send(`{"jsonrpc":"2.0","id":3,"method":"server/discover","params":{}}`)
	checkRefusal(t, "discover without _meta", c.next(), -32600, "3")
}

// alternate sends each HTTP request to the next of urls in turn, as a
// load balancer in front of several server processes would.
type alternate struct {
	urls []string
	n    atomic.Int32
	hits []atomic.Int32
}

func (a *alternate) RoundTrip(r *http.Request) (*http.Response, error) {
	i := int(a.n.Add(1)-1) % len(a.urls)
	a.hits[i].Add(1)
	r = r.Clone(r.Context())
	u, _ := r.URL.Parse(a.urls[i])
	r.URL, r.Host = u, u.Host
	r.Header.Set("Authorization", "Bearer secret")
	return http.DefaultTransport.RoundTrip(r)
}

// At 2026-07-28 over HTTP no request needs a session: two servers (two
// Runtimes, as two processes would have) take one client's requests
// alternately, the discovery included, and every call succeeds.
func TestHTTPStatelessTwoServers(t *testing.T) {
	var urls []string
	for range 2 {
		s, _ := newServer(t, glovebox.Limits{}, mcpserver.Options{})
		u, _ := serveHTTP(t, s, "secret")
		urls = append(urls, u)
	}
	lb := &alternate{urls: urls, hits: make([]atomic.Int32, 2)}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: urls[0], HTTPClient: &http.Client{Transport: lb}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if v := cs.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("negotiated %q, want 2026-07-28", v)
	}
	for i := range 4 {
		if got := text(call(t, cs, mcpserver.ToolRun, "6*7")); got != "=> 42" {
			t.Fatalf("call %d: %q", i, got)
		}
	}
	if lb.hits[0].Load() == 0 || lb.hits[1].Load() == 0 {
		t.Fatalf("requests per server: %d, %d", lb.hits[0].Load(), lb.hits[1].Load())
	}
	// ruby_session has no session to keep its VM in: its state comes
	// back as a handle (TestSessionHandle). An approval cannot be asked
	// without elicitation: the call is denied with the reason, and never
	// runs (TestStatelessApproval asks).
	before := transfers.Load()
	if got := text(call(t, cs, mcpserver.ToolRun, "transfer(5)")); !strings.Contains(got, "does not support elicitation") || transfers.Load() != before {
		t.Fatalf("approval at 2026-07-28: %q", got)
	}
}

// Raw requests at 2026-07-28: one without the _meta gets -32602, an
// unknown method HTTP 404 with -32601, a call without its Mcp-Name header
// is refused by the SDK, and a complete one is answered with no session.
func TestHTTPStatelessRefusals(t *testing.T) {
	s, _ := newServer(t, glovebox.Limits{}, mcpserver.Options{})
	url, _ := serveHTTP(t, s, "secret")
	hdr := map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"}
	code, _, msgs := raw(t, url, "", hdr, `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`)
	if code != 400 || len(msgs) != 1 {
		t.Fatalf("no _meta: %d %v", code, msgs)
	}
	checkRefusal(t, "no _meta", msgs[0], -32602, "1")
	hdr["Mcp-Method"] = "nope/nothing"
	code, _, msgs = raw(t, url, "", hdr, `{"jsonrpc":"2.0","id":2,"method":"nope/nothing","params":{`+meta2026+`}}`)
	if code != 404 || len(msgs) != 1 {
		t.Fatalf("unknown method: %d %v", code, msgs)
	}
	checkRefusal(t, "unknown method", msgs[0], -32601, "2")
	hdr["Mcp-Method"] = "tools/call"
	call := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"run_ruby","arguments":{"code":"6*7"},` + meta2026 + `}}`
	if code, _, _ = raw(t, url, "", hdr, call); code != 400 {
		t.Fatalf("no Mcp-Name: %d", code)
	}
	hdr["Mcp-Name"] = "run_ruby"
	code, sid, msgs := raw(t, url, "", hdr, call)
	if code != 200 || sid != "" || len(msgs) != 1 || !strings.Contains(mustJSON(msgs[0]), `"value":42`) {
		t.Fatalf("stateless call: %d session %q %v", code, sid, msgs)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
