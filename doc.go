// Package glovebox runs Ruby code nobody should trust — above all code a
// language model just wrote — and returns a structured answer, while that
// code reaches nothing but the functions ("tools") the host grants it.
//
// The guest is CRuby 4.0 compiled to WebAssembly (wasm32-wasi), run under
// wasmtime. Every eval gets a fresh VM, restored from a boot snapshot in
// well under a millisecond, that shares no state with any other eval.
//
//	rt, err := glovebox.New(ctx, glovebox.Config{})
//	...
//	res, err := rt.Eval(ctx, `[1, 2, 3].sum`)
//	// res.Status == glovebox.StatusOK, res.Value == int64(6)
//
// # Results and statuses
//
// Everything the guest does is a [Result]: its [Status], the value of the
// last expression, captured stdout and stderr, the exception for failures
// ([GuestError]: class, message and a guest-only backtrace), fuel used,
// duration and the tool-call transcript. Eval returns a Go error only for
// host-side failures such as a closed [Runtime]. The statuses are listed
// with [Status].
//
// [Runtime.EvalWith] takes options for one eval: standard input
// ([WithStdin]) and ARGV ([WithArgs]) for the guest, and writers that
// receive its output as it is written ([WithOutput]).
//
// # Limits
//
// [Limits] bound wall-clock time (epoch interruption, so C builtins such as
// regular expressions are stopped too, and sleeps honour it), fuel (a
// deterministic CPU budget), linear memory, kept output, the size of the
// result value, and tool calls. Cancelling the context passed to Eval stops
// the guest within about 10 ms.
//
// # Values
//
// Values cross the boundary as JSON-like data. From the guest:
//
//	nil, true, false     nil, bool
//	Integer              int64, or *big.Int beyond 64 bits (exact)
//	Float                float64, NaN and ±Inf included
//	String, Symbol       string: other encodings are transcoded to UTF-8,
//	                     invalid bytes become U+FFFD
//	binary String        []byte, exact: a String in ASCII-8BIT (BINARY)
//	                     with a byte above 0x7f (an all-ASCII one is a
//	                     string)
//	Array                []any
//	Hash                 map[string]any: String and Symbol keys by name,
//	                     other keys by their inspect string; on a clash
//	                     the later key wins
//	anything else        its inspect string (or "#<Class>" if inspect fails)
//
// An Array or Hash that contains itself crosses with the inner reference
// replaced by the string "[...]" or "{...}", as Ruby's inspect shows it.
// Nesting deeper than 64 levels, or a value larger than Limits.Value once
// encoded, ends the eval with StatusError and class Glovebox::ValueError
// rather than being cut silently. In JSON ([Result.MarshalJSON]) NaN and
// the infinities are written as the strings "NaN", "Infinity" and
// "-Infinity"; integers keep every digit.
//
// Tool arguments arrive in Go as the same data (see [Args]); tool results
// go back the same way, []byte as a binary String, Go structs as their
// encoding/json form (a []byte field as base64 text). In JSON
// ([Result.MarshalJSON], the transcript, the executor's wire) bytes are
// the object {"$base64": "<standard base64>"}, read back as []byte; a
// guest Hash whose only key is "$base64", with base64 text as its value,
// is read as bytes too. A typed parameter of string or []byte type takes
// a binary String's bytes as they are. Typed
// parameters ([Toolset.Func]) are filled from that data exactly: an
// Integer stays an integer at any depth (int64, or *big.Int in an any), a
// typed field it does not fit is refused, and a Hash fills a struct only
// through its fields' exact JSON names, an unknown key or keyword raising
// ArgumentError that names the accepted ones. A result
// with no data form (a channel, a function, cyclic data) raises TypeError
// in the guest, naming the Go type.
//
// # Tools
//
// A [Toolset] turns Go functions and the methods of Go values into guest
// functions: model-written code calls orders() or change_plan("premium")
// and gets data back. Allowlists, denylists and a ceiling the object
// declares ([ToolCeiling]) narrow what is exposed; [Hooks] can veto calls,
// observe them and sanitize error messages; Limits budget their number,
// time and payload size.
//
// A [ToolError] chooses the exception class the guest sees, so guest code
// can rescue one kind of failure. The httptool package adds HTTP with
// SSRF defenses as tools.
//
// # Approval
//
// A tool can need a person's approval ([Toolset.RequireApproval],
// [ToolDoc].NeedsApproval): before each call, [Hooks].Approver decides, and
// a denied call raises Glovebox::ToolDenied, which guest code can rescue.
// The wait has its own bound, [Limits].ApprovalTimeout, and does not use
// up the eval's Timeout or ToolTime. The mcpserver package asks through
// MCP elicitation; `glovebox repl --approve` asks on the terminal.
//
// # Sessions
//
// [Runtime.NewSession] keeps one VM across evals, so variables, methods
// and libraries persist; a trap discards it and says so
// (Result.SessionReset). A session belongs to one user: never share it.
//
// # Suspension
//
// With [Config].StateKeys, an idle session becomes sealed bytes
// ([Session.Suspend]) that any process with a compatible Runtime resumes
// ([Runtime.ResumeSession]), and a tool call can be suspended instead of
// answered: a tool, Hooks.BeforeCall or the Approver returns
// [SuspendCall], the eval ends with [StatusSuspended] carrying the
// pending call and its state, and [Runtime.Continue] (for a session,
// [Session.Continue]) answers it and runs the eval on from inside the
// call. States are encrypted and authenticated, and refused with a typed
// error when damaged or given to a different Runtime; [StateStore] makes
// each continue at most once. RATIONALE.md says how (a paused eval is
// replayed to its call) and what cannot be suspended.
//
// What survives a pause is everything the program could observe of
// itself: its objects, methods, constants, libraries, random generator,
// output so far and (paused in a call) its stack, fibers and ensure
// clauses included; the Result and the limits count the whole eval. What
// does not: time moves on (Time.now is the time of resumption; the
// wall-clock limit and the monotonic clock count only running time); host
// files in mounts are whatever they are then (a paused eval whose mounted
// input changed before its call is refused with [ErrStateDiverged], and can
// be continued again once the input is back); and a
// tool's side effects before the pause happened once — those calls are
// not made again, while continuing one state twice runs the calls after
// the pause twice unless a [StateStore] refuses it. Writable mounts, open
// files in an idle session and a Runtime without StateKeys refuse to
// suspend, saying why. docs/suspend.md has the list and a CLI transcript
// (glovebox eval --suspend-to, glovebox resume).
//
// # Files
//
// [Config].Mounts grant host directories, read-only unless Writable, at
// guest paths of your choice; nothing outside them is reachable (paths
// are resolved beneath each mount by the host kernel). Every eval has a
// private scratch directory at [ScratchPath], wiped when it ends, and
// Limits bound the bytes and entries an eval writes.
//
// # Profiles
//
// A [Config] is a value: [Config.Clone] copies it deeply and
// [Config.Fingerprint] identifies its settings. [Profiles] registers named
// configurations once, derives variants and starts Runtimes by name.
//
// # Default closed
//
// A guest has no host files beyond its scratch directory and the mounts
// it is given, an empty
// environment, fixed arguments, no processes, no threads and no network.
// UTF-8 is the default encoding; randomness comes from the host's CSPRNG:
// Ruby seeds its generator from it on first use in each eval. Ruby's string hash seed and heap layout are
// fixed in the boot snapshot and so shared by every VM: the seed cannot be
// reseeded after boot, and what it protects against (hash flooding) is
// already bounded per eval by its time, fuel and memory limits.
//
// # Cost
//
// The first [New] on a machine fetches the image with npm, compiles it and
// builds the snapshot (one to two minutes on 2 cores); later processes load
// them from the cache in tens of milliseconds. README.md has measured
// figures.
package glovebox
