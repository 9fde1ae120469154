package mcpserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/mcpserver"
)

// serveUsers serves s behind the go-sdk's bearer-token middleware, as an
// embedder with per-user auth does: the token "NAME-token" is user NAME.
func serveUsers(t *testing.T, s *mcpserver.Server) string {
	t.Helper()
	ts := httptest.NewUnstartedServer(nil)
	h, err := s.HTTPHandler(mcpserver.HTTPOptions{Addr: ts.Listener.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	verify := func(_ context.Context, tok string, _ *http.Request) (*auth.TokenInfo, error) {
		user, ok := strings.CutSuffix(tok, "-token")
		if !ok {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{UserID: user, Expiration: time.Now().Add(time.Hour)}, nil
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", auth.RequireBearerToken(verify, nil)(h))
	ts.Config.Handler = mux
	ts.Start()
	t.Cleanup(ts.Close)
	return ts.URL + "/mcp"
}

// userCall is rawCall as user.
func userCall(t *testing.T, url, user, tool, params string) (res, rpcErr map[string]any) {
	t.Helper()
	hdr := map[string]string{"Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": tool, "Authorization": "Bearer " + user + "-token"}
	_, _, msgs := raw(t, url, "", hdr, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"`+tool+`",`+params+`,`+strings.Replace(meta2026, `clientCapabilities":{}`, `clientCapabilities":{"elicitation":{}}`, 1)+`}}`)
	if len(msgs) != 1 {
		t.Fatalf("tools/call %s as %s: %v", tool, user, msgs)
	}
	res, _ = msgs[0]["result"].(map[string]any)
	rpcErr, _ = msgs[0]["error"].(map[string]any)
	return res, rpcErr
}

// Behind per-user auth a task belongs to the user who started it:
// another user's tasks/get, tasks/update and tasks/cancel hear what an
// unknown id hears, and the per-client bound counts per user whatever
// clientInfo name the requests give.
func TestTasksBoundToUser(t *testing.T) {
	s, open := gatedServer(t, mcpserver.Options{Tasks: mcpserver.TaskOptions{MaxPerClient: 2}})
	url := serveUsers(t, s)
	alice, bob := newTaskClient(t, url), newTaskClient(t, url)
	alice.token, bob.token = "alice-token", "bob-token"
	id := alice.start("gate\n1")
	unknown := strings.Replace(id, id[len(id)-4:], "zzzz", 1)
	_, want := bob.send("tasks/get", unknown, `"taskId":"`+unknown+`"`, metaTasks)
	wantMsg := strings.ReplaceAll(want["error"].(map[string]any)["message"].(string), unknown, id)
	for _, m := range []string{"tasks/get", "tasks/update", "tasks/cancel"} {
		_, got := bob.send(m, id, `"taskId":"`+id+`"`, metaTasks)
		rpcError(t, "bob's "+m+" of alice's task", got, -32602, wantMsg)
	}
	if r := alice.get(id); r["status"] != "working" {
		t.Fatalf("alice's task after bob's cancel: %v", r)
	}
	// A second task under another clientInfo name still counts for alice.
	named := func(n string) string { return strings.Replace(metaTasks, `"tasker"`, `"`+n+`"`, 1) }
	if _, m := alice.send("tools/call", "run_ruby", `"name":"run_ruby","arguments":{"code":"gate\n2"}`, named("other")); m["result"] == nil {
		t.Fatalf("alice's second task: %v", m)
	}
	_, m := alice.send("tools/call", "run_ruby", `"name":"run_ruby","arguments":{"code":"gate\n3"}`, named("third"))
	rpcError(t, "alice's third task under a new name", m, -32000, "too many tasks")
	bob.start("gate\n4") // bob has his own bound
	close(open)
	if r := alice.wait(id); r["status"] != "completed" {
		t.Fatalf("alice's task: %v", r)
	}
}

// Behind per-user auth a requestState and a session handle are sealed
// with the user they were given to: another user's retry is refused with
// -32602 and runs nothing, and the state stays usable by its user.
func TestStatesBoundToUser(t *testing.T) {
	s, _ := newServer(t, glovebox.Limits{}, mcpserver.Options{})
	url := serveUsers(t, s)
	res, _ := userCall(t, url, "alice", mcpserver.ToolRun, `"arguments":{"code":"transfer(7) + 1"}`)
	state, _ := res["requestState"].(string)
	if res["resultType"] != "input_required" || state == "" {
		t.Fatalf("first call: %v", res)
	}
	sj, _ := json.Marshal(state)
	retry := `"arguments":{"code":"transfer(7) + 1"},"requestState":` + string(sj) + `,"inputResponses":{"approval":{"action":"accept","content":{"approve":true}}}`
	before := transfers.Load()
	if _, e := userCall(t, url, "bob", mcpserver.ToolRun, retry); e == nil || e["code"] != json.Number("-32602") || !strings.Contains(e["message"].(string), "another user") || transfers.Load() != before {
		t.Fatalf("bob's retry of alice's state: %v", e)
	}
	if done, _ := userCall(t, url, "alice", mcpserver.ToolRun, retry); !strings.Contains(mustJSON(done), `"value":8`) || transfers.Load() != before+1 {
		t.Fatalf("alice's retry: %v", done)
	}
	// Bob's replay of the continued state does not get its outcome either.
	if _, e := userCall(t, url, "bob", mcpserver.ToolRun, retry); e == nil || !strings.Contains(e["message"].(string), "another user") {
		t.Fatalf("bob's replay: %v", e)
	}

	res, _ = userCall(t, url, "alice", mcpserver.ToolSession, `"arguments":{"code":"secret = 41"}`)
	sc, _ := res["structuredContent"].(map[string]any)
	h, _ := sc["session"].(string)
	if h == "" {
		t.Fatalf("ruby_session: %v", res)
	}
	hj, _ := json.Marshal(h)
	if _, e := userCall(t, url, "bob", mcpserver.ToolSession, `"arguments":{"code":"secret","session":`+string(hj)+`}`); e == nil || e["code"] != json.Number("-32602") || !strings.Contains(e["message"].(string), "another user") {
		t.Fatalf("bob's use of alice's handle: %v", e)
	}
	if r, _ := userCall(t, url, "alice", mcpserver.ToolSession, `"arguments":{"code":"secret + 1","session":`+string(hj)+`}`); !strings.Contains(mustJSON(r), `"value":42`) {
		t.Fatalf("alice's handle after bob's try: %v", r)
	}
}

// Under 2025-11-25 the server answers a session's tasks/* itself, before
// the SDK checks the session's user: a task stays its user's there too,
// even to a request that names the session.
func TestLegacyTasksBoundToUser(t *testing.T) {
	s, _ := newServer(t, glovebox.Limits{}, mcpserver.Options{})
	url := serveUsers(t, s)
	as := func(user string) map[string]string {
		return map[string]string{"Authorization": "Bearer " + user + "-token", "Mcp-Protocol-Version": "2025-11-25"}
	}
	_, sid, _ := raw(t, url, "", as("alice"), `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"a","version":"1"}}}`)
	if sid == "" {
		t.Fatal("no session")
	}
	raw(t, url, sid, as("alice"), `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	_, _, msgs := raw(t, url, sid, as("alice"), `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run_ruby","arguments":{"code":"6*7"},"task":{"ttl":60000}}}`)
	var id string
	if len(msgs) == 1 {
		task, _ := msgs[0]["result"].(map[string]any)["task"].(map[string]any)
		id, _ = task["taskId"].(string)
	}
	if id == "" {
		t.Fatalf("CreateTaskResult: %v", msgs)
	}
	get := `{"jsonrpc":"2.0","id":3,"method":"tasks/get","params":{"taskId":"` + id + `"}}`
	if _, _, msgs = raw(t, url, sid, as("bob"), get); len(msgs) != 1 || msgs[0]["error"] == nil {
		t.Fatalf("bob's tasks/get in alice's session: %v", msgs)
	}
	if _, _, msgs = raw(t, url, sid, as("bob"), `{"jsonrpc":"2.0","id":4,"method":"tasks/list"}`); len(msgs) == 1 && strings.Contains(mustJSON(msgs[0]), id) {
		t.Fatalf("bob's tasks/list in alice's session: %v", msgs)
	}
	if _, _, msgs = raw(t, url, sid, as("alice"), get); len(msgs) != 1 || msgs[0]["result"] == nil {
		t.Fatalf("alice's tasks/get: %v", msgs)
	}
}
