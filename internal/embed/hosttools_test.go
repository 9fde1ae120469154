package embed

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestHTTPToolBindAndCall: an HTTP tool bound by the parent answers its
// calls with httptool's rules (a trusted loopback server reached, the
// metadata address refused), reports each request for on_request, keeps
// its budget across calls until http_reset, and is one handle per ID.
func TestHTTPToolBindAndCall(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"path":"` + r.URL.Path + `"}`))
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	p := startChild(t, Protocol)
	p.hello()
	ch := p.channel()
	ask := func(req string) (byte, string) {
		t.Helper()
		writeFrame(t, ch, 'Q', req)
		return readFrame(t, ch)
	}
	spec := `{"id":"t-1","allow":["localhost"],"trust":["127.0.0.0/8"],"ports":[` + u.Port() + `],"max_requests":2}`
	typ, body := ask(`{"op":"bind","bind":{"http":` + spec + `}}`)
	var bound bindAnswer
	if typ != 'R' || json.Unmarshal([]byte(body), &bound) != nil || bound.Handle == "" || len(bound.Tools) != 7 {
		t.Fatalf("bind answered %c %s", typ, body)
	}
	if typ, again := ask(`{"op":"bind","bind":{"http":` + spec + `}}`); typ != 'R' || !strings.Contains(again, `"handle":"`+bound.Handle+`"`) {
		t.Fatalf("the same spec bound again: %c %s", typ, again)
	}
	if typ, body := ask(`{"op":"bind","bind":{"http":{"id":"t-1","allow":["other.example.com"]}}}`); typ != 'X' || !strings.Contains(body, "bound already") {
		t.Fatalf("the same ID with other settings: %c %s", typ, body)
	}
	call := func(args string) callAnswer {
		t.Helper()
		a, _ := json.Marshal(args)
		typ, body := ask(`{"op":"call","call":{"handle":"` + bound.Handle + `","name":"get","args":` + string(a) + `,"timeout_us":5000000}}`)
		var ans callAnswer
		if typ != 'R' || json.Unmarshal([]byte(body), &ans) != nil {
			t.Fatalf("call answered %c %s", typ, body)
		}
		return ans
	}
	ok := call(`[["http://localhost:` + u.Port() + `/x"],{}]`)
	if !strings.HasPrefix(ok.Reply, "j\n") || !strings.Contains(ok.Reply, `"path":"/x"`) || len(ok.Requests) != 1 || ok.Requests[0].Status != 200 {
		t.Fatalf("the allowed call: %+v", ok)
	}
	meta := call(`[["http://169.254.169.254/"],{}]`)
	if !strings.HasPrefix(meta.Reply, "err\nHTTP") || len(meta.Requests) != 1 || meta.Requests[0].Class == "" {
		t.Fatalf("the metadata address: %+v", meta)
	}
	if spent := call(`[["http://localhost:` + u.Port() + `/y"],{}]`); !strings.HasPrefix(spent.Reply, "err\nHTTPBudgetError\n") {
		t.Fatalf("the third request of two: %+v", spent)
	}
	if typ, body := ask(`{"op":"http_reset","handle":"` + bound.Handle + `"}`); typ != 'R' {
		t.Fatalf("http_reset answered %c %s", typ, body)
	}
	if again := call(`[["http://localhost:` + u.Port() + `/z"],{}]`); !strings.Contains(again.Reply, `"path":"/z"`) {
		t.Fatalf("after the reset: %+v", again)
	}
	if typ, body := ask(`{"op":"call","call":{"handle":"h999","name":"get","args":"[[],{}]"}}`); typ != 'X' || !strings.Contains(body, codeUnknownHandle) {
		t.Fatalf("an unknown handle: %c %s", typ, body)
	}
	if typ, body := ask(`{"op":"call","call":{"handle":"` + bound.Handle + `","name":"system","args":"[[],{}]"}}`); typ != 'R' || !strings.Contains(body, "UnknownToolError") {
		t.Fatalf("a name the tool does not have: %c %s", typ, body)
	}
	if typ, body := ask(`{"op":"call","call":{"handle":"` + bound.Handle + `","name":"get","args":"[[\"http://localhost/\"],{}]","timeout_us":0}}`); typ != 'R' || !strings.Contains(body, `abort\ntimeout`) {
		t.Fatalf("a call with no time left: %c %s", typ, body)
	}
	if typ, body := ask(`{"op":"unbind","handle":"` + bound.Handle + `"}`); typ != 'R' {
		t.Fatalf("unbind answered %c %s", typ, body)
	}
	if typ, body := ask(`{"op":"bind","bind":{"http":{"id":"t-2","allow":["*a.example.com"]}}}`); typ != 'X' || !strings.Contains(body, "wildcard") {
		t.Fatalf("a bad pattern: %c %s", typ, body)
	}
	if typ, body := ask(`{"op":"bind","bind":{}}`); typ != 'X' || !strings.Contains(body, "exactly one of http and mcp") {
		t.Fatalf("an empty bind: %c %s", typ, body)
	}
}

// TestMCPBindAndCall: MCP servers bound by the parent (here one over
// Streamable HTTP, its header held by the child) answer their tools'
// calls; the answer names each tool's server; the binding is shared by
// the same spec and dropped by unbind.
func TestMCPBindAndCall(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "http", Version: "1"}, &mcp.ServerOptions{Instructions: "Ask whoami."})
	s.AddTool(&mcp.Tool{Name: "whoami", InputSchema: map[string]any{"type": "object"}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "user-7"}}}, nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer secret-7" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	p := startChild(t, Protocol)
	p.hello()
	ch := p.channel()
	ask := func(req string) (byte, string) {
		t.Helper()
		writeFrame(t, ch, 'Q', req)
		return readFrame(t, ch)
	}
	spec := `{"op":"bind","bind":{"mcp":[{"name":"remote","url":"` + srv.URL + `","headers":{"Authorization":"Bearer secret-7"}}]}}`
	typ, body := ask(spec)
	var bound bindAnswer
	if typ != 'R' || json.Unmarshal([]byte(body), &bound) != nil || len(bound.Tools) != 1 || bound.Names["whoami"] != "remote/whoami" ||
		len(bound.Servers) != 1 || bound.Servers[0].Instructions != "Ask whoami." || strings.Contains(body, "secret-7") {
		t.Fatalf("bind answered %c %s", typ, body)
	}
	if typ, again := ask(spec); typ != 'R' || !strings.Contains(again, `"handle":"`+bound.Handle+`"`) {
		t.Fatalf("the same servers bound again: %c %s", typ, again)
	}
	typ, body = ask(`{"op":"call","call":{"handle":"` + bound.Handle + `","name":"whoami","args":"[[],{}]","timeout_us":5000000}}`)
	if typ != 'R' || !strings.Contains(body, `user-7`) || strings.Contains(body, "secret-7") {
		t.Fatalf("call answered %c %s", typ, body)
	}
	if typ, body := ask(`{"op":"unbind","handle":"` + bound.Handle + `"}`); typ != 'R' {
		t.Fatalf("unbind answered %c %s", typ, body)
	}
	if typ, body := ask(`{"op":"bind","bind":{"mcp":[{"name":"remote","url":"` + srv.URL + `"}]}}`); typ != 'X' || !strings.Contains(body, "bad_request") {
		t.Fatalf("a server refusing us: %c %s", typ, body)
	}
}
