package codemode

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gloveboxhq/glovebox"
)

// sandbox is everything the description states.
type sandbox struct {
	name         string
	session      bool
	tools        []glovebox.ToolDoc
	mounts       []glovebox.Mount
	limits       glovebox.Limits // defaults filled in
	memoryFloor  int64           // bytes the booted guest occupies
	maxOutput    int
	instructions string
	servers      []Server // tool servers and their notes (servers.go)
}

// fuelPerMillionLoops is the fuel a 1M-iteration Ruby while loop takes,
// as measured for the Limits.Fuel documentation (about 5.1e8).
const fuelPerMillionLoops = 510_000_000

// httpPrefix starts the names of the HTTP tool's guest functions.
const httpPrefix = "http_"

// The libraries the description names, as the guest image has them
// (TestDescribedLibraries requires each in the guest, so the text cannot
// promise what the image lacks): guestLibraries load; missingLibraries
// are Ruby 4.0 bundled gems with C extensions the image was built
// without; unreachableLibraries need sockets or a terminal, which WASI
// does not give (their LoadError says so).
var (
	guestLibraries = []string{"json", "set", "date", "time", "csv", "yaml", "erb", "digest", "securerandom", "base64",
		"stringio", "strscan", "zlib", "uri", "matrix", "prime", "benchmark", "logger", "ostruct", "pstore", "rexml/document"}
	missingLibraries     = []string{"bigdecimal", "nkf", "racc", "syslog", "fiddle"}
	unreachableLibraries = []string{"socket", "net/http", "io/console"}
)

// libraryHint says what to use instead of a library the guest lacks.
var libraryHint = map[string]string{"bigdecimal": "use Integer cents or Rational for money"}

// quoted writes names as Ruby strings separated by commas, each with its
// libraryHint.
func quoted(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = `"` + n + `"`
		if h := libraryHint[n]; h != "" {
			q[i] += " (" + h + ")"
		}
	}
	return strings.Join(q, ", ")
}

// describe writes the model-facing description of sb.
func describe(sb sandbox) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("Runs a Ruby program in a sandbox and returns what it did as JSON. ")
	if len(sb.tools) > 0 {
		w("Use it to answer questions with the functions listed below: write one complete program that calls them, computes the answer, and ends with an expression holding it.\n")
	} else {
		w("Use it to compute: write one complete program that ends with an expression holding the answer.\n")
	}

	w("\n## The sandbox\n\n")
	w("- Ruby 4.0 (CRuby compiled to WebAssembly) with its standard library and the bundled gems written in Ruby: require %s, ... work. Not in the sandbox: %s, and what needs sockets or a terminal: %s. No other gems.\n",
		quoted(guestLibraries), quoted(missingLibraries), quoted(unreachableLibraries))
	w("- One thread: Thread.new fails, but Timeout.timeout(seconds) { ... } works. Local time is always UTC and ENV[\"TZ\"] has no effect: use offsets, e.g. Time.now.getlocal(\"+09:00\").\n")
	if sb.session {
		w("- All calls share one Ruby VM (a session): top-level local variables, methods, classes, constants and required libraries survive from one call to the next, so you can work step by step. Files in %s do not: it is emptied after every call. ", glovebox.ScratchPath)
		w("When a call is stopped by a limit or the VM crashes, the session is discarded, that call's result says \"session_reset\": true, and the next call starts from an empty VM.\n")
	} else {
		w("- Every call starts a fresh Ruby VM: nothing survives from an earlier call (variables, methods, files), so each program must do all its work itself.\n")
	}
	http := hasHTTP(sb.tools)
	if http {
		w("- The program has no network of its own (sockets and Net::HTTP fail); the %s* functions below make HTTP requests from the host, under the host's rules. No subprocesses, threads or environment variables.\n", httpPrefix)
	} else {
		w("- No network, subprocesses, threads or environment variables. ")
		if len(sb.tools) > 0 {
			w("The functions below are the only way to reach anything outside the program.\n")
		} else {
			w("The program can reach nothing outside itself but the files listed below.\n")
		}
	}
	w("- Limits per call: %s of wall-clock time", duration(sb.limits.Timeout))
	if len(sb.tools) > 0 {
		w(" (function calls included")
		if sb.limits.ToolTime < sb.limits.Timeout {
			w(", at most %s inside functions", duration(sb.limits.ToolTime))
		}
		w(")")
	}
	if f := sb.limits.Fuel; f > 0 {
		w("; a CPU budget of about %s simple loop iterations", count(f/(fuelPerMillionLoops/1_000_000)))
	}
	if free := sb.limits.Memory - sb.memoryFloor; free > 0 && sb.memoryFloor > 0 {
		w("; about %d MiB of memory for the program's data", (free+(1<<19))>>20)
	} else {
		w("; %s of memory, Ruby included", bytesHuman(sb.limits.Memory))
	}
	if len(sb.tools) > 0 {
		w("; %s function calls, each carrying at most %s of arguments or result (a larger one raises Glovebox::ToolPayloadError, which you can rescue)", count(uint64(sb.limits.ToolCalls)), bytesHuman(int64(sb.limits.ToolPayload)))
	}
	w("; a final value of at most %s as JSON; %s of stdout and %s of stderr kept. ", bytesHuman(int64(sb.limits.Value)), bytesHuman(int64(sb.limits.Stdout)), bytesHuman(int64(sb.limits.Stderr)))
	w("A program that exceeds a limit is stopped, and the result's status says which limit.\n")
	w("- What you get back is at most %s of JSON: print summaries, not whole data sets.\n", bytesHuman(int64(sb.maxOutput)))

	if len(sb.tools) > 0 {
		w("\n## Functions\n\n")
		w("Call them as plain Ruby methods. They return plain data: nil, true, false, Integer, Float, String, Array and Hash. ")
		w("Hashes have String keys, so write order[\"total\"], not order[:total]. ")
		w("A function that fails raises Glovebox::ToolError (or a subclass of it) with a message saying why (rescue it to try something else); wrong arguments raise ArgumentError.\n")
		describeLabels(&b, sb.tools)
		for _, d := range sb.tools {
			describeTool(&b, d)
		}
	}

	w("\n## Files\n\n")
	for _, m := range sb.mounts {
		access := "read-only"
		if m.Writable {
			access = "read-write"
		}
		w("- %s (%s)", m.GuestPath, access)
		if m.Description != "" {
			w(": %s", oneLine(m.Description))
		}
		w("\n")
	}
	w("- %s (read-write): scratch space, empty when each call starts and wiped when it ends.\n", glovebox.ScratchPath)
	if len(sb.mounts) == 0 {
		w("No other files are reachable.\n")
	} else {
		w("No other host files are reachable.\n")
	}

	w("\n## Result\n\n")
	w("One JSON object:\n")
	w("- status: \"ok\" when the program ran to its end; otherwise why it stopped: \"error\" (an exception it did not rescue, SyntaxError included), \"timeout\", \"fuel_exhausted\" (CPU budget), \"memory_limit\", \"tool_budget_exceeded\" (too many function calls, or too long in them), \"canceled\", \"sandbox_error\" (the sandbox failed, not your program), or \"invalid_input\" (the tool input was not {\"code\": \"...\"}).\n")
	w("- value: the last expression's value as JSON (status ok only). Symbols become strings; objects without a JSON form become their inspect string.\n")
	w("- stdout, stderr: what the program printed, when it printed anything.\n")
	w("- error: {class, message, backtrace} for every status but ok. Backtrace lines \"sandbox:LINE\" are lines of your program.\n")
	if len(sb.tools) > 0 {
		w("- tool_calls: the functions the program called, in order, with the error of each that failed (repeated successful calls are merged into one entry with a count).\n")
	}
	w("- value_truncated, stdout_truncated, stderr_truncated: true when that part was cut to fit.\n")
	if slices.ContainsFunc(sb.tools, func(d glovebox.ToolDoc) bool { return d.NeedsApproval }) {
		w("- pending: with status \"suspended\", the call that waits for a person's approval (name, waiting_for, args). The program has stopped inside that call and goes on from there once a person answers; that result reaches you later. Do not repeat the call meanwhile.\n")
	}
	if sb.session {
		w("- session_reset: true when this call was stopped by a limit or a crash and the session's state is gone; the next call starts empty.\n")
	}
	w("When a program fails, read the error, fix the program and call %s again.\n", sb.name)

	describeServers(&b, sb.servers)
	if s := strings.TrimSpace(sb.instructions); s != "" {
		w("\n## Notes\n\n%s\n", s)
	}
	return b.String()
}

// describeTool writes one function's section.
func describeTool(b *strings.Builder, d glovebox.ToolDoc) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	var sig []string
	for _, p := range d.Params {
		if p.Variadic {
			sig = append(sig, "*"+p.Name)
		} else {
			sig = append(sig, p.Name)
		}
	}
	if d.Params == nil {
		sig = []string{"..."}
	}
	w("\n### %s(%s)\n\n", d.Name, strings.Join(sig, ", "))
	if d.Description != "" {
		w("%s\n", strings.TrimSpace(d.Description))
	} else {
		w("(Not documented.)\n")
	}
	if len(d.Labelled) > 0 {
		w("Its results carry sensitive values (%s), which you see only as tokens.\n", kindList(d.Labelled))
	}
	if len(d.Accepts) > 0 {
		w("Accepts sensitive values (%s) and their tokens in its arguments.\n", kindList(d.Accepts))
	}
	if d.NeedsApproval {
		w("Needs approval: each call waits for a person to allow it. A refused call raises Glovebox::ToolDenied (a Glovebox::ToolError) with the reason; rescue it to carry on without the call.\n")
	}
	if d.Params == nil {
		w("Arguments: not documented.\n")
	} else if len(d.Params) == 0 {
		w("No arguments.\n")
	} else {
		w("Arguments:\n")
		for _, p := range d.Params {
			w("- %s: %s", p.Name, schemaText(p.Schema))
			switch {
			case p.Variadic:
				w("; any number of them")
			case p.Required:
				w("; required")
			default:
				w("; optional")
			}
			if p.Keywords {
				w("; may be passed as keyword arguments")
			}
			if p.Description != "" {
				w(". %s", oneLine(p.Description))
			}
			w("\n")
		}
	}
	if d.Returns != "" || d.Result != nil {
		w("Returns:")
		if d.Returns != "" {
			w(" %s", strings.TrimRight(oneLine(d.Returns), ".;"))
		}
		if d.Result != nil {
			if d.Returns != "" {
				w(";")
			}
			w(" %s", schemaText(d.Result))
		}
		w("\n")
	}
	w("Example: %s\n", example(d))
}

// schemaText is a schema for reading: a bare type name for simple ones,
// the compact JSON Schema otherwise.
func schemaText(s json.RawMessage) string {
	var m map[string]any
	if err := json.Unmarshal(s, &m); err != nil {
		return "any value"
	}
	if len(m) == 0 {
		return "any value"
	}
	if t, ok := m["type"].(string); ok && len(m) == 1 {
		return t
	}
	return "JSON Schema " + string(s)
}

// example is d's example call, or one made from its parameters.
func example(d glovebox.ToolDoc) string {
	if d.Example != "" {
		return oneLine(d.Example)
	}
	if d.Params == nil {
		return d.Name + "(...)"
	}
	var args []string
	for _, p := range d.Params {
		var m map[string]any
		_ = json.Unmarshal(p.Schema, &m)
		if p.Keywords {
			if kw := keywordsExample(m, p.Schema); kw != "" {
				args = append(args, kw)
				continue
			}
		}
		args = append(args, rubyExample(m))
	}
	if len(args) == 0 {
		return d.Name + "()"
	}
	return d.Name + "(" + strings.Join(args, ", ") + ")"
}

// keywordsExample writes name: value pairs for an object schema's
// required properties (or its first property when none is required), at
// most five.
func keywordsExample(m map[string]any, raw json.RawMessage) string {
	props, _ := m["properties"].(map[string]any)
	if len(props) == 0 {
		return ""
	}
	var names []string
	if req, ok := m["required"].([]any); ok {
		for _, r := range req {
			if n, ok := r.(string); ok {
				names = append(names, n)
			}
		}
	}
	if len(names) == 0 {
		// The first property in the schema's own order.
		names = append(names, firstKey(raw))
	}
	var out []string
	for _, n := range names[:min(len(names), 5)] {
		pm, _ := props[n].(map[string]any)
		if n == "" || !isRubyLabel(n) {
			continue
		}
		out = append(out, n+": "+rubyExample(pm))
	}
	return strings.Join(out, ", ")
}

// firstKey returns the first key of a schema's properties as written.
func firstKey(raw json.RawMessage) string {
	var top map[string]json.RawMessage
	if json.Unmarshal(raw, &top) != nil {
		return ""
	}
	dec := json.NewDecoder(strings.NewReader(string(top["properties"])))
	if _, err := dec.Token(); err != nil { // the opening brace
		return ""
	}
	tok, _ := dec.Token()
	k, _ := tok.(string)
	return k
}

func isRubyLabel(s string) bool {
	for i, r := range s {
		if !(r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (i > 0 && r >= '0' && r <= '9')) {
			return false
		}
	}
	return s != ""
}

// rubyExample is a Ruby literal that fits schema m.
func rubyExample(m map[string]any) string {
	for _, k := range []string{"examples", "enum"} {
		if xs, ok := m[k].([]any); ok && len(xs) > 0 {
			return rubyLiteral(xs[0])
		}
	}
	if v, ok := m["default"]; ok {
		return rubyLiteral(v)
	}
	typ, _ := m["type"].(string)
	if ts, ok := m["type"].([]any); ok && len(ts) > 0 {
		typ, _ = ts[0].(string)
	}
	switch typ {
	case "string":
		if m["format"] == "date-time" {
			return `"2026-01-31T12:00:00Z"`
		}
		if m["format"] == "date" {
			return `"2026-01-31"`
		}
		if m["format"] == "uri" {
			return `"https://example.com/"`
		}
		return `"text"`
	case "integer":
		return "1"
	case "number":
		return "1.5"
	case "boolean":
		return "true"
	case "array":
		return "[]"
	case "object":
		return "{}"
	}
	return "nil"
}

// rubyLiteral writes JSON data as Ruby.
func rubyLiteral(v any) string {
	switch x := v.(type) {
	case nil:
		return "nil"
	case string, float64, bool:
		b, _ := json.Marshal(x)
		return string(b)
	}
	b, _ := json.Marshal(v)
	return string(b) // arrays and hashes of scalars read the same in Ruby
}

func hasHTTP(docs []glovebox.ToolDoc) bool {
	for _, d := range docs {
		if strings.HasPrefix(d.Name, httpPrefix) {
			return true
		}
	}
	return false
}

// oneLine folds s onto one line.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// duration writes d in the largest whole unit: 10 s, 500 ms, 2 min.
func duration(d time.Duration) string {
	switch {
	case d >= time.Minute && d%time.Minute == 0:
		return fmt.Sprintf("%d min", d/time.Minute)
	case d >= time.Second && d%time.Second == 0:
		return fmt.Sprintf("%d s", d/time.Second)
	case d >= time.Second:
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
	return fmt.Sprintf("%d ms", d.Milliseconds())
}

// bytesHuman writes n bytes in binary units: 512 MiB, 64 KiB, 1.5 MiB.
func bytesHuman(n int64) string {
	units := []string{"bytes", "KiB", "MiB", "GiB"}
	f, i := float64(n), 0
	for f >= 1024 && i < len(units)-1 {
		f, i = f/1024, i+1
	}
	if f == float64(int64(f)) {
		return fmt.Sprintf("%d %s", int64(f), units[i])
	}
	return fmt.Sprintf("%.1f %s", f, units[i])
}

// count writes n with thousands separators: 1,000.
func count(n uint64) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// describeLabels explains tokens when some function's results are
// labelled (glovebox.Toolset.Label).
func describeLabels(b *strings.Builder, docs []glovebox.ToolDoc) {
	for _, d := range docs {
		if len(d.Labelled) > 0 {
			b.WriteString("Sensitive values (emails, phone numbers, ...) that functions return are real inside the program, so it can compare, count and filter them, but everything you read back (value, stdout, errors) shows each as a token such as [[email:7f3a]], the same token for the same value. " +
				"Give a value, or its token, only to a function that says it accepts its kind: any other function refuses the call with Glovebox::ToolDenied (a Glovebox::ToolError; rescue it to carry on), however the value is spelled. Inside the program a token is only a placeholder string, not equal to the value.\n")
			return
		}
	}
}

func kindList(k []glovebox.Kind) string {
	s := make([]string, len(k))
	for i, x := range k {
		s[i] = string(x)
	}
	return strings.Join(s, ", ")
}
