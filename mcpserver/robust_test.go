package mcpserver_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/mcpserver"
)

// malformed are messages every transport must answer with a JSON-RPC
// error (code, id as sent back) and survive.
var malformed = []struct {
	name, line string
	code       int
	id         string // the id the error must carry: "null" when unreadable
}{
	{"bool id", `{"jsonrpc":"2.0","id":true,"method":"ping"}`, -32600, "null"},
	{"object id", `{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`, -32600, "null"},
	{"array id", `{"jsonrpc":"2.0","id":[1],"method":"ping"}`, -32600, "null"},
	{"fractional id", `{"jsonrpc":"2.0","id":1.5,"method":"ping"}`, -32600, "null"},
	{"huge id", `{"jsonrpc":"2.0","id":12345678901234567890,"method":"ping"}`, -32600, "null"},
	{"null id", `{"jsonrpc":"2.0","id":null,"method":"ping"}`, -32600, "null"},
	{"not JSON", `{"jsonrpc":"2.0","id":3,"method":`, -32700, "null"},
	{"not an object", `42`, -32600, "null"},
	{"wrong version", `{"jsonrpc":"1.0","id":4,"method":"ping"}`, -32600, "4"},
	{"no version", `{"id":5,"method":"ping"}`, -32600, "5"},
	{"unknown method", `{"jsonrpc":"2.0","id":6,"method":"tools/frobnicate"}`, -32601, "6"},
	{"params not an object", `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":[1]}`, -32602, "7"},
	{"params missing", `{"jsonrpc":"2.0","id":8,"method":"tools/call"}`, -32602, "8"},
	{"params of the wrong shape", `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":5}}`, -32602, "9"},
	{"notification with an id", `{"jsonrpc":"2.0","id":10,"method":"notifications/initialized"}`, -32600, "10"},
	{"request without an id", `{"jsonrpc":"2.0","method":"tools/list"}`, -32600, "null"},
	{"response to nothing", `{"jsonrpc":"2.0","id":11,"result":{}}`, -32600, "null"},
	{"batch", `[{"jsonrpc":"2.0","id":12,"method":"ping"}]`, -32600, "null"},
	{"unknown tool", `{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"name":"nope","arguments":{}}}`, -32602, "13"},
	{"argument the schema forbids", `{"jsonrpc":"2.0","id":14,"method":"tools/call","params":{"name":"run_ruby","arguments":{"code":"1","timeout":5}}}`, -32602, "14"},
	{"argument of the wrong type", `{"jsonrpc":"2.0","id":15,"method":"tools/call","params":{"name":"run_ruby","arguments":{"code":5}}}`, -32602, "15"},
}

// checkRefusal checks one error answer.
func checkRefusal(t *testing.T, name string, m map[string]any, code int, id string) {
	t.Helper()
	e, _ := m["error"].(map[string]any)
	gotID, _ := json.Marshal(m["id"])
	if e == nil || e["code"] != json.Number(json.Number(itoa(code))) || string(gotID) != id || e["message"] == "" {
		t.Errorf("%s: got %v, want error code %d with id %s", name, m, code, id)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// stdioClient drives ServeIO over pipes with raw lines.
type stdioClient struct {
	t    *testing.T
	in   *io.PipeWriter
	out  *bufio.Scanner
	done chan error
}

func serveStdio(t *testing.T, s *mcpserver.Server) *stdioClient {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	c := &stdioClient{t: t, in: inW, out: bufio.NewScanner(outR), done: make(chan error, 1)}
	c.out.Buffer(nil, 8<<20)
	go func() { c.done <- s.ServeIO(context.Background(), inR, outW); outW.Close() }()
	t.Cleanup(func() { inW.Close(); outR.Close() })
	return c
}

func (c *stdioClient) send(line string) {
	if _, err := io.WriteString(c.in, line+"\n"); err != nil {
		c.t.Fatal(err)
	}
}

func (c *stdioClient) next() map[string]any {
	c.t.Helper()
	if !c.out.Scan() {
		c.t.Fatalf("the server closed its output: %v", c.out.Err())
	}
	d := json.NewDecoder(strings.NewReader(c.out.Text()))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		c.t.Fatalf("not JSON: %s", c.out.Text())
	}
	return m
}

func (c *stdioClient) initialize() {
	c.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	if m := c.next(); m["result"] == nil {
		c.t.Fatalf("initialize: %v", m)
	}
	c.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
}

// Every malformed message gets its JSON-RPC error over stdio, and the
// session goes on; an unknown notification is ignored.
func TestStdioMalformedMessages(t *testing.T) {
	s, _ := newServer(t, glovebox.Limits{}, mcpserver.Options{})
	c := serveStdio(t, s)
	c.send(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	checkRefusal(t, "before initialize", c.next(), -32600, "2")
	c.initialize()
	for _, tc := range malformed {
		c.send(`{"jsonrpc":"2.0","method":"notifications/whatever"}`) // ignored: never answered
		c.send(tc.line)
		checkRefusal(t, tc.name, c.next(), tc.code, tc.id)
	}
	c.send(`{"jsonrpc":"2.0","id":"last","method":"tools/call","params":{"name":"run_ruby","arguments":{"code":"6*7"}}}`)
	m := c.next()
	if m["id"] != "last" || m["result"].(map[string]any)["structuredContent"].(map[string]any)["value"] != json.Number("42") {
		t.Fatalf("after the malformed messages: %v", m)
	}
}

// Over HTTP, the same messages get HTTP 400 with the same JSON-RPC
// errors, never a plain-text body; the session goes on.
func TestHTTPMalformedMessages(t *testing.T) {
	s, _ := newServer(t, glovebox.Limits{}, mcpserver.Options{})
	url, _ := serveHTTP(t, s, "secret")
	code, _, msgs := raw(t, url, "", nil, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	if code != 400 || len(msgs) != 1 {
		t.Fatalf("a request without a session: HTTP %d %v", code, msgs)
	}
	checkRefusal(t, "without a session", msgs[0], -32600, "2")
	sid := rawSession(t, url)
	for _, tc := range malformed {
		code, _, msgs := raw(t, url, sid, nil, tc.line)
		if len(msgs) != 1 {
			t.Errorf("%s: HTTP %d, %d messages", tc.name, code, len(msgs))
			continue
		}
		if tc.code != -32602 || strings.HasPrefix(tc.line, `{"jsonrpc":"2.0","id":7`) || strings.HasPrefix(tc.line, `{"jsonrpc":"2.0","id":8`) {
			// Refused before the SDK: HTTP 400. (Errors of a call the
			// SDK handled come in its event stream, with 200.)
			if code != 400 {
				t.Errorf("%s: HTTP %d, want 400", tc.name, code)
			}
		}
		checkRefusal(t, tc.name, msgs[0], tc.code, tc.id)
	}
	_, _, msgs = raw(t, url, sid, nil, `{"jsonrpc":"2.0","id":99,"method":"tools/call","params":{"name":"run_ruby","arguments":{"code":"6*7"}}}`)
	if len(msgs) != 1 || msgs[0]["result"].(map[string]any)["structuredContent"].(map[string]any)["value"] != json.Number("42") {
		t.Fatalf("after the malformed messages: %v", msgs)
	}
	// initialize comes alone, never in a batch, at any revision.
	oldInit := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"old","version":"1"}}}`
	noHeader := map[string]string{"Mcp-Protocol-Version": ""}
	if code, sid, msgs := raw(t, url, "", noHeader, "["+oldInit+"]"); code != 400 || sid != "" {
		t.Fatalf("initialize in a batch: HTTP %d, session %q, %v", code, sid, msgs)
	}
	// A revision with batches gets them: an old client's batch is run.
	code, oldSID, _ := raw(t, url, "", noHeader, oldInit)
	if code != 200 || oldSID == "" {
		t.Fatalf("a 2025-03-26 initialize: HTTP %d", code)
	}
	batch := `[{"jsonrpc":"2.0","id":"b1","method":"tools/call","params":{"name":"run_ruby","arguments":{"code":"6*7"}}}]`
	if code, _, msgs := raw(t, url, oldSID, noHeader, batch); code != 200 || len(msgs) != 1 || msgs[0]["error"] != nil {
		t.Fatalf("a 2025-03-26 session's batch: HTTP %d %v", code, msgs)
	}
	// A session that began at a later revision gets none, even when a
	// request leaves out the Mcp-Protocol-Version header.
	if code, _, msgs := raw(t, url, sid, noHeader, batch); code != 400 || len(msgs) != 1 {
		t.Fatalf("a 2025-06-18 session's batch without the header: HTTP %d %v", code, msgs)
	}
}

// The unknown tool's error lists the tools; an argument the inputSchema
// forbids is named.
func TestCallErrorsSayWhat(t *testing.T) {
	s, _ := newServer(t, glovebox.Limits{}, mcpserver.Options{})
	cs := connect(t, s, nil)
	ctx := context.Background()
	_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_python", Arguments: map[string]any{"code": "1"}})
	if err == nil || !strings.Contains(err.Error(), "run_ruby") || !strings.Contains(err.Error(), "ruby_session") {
		t.Fatalf("unknown tool: %v", err)
	}
	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: mcpserver.ToolRun, Arguments: map[string]any{"code": "1", "memory": 5}})
	if err == nil || !strings.Contains(err.Error(), `"memory"`) {
		t.Fatalf("a forbidden argument: %v", err)
	}
	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: mcpserver.ToolSessionReset, Arguments: map[string]any{"all": true}})
	if err == nil || !strings.Contains(err.Error(), `"all"`) {
		t.Fatalf("a forbidden argument to %s: %v", mcpserver.ToolSessionReset, err)
	}
}

// The HTTP server holds at most MaxSessions sessions: past it, an
// initialize is refused with 503 and a JSON-RPC error naming the limit
// while every session is in use (each made a request since its
// initialize); once one has been idle for PressureIdle, the least
// recently used goes to make room.
func TestHTTPSessionCap(t *testing.T) {
	for _, pressure := range []time.Duration{time.Hour, time.Nanosecond} {
		s, _ := newServer(t, glovebox.Limits{}, mcpserver.Options{})
		url := serveHTTPWith(t, s, mcpserver.HTTPOptions{MaxSessions: 2, PressureIdle: pressure})
		a, b := rawSession(t, url), rawSession(t, url)
		raw(t, url, b, nil, `{"jsonrpc":"2.0","id":2,"method":"ping"}`)
		raw(t, url, a, nil, `{"jsonrpc":"2.0","id":2,"method":"ping"}`) // b is now the least recently used
		code, sid, msgs := raw(t, url, "", nil, initBody)
		if pressure == time.Hour {
			if code != http.StatusServiceUnavailable || sid != "" || len(msgs) != 1 {
				t.Fatalf("a third session: HTTP %d %q %v", code, sid, msgs)
			}
			checkRefusal(t, "over the cap", msgs[0], mcpserver.CodeServerBusy, "1")
			if !strings.Contains(msgs[0]["error"].(map[string]any)["message"].(string), "--max-http-sessions") {
				t.Fatalf("the refusal does not name the limit: %v", msgs[0])
			}
			continue
		}
		if code != 200 || sid == "" {
			t.Fatalf("a third session under pressure: HTTP %d", code)
		}
		for i := 0; ; i++ { // b is closed asynchronously
			code, _, _ := raw(t, url, b, nil, `{"jsonrpc":"2.0","id":3,"method":"ping"}`)
			if code == http.StatusNotFound {
				break
			}
			if i == 500 {
				t.Fatalf("the least recently used session was not closed: HTTP %d", code)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if code, _, _ := raw(t, url, a, nil, `{"jsonrpc":"2.0","id":4,"method":"ping"}`); code != 200 {
			t.Fatalf("the recently used session was closed: HTTP %d", code)
		}
	}
}

// A call whose HTTP client drops the connection stops: with one slot,
// the next call runs (it would wait for the ten-minute timeout
// otherwise).
func TestHTTPDisconnectStopsEval(t *testing.T) {
	s, _ := newServer(t, glovebox.Limits{Timeout: 10 * time.Minute}, mcpserver.Options{MaxConcurrent: 1})
	url, _ := serveHTTP(t, s, "secret")
	sid := rawSession(t, url)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run_ruby","arguments":{"code":"loop {}"},"_meta":{"progressToken":"p"}}}`))
	for k, v := range map[string]string{"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
		"Authorization": "Bearer secret", "Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-06-18"} {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	// The first progress notification says the loop runs.
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	cancel() // the client goes: its connection closes
	resp.Body.Close()
	next := make(chan []map[string]any, 1)
	go func() {
		_, _, msgs := raw(t, url, sid, nil, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"run_ruby","arguments":{"code":"6*7"}}}`)
		next <- msgs
	}()
	select {
	case msgs := <-next:
		if len(msgs) != 1 || msgs[0]["result"].(map[string]any)["structuredContent"].(map[string]any)["value"] != json.Number("42") {
			t.Fatalf("the next call: %v", msgs)
		}
	case <-time.After(5 * time.Minute): // far below the loop's timeout
		t.Fatal("the dropped client's loop still holds the only slot")
	}
}

// Over stdio, the end of input stops the calls still running.
func TestStdioEOFStopsEval(t *testing.T) {
	s, _ := newServer(t, glovebox.Limits{Timeout: 10 * time.Minute}, mcpserver.Options{MaxConcurrent: 1})
	c := serveStdio(t, s)
	c.initialize()
	c.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run_ruby","arguments":{"code":"loop {}"},"_meta":{"progressToken":"p"}}}`)
	if m := c.next(); m["method"] != "notifications/progress" {
		t.Fatalf("want a progress notification, got %v", m)
	}
	c.in.Close()
	go func() { // the client reads on: the canceled call's answer comes
		for c.out.Scan() {
		}
	}()
	if err := <-c.done; err != nil {
		t.Fatalf("ServeIO after the end of input: %v", err)
	}
	cs := connect(t, s, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // far below the loop's timeout
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: mcpserver.ToolRun, Arguments: map[string]any{"code": "6*7"}})
	if err != nil {
		t.Fatalf("the gone client's loop still holds the only slot: %v", err)
	}
	if text(res) != "=> 42" {
		t.Fatalf("the next call: %s", text(res))
	}
}

// A canceled ruby_session call discards the VM; the next call says so.
func TestCanceledSessionCallReportsReset(t *testing.T) {
	s, _ := newServer(t, glovebox.Limits{Timeout: 10 * time.Minute}, mcpserver.Options{ProgressInterval: 20 * time.Millisecond})
	started := make(chan struct{}, 1)
	cs := connect(t, s, &mcp.ClientOptions{ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) {
		select {
		case started <- struct{}{}:
		default:
		}
	}})
	call(t, cs, mcpserver.ToolSession, "x = 1")
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		p := &mcp.CallToolParams{Name: mcpserver.ToolSession, Arguments: map[string]any{"code": "loop {}"}}
		p.SetProgressToken("p")
		_, err := cs.CallTool(ctx, p)
		errc <- err
	}()
	<-started
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("the canceled call returned %v", err)
	}
	res := call(t, cs, mcpserver.ToolSession, "defined?(x)")
	m := structured(t, res)
	if m["session_reset"] != true || !strings.Contains(m["session_reset_reason"].(string), "canceled") || !strings.Contains(text(res), "canceled") {
		t.Fatalf("the call after the cancel: %v\n%s", m, text(res))
	}
	if m := structured(t, call(t, cs, mcpserver.ToolSession, "1")); m["session_reset"] != false {
		t.Fatalf("the loss is reported twice: %v", m)
	}
}

// ruby_session's description does not repeat the functions run_ruby's
// describes.
func TestSessionDescriptionNotRepeated(t *testing.T) {
	s, _ := newServer(t, glovebox.Limits{}, mcpserver.Options{})
	cs := connect(t, s, nil)
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools.Tools {
		if tool.Name == mcpserver.ToolSession && (strings.Contains(tool.Description, "transfer") || !strings.Contains(tool.Description, mcpserver.ToolRun+"'s description")) {
			t.Fatalf("ruby_session's description:\n%s", tool.Description)
		}
	}
}

// A million one-byte writes reach the client as a bounded result:
// progress is timed, not per write, and the output is cut by bytes.
func TestManyWritesStayBounded(t *testing.T) {
	s, _ := newServer(t, glovebox.Limits{Timeout: 5 * time.Minute}, mcpserver.Options{ProgressInterval: 50 * time.Millisecond})
	var notes atomic.Int64
	cs := connect(t, s, &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) { notes.Add(1) },
		LoggingMessageHandler:       func(context.Context, *mcp.LoggingMessageRequest) { notes.Add(1) },
	})
	p := &mcp.CallToolParams{Name: mcpserver.ToolRun, Arguments: map[string]any{"code": `STDOUT.sync = true; 1_000_000.times { $stdout.write("x") }; :done`}}
	p.SetProgressToken("p")
	res, err := cs.CallTool(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	m := structured(t, res)
	out, _ := m["stdout"].(string)
	b, _ := json.Marshal(res.StructuredContent)
	t.Logf("%d notifications, %d bytes of result, %d of stdout", notes.Load(), len(b), len(out))
	if m["status"] != "ok" || len(b) > 64<<10 || notes.Load() > 10_000 {
		t.Fatalf("status %v, %d bytes of result, %d notifications for 1e6 writes", m["status"], len(b), notes.Load())
	}
}

// Elicitation over HTTP still works: the client's answer is a response
// to a request the server sent, which the checks let through.
func TestHTTPApproval(t *testing.T) {
	s, _ := newServer(t, glovebox.Limits{}, mcpserver.Options{})
	url, _ := serveHTTP(t, s, "secret")
	c := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, &mcp.ClientOptions{ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}, nil
	}})
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: bearer("secret")}, legacy)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if got := text(call(t, cs, mcpserver.ToolRun, "transfer(5)")); got != "=> 5\ncalled transfer" {
		t.Fatalf("approved over HTTP: %q", got)
	}
}

// A flood of initialize requests whose sessions are never used does not
// lock anyone out: with every slot taken by them, the next client's
// initialize closes the oldest never-used one, gets a session and works,
// and a session that was in use before the flood keeps working. The
// sessions held never pass the cap.
func TestHTTPSessionFloodLocksNobodyOut(t *testing.T) {
	s, _ := newServer(t, glovebox.Limits{}, mcpserver.Options{})
	const limit = 16
	url := serveHTTPWith(t, s, mcpserver.HTTPOptions{MaxSessions: limit})
	used := rawSession(t, url)
	if code, _, _ := raw(t, url, used, nil, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`); code != 200 {
		t.Fatalf("tools/list: HTTP %d", code)
	}
	var admitted, refused atomic.Int64
	flood := make(chan struct{})
	for range 8 {
		go func() {
			defer func() { flood <- struct{}{} }()
			for range 40 {
				code, sid, _ := raw(t, url, "", nil, initBody)
				switch {
				case code == 200 && sid != "":
					admitted.Add(1)
				case code == http.StatusServiceUnavailable:
					refused.Add(1)
				default:
					t.Errorf("a flood initialize: HTTP %d", code)
				}
			}
		}()
	}
	for range 8 {
		<-flood
	}
	t.Logf("flood: %d sessions made, %d refused", admitted.Load(), refused.Load())
	if n := countSessions(s); n > limit {
		t.Fatalf("%d SDK sessions after the flood, over the cap of %d", n, limit)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "next", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: url, HTTPClient: bearer("secret"), DisableStandaloneSSE: true}, legacy)
	if err != nil {
		t.Fatalf("the client after the flood gets no session: %v", err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: mcpserver.ToolRun, Arguments: map[string]any{"code": "6*7"}})
	if err != nil || res.IsError {
		t.Fatalf("the client after the flood: %v %v", err, res)
	}
	if v, _ := json.Marshal(res.StructuredContent); !strings.Contains(string(v), `"value":42`) {
		t.Fatalf("the client after the flood got %s", v)
	}
	if code, _, _ := raw(t, url, used, nil, `{"jsonrpc":"2.0","id":3,"method":"ping"}`); code != 200 {
		t.Fatalf("the session in use before the flood: HTTP %d", code)
	}
}

// countSessions counts the SDK's open sessions of s.
func countSessions(s *mcpserver.Server) int {
	n := 0
	for range s.MCP().Sessions() {
		n++
	}
	return n
}

// A session that makes no request after its initialize is closed after
// NewSessionGrace, server full or not; one that made a request stays.
func TestHTTPNeverUsedSessionGrace(t *testing.T) {
	s, _ := newServer(t, glovebox.Limits{}, mcpserver.Options{})
	url := serveHTTPWith(t, s, mcpserver.HTTPOptions{NewSessionGrace: time.Second})
	used := rawSession(t, url)
	raw(t, url, used, nil, `{"jsonrpc":"2.0","id":2,"method":"ping"}`)
	idle := rawSession(t, url)
	for i := 0; countSessions(s) > 1; i++ {
		if i == 300 {
			t.Fatalf("the never-used session was not closed after its grace: %d sessions open", countSessions(s))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, _, _ := raw(t, url, idle, nil, `{"jsonrpc":"2.0","id":3,"method":"ping"}`); code != http.StatusNotFound {
		t.Fatalf("the never-used session after its grace: HTTP %d, want 404", code)
	}
	if code, _, _ := raw(t, url, used, nil, `{"jsonrpc":"2.0","id":4,"method":"ping"}`); code != 200 {
		t.Fatalf("the session that made a request was closed: HTTP %d", code)
	}
}
