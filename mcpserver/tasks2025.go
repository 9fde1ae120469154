package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// legacyTasksVersion is the protocol revision whose core had tasks, as
// an experimental feature: the client asks for one with params.task on a
// tools/call, and polls with tasks/get, tasks/result, tasks/list and
// tasks/cancel, all within its session. The tasks extension replaced them
// at statelessVersion.
const legacyTasksVersion = "2025-11-25"

// liftedTask is the params._meta key a tools/call's params.task is moved
// to before the SDK decodes the call (its CallToolParams has no field for
// it, and would drop it).
const liftedTask = "glovebox/task"

// legacyTaskMethods are the task requests of legacyTasksVersion.
var legacyTaskMethods = []string{"tasks/get", "tasks/result", "tasks/list", "tasks/cancel"}

// sessionClient names the client of session ss for the task store: its
// HTTP session ID, or the connection over stdio.
func sessionClient(ss *mcp.ServerSession) string {
	if ss != nil && ss.ID() != "" {
		return "session:" + ss.ID()
	}
	return fmt.Sprintf("stdio:%p", ss)
}

// legacyTaskFields adds to the answers of a legacyTasksVersion session
// what the SDK cannot express: the tasks capability in initialize's, and
// each task tool's execution.taskSupport in tools/list's.
func (s *Server) legacyTaskFields(ctx context.Context, method string, req mcp.Request, next mcp.MethodHandler) (mcp.Result, error) {
	res, err := next(ctx, method, req)
	if err != nil {
		return res, err
	}
	var obj map[string]json.RawMessage
	switch r := res.(type) {
	case *mcp.InitializeResult:
		if r.ProtocolVersion != legacyTasksVersion {
			return res, nil
		}
		b, _ := json.Marshal(r)
		var caps map[string]json.RawMessage
		if json.Unmarshal(b, &obj) != nil || json.Unmarshal(obj["capabilities"], &caps) != nil || caps == nil {
			return res, nil
		}
		caps["tasks"] = json.RawMessage(`{"list":{},"cancel":{},"requests":{"tools":{"call":{}}}}`)
		obj["capabilities"], _ = json.Marshal(caps)
	case *mcp.ListToolsResult:
		if sessionVersion(&mcp.CallToolRequest{Session: req.GetSession().(*mcp.ServerSession)}) != legacyTasksVersion {
			return res, nil
		}
		var tools []map[string]any
		b, _ := json.Marshal(r)
		if json.Unmarshal(b, &obj) != nil || json.Unmarshal(obj["tools"], &tools) != nil {
			return res, nil
		}
		for _, t := range tools {
			if name, _ := t["name"].(string); s.taskTool(name) != "" {
				support := s.taskTool(name)
				if support == taskAfterInput {
					support = "optional" // 2025-11-25 has no asking before the task
				}
				t["execution"] = map[string]string{"taskSupport": string(support)}
			}
		}
		obj["tools"], _ = json.Marshal(tools)
	default:
		return res, nil
	}
	raw, _ := json.Marshal(obj)
	return &rawResult{raw: raw}, nil
}

// taskMessage answers msgs, a payload of one client request, when it is a
// task request the server answers itself (the SDK has none): at
// statelessVersion (session "") a request of the tasks extension, under
// version legacyTasksVersion one of legacyTaskMethods, kept to session's
// tasks. It returns the JSON-RPC response and its HTTP status, or ok
// false to pass msgs on. header is the HTTP request's (nil over stdio).
// A tasks/result waits, until its task ends or ctx does.
func (s *Server) taskMessage(ctx context.Context, msgs []message, version string, header http.Header, session string) (reply []byte, status int, ok bool) {
	if !taskRouted(msgs, version, session) {
		return nil, 0, false
	}
	m := msgs[0]
	switch {
	case m.stateless && isTaskMethod(m.method):
		reply, status = s.taskRequest(m, header, contextUser(ctx))
		return reply, status, true
	case m.stateless && slices.Contains(legacyTaskMethods, m.method):
		return rpcReply(m.id, nil, &jsonrpc.Error{Code: CodeMethodNotFound, Message: fmt.Sprintf("method not found: %s was part of MCP %s's experimental tasks, which the tasks extension removed; under %s a task's outcome is in its tasks/get answer", m.method, legacyTasksVersion, statelessVersion)}), http.StatusNotFound, true
	}
	res, e := s.legacyTaskRequest(ctx, m, session)
	return rpcReply(m.id, res, e), http.StatusOK, true
}

// taskRouted reports whether [Server.taskMessage] answers msgs.
func taskRouted(msgs []message, version, session string) bool {
	if len(msgs) != 1 {
		return false
	}
	m := msgs[0]
	if m.stateless {
		return isTaskMethod(m.method) || slices.Contains(legacyTaskMethods, m.method)
	}
	return session != "" && version == legacyTasksVersion && slices.Contains(legacyTaskMethods, m.method)
}

// rpcReply is a JSON-RPC response with result res, or error e when set.
func rpcReply(id, res json.RawMessage, e *jsonrpc.Error) []byte {
	var b []byte
	if e != nil {
		b, _ = json.Marshal(struct {
			JSONRPC string          `json:"jsonrpc"`
			ID      json.RawMessage `json:"id"`
			Error   *jsonrpc.Error  `json:"error"`
		}{"2.0", id, e})
		return b
	}
	var buf bytes.Buffer
	buf.WriteString(`{"jsonrpc":"2.0","id":`)
	buf.Write(id)
	buf.WriteString(`,"result":`)
	buf.Write(res)
	buf.WriteString("}")
	return buf.Bytes()
}

// liftTask returns body with the params.task of a tools/call under
// legacyTasksVersion moved to params._meta[liftedTask], where the SDK
// keeps it; other bodies are returned as they are.
func liftTask(body []byte, msgs []message, version string) []byte {
	if version != legacyTasksVersion || len(msgs) != 1 || msgs[0].method != "tools/call" || msgs[0].stateless {
		return body
	}
	var msg, params, meta map[string]json.RawMessage
	if json.Unmarshal(body, &msg) != nil || json.Unmarshal(msg["params"], &params) != nil || params["task"] == nil {
		return body
	}
	if len(params["_meta"]) > 0 && json.Unmarshal(params["_meta"], &meta) != nil {
		return body
	}
	if meta == nil {
		meta = map[string]json.RawMessage{}
	}
	meta[liftedTask] = params["task"]
	delete(params, "task")
	params["_meta"], _ = json.Marshal(meta)
	msg["params"], _ = json.Marshal(params)
	out, err := json.Marshal(msg)
	if err != nil {
		return body
	}
	return out
}

// legacyTaskRequest answers m, one of legacyTaskMethods, for the client
// session: tasks/get the task, tasks/list all of session's, tasks/cancel
// the cancelled task (-32602 for one that has ended, as 2025-11-25
// requires), tasks/result the call's own result or error once the task
// has ended. A task of another session is unknown (-32602).
func (s *Server) legacyTaskRequest(ctx context.Context, m message, session string) (json.RawMessage, *jsonrpc.Error) {
	var p struct {
		TaskID string `json:"taskId"`
	}
	if len(m.params) > 0 {
		if err := json.Unmarshal(m.params, &p); err != nil {
			return nil, &jsonrpc.Error{Code: CodeInvalidParams, Message: fmt.Sprintf("invalid params: %s takes {\"taskId\": string}: %v", m.method, err)}
		}
	}
	st := s.tasks
	st.mu.Lock()
	defer st.mu.Unlock()
	if m.method == "tasks/list" {
		st.sweep()
		list := []json.RawMessage{}
		for _, id := range st.order {
			if t := st.tasks[id]; t.client == session && t.user == contextUser(ctx) {
				list = append(list, st.wire(t, "", s.impl()))
			}
		}
		b, _ := json.Marshal(map[string]any{"tasks": list})
		return b, nil
	}
	t, e := st.lookup(p.TaskID, contextUser(ctx))
	if e == nil && t.client != session {
		t, e = nil, &jsonrpc.Error{Code: CodeInvalidParams, Message: fmt.Sprintf("unknown task %q: it belongs to another MCP session; tasks/get, tasks/result and tasks/cancel reach the tasks of the session that made them", p.TaskID)}
	}
	if e != nil {
		return nil, e
	}
	switch m.method {
	case "tasks/cancel":
		if t.status != taskWorking {
			return nil, &jsonrpc.Error{Code: CodeInvalidParams, Message: fmt.Sprintf("task %s has already ended (%s); there is nothing to cancel, and its outcome stays available to tasks/result", t.id, t.status)}
		}
		st.stop(t, cancelledByClient)
	case "tasks/result":
		st.mu.Unlock()
		select {
		case <-t.done:
		case <-ctx.Done():
		}
		st.mu.Lock()
		switch {
		case ctx.Err() != nil:
			return nil, &jsonrpc.Error{Code: CodeInternalError, Message: "the request ended before the task did; ask again with tasks/result"}
		case t.status == taskCompleted:
			var res map[string]json.RawMessage
			_ = json.Unmarshal(t.outcome, &res)
			var meta map[string]any
			_ = json.Unmarshal(res["_meta"], &meta)
			if meta == nil {
				meta = map[string]any{}
			}
			meta["io.modelcontextprotocol/related-task"] = map[string]string{"taskId": t.id}
			res["_meta"], _ = json.Marshal(meta)
			b, _ := json.Marshal(res)
			return b, nil
		case t.status == taskFailed:
			var we jsonrpc.Error
			_ = json.Unmarshal(t.outcome, &we)
			return nil, &we
		default:
			return nil, &jsonrpc.Error{Code: CodeInternalError, Message: fmt.Sprintf("task %s was cancelled (tasks/cancel) before it ended; it has no result", t.id)}
		}
	}
	return st.wire(t, "", s.impl()), nil
}
