// Package codemode turns a glovebox configuration into the one tool a
// language model sees: instead of calling many tools one round trip at a
// time, the model writes a Ruby program that calls them, and glovebox
// runs it.
//
//	tool, err := codemode.New(codemode.Config{Runtime: rt})
//	...
//	tool.Name()        // "run_ruby"
//	tool.Description() // how the sandbox behaves, its functions, files, limits
//	tool.InputSchema() // {"type":"object","properties":{"code":...},...}
//	out, err := tool.Handle(ctx, json.RawMessage(`{"code":"orders.size"}`))
//	// out.Output: {"status":"ok","value":42,"tool_calls":[{"name":"orders"}]}
//
// # The description
//
// [Tool.Description] is generated from the [glovebox.Runtime]: whether
// each call gets a fresh VM or shares a session, the limits in human
// units, that there is no network (unless http_* functions are present),
// every function with its parameters, JSON Schemas and an example call
// (from [glovebox.Runtime.ToolDocs], so document tools with
// [glovebox.Toolset.Describe]), every mount with its guest path, access
// and description, the scratch directory, and the result format. Its
// text is checked against golden files in testdata.
//
// # The result
//
// [Tool.Run] turns a [glovebox.Result] into a JSON object for the model:
// status, value, stdout, stderr, error (class, message, backtrace),
// truncation flags, a summary of the tool calls, and session_reset for
// sessions, cut to fit [Config].MaxOutput. A guest exception, a limit or
// a failing tool is information for the model, an [Outcome] with IsError
// set, never a Go error; so is malformed input. Go errors are kept for
// host-side failures such as a closed Runtime.
//
// # Adapters
//
// The SDK adapters live in their own packages, so this one imports no
// model SDK: [github.com/gloveboxhq/glovebox/codemode/anthropictool] for
// the Anthropic Messages API and
// [github.com/gloveboxhq/glovebox/codemode/openaitool] for OpenAI Chat
// Completions. Each gives the tool definition in the SDK's types, a
// handler from the model's tool call to the SDK's tool-result message,
// and a Run helper, a small agent loop that returns the answer with a
// transcript of [Step]s.
//
// # Approval
//
// A function that needs a person's approval ([glovebox.Toolset.RequireApproval]
// or [glovebox.ToolDoc].NeedsApproval) is marked so in the description, and
// the model is told that a refusal raises Glovebox::ToolDenied. The Go
// caller decides through the Runtime's [glovebox.Hooks].Approver, which runs
// with the context passed to [Tool.Handle] or the adapters' Run helpers (put
// what the approver needs, such as the user to ask, in that context). Each
// call's decision is in the tool_calls the model reads ("approval") and in
// [Outcome].Result.ToolCalls.
package codemode
