// Package mcptools binds the tools of MCP servers into a
// [glovebox.Toolset], so guest code can call every tool of a server as a
// Ruby function while the sandbox itself never touches the network: each
// call is made by the host, through the official MCP Go SDK's client.
//
//	var ts glovebox.Toolset
//	b, err := mcptools.Bind(ctx, &ts, mcptools.Server{Name: "memory", Command: []string{"npx", "-y", "@modelcontextprotocol/server-memory"}})
//	...
//	defer b.Close()
//	rt, err := glovebox.New(ctx, glovebox.Config{Tools: &ts})
//
// A server is a command (stdio) or a URL (Streamable HTTP, with headers the
// host supplies and the guest never sees, OAuth 2.1 run by the host, or
// the host's own tokens: see [OAuth] and [TokenSource]). It is asked for
// MCP 2026-07-28 first and bound at an older revision when that is what
// it speaks (see [Server].ProtocolVersion). The guest calls a tool with
// keyword arguments, which become the tool's arguments object after the
// host validates them against the tool's inputSchema (nil for an optional
// property whose type excludes null is left out: Ruby's "not given"), and
// receives a Hash:
//
//	"text"       String: the text content items joined with "\n"
//	"structured" the parsed structuredContent, or nil; its integers are
//	             exact for stdio servers (read from the raw stream); over
//	             HTTP the SDK's decoding rounds those beyond 2^53
//	             ("text" usually carries them exactly)
//	"error"      true when the server flagged the result isError (data, not an exception)
//	"content"    Array of the other content items, each a Hash with
//	             "type", "mime_type", "size" (bytes) and, for an image,
//	             audio or blob resource of at most [Config].MaxInlineBytes,
//	             "data": the bytes in base64, as MCP sends them, with
//	             "encoding" => "base64", and "bytes": the same bytes as a
//	             binary (ASCII-8BIT) String; "uri" and "text" for
//	             resources
//
// In Go the item is a map[string]any with "data" a string and "bytes" a
// []byte; in JSON "bytes" is {"$base64": ...} (see Values in glovebox's
// package documentation). A binary String passed as a tool argument is
// sent as its base64 text, the JSON form of bytes in MCP.
//
// Failures raise Glovebox::ToolError subclasses named by the Class
// constants: an argument that breaks the schema raises MCPArgumentError
// (naming the field); a server that cannot be reached, has crashed or
// answered with a protocol error raises MCPTransportError, MCPServerCrashError
// or MCPProtocolError; a call that ran out of time raises MCPTimeoutError.
// When the request may have run on the server, the message says "in doubt".
// A message names the server by its Name and shows nothing of its URL:
// neither host nor address, userinfo, path, query nor fragment (where
// API keys travel); the host's own errors (Bind's) and logs leave out
// the URL's userinfo, path, query and fragment.
//
// # Caps
//
// Every byte read from a server is capped, so a hostile or broken one
// cannot make the host allocate without bound: one message (a JSON body,
// an error page, an SSE event and so each of its lines, a stdio line) at
// [Config].MaxMessageBytes, everything one HTTP response carries at
// MaxResponseBytes, and a tool listing at MaxListTools tools,
// MaxListBytes bytes and 100 pages. A server past a cap is read no
// further: the call raises MCPProtocolError naming the server and the
// cap (Bind fails so during the listing), the connection is closed and
// the server is restarted at the next call.
//
// # Lifecycle
//
// [Bind] starts every server, lists its tools (following pagination) and
// registers them; if any server cannot start or answer, or a name cannot
// be bound, it stops what it started and binds nothing. A server that
// offers no tools (no tools capability) binds none and is no error: the
// Logger gets a warning. The servers are
// shared by every eval of the Runtimes using the Toolset; a server whose
// connection dies is restarted on the next call, at most once per backoff
// period (doubling from [Config].RestartBackoff up to a minute). Close stops
// every server (stdin closed, then SIGTERM, then SIGKILL of its process
// group), so no child process outlives the Binding. Nor does one outlive
// the host process, however it ends (kill -9 included): each stdio server
// runs under a small /bin/sh watchdog that kills the server's whole
// process group (npx, the node it starts, their helpers) when a pipe only
// the host holds closes, and on Linux the kernel also kills the watchdog
// itself when the host dies (Pdeathsig).
//
// # Names
//
// A tool's name is used as-is when it is a valid glovebox tool name (see
// [glovebox.ValidToolName]). Otherwise it is mapped deterministically: lower
// case, each run of characters outside [a-z0-9_] becomes "_", a leading
// digit gets "t_" in front. A name already in the Toolset (or bound by an
// earlier server in the same Bind) is bound as "<server>_<name>"; if that
// collides too, or is still not valid, Bind fails. [Binding.Names] gives the
// map from guest names to MCP names, and each tool's description says its
// MCP name when it differs.
package mcptools
