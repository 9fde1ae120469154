package mcpserver_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/mcpserver"
)

// serveHTTP serves s at /mcp on a loopback test server and returns the
// endpoint URL and the host:port.
func serveHTTP(t testing.TB, s *mcpserver.Server, token string) (string, string) {
	t.Helper()
	url := serveHTTPWith(t, s, mcpserver.HTTPOptions{Token: token, MaxRequestBytes: 64 << 10})
	return url, strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/mcp")
}

// serveHTTPWith is serveHTTP with options (Addr is filled in).
func serveHTTPWith(t testing.TB, s *mcpserver.Server, o mcpserver.HTTPOptions) string {
	t.Helper()
	ts := httptest.NewUnstartedServer(nil)
	o.Addr = ts.Listener.Addr().String()
	if o.Token == "" {
		o.Token = "secret"
	}
	h, err := s.HTTPHandler(o)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	ts.Config.Handler = mux
	ts.Start()
	t.Cleanup(ts.Close)
	return ts.URL + "/mcp"
}

type bearerRT struct{ token string }

func (b bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

func bearer(token string) *http.Client { return &http.Client{Transport: bearerRT{token}} }

// raw sends one JSON-RPC message and returns the status, the session ID
// and the messages in the answer (JSON or an event stream).
func raw(t testing.TB, url, session string, hdr map[string]string, body string) (int, string, []map[string]any) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer secret")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var msgs []map[string]any
	decode := func(b []byte) {
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		var m map[string]any
		if d.Decode(&m) == nil {
			msgs = append(msgs, m)
		}
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				decode([]byte(d))
			}
		}
	} else {
		decode(data)
	}
	return resp.StatusCode, resp.Header.Get("Mcp-Session-Id"), msgs
}

const initBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`

func rawSession(t testing.TB, url string) string {
	t.Helper()
	code, sid, _ := raw(t, url, "", nil, initBody)
	if code != 200 || sid == "" {
		t.Fatalf("initialize: %d %q", code, sid)
	}
	raw(t, url, sid, nil, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return sid
}

// The structuredContent on the wire holds big integers exactly.
func TestBigIntegersExactOnTheWire(t *testing.T) {
	s, _ := newServer(t, glovebox.Limits{}, mcpserver.Options{})
	url, _ := serveHTTP(t, s, "secret")
	sid := rawSession(t, url)
	_, _, msgs := raw(t, url, sid, nil, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run_ruby","arguments":{"code":"[2**64, -2**63, 2**100]"}}}`)
	if len(msgs) != 1 {
		t.Fatalf("messages %v", msgs)
	}
	sc := msgs[0]["result"].(map[string]any)["structuredContent"].(map[string]any)
	b, _ := json.Marshal(sc["value"])
	if string(b) != "[18446744073709551616,-9223372036854775808,1267650600228229401496703205376]" {
		t.Fatalf("value on the wire: %s", b)
	}
}

// Bad requests are refused with the right error, and the server keeps
// serving.
func TestHTTPRefusals(t *testing.T) {
	s, _ := newServer(t, glovebox.Limits{}, mcpserver.Options{})
	url, addr := serveHTTP(t, s, "secret")
	sid := rawSession(t, url)
	for _, tc := range []struct {
		name string
		hdr  map[string]string
		body string
		code int
		rpc  float64 // JSON-RPC error code, 0 for none expected
	}{
		{"no token", map[string]string{"Authorization": ""}, initBody, 401, 0},
		{"wrong token", map[string]string{"Authorization": "Bearer nope"}, initBody, 401, 0},
		{"empty bearer", map[string]string{"Authorization": "Bearer "}, initBody, 401, 0},
		{"other scheme", map[string]string{"Authorization": "Basic secret"}, initBody, 401, 0},
		{"token without scheme", map[string]string{"Authorization": "secret"}, initBody, 401, 0},
		{"foreign Origin", map[string]string{"Origin": "https://evil.example"}, initBody, 403, 0},
		{"rebound Host", map[string]string{"Host": "evil.example:" + strings.Split(addr, ":")[1]}, initBody, 403, 0},
		{"oversized", nil, `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"run_ruby","arguments":{"code":"` + strings.Repeat("1", 100<<10) + `"}}}`, 413, 0},
	} {
		code, _, _ := raw(t, url, sid, tc.hdr, tc.body)
		if code != tc.code {
			t.Errorf("%s: HTTP %d, want %d", tc.name, code, tc.code)
		}
	}
	// Malformed JSON-RPC: a parse error, not a crash.
	code, _, msgs := raw(t, url, sid, nil, `{"jsonrpc":"2.0","id":3,"method":`)
	if code < 400 && (len(msgs) == 0 || msgs[0]["error"] == nil) {
		t.Errorf("malformed JSON: HTTP %d %v", code, msgs)
	}
	// A call with arguments its inputSchema forbids is invalid params,
	// naming the argument.
	_, _, msgs = raw(t, url, sid, nil, `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"run_ruby","arguments":{"code":5}}}`)
	if len(msgs) != 1 || msgs[0]["error"] == nil || msgs[0]["error"].(map[string]any)["code"] != json.Number("-32602") || !strings.Contains(msgs[0]["error"].(map[string]any)["message"].(string), `"code"`) {
		t.Errorf("bad arguments: %v", msgs)
	}
	// A loopback Origin is a local browser: allowed.
	if code, _, _ := raw(t, url, "", map[string]string{"Origin": "http://localhost:3000"}, initBody); code != 200 {
		t.Errorf("loopback Origin: HTTP %d", code)
	}
	// Still serving.
	_, _, msgs = raw(t, url, sid, nil, `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"run_ruby","arguments":{"code":"1+1"}}}`)
	if len(msgs) != 1 || msgs[0]["result"].(map[string]any)["structuredContent"].(map[string]any)["value"] != json.Number("2") {
		t.Fatalf("after the refusals: %v", msgs)
	}
}

func TestHTTPNonLoopbackNeedsToken(t *testing.T) {
	s, _ := newServer(t, glovebox.Limits{}, mcpserver.Options{})
	if _, err := s.HTTPHandler(mcpserver.HTTPOptions{Addr: "0.0.0.0:8080"}); !errors.Is(err, mcpserver.ErrTokenRequired) {
		t.Fatalf("got %v", err)
	}
	if _, err := s.HTTPHandler(mcpserver.HTTPOptions{Addr: "0.0.0.0:8080", Token: "x"}); err != nil {
		t.Fatal(err)
	}
}

// Two HTTP clients get separate sessions.
func TestHTTPSessionsSeparate(t *testing.T) {
	s, _ := newServer(t, glovebox.Limits{}, mcpserver.Options{})
	url, _ := serveHTTP(t, s, "secret")
	dial := func() *mcp.ClientSession {
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(context.Background(),
			&mcp.StreamableClientTransport{Endpoint: url, HTTPClient: bearer("secret")}, legacy)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	a, b := dial(), dial()
	call(t, a, mcpserver.ToolSession, "$x = :a")
	if got := text(call(t, b, mcpserver.ToolSession, "$x")); got != "=> null" {
		t.Fatalf("b sees a's state: %s", got)
	}
	if got := text(call(t, a, mcpserver.ToolSession, "$x")); got != `=> "a"` {
		t.Fatalf("a lost its state: %s", got)
	}
}

// Past MaxConnections concurrent requests, the server answers 503 and
// keeps serving.
func TestHTTPConcurrencyLimit(t *testing.T) {
	s, _ := newServer(t, glovebox.Limits{}, mcpserver.Options{})
	ts := httptest.NewUnstartedServer(nil)
	h, err := s.HTTPHandler(mcpserver.HTTPOptions{Addr: ts.Listener.Addr().String(), Token: "secret", MaxConnections: 1})
	if err != nil {
		t.Fatal(err)
	}
	ts.Config.Handler = h
	ts.Start()
	defer ts.Close()
	url := ts.URL
	sid := rawSession(t, url)
	slow := make(chan struct{})
	go func() {
		defer close(slow)
		// Retried while a ping holds the slot.
		for {
			code, _, _ := raw(t, url, sid, nil, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"run_ruby","arguments":{"code":"sleep 3; 1"}}}`)
			if code != http.StatusServiceUnavailable {
				return
			}
		}
	}()
	refused := false
	for !refused {
		select {
		case <-slow:
			t.Fatal("no request was refused while the slow call held the only slot")
		default:
		}
		code, _, _ := raw(t, url, sid, nil, `{"jsonrpc":"2.0","id":8,"method":"ping"}`)
		refused = code == http.StatusServiceUnavailable
	}
	<-slow
	if code, _, msgs := raw(t, url, sid, nil, `{"jsonrpc":"2.0","id":9,"method":"ping"}`); code != 200 || len(msgs) != 1 {
		t.Fatalf("after the slow call: HTTP %d %v", code, msgs)
	}
}

// The bearer scheme name is case-insensitive (RFC 9110 section 11.1): a
// client that writes "bearer" or "BEARER" with the right token is served.
func TestHTTPBearerSchemeCase(t *testing.T) {
	s, _ := newServer(t, glovebox.Limits{}, mcpserver.Options{})
	url, _ := serveHTTP(t, s, "secret")
	for _, h := range []string{"bearer secret", "BEARER secret", "Bearer  secret "} {
		code, _, _ := raw(t, url, "", map[string]string{"Authorization": h}, initBody)
		if code != 200 {
			t.Errorf("Authorization %q: HTTP %d, want 200", h, code)
		}
	}
}
