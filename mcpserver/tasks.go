package mcpserver

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TasksExtension is the identifier of MCP's tasks extension (SEP-2663),
// which the server offers from MCP 2026-07-28 on: a client that names it
// in the extensions of a request's client capabilities may get a task
// for a run_ruby call (or a named program whose side file says "task":
// true) instead of its result, and fetches the result with tasks/get.
const TasksExtension = "io.modelcontextprotocol/tasks"

// Defaults for zero [TaskOptions] fields.
const (
	// DefaultTaskTTL is how long a task's outcome is kept once the
	// program has ended (1 hour: a client that lost its connection has
	// time to come back; a result is at most the Runtime's output limits).
	// A task's ttlMs, counted from its creation as the extension has it,
	// is the time it ran plus this.
	DefaultTaskTTL = time.Hour
	// DefaultTaskPollInterval is the pollIntervalMs a task suggests
	// (500 ms: an eval that takes seconds is seen ending within half a
	// second, at two small requests a second).
	DefaultTaskPollInterval = 500 * time.Millisecond
	// DefaultMaxTasksPerClient bounds the tasks one client has running at
	// once (8: four times what two cores run at once; the rest wait for a
	// sandbox in Options.MaxConcurrent's queue).
	DefaultMaxTasksPerClient = 8
	// DefaultMaxTasks bounds the tasks one server process keeps, running
	// or ended (256).
	DefaultMaxTasks = 256
	// DefaultMaxTaskBytes bounds the bytes of the outcomes kept (64 MiB:
	// 256 results of the default 256 KiB output limit).
	DefaultMaxTaskBytes = 64 << 20
	// maxTombstones bounds the ids of tasks dropped that are remembered,
	// so that a late tasks/get hears "expired", not "unknown".
	maxTombstones = 4096
)

// TaskOptions configure the tasks of a [Server] (see [TasksExtension]).
// The zero value means every default.
type TaskOptions struct {
	// TTL is how long an ended task's outcome is kept; then tasks/get
	// answers -32602 "expired". Zero means DefaultTaskTTL.
	TTL time.Duration
	// PollInterval is the pollIntervalMs suggested to clients. Zero means
	// DefaultTaskPollInterval.
	PollInterval time.Duration
	// MaxPerClient bounds the tasks one client has running at once; one
	// more tools/call gets error [CodeServerBusy] naming the limit. A
	// client is the authenticated user when the request has one (the
	// UserID of the go-sdk auth.TokenInfo that auth middleware such as
	// auth.RequireBearerToken puts on the HTTP request), else the
	// connection over stdio and the clientInfo name of the request's
	// _meta over HTTP, which the client chooses: without per-user auth
	// the bound is one a cooperating client keeps. Zero means
	// DefaultMaxTasksPerClient.
	MaxPerClient int
	// MaxKept bounds the tasks the process keeps, running or ended; the
	// oldest ended ones are dropped first (tasks/get then says so), and
	// a tools/call that finds MaxKept tasks all running gets
	// [CodeServerBusy]. Zero means DefaultMaxTasks.
	MaxKept int
	// MaxBytes bounds the bytes of the outcomes kept, dropping the oldest
	// ended tasks first. Zero means DefaultMaxTaskBytes.
	MaxBytes int64
}

// Task statuses (SEP-2663).
const (
	taskWorking   = "working"
	taskInput     = "input_required"
	taskCompleted = "completed"
	taskFailed    = "failed"
	taskCancelled = "cancelled"
)

// task is one task: a tool call running, or its outcome.
type task struct {
	id, client    string
	user          string // the authenticated user who started it, "" without one
	status        string
	message       string
	created, last time.Time
	ended         time.Time       // zero while running
	outcome       json.RawMessage // the CallToolResult (completed) or the JSON-RPC error (failed)
	cancel        context.CancelFunc
	running       bool          // its goroutine has not returned
	done          chan struct{} // closed when the task ends

	// While the status is input_required: the program's questions not yet
	// answered (tasks/get shows them), the answers tasks/update gave, and
	// the channel closed when every question has its answer. The
	// tasks/update that gives the last answer moves the task to working
	// itself, under the store's lock, and leaves the answers in given
	// for the program's goroutine: a tasks/get in between never sees
	// input_required with no question left.
	pending mcp.InputRequestMap
	answers map[string]json.RawMessage
	wake    chan struct{}
	given   map[string]json.RawMessage
}

// live reports whether t has not ended: working, or waiting for input.
func (t *task) live() bool { return t.status == taskWorking || t.status == taskInput }

// taskStore holds a process's tasks. Task ids begin with the process's
// instance, so that a request reaching another process is told where
// its task lives (see RATIONALE.md, "Why is a task owned by the process
// that runs it?").
type taskStore struct {
	opts     TaskOptions
	instance string
	mu       sync.Mutex
	tasks    map[string]*task
	order    []string             // task ids, oldest first
	gone     map[string]tombstone // dropped task id → why
	goneIDs  []string             // gone's keys, oldest first
	bytes    int64
	now      func() time.Time
}

func newTaskStore(o TaskOptions) (*taskStore, error) {
	for name, v := range map[string]int64{"TTL (--task-ttl)": int64(o.TTL), "PollInterval": int64(o.PollInterval),
		"MaxPerClient (--max-client-tasks)": int64(o.MaxPerClient), "MaxKept (--max-tasks)": int64(o.MaxKept), "MaxBytes": o.MaxBytes} {
		if v < 0 {
			return nil, fmt.Errorf("mcpserver: TaskOptions.%s is negative; zero means the default", name)
		}
	}
	o.TTL = cmp.Or(o.TTL, DefaultTaskTTL)
	o.PollInterval = cmp.Or(o.PollInterval, DefaultTaskPollInterval)
	o.MaxPerClient = cmp.Or(o.MaxPerClient, DefaultMaxTasksPerClient)
	o.MaxKept = cmp.Or(o.MaxKept, DefaultMaxTasks)
	o.MaxBytes = cmp.Or(o.MaxBytes, DefaultMaxTaskBytes)
	inst := strings.ToLower(rand.Text()[:8])
	return &taskStore{opts: o, instance: inst, tasks: map[string]*task{}, gone: map[string]tombstone{}, now: time.Now}, nil
}

// tombstone is what is remembered of a dropped task: why, and whose it was.
type tombstone struct{ why, user string }

// taskIDPrefix begins every task id; the process instance follows, then
// a dot and 26 random base-32 characters (130 bits: the id is the only
// thing a client without per-user auth needs to read or cancel a task).
const taskIDPrefix = "gbt-"

// drop forgets t, remembering why; st.mu is held.
func (st *taskStore) drop(id, why string) {
	t := st.tasks[id]
	if t == nil {
		return
	}
	st.bytes -= int64(len(t.outcome))
	delete(st.tasks, id)
	for i, o := range st.order {
		if o == id {
			st.order = append(st.order[:i], st.order[i+1:]...)
			break
		}
	}
	st.gone[id] = tombstone{why, t.user}
	st.goneIDs = append(st.goneIDs, id)
	if len(st.goneIDs) > maxTombstones {
		delete(st.gone, st.goneIDs[0])
		st.goneIDs = st.goneIDs[1:]
	}
}

// sweep drops the ended tasks whose TTL has passed, then the oldest ended
// ones while more than MaxKept tasks or MaxBytes are held; st.mu is held.
func (st *taskStore) sweep() { st.makeRoom(0) }

// makeRoom is sweep leaving room for n more tasks; st.mu is held.
func (st *taskStore) makeRoom(n int) {
	now := st.now()
	for _, id := range append([]string(nil), st.order...) {
		t := st.tasks[id]
		if !t.running && !t.ended.IsZero() && now.Sub(t.ended) >= st.opts.TTL {
			st.drop(id, fmt.Sprintf("task %s has expired: its outcome was kept for %v after it ended (at %s) and is gone", id, st.opts.TTL, t.ended.UTC().Format(time.RFC3339)))
		}
	}
	for _, id := range append([]string(nil), st.order...) {
		if len(st.tasks)+n <= st.opts.MaxKept && st.bytes <= st.opts.MaxBytes {
			break
		}
		if t := st.tasks[id]; !t.ended.IsZero() {
			st.drop(id, fmt.Sprintf("task %s has expired early: this server process keeps at most %d tasks and %d bytes of outcomes, and dropped the oldest ended tasks to make room; fetch results sooner, or raise the limits", id, st.opts.MaxKept, st.opts.MaxBytes))
		}
	}
}

// start records a new running task for client and user (the request's
// authenticated user, "" without one); it fails with a CodeServerBusy
// error when user, or without one client, has MaxPerClient tasks running,
// or the process holds MaxKept tasks all running. A user is counted
// whatever client names it gives: a clientInfo name is the client's own
// choice.
func (st *taskStore) start(client, user string, cancel context.CancelFunc) (*task, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.makeRoom(1)
	running := 0
	for _, t := range st.tasks {
		if t.live() && (user != "" && t.user == user || user == "" && t.user == "" && t.client == client) {
			running++
		}
	}
	if running >= st.opts.MaxPerClient {
		return nil, &jsonrpc.Error{Code: CodeServerBusy, Message: fmt.Sprintf("too many tasks: this client has %d tasks running, the limit per client; wait for one to end (tasks/get) or cancel one (tasks/cancel), then call again", running)}
	}
	if len(st.tasks) >= st.opts.MaxKept { // all running: makeRoom dropped every ended one it could
		return nil, &jsonrpc.Error{Code: CodeServerBusy, Message: fmt.Sprintf("too many tasks: this server process holds %d tasks running, its limit; try again when some have ended", len(st.tasks))}
	}
	now := st.now()
	t := &task{id: taskIDPrefix + st.instance + "." + strings.ToLower(rand.Text()), client: client, user: user, status: taskWorking,
		message: "the program is running", created: now, last: now, cancel: cancel, running: true, done: make(chan struct{})}
	st.tasks[t.id] = t
	st.order = append(st.order, t.id)
	return t, nil
}

// finish records the outcome of t's call; a task cancelled meanwhile
// keeps its status.
func (st *taskStore) finish(t *task, res mcp.Result, err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	t.running = false
	if !t.live() {
		return
	}
	now := st.now()
	t.last, t.ended = now, now
	defer close(t.done)
	if err != nil {
		var we *jsonrpc.Error
		if e, ok := err.(*jsonrpc.Error); ok {
			we = e
		} else {
			we = &jsonrpc.Error{Code: CodeInternalError, Message: err.Error()}
		}
		t.status, t.message = taskFailed, "the call failed: "+we.Message
		t.outcome, _ = json.Marshal(we)
	} else {
		t.status, t.message = taskCompleted, "the program has ended"
		t.outcome, _ = json.Marshal(res)
		if cr, ok := res.(*mcp.CallToolResult); ok && cr.IsError {
			t.message = "the program has ended with an error result"
		}
	}
	st.bytes += int64(len(t.outcome))
	st.sweep()
}

// await parks t in input_required with the program's questions asks and
// returns the client's answers once tasks/update has given one for every
// question; false when the task is stopped first.
func (st *taskStore) await(ctx context.Context, t *task, asks mcp.InputRequestMap) (mcp.InputResponseMap, bool) {
	st.mu.Lock()
	if !t.live() {
		st.mu.Unlock()
		return nil, false
	}
	wake := make(chan struct{})
	t.status, t.message, t.last = taskInput, "the program waits for the client's answers to its inputRequests (tasks/update)", st.now()
	t.pending, t.answers, t.wake = maps.Clone(asks), map[string]json.RawMessage{}, wake
	st.mu.Unlock()
	select {
	case <-wake:
	case <-ctx.Done():
		st.mu.Lock()
		t.given = nil
		st.mu.Unlock()
		return nil, false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	given := t.given
	t.given = nil
	if t.status != taskWorking || given == nil { // stopped meanwhile
		return nil, false
	}
	raw, _ := json.Marshal(given)
	var resp mcp.InputResponseMap
	if err := json.Unmarshal(raw, &resp); err != nil { // checked one by one in answer
		return nil, false
	}
	return resp, true
}

// answer records the input responses of a tasks/update for t: those to
// a question still pending, the others being ignored (an answer to
// nothing asked, or asked and answered already). When every question has
// its answer the program goes on. Errors: -32602 for a response that is
// no MCP input response (an ElicitResult, CreateMessageResult or
// ListRootsResult). st.mu is held.
func (st *taskStore) answer(t *task, resp map[string]json.RawMessage) *jsonrpc.Error {
	if t.status != taskInput {
		return nil // a task not waiting: nothing to answer
	}
	for k, raw := range resp {
		if _, ok := t.pending[k]; !ok {
			continue
		}
		one, _ := json.Marshal(map[string]json.RawMessage{k: raw})
		var m mcp.InputResponseMap
		if err := json.Unmarshal(one, &m); err != nil {
			return &jsonrpc.Error{Code: CodeInvalidParams, Message: fmt.Sprintf("invalid params: %v (an answer is an ElicitResult, CreateMessageResult or ListRootsResult)", err)}
		}
	}
	for k, raw := range resp {
		if _, ok := t.pending[k]; ok {
			t.answers[k] = raw
			delete(t.pending, k)
		}
	}
	t.last = st.now()
	if len(t.pending) == 0 && t.wake != nil {
		// The program goes on: the task is working from this moment, not
		// from when its goroutine wakes.
		t.status, t.message = taskWorking, "the program is running"
		t.given = t.answers
		t.pending, t.answers = nil, nil
		close(t.wake)
		t.wake = nil
	}
	return nil
}

// cancelledByClient is the statusMessage of a task a client cancelled.
const cancelledByClient = "cancelled by the client (tasks/cancel); the program was stopped"

// stopAll cancels every working task (the server is closing).
func (st *taskStore) stopAll() {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, t := range st.tasks {
		st.stop(t, "cancelled: the server closed, stopping the program")
	}
}

// stop cancels t if it is working, why being its statusMessage; st.mu is
// held.
func (st *taskStore) stop(t *task, why string) {
	if t.live() {
		now := st.now()
		t.status, t.message, t.last, t.ended = taskCancelled, why, now, now
		t.pending, t.answers, t.given = nil, nil, nil
		t.cancel()
		close(t.done)
	}
}

// lookup returns the task named id for user (the request's
// authenticated user, "" without one), or the -32602 error saying it is
// unknown, expired, or another process's. Another user's task, live or
// dropped, is unknown, with an unknown id's message: the answer does not
// confirm that the id exists.
func (st *taskStore) lookup(id, user string) (*task, *jsonrpc.Error) {
	st.sweep()
	if t := st.tasks[id]; t != nil && t.user == user {
		return t, nil
	}
	if g, ok := st.gone[id]; ok && g.user == user {
		return nil, &jsonrpc.Error{Code: CodeInvalidParams, Message: g.why}
	}
	if rest, ok := strings.CutPrefix(id, taskIDPrefix); ok {
		if inst, _, ok := strings.Cut(rest, "."); ok && inst != st.instance {
			return nil, &jsonrpc.Error{Code: CodeInvalidParams, Message: fmt.Sprintf("unknown task %q: it was made by glovebox process %s, and this is process %s (or that process has restarted); a task lives in the process that runs it, so send tasks/get, tasks/update and tasks/cancel to the process that made it (a load balancer can route on the Mcp-Name header, which carries the task id)", id, inst, st.instance)}
		}
	}
	return nil, &jsonrpc.Error{Code: CodeInvalidParams, Message: fmt.Sprintf("unknown task %q: no task of this server has that id (task ids come from a tools/call whose result has resultType \"task\")", id)}
}

// wire is t as the extension shows it (a DetailedTask), with resultType
// rt and the server's info in _meta; rt "" is t as MCP 2025-11-25 shows
// it (a Task: ttl and pollInterval, never the outcome).
func (st *taskStore) wire(t *task, rt string, impl *mcp.Implementation) json.RawMessage {
	ttl := st.opts.TTL
	if t.ended.IsZero() {
		ttl += st.now().Sub(t.created)
	} else {
		ttl += t.ended.Sub(t.created)
	}
	m := map[string]any{
		"resultType": rt, "taskId": t.id, "status": t.status, "statusMessage": t.message,
		"createdAt": t.created.UTC().Format(time.RFC3339Nano), "lastUpdatedAt": t.last.UTC().Format(time.RFC3339Nano),
		"ttlMs": ttl.Milliseconds(), "pollIntervalMs": st.opts.PollInterval.Milliseconds(),
		"_meta": map[string]any{mcp.MetaKeyServerInfo: impl},
	}
	if rt == "" {
		m["ttl"], m["pollInterval"] = m["ttlMs"], m["pollIntervalMs"]
		for _, k := range []string{"ttlMs", "pollIntervalMs", "resultType", "_meta"} {
			delete(m, k)
		}
	}
	switch t.status {
	case taskInput:
		if rt == "complete" {
			m["inputRequests"] = t.pending
		}
	case taskCompleted:
		if rt == "complete" {
			m["result"] = t.outcome
		}
	case taskFailed:
		if rt == "complete" {
			m["error"] = t.outcome
		}
	}
	b, _ := json.Marshal(m)
	return b
}

// rawResult is a result the SDK has no type for (a CreateTaskResult), or
// one with members it cannot express, as JSON.
type rawResult struct {
	mcp.ResultBase
	raw json.RawMessage
}

func (r *rawResult) MarshalJSON() ([]byte, error) { return r.raw, nil }

// taskSupport says whether a tool runs as a task for a client that
// declares the extension: "" (never), "optional", "required" (a client
// without the extension is refused) or "after_input" (the first call
// runs in the foreground, its questions answered as input_required
// results; the retry that answers them runs as a task). A side file's
// "task" is true, false, "optional", "required" or "after_input".
type taskSupport string

// taskAfterInput is the taskSupport of a tool that asks before it runs as
// a task (SEP-2663's composition of input_required rounds and tasks).
const taskAfterInput taskSupport = "after_input"

func (t *taskSupport) UnmarshalJSON(b []byte) error {
	switch string(b) {
	case "true", `"optional"`:
		*t = "optional"
	case "false", "null":
		*t = ""
	case `"required"`:
		*t = "required"
	case `"after_input"`:
		*t = taskAfterInput
	default:
		return fmt.Errorf(`"task" is %s; it takes true, false, "optional", "required" or "after_input"`, b)
	}
	return nil
}

// taskTool says how the tool named name runs as a task: run_ruby
// optionally, a named program as its side file says.
func (s *Server) taskTool(name string) taskSupport {
	if name == ToolRun {
		return "optional"
	}
	for _, p := range s.programs {
		if p.name == name && p.Kind == "tool" {
			return p.Task
		}
	}
	return ""
}

// declaresTasks reports whether caps name TasksExtension.
func declaresTasks(caps *mcp.ClientCapabilities) bool {
	if caps == nil {
		return false
	}
	_, ok := caps.Extensions[TasksExtension]
	return ok
}

// taskCalls is receiving middleware: a tools/call of a task tool from a
// client that declared TasksExtension in the request's capabilities, at
// MCP 2026-07-28, runs in the background, and its answer is a
// CreateTaskResult (resultType "task"); so does one with params.task in
// a 2025-11-25 session, answered with that revision's {"task": Task}
// (see tasks2025.go, which also adds the fields the SDK cannot express to
// initialize and tools/list). The call runs as it would have, but does not
// stop when the HTTP request ends. Errors: -32021 for a tool whose task
// support is "required" called by a client without tasks, -32602 for
// params.task on a tool without task support, -32000 past TaskOptions'
// bounds.
func (s *Server) taskCalls(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method == "initialize" || method == "tools/list" {
			return s.legacyTaskFields(ctx, method, req, next)
		}
		cr, ok := req.(*mcp.CallToolRequest)
		if !ok || cr.Params == nil {
			return next(ctx, method, req)
		}
		support := s.taskTool(cr.Params.Name)
		var client string
		_, legacy := cr.Params.Meta[liftedTask]
		delete(cr.Params.Meta, liftedTask)
		if sessionVersion(cr) == legacyTasksVersion {
			// MCP 2025-11-25: the client asks for a task with params.task.
			switch {
			case legacy && support == "":
				// -32602, not the -32601 2025-11-25 suggests: the SDK
				// replaces a -32601's message with its own.
				return nil, &jsonrpc.Error{Code: CodeInvalidParams, Message: fmt.Sprintf("the tool %s does not run as a task (its execution.taskSupport is forbidden); call it without params.task", cr.Params.Name)}
			case !legacy && support == "required":
				return nil, &jsonrpc.Error{Code: CodeInvalidParams, Message: fmt.Sprintf("the tool %s runs only as a task (its execution.taskSupport is required); call it with params.task", cr.Params.Name)}
			case !legacy:
				return next(ctx, method, req)
			}
			client = sessionClient(cr.Session)
		} else {
			legacy = false
			noTasks := sessionVersion(cr) < statelessVersion || !declaresTasks(cr.ClientCapabilities())
			if support == "" || (support == "optional" && noTasks) || (support == taskAfterInput && (noTasks || !isRetry(cr.Params))) {
				return next(ctx, method, req)
			}
			if sessionVersion(cr) < statelessVersion || !declaresTasks(cr.ClientCapabilities()) {
				return nil, needTasks(fmt.Sprintf("the tool %s runs only as a task, under MCP %s with the extension %q named in the request's client capabilities", cr.Params.Name, statelessVersion, TasksExtension))
			}
			client = "http:" + clientName(cr)
			if cr.Extra == nil || cr.Extra.Header == nil {
				client = sessionClient(cr.Session) // over stdio the connection is the client
			}
		}
		tctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		t, err := s.tasks.start(client, requestUser(cr), cancel)
		if err != nil {
			cancel()
			return nil, err
		}
		// The call runs on with the request's session (over stdio it still
		// stops when the client's input ends), but not with its HTTP
		// request, nor its progress token: a task reports through tasks/get.
		params := *cr.Params
		params.Meta = maps.Clone(params.Meta)
		delete(params.Meta, "progressToken")
		bg := &mcp.CallToolRequest{Session: cr.Session, Params: &params, Extra: &mcp.RequestExtra{TokenInfo: extraToken(cr), Header: http.Header{}}}
		if cr.Extra != nil && cr.Extra.Header != nil {
			if a := cr.Extra.Header.Get(ownerHeader); a != "" {
				bg.Extra.Header.Set(ownerHeader, a) // its states count against its client's share
			}
		}
		go func() {
			defer cancel()
			for {
				res, err := next(tctx, method, bg)
				// A program that asks the client (mcp_ask, an approval, a
				// bound server's question) is paused, as its call would be:
				// the task waits in input_required for tasks/update's
				// answers, then the call is continued with them.
				if cr, ok := res.(*mcp.CallToolResult); ok && err == nil && tctx.Err() == nil && len(cr.InputRequests) > 0 && cr.RequestState != "" {
					resp, ok := s.tasks.await(tctx, t, cr.InputRequests)
					if ok {
						p := *bg.Params
						p.InputResponses, p.RequestState = resp, cr.RequestState
						bg = &mcp.CallToolRequest{Session: bg.Session, Params: &p, Extra: bg.Extra}
						continue
					}
				}
				if tctx.Err() != nil && err == nil {
					err = &jsonrpc.Error{Code: CodeInternalError, Message: "the task was stopped"}
				}
				s.tasks.finish(t, res, err)
				return
			}
		}()
		s.tasks.mu.Lock()
		var raw json.RawMessage
		if legacy {
			raw, _ = json.Marshal(map[string]json.RawMessage{"task": s.tasks.wire(t, "", s.impl())})
		} else {
			raw = s.tasks.wire(t, "task", s.impl())
		}
		s.tasks.mu.Unlock()
		return &rawResult{raw: raw}, nil
	}
}

// needTasks is the -32021 error of a request that needs the client to
// declare TasksExtension; why says what needs it.
func needTasks(why string) *jsonrpc.Error {
	data, _ := json.Marshal(map[string]any{"requiredCapabilities": map[string]any{"extensions": map[string]any{TasksExtension: map[string]any{}}}})
	return &jsonrpc.Error{Code: mcp.CodeMissingRequiredClientCapabilities, Data: data, Message: "missing required client capability: " + why}
}

func extraToken(cr *mcp.CallToolRequest) *auth.TokenInfo {
	if cr.Extra == nil {
		return nil
	}
	return cr.Extra.TokenInfo
}

// clientName is the clientInfo name of cr's client, "" when unknown.
func clientName(cr *mcp.CallToolRequest) string {
	if cr.Session != nil {
		if p := cr.Session.InitializeParams(); p != nil && p.ClientInfo != nil {
			return p.ClientInfo.Name
		}
	}
	return ""
}

func (s *Server) impl() *mcp.Implementation {
	return &mcp.Implementation{Name: s.opts.Name, Version: s.opts.Version}
}

// isTaskMethod reports whether method is one of the tasks extension's
// requests the server answers itself (the SDK has none of them).
func isTaskMethod(method string) bool {
	return method == "tasks/get" || method == "tasks/update" || method == "tasks/cancel"
}

// taskRequest answers m, a tasks/get, tasks/update or tasks/cancel at
// MCP 2026-07-28 (m.stateless), with its JSON-RPC response and the HTTP
// status to send it with. header is the HTTP request's header (nil over
// stdio): its Mcp-Method must name m's method and its Mcp-Name the task
// id, else -32020; user is the request's authenticated user ("" without
// one), and another user's task is unknown. Errors: -32021 when the
// request's capabilities do not name TasksExtension; -32602 for a
// missing, unknown or expired task id
// or one of another process, and for a tasks/update whose answer to a
// pending question is malformed.
func (s *Server) taskRequest(m message, header http.Header, user string) ([]byte, int) {
	var p struct {
		TaskID         *string                    `json:"taskId"`
		InputResponses map[string]json.RawMessage `json:"inputResponses"`
		Meta           struct {
			Caps struct {
				Extensions map[string]json.RawMessage `json:"extensions"`
			} `json:"io.modelcontextprotocol/clientCapabilities"`
		} `json:"_meta"`
	}
	fail := func(status int, e *jsonrpc.Error) ([]byte, int) { return rpcReply(m.id, nil, e), status }
	if err := json.Unmarshal(m.params, &p); err != nil {
		return fail(http.StatusOK, &jsonrpc.Error{Code: CodeInvalidParams, Message: fmt.Sprintf("invalid params: %s takes {\"taskId\": string}: %v", m.method, err)})
	}
	if _, ok := p.Meta.Caps.Extensions[TasksExtension]; !ok {
		return fail(http.StatusOK, needTasks(fmt.Sprintf("%s is part of the tasks extension; name %q in the extensions of the request's _meta clientCapabilities", m.method, TasksExtension)))
	}
	if p.TaskID == nil {
		return fail(http.StatusOK, &jsonrpc.Error{Code: CodeInvalidParams, Message: fmt.Sprintf("invalid params: %s needs \"taskId\", the id a tools/call with resultType \"task\" returned", m.method)})
	}
	id := *p.TaskID
	if header != nil {
		if got := header.Get("Mcp-Method"); got != m.method {
			return fail(http.StatusBadRequest, &jsonrpc.Error{Code: mcp.CodeHeaderMismatch, Message: fmt.Sprintf("header mismatch: the Mcp-Method header is %q, and the body's method is %q; they must be equal", got, m.method)})
		}
		if got := header.Get("Mcp-Name"); got != id {
			return fail(http.StatusBadRequest, &jsonrpc.Error{Code: mcp.CodeHeaderMismatch, Message: fmt.Sprintf("header mismatch: the Mcp-Name header is %q, and the task id is %q; under the tasks extension Mcp-Name carries the task id", got, id)})
		}
	}
	st := s.tasks
	st.mu.Lock()
	t, e := st.lookup(id, user)
	var result json.RawMessage
	switch {
	case e != nil:
	case m.method == "tasks/get":
		result = st.wire(t, "complete", s.impl())
	case m.method == "tasks/update":
		e = st.answer(t, p.InputResponses)
	case m.method == "tasks/cancel":
		// Acknowledged whatever the status, as the extension requires: a
		// task that has ended keeps its outcome.
		st.stop(t, cancelledByClient)
	}
	st.mu.Unlock()
	if e != nil {
		return fail(http.StatusOK, e)
	}
	if result == nil { // tasks/update and tasks/cancel: an empty ack
		result, _ = json.Marshal(map[string]any{"resultType": "complete", "_meta": map[string]any{mcp.MetaKeyServerInfo: s.impl()}})
	}
	return rpcReply(m.id, result, nil), http.StatusOK
}
