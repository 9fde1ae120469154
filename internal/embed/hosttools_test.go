package embed

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
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
