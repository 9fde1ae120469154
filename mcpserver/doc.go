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
//     first call and freed when the MCP session ends or has been idle for
//     [Options].SessionIdle; two MCP sessions never share one.
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
// as read-only resources (file:///GUEST/PATH), directories as listings.
// Each call's outcome is logged through MCP logging.
//
// # Approval
//
// Tools marked as needing approval ([glovebox.Toolset.RequireApproval])
// are approved through MCP elicitation when the client supports it; when
// it does not, such calls are denied with a reason saying so.
//
// # HTTP
//
// [Server.HTTPHandler] serves Streamable HTTP with the checks a local
// server needs: a bearer token when configured, Origin and Host checks
// against DNS rebinding, a request size limit, a concurrency limit, and
// recovery from handler panics.
package mcpserver
