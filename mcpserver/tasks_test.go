package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/mcpserver"
)

// metaTasks is meta2026 with the tasks extension declared.
const metaTasks = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"tasker","version":"1"},"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}`

// gatedServer is a server whose programs may call gate(), which returns
// once open is closed (or the eval is stopped).
func gatedServer(t *testing.T, opts mcpserver.Options) (*mcpserver.Server, chan struct{}) {
	t.Helper()
	open := make(chan struct{})
	var ts glovebox.Toolset
	if err := ts.Func("gate", func(ctx context.Context) error {
		select {
		case <-open:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}); err != nil {
		t.Fatal(err)
	}
	rt, err := glovebox.New(context.Background(), glovebox.Config{Limits: glovebox.Limits{Timeout: 10 * time.Minute}, Tools: &ts, PoolSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	opts.Runtime = rt
	s, err := mcpserver.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, open
}

// taskClient speaks the tasks extension in raw JSON-RPC over HTTP at
// 2026-07-28 (the TypeScript SDK, 2.4.0, has no runtime for it: it
// refuses to send tasks/get to a 2026-07-28 server), each request on a
// connection of its own transport, so that dropping one is a reconnect.
type taskClient struct {
	t   *testing.T
	url string
	hc  *http.Client
	id  int
	// token, when set, is the bearer token the requests carry instead of
	// raw's.
	token string
}

func newTaskClient(t *testing.T, url string) *taskClient {
	return &taskClient{t: t, url: url, hc: &http.Client{Transport: &http.Transport{}}}
}

// reconnect drops the client's connections: the next request opens a
// new one, as a client that lost its network and came back would.
func (c *taskClient) reconnect() {
	c.hc.Transport.(*http.Transport).CloseIdleConnections()
	c.hc = &http.Client{Transport: &http.Transport{}}
}

// send posts method with params (a JSON object's members, without the
// braces), the routing headers set from name; meta is the _meta member.
func (c *taskClient) send(method, name, params, meta string) (int, map[string]any) {
	c.t.Helper()
	c.id++
	body := `{"jsonrpc":"2.0","id":` + itoa(c.id) + `,"method":"` + method + `","params":{` + params
	if meta != "" {
		if params != "" {
			body += ","
		}
		body += meta
	}
	body += "}}"
	hdr := map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": method, "Mcp-Name": name}
	if c.token != "" {
		hdr["Authorization"] = "Bearer " + c.token
	}
	old := http.DefaultClient
	http.DefaultClient = c.hc
	defer func() { http.DefaultClient = old }()
	code, _, msgs := raw(c.t, c.url, "", hdr, body)
	if len(msgs) != 1 {
		c.t.Fatalf("%s: HTTP %d, %d messages", method, code, len(msgs))
	}
	return code, msgs[0]
}

// result returns m's result, failing the test on an error.
func (c *taskClient) result(what string, m map[string]any) map[string]any {
	c.t.Helper()
	r, ok := m["result"].(map[string]any)
	if !ok {
		c.t.Fatalf("%s: %v", what, m)
	}
	return r
}

// start calls run_ruby with code as a task and returns its id.
func (c *taskClient) start(code string) string {
	c.t.Helper()
	args, _ := json.Marshal(map[string]string{"code": code})
	_, m := c.send("tools/call", "run_ruby", `"name":"run_ruby","arguments":`+string(args), metaTasks)
	r := c.result("tools/call as a task", m)
	id, _ := r["taskId"].(string)
	if r["resultType"] != "task" || r["status"] != "working" || id == "" || r["pollIntervalMs"] == nil || r["ttlMs"] == nil || r["createdAt"] == nil {
		c.t.Fatalf("CreateTaskResult: %v", r)
	}
	return id
}

func (c *taskClient) get(id string) map[string]any {
	c.t.Helper()
	_, m := c.send("tasks/get", id, `"taskId":"`+id+`"`, metaTasks)
	return c.result("tasks/get", m)
}

// wait polls tasks/get until the task has ended, with no bound of its
// own (the test's deadline is the bound).
func (c *taskClient) wait(id string) map[string]any {
	c.t.Helper()
	for {
		r := c.get(id)
		if r["status"] != "working" {
			return r
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// rpcError checks that m is a JSON-RPC error with code whose message
// contains want.
func rpcError(t *testing.T, what string, m map[string]any, code int, want string) {
	t.Helper()
	e, _ := m["error"].(map[string]any)
	if e == nil || e["code"] != json.Number(itoa(code)) || !strings.Contains(e["message"].(string), want) {
		t.Fatalf("%s: want error %d with %q, got %v", what, code, want, m)
	}
}

// A run_ruby call of a client that declares the tasks extension becomes
// a task; the client drops its connection, comes back on a new one, and
// polls the task to its result. A client that does not declare the
// extension gets its result in the call, as before.
func TestTaskPolledAfterReconnect(t *testing.T) {
	s, open := gatedServer(t, mcpserver.Options{})
	url, _ := serveHTTP(t, s, "secret")
	c := newTaskClient(t, url)
	id := c.start("gate\n6 * 7")
	if r := c.get(id); r["status"] != "working" || r["resultType"] != "complete" || r["result"] != nil {
		t.Fatalf("running task: %v", r)
	}
	c.reconnect()
	close(open)
	r := c.wait(id)
	res, _ := r["result"].(map[string]any)
	if r["status"] != "completed" || res == nil || res["structuredContent"].(map[string]any)["value"] != json.Number("42") {
		t.Fatalf("ended task: %v", r)
	}
	// Without the extension: no task.
	_, m := c.send("tools/call", "run_ruby", `"name":"run_ruby","arguments":{"code":"6*7"}`, meta2026)
	if r := c.result("call without the extension", m); r["resultType"] != "complete" || r["taskId"] != nil {
		t.Fatalf("call without the extension: %v", r)
	}
}

// tasks/cancel stops the program: with one sandbox, a task looping
// forever is cancelled and the next call runs. Cancelling it again, once
// it has ended, is acknowledged (as the extension requires) and changes
// nothing.
func TestTaskCancelStopsEval(t *testing.T) {
	s, _ := gatedServer(t, mcpserver.Options{MaxConcurrent: 1})
	url, _ := serveHTTP(t, s, "secret")
	c := newTaskClient(t, url)
	id := c.start("loop {}")
	_, m := c.send("tasks/cancel", id, `"taskId":"`+id+`"`, metaTasks)
	if r := c.result("tasks/cancel", m); r["resultType"] != "complete" || r["taskId"] != nil {
		t.Fatalf("tasks/cancel: %v", r)
	}
	if r := c.get(id); r["status"] != "cancelled" {
		t.Fatalf("cancelled task: %v", r)
	}
	next := c.start("6 * 7") // waits for the only sandbox
	if r := c.wait(next); r["status"] != "completed" {
		t.Fatalf("the next task: %v", r)
	}
	_, m = c.send("tasks/cancel", next, `"taskId":"`+next+`"`, metaTasks)
	c.result("tasks/cancel of an ended task", m)
	if r := c.get(next); r["status"] != "completed" {
		t.Fatalf("ended task after tasks/cancel: %v", r)
	}
}

// Each refusal of the task surface is a JSON-RPC error that says what to
// do: an unknown task, an expired one, one made by another process, too
// many tasks for one client, a client without the extension, routing
// headers that disagree with the body, and the methods of the
// 2025-11-25 tasks, which the extension removed.
func TestTaskErrors(t *testing.T) {
	s, open := gatedServer(t, mcpserver.Options{Tasks: mcpserver.TaskOptions{MaxPerClient: 1, TTL: time.Nanosecond}})
	url, _ := serveHTTP(t, s, "secret")
	other, _ := gatedServer(t, mcpserver.Options{})
	otherURL, _ := serveHTTP(t, other, "secret")
	c := newTaskClient(t, url)

	_, m := c.send("tasks/get", "nope", `"taskId":"nope"`, metaTasks)
	rpcError(t, "unknown task", m, -32602, `unknown task "nope"`)

	id := c.start("gate\n1")
	args := `"name":"run_ruby","arguments":{"code":"2"}`
	_, m = c.send("tools/call", "run_ruby", args, metaTasks)
	rpcError(t, "a second task", m, -32000, "too many tasks: this client has 1 tasks running")

	oc := newTaskClient(t, otherURL)
	_, m = oc.send("tasks/get", id, `"taskId":"`+id+`"`, metaTasks)
	rpcError(t, "another process's task", m, -32602, "send tasks/get, tasks/update and tasks/cancel to the process that made it")

	_, m = c.send("tasks/get", id, `"taskId":"`+id+`"`, meta2026)
	rpcError(t, "no extension", m, -32021, "io.modelcontextprotocol/tasks")
	code, m := c.send("tasks/get", "other", `"taskId":"`+id+`"`, metaTasks)
	if code != 400 {
		t.Fatalf("Mcp-Name mismatch: HTTP %d", code)
	}
	rpcError(t, "Mcp-Name mismatch", m, -32020, "Mcp-Name carries the task id")
	code, m = c.send("tasks/result", id, `"taskId":"`+id+`"`, metaTasks)
	if code != 404 {
		t.Fatalf("tasks/result: HTTP %d", code)
	}
	rpcError(t, "tasks/result", m, -32601, "method not found")

	// With a TTL of 1 ns the outcome is gone as soon as the task ends.
	close(open)
	for {
		_, m = c.send("tasks/get", id, `"taskId":"`+id+`"`, metaTasks)
		if r, _ := m["result"].(map[string]any); r == nil || r["status"] != "working" {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	rpcError(t, "expired task", m, -32602, "has expired: its outcome was kept for 1ns")
	_, m = c.send("tasks/cancel", id, `"taskId":"`+id+`"`, metaTasks)
	rpcError(t, "cancel of an expired task", m, -32602, "has expired")
}

// Over stdio at 2026-07-28 a call becomes a task the same way, and
// tasks/get answers on the same stream.
func TestTaskOverStdio(t *testing.T) {
	s, _ := newServer(t, glovebox.Limits{}, mcpserver.Options{})
	c := serveStdio(t, s)
	c.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_ruby","arguments":{"code":"6*7"},` + metaTasks + `}}`)
	m := c.next()
	r, _ := m["result"].(map[string]any)
	id, _ := r["taskId"].(string)
	if r["resultType"] != "task" || id == "" {
		t.Fatalf("tools/call: %v", m)
	}
	for n := 2; ; n++ {
		c.send(`{"jsonrpc":"2.0","id":` + itoa(n) + `,"method":"tasks/get","params":{"taskId":"` + id + `",` + metaTasks + `}}`)
		m = c.next()
		r, _ = m["result"].(map[string]any)
		if r == nil || r["status"] != "working" {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r == nil || r["status"] != "completed" || r["result"].(map[string]any)["structuredContent"].(map[string]any)["value"] != json.Number("42") {
		t.Fatalf("tasks/get: %v", m)
	}
}

// Under MCP 2025-11-25 (its experimental tasks) a session asks for a task
// with params.task, and its tasks are its own: tasks/list lists them,
// another session finds none of them, tasks/result answers the call's
// own result, and tasks/cancel of an ended task is refused (-32602, as
// that revision requires); a tool without task support refuses params.task.
func TestTasks20251125(t *testing.T) {
	s, _ := newServer(t, glovebox.Limits{}, mcpserver.Options{})
	a, b := serveStdio(t, s), serveStdio(t, s)
	a.initialize()
	b.initialize()
	a.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run_ruby","arguments":{"code":"6*7"},"task":{"ttl":60000}}}`)
	m := a.next()
	task, _ := m["result"].(map[string]any)["task"].(map[string]any)
	id, _ := task["taskId"].(string)
	if id == "" || task["status"] != "working" || task["pollInterval"] == nil {
		t.Fatalf("CreateTaskResult: %v", m)
	}
	a.send(`{"jsonrpc":"2.0","id":3,"method":"tasks/result","params":{"taskId":"` + id + `"}}`)
	m = a.next()
	res, _ := m["result"].(map[string]any)
	if res == nil || res["structuredContent"].(map[string]any)["value"] != json.Number("42") ||
		res["_meta"].(map[string]any)["io.modelcontextprotocol/related-task"].(map[string]any)["taskId"] != id {
		t.Fatalf("tasks/result: %v", m)
	}
	a.send(`{"jsonrpc":"2.0","id":4,"method":"tasks/list"}`)
	if m = a.next(); !strings.Contains(mustJSON(m), `"taskId":"`+id+`"`) || !strings.Contains(mustJSON(m), `"status":"completed"`) {
		t.Fatalf("tasks/list: %v", m)
	}
	a.send(`{"jsonrpc":"2.0","id":5,"method":"tasks/cancel","params":{"taskId":"` + id + `"}}`)
	rpcError(t, "cancel of an ended task", a.next(), -32602, "has already ended (completed); there is nothing to cancel")
	b.send(`{"jsonrpc":"2.0","id":2,"method":"tasks/get","params":{"taskId":"` + id + `"}}`)
	rpcError(t, "another session's task", b.next(), -32602, "belongs to another MCP session")
	b.send(`{"jsonrpc":"2.0","id":3,"method":"tasks/list"}`)
	if m = b.next(); mustJSON(m["result"]) != `{"tasks":[]}` {
		t.Fatalf("tasks/list of another session: %v", m)
	}
	b.send(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"ruby_session_reset","arguments":{},"task":{}}}`)
	rpcError(t, "a task of a tool without task support", b.next(), -32602, "does not run as a task")
}

// A process keeps at most MaxKept tasks: a new task drops the oldest
// ended one, whose id then says it expired early, and when every kept
// task is running, one more is refused (-32000).
func TestTasksBounded(t *testing.T) {
	s, open := gatedServer(t, mcpserver.Options{Tasks: mcpserver.TaskOptions{MaxKept: 1}})
	url, _ := serveHTTP(t, s, "secret")
	c := newTaskClient(t, url)
	first := c.start("1")
	c.wait(first)
	second := c.start("gate\n2")
	_, m := c.send("tasks/get", first, `"taskId":"`+first+`"`, metaTasks)
	rpcError(t, "a task dropped for room", m, -32602, "has expired early: this server process keeps at most 1 tasks")
	_, m = c.send("tools/call", "run_ruby", `"name":"run_ruby","arguments":{"code":"3"}`, metaTasks)
	rpcError(t, "one task more than MaxKept, all running", m, -32000, "this server process holds 1 tasks running, its limit")
	close(open)
	if r := c.wait(second); r["status"] != "completed" {
		t.Fatalf("second task: %v", r)
	}
}

// metaTasksAsk is metaTasks with elicitation declared too.
const metaTasksAsk = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"tasker","version":"1"},"io.modelcontextprotocol/clientCapabilities":{"elicitation":{},"extensions":{"io.modelcontextprotocol/tasks":{}}}}`

// A task whose program asks the client waits in input_required with the
// questions in tasks/get's inputRequests; tasks/update answers them,
// one at a time if the client likes (an answer to nothing asked is
// ignored), and the program goes on: to an approval, another round, and
// its result.
func TestTaskAsksTheClient(t *testing.T) {
	s, _ := newServer(t, glovebox.Limits{}, mcpserver.Options{})
	url, _ := serveHTTP(t, s, "secret")
	c := newTaskClient(t, url)
	q := func(k string) string {
		return `"` + k + `" => {"method" => "elicitation/create", "params" => {"message" => "` + k + `?", "requestedSchema" => {"type" => "object", "properties" => {"v" => {"type" => "string"}}}}}`
	}
	code := `a = mcp_ask({` + q("a") + `, ` + q("b") + `}); [a["a"]["content"]["v"], a["b"]["content"]["v"], transfer(5)]`
	args, _ := json.Marshal(map[string]string{"code": code})
	_, m := c.send("tools/call", "run_ruby", `"name":"run_ruby","arguments":`+string(args), metaTasksAsk)
	id, _ := c.result("tools/call as a task", m)["taskId"].(string)
	waitInput := func(keys ...string) map[string]any {
		t.Helper()
		for {
			r := c.get(id)
			if r["status"] == "working" {
				time.Sleep(20 * time.Millisecond)
				continue
			}
			asks, _ := r["inputRequests"].(map[string]any)
			if r["status"] != "input_required" || len(asks) != len(keys) {
				t.Fatalf("want input_required asking %v, got %v", keys, r)
			}
			for _, k := range keys {
				if a, _ := asks[k].(map[string]any); a == nil || a["method"] != "elicitation/create" {
					t.Fatalf("inputRequests lack %q: %v", k, asks)
				}
			}
			return r
		}
	}
	update := func(responses string) {
		t.Helper()
		_, m := c.send("tasks/update", id, `"taskId":"`+id+`","inputResponses":{`+responses+`}`, metaTasksAsk)
		if r := c.result("tasks/update", m); r["resultType"] != "complete" || r["status"] != nil {
			t.Fatalf("tasks/update ack: %v", r)
		}
	}
	waitInput("a", "b")
	update(`"a":{"action":"accept","content":{"v":"x"}},"nobody-asked":{"action":"decline"}`)
	waitInput("b")
	update(`"b":{"action":"accept","content":{"v":"y"}}`)
	waitInput("approval")
	before := transfers.Load()
	update(`"approval":{"action":"accept","content":{"approve":true}}`)
	r := c.wait(id)
	res, _ := r["result"].(map[string]any)
	if r["status"] != "completed" || res == nil || transfers.Load() != before+1 {
		t.Fatalf("ended task: %v", r)
	}
	if v, _ := json.Marshal(res["structuredContent"].(map[string]any)["value"]); string(v) != `["x","y",5]` {
		t.Fatalf("the program got %s", v)
	}
	// A malformed answer to a pending question is refused; cancelling a
	// task waiting for input stops it.
	_, m = c.send("tools/call", "run_ruby", `"name":"run_ruby","arguments":{"code":"mcp_ask({`+strings.ReplaceAll(q("a"), `"`, `\"`)+`})"}`, metaTasksAsk)
	id, _ = c.result("tools/call as a task", m)["taskId"].(string)
	waitInput("a")
	_, m = c.send("tasks/update", id, `"taskId":"`+id+`","inputResponses":{"a":{"nonsense":1}}`, metaTasksAsk)
	rpcError(t, "a malformed answer", m, -32602, "invalid params")
	c.send("tasks/cancel", id, `"taskId":"`+id+`"`, metaTasksAsk)
	if r := c.get(id); r["status"] != "cancelled" || r["inputRequests"] != nil {
		t.Fatalf("cancelled while waiting: %v", r)
	}
}

// A program whose side file says "task": "after_input" asks in the
// foreground (an input_required result, no task) and becomes a task on
// the retry that answers; a client without the extension gets it all in
// the foreground.
func TestTaskAfterInput(t *testing.T) {
	dir := t.TempDir()
	writeProgram(t, dir, "hello", `"Hello, #{mcp_ask({"n" => {"method" => "elicitation/create", "params" => {"message" => "Name?", "requestedSchema" => {"type" => "object", "properties" => {"name" => {"type" => "string"}}}}}})["n"]["content"]["name"]}!"`,
		`{"description": "Greets whoever answers", "task": "after_input"}`)
	s, _ := newServer(t, glovebox.Limits{}, mcpserver.Options{Programs: dir})
	url, _ := serveHTTP(t, s, "secret")
	c := newTaskClient(t, url)
	for _, meta := range []string{metaTasksAsk, strings.Replace(metaTasksAsk, `,"extensions":{"io.modelcontextprotocol/tasks":{}}`, "", 1)} {
		_, m := c.send("tools/call", "hello", `"name":"hello","arguments":{}`, meta)
		r := c.result("the first call", m)
		st, _ := r["requestState"].(string)
		if r["resultType"] != "input_required" || r["taskId"] != nil || st == "" {
			t.Fatalf("the first call: %v", r)
		}
		_, m = c.send("tools/call", "hello", `"name":"hello","arguments":{},"inputResponses":{"n":{"action":"accept","content":{"name":"Ada"}}},"requestState":"`+st+`"`, meta)
		r = c.result("the retry", m)
		if meta != metaTasksAsk {
			if r["resultType"] != "complete" || !strings.Contains(fmt.Sprint(r["content"]), "Hello, Ada!") {
				t.Fatalf("the retry without the extension: %v", r)
			}
			continue
		}
		id, _ := r["taskId"].(string)
		if r["resultType"] != "task" || id == "" || r["requestState"] != nil {
			t.Fatalf("the retry: %v", r)
		}
		if r := c.wait(id); r["status"] != "completed" || !strings.Contains(fmt.Sprint(r["result"]), "Hello, Ada!") {
			t.Fatalf("the task: %v", r)
		}
	}
}
