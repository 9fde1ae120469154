// Package mcpserver serves a glovebox sandbox as a Model Context Protocol
// server, so any MCP client (a desktop assistant, a coding agent, an IDE)
// can run Ruby in it. It is built on the official Go SDK
// (github.com/modelcontextprotocol/go-sdk) and is what `glovebox mcp` runs.
//
// # Tools
//
//   - run_ruby runs a program in a fresh VM: nothing survives the call. Its
//     description is the one [codemode] generates (limits, mounts, network,
//     functions with their schemas, result format).
//   - ruby_session runs a program in the VM of the calling MCP session, so
//     variables, methods and required libraries persist between its calls;
//     ruby_session_reset discards that VM. A session's VM is made at its
//     first call and freed when the MCP session ends; idle for
//     [Options].SessionIdle, it is suspended into sealed bytes and resumed
//     at the next call; two MCP sessions never share one. Under MCP
//     2026-07-28 over HTTP the session travels as a handle instead (see
//     "Protocol revisions").
//
// The two Ruby tools share one sandbox: run_ruby's description states it
// (functions and their schemas included) and ruby_session's states only
// what differs, so a client reads the bound functions once. When a
// session's state is lost without a result saying so (a canceled call
// that discarded the VM, idleness, ruby_session_reset), its next result
// has session_reset true and session_reset_reason.
//
// Every result is the codemode JSON object (status, value, stdout, stderr,
// error, tool_calls) as structuredContent, described by an outputSchema,
// plus a readable text rendering. A guest failure (an exception, a
// timeout, a limit) is a result with isError set; protocol errors are
// kept for malformed requests.
//
// # Protocol
//
// Every message from a client is checked before the SDK sees it (see
// [Server.ServeIO] and [Server.HTTPHandler]): a malformed one gets the
// JSON-RPC error the specification gives and the session goes on. A
// call's arguments are checked against its tool's inputSchema (-32602,
// naming the argument); an unknown tool's error lists the tools. A call
// stops when its client is gone (stdio input ended, HTTP connection
// dropped): the server keeps no result for a later request.
//
// A call that carries a progress token gets progress notifications while
// the program runs; notifications/cancelled stops it. Mounts are offered
// as read-only resources (file:///GUEST/PATH), directories as listings; a
// client subscribed to one (resources/subscribe) is told when the file
// changes ([Options].WatchInterval), and may subscribe to a named
// resource too (its answer depends only on its URI: no update is sent).
// Each call's outcome is logged through MCP logging.
//
// # Questions and approval
//
// Tools marked as needing approval ([glovebox.Toolset.RequireApproval])
// are approved by the person behind the client ([Approve]). Under MCP
// 2025-11-25 and older the question is an elicitation during the call.
// Under 2026-07-28 a server asks nothing during a call: the program is
// suspended in its call, the result is input_required with the question
// as an elicitation in inputRequests and a requestState, and the retry
// carrying the answer in inputResponses and the same requestState
// continues the program from inside the call, in any process with the
// same [Options].StateKey and StateDir. Accept with approve true runs the
// tool; accept with approve false, decline and cancel raise
// Glovebox::ToolDenied with the reason; a client without elicitation is
// not asked, and the call is denied saying so.
//
// A requestState is signed (HMAC-SHA256 with a key derived from
// StateKey) and holds the sealed state when it is at most
// [Options].MaxInlineState bytes, else a reference to it in StateDir. It
// continues once: an altered or foreign one is refused with -32602, a
// retry lacking an answer is asked again with the same state, and a
// replay gets the outcome recorded when it was first continued (kept in
// StateDir, as long as the state is valid: [Options].StateTTL); an expired
// one is refused saying so. StateDir is bounded ([Options].MaxStateBytes)
// and each client holds at most a share of it (MaxClientStateBytes; see
// [DefaultClientStateShare] for what a client is): a record that does
// not fit drops the oldest session handles' states and outcomes, the
// client's own first (their request states are then refused as expired
// early), and when only paused calls are in the way the call is refused
// with the bound and the time its oldest record expires.
//
// [ClientTools] gives programs the same reach: mcp_ask asks the client
// (elicitation, sampling by the client's own model, roots; several at
// once), as requests during the call under 2025-11-25 and as
// input_required rounds under 2026-07-28 (one round per mcp_ask);
// mcp_progress sends progress notifications; mcp_client_capabilities
// says what the client declared. [ForwardElicit] passes the elicitation
// of an MCP server bound into the Runtime (mcptools) on to the client the
// same way, under the input request key "elicitation" at 2026-07-28.
//
// # Protocol revisions
//
// The server speaks MCP 2026-07-28 and 2025-11-25, 2025-06-18, 2025-03-26
// and 2024-11-05, each client getting the revision it asks for. At
// 2026-07-28 there is no initialize and no session: server/discover
// answers the revisions and capabilities, every request carries its
// revision, client info and capabilities in params._meta, results carry
// resultType, and over HTTP each request is served on its own (the SDK
// checks the Mcp-Method and Mcp-Name headers), so several processes
// behind one address can serve one client. ruby_session has no MCP
// session to live in there over HTTP: each result carries "session", a
// signed handle of the suspended session's state (always a reference
// into StateDir), which the next call passes back as its session
// argument; no VM is held between calls, and a handle continues once (a
// replay gets the result its first use gave).
//
// # Tasks
//
// From 2026-07-28, a run_ruby call whose request's client capabilities
// name the extension [TasksExtension] runs in the background: the call
// answers a task (resultType "task", taskId, status "working", ttlMs,
// pollIntervalMs), and tasks/get, tasks/update and tasks/cancel, which
// the server answers itself before the SDK sees them, poll it, fetch its
// outcome and stop it. A task whose program asks the client (mcp_ask, an
// approval, a bound server's question) is suspended with status
// input_required and its questions in tasks/get's inputRequests;
// tasks/update gives the answers (some or all; tasks/get then shows the
// rest), and the program goes on once each question has its answer.
// [TaskOptions] bound and time them; task ids name
// the process that runs them, and another process refuses them with
// -32602 saying so. A 2025-11-25 session gets that revision's
// experimental tasks instead: the tasks capability, execution.taskSupport
// on task tools, params.task on a call, and tasks/get, tasks/result,
// tasks/list and tasks/cancel over the session's own tasks.
//
// # Named programs
//
// A named program is a vetted Ruby program served as an MCP tool, prompt
// or resource ([Options].Programs, `glovebox mcp --programs DIR`): NAME.rb in the folder, with its
// side file NAME.json describing it:
//
//	{"kind": "tool", "description": "…", "inputSchema": {"type": "object", …}}
//	{"kind": "prompt", "description": "…", "arguments": [{"name": "topic", "required": true}]}
//	{"kind": "resource", "uri": "test://static-text", "mimeType": "text/plain"}
//	{"kind": "resource", "uriTemplate": "test://template/{id}/data", "mimeType": "application/json"}
//
// kind defaults to "tool", inputSchema to an object with any properties.
// A tool's side file may also have "requiresClientCapabilities" (for
// example {"sampling": {}}: a client that did not declare one of them
// gets error -32021 naming them, and the program does not run) and
// "logStdout": true (each line the program printed is sent as an MCP log
// message, level info, logger NAME, before the result; at most 100) and
// "task": true, "optional", "required" or "after_input" (the tool runs
// as a task for a client declaring [TasksExtension], as run_ruby does;
// "required" refuses other clients with -32021; "after_input" runs the
// first call in the foreground, its questions input_required results,
// and the retry answering them as the task; default false, never a task).
// Each call runs the program in a fresh VM of the server's Runtime (the
// sandbox, functions and limits of run_ruby) with the constant ARGS
// holding the call's arguments as a Hash with string keys (a prompt's
// arguments; for a resource, {"uri" => the URI read}). The program's last
// value is the answer:
//   - tool: a String is the text of the result; a Hash with "content"
//     (an Array of MCP content objects) is the result itself, "isError"
//     and "structuredContent" included; anything else is its JSON as text.
//   - prompt: a String is one user message; an Array of messages, or a
//     Hash with "messages" (and "description"), is the result.
//   - resource: a String is the text; a Hash with "text" or "blob"
//     (base64) and optionally "mimeType" is the content.
//
// A program that does not end with StatusOK answers an isError tool
// result with the status and error, as run_ruby does, and fails a prompt
// or resource request with an internal error naming the program.
//
// # HTTP
//
// [Server.HTTPHandler] serves Streamable HTTP with the checks a local
// server needs: a bearer token when configured, Origin and Host checks
// against DNS rebinding, a request size limit, a concurrency limit, and
// recovery from handler panics.
package mcpserver
