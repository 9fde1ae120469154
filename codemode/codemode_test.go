package codemode_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/codemode"
	"github.com/gloveboxhq/glovebox/codemode/internal/codemodetest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func TestMain(m *testing.M) { codemodetest.Main(m) }

func shopRuntime(t *testing.T, l glovebox.Limits) (*glovebox.Runtime, *codemodetest.Shop) {
	t.Helper()
	shop := &codemodetest.Shop{Plan: "basic"}
	ts, err := codemodetest.Toolset(shop)
	if err != nil {
		t.Fatal(err)
	}
	return codemodetest.Runtime(t, ts, l), shop
}

// golden compares got with testdata/name.golden, or rewrites it under
// -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./codemode -run %s -update to create it)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("%s differs from the generated text (if the change is intended, run go test ./codemode -run %s -update and review the diff)\n--- got ---\n%s", path, t.Name(), got)
	}
}

func TestDescriptionGolden(t *testing.T) {
	rt, _ := shopRuntime(t, glovebox.Limits{})
	floor := rt.MemoryFloor()
	var extra glovebox.Toolset
	if err := extra.Add("http_get", func(context.Context, glovebox.Args) (any, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	if err := extra.Describe("http_get", glovebox.ToolDoc{
		Description: "Fetches a URL from the allowed hosts.",
		Params:      []glovebox.Param{{Name: "url", Required: true, Schema: json.RawMessage(`{"type":"string","format":"uri"}`)}},
		Returns:     "a Hash with status, headers and body",
	}); err != nil {
		t.Fatal(err)
	}
	if err := extra.Add("legacy_lookup", func(context.Context, glovebox.Args) (any, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	withHTTP := codemodetest.Runtime(t, &extra, glovebox.Limits{}).ToolDocs()
	mounts := []glovebox.Mount{
		{HostPath: "/srv/in", GuestPath: "/data", Description: "CSV exports of the orders table,\none file per month"},
		{HostPath: "/srv/out", GuestPath: "/workspace", Writable: true, Description: "Write reports here."},
		{HostPath: "/srv/x", GuestPath: "/refs"},
	}
	cases := []struct {
		name string
		desc string
	}{
		{"fresh", mustTool(t, codemode.Config{Runtime: rt}).Description()},
		{"session", codemode.DescribeSandbox("ruby", true, append(rt.ToolDocs(), withHTTP...), mounts,
			glovebox.Limits{Timeout: 5 * time.Second, Fuel: 4_700_000_000, Memory: 1 << 30, Stdout: 64 << 10, Stderr: 16 << 10,
				Value: 256 << 10, ToolCalls: 50, ToolTime: 2 * time.Second, ToolPayload: 128 << 10},
			floor, 8<<10, "You are helping customer 42.\nAnswer in one sentence.")},
		{"bare", mustTool(t, codemode.Config{Runtime: codemodetest.Runtime(t, nil, glovebox.Limits{Timeout: 1500 * time.Millisecond})}).Description()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { golden(t, c.name, c.desc) })
	}
}

func mustTool(t *testing.T, cfg codemode.Config) *codemode.Tool {
	t.Helper()
	tool, err := codemode.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tool
}

// TestEveryFunctionDescribed fails when a function the guest can call is
// missing from the description: the golden files pin the text, and this
// pins the rule for any tool set, a newly added function included.
func TestEveryFunctionDescribed(t *testing.T) {
	shop := &codemodetest.Shop{}
	ts, err := codemodetest.Toolset(shop)
	if err != nil {
		t.Fatal(err)
	}
	// A function added after the documented ones, undocumented.
	if err := ts.Func("refund_order", func(id int64, reason string) (bool, error) { return false, nil }); err != nil {
		t.Fatal(err)
	}
	rt := codemodetest.Runtime(t, ts, glovebox.Limits{})
	desc := mustTool(t, codemode.Config{Runtime: rt}).Description()
	if len(rt.Tools()) != 3 {
		t.Fatalf("tools %v, want 3", rt.Tools())
	}
	for _, name := range rt.Tools() {
		if !strings.Contains(desc, "\n### "+name+"(") {
			t.Errorf("the description has no section for %s:\n%s", name, desc)
		}
	}
	if !strings.Contains(desc, "### refund_order(arg1, arg2)\n\n(Not documented.)\nArguments:\n- arg1: integer; required\n- arg2: string; required\nReturns: boolean\nExample: refund_order(1, \"text\")\n") {
		t.Errorf("refund_order's inferred section is missing or changed:\n%s", desc)
	}
}

// decode parses an Outcome's JSON for assertions.
func decode(t *testing.T, out *codemode.Outcome) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(out.Output, &m); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out.Output)
	}
	return m
}

func TestHandle(t *testing.T) {
	rt, shop := shopRuntime(t, glovebox.Limits{Fuel: 200_000_000})
	tool := mustTool(t, codemode.Config{Runtime: rt})
	cases := []struct {
		name    string
		input   string
		isError bool
		want    string // the whole output JSON
	}{
		{"value and tool calls", `{"code":"orders(status: \"shipped\").sum { _1[\"total\"] }.round(2)"}`, false,
			`{"status":"ok","value":400.49,"tool_calls":[{"name":"orders"}]}`},
		{"stdout and nil value", `{"code":"puts orders(status: 'pending').size\nputs 'done'"}`, false,
			`{"status":"ok","value":null,"stdout":"1\ndone\n","tool_calls":[{"name":"orders"}]}`},
		{"repeated calls merged", `{"code":"3.times { orders(status: 'shipped') }; change_plan('premium')"}`, false,
			`{"status":"ok","value":{"plan":"premium"},"tool_calls":[{"name":"orders","count":3},{"name":"change_plan"}]}`},
		{"symbol key mistake", `{"code":"orders({}).first[:total] + 1"}`, true,
			`{"status":"error","error":{"class":"NoMethodError","message":"undefined method '+' for nil","backtrace":["sandbox:1:in '<main>'"]},"tool_calls":[{"name":"orders"}]}`},
		{"tool error", `{"code":"change_plan('platinum')"}`, true,
			`{"status":"error","error":{"class":"Glovebox::ToolError","message":"plan must be basic or premium","backtrace":["sandbox:1:in '<main>'"]},"tool_calls":[{"name":"change_plan","error":"plan must be basic or premium"}]}`},
		{"fuel limit", `{"code":"i = 0\nloop { i += 1 }"}`, true, `"status":"fuel_exhausted"`},
		{"syntax error", `{"code":"def ("}`, true, `"status":"error","error":{"class":"SyntaxError"`},
		{"not JSON", `run this: 1+1`, true,
			`{"status":"invalid_input","error":{"class":"InvalidInput","message":"the input is not a JSON object; send {\"code\": \"<a Ruby program>\"}"}}`},
		{"JSON array", `[1]`, true, `"message":"the input is not a JSON object`},
		{"null", `null`, true, `"message":"the input is not a JSON object`},
		{"no code", `{"program":"1"}`, true, `"message":"the input has no \"code\" field`},
		{"code not a string", `{"code":5}`, true, `"message":"\"code\" must be a string`},
		{"empty code", `{"code":" \n"}`, true, `"message":"\"code\" is empty`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := tool.Handle(context.Background(), json.RawMessage(c.input))
			if err != nil {
				t.Fatalf("Handle: %v (guest failures must not be Go errors)", err)
			}
			decode(t, out)
			if out.IsError != c.isError {
				t.Errorf("IsError %v, want %v; output %s", out.IsError, c.isError, out.Output)
			}
			got := string(out.Output)
			if strings.HasPrefix(c.want, "{") && got != c.want || !strings.Contains(got, c.want) {
				t.Errorf("output\n got %s\nwant %s", got, c.want)
			}
			if strings.Contains(c.name, "JSON") || strings.Contains(c.name, "code") {
				if out.Result != nil || out.Code != "" {
					t.Errorf("refused input has Result %v, Code %q", out.Result, out.Code)
				}
			}
		})
	}
	if shop.Plan != "premium" {
		t.Errorf("plan %q: the change_plan call did not reach the host", shop.Plan)
	}
	out, err := tool.HandleCall(context.Background(), "python", json.RawMessage(`{"code":"1"}`))
	if err != nil || !out.IsError || !strings.Contains(string(out.Output), `"class":"UnknownTool","message":"there is no tool named \"python\"; the only tool is run_ruby`) {
		t.Errorf("HandleCall(python) = %s, %v", out.Output, err)
	}
	if out, err := tool.HandleCall(context.Background(), "run_ruby", json.RawMessage(`{"code":"6*7"}`)); err != nil || string(out.Output) != `{"status":"ok","value":42}` || out.Code != "6*7" || out.Result.Value != int64(42) {
		t.Errorf("HandleCall(run_ruby) = %+v, %v", out, err)
	}
}

// evaluatorFunc adapts a function to codemode.Evaluator.
type evaluatorFunc func(ctx context.Context, code string) (*glovebox.Result, error)

func (f evaluatorFunc) Eval(ctx context.Context, code string) (*glovebox.Result, error) {
	return f(ctx, code)
}

func TestSessionAndHostErrors(t *testing.T) {
	rt, _ := shopRuntime(t, glovebox.Limits{})
	var seen []string
	session := evaluatorFunc(func(ctx context.Context, code string) (*glovebox.Result, error) {
		seen = append(seen, code)
		return rt.Eval(ctx, code)
	})
	tool := mustTool(t, codemode.Config{Runtime: rt, Evaluator: session, Session: true, Name: "ruby"})
	out, err := tool.Handle(context.Background(), json.RawMessage(`{"code":"1"}`))
	if err != nil || string(out.Output) != `{"status":"ok","value":1,"session_reset":false}` || len(seen) != 1 {
		t.Errorf("session output %s, %v; evaluator saw %q", out.Output, err, seen)
	}
	if d := tool.Description(); !strings.Contains(d, "(a session)") || !strings.Contains(d, "session_reset") {
		t.Errorf("session description does not say so:\n%s", d)
	}
	// A host-side failure is the one Go error.
	closed := codemodetest.Runtime(t, nil, glovebox.Limits{})
	ct := mustTool(t, codemode.Config{Runtime: closed})
	closed.Close()
	if _, err := ct.Handle(context.Background(), json.RawMessage(`{"code":"1"}`)); !errors.Is(err, glovebox.ErrClosed) {
		t.Errorf("Handle on a closed Runtime: %v, want ErrClosed", err)
	}
}

func TestNewRejects(t *testing.T) {
	rt, _ := shopRuntime(t, glovebox.Limits{})
	for _, c := range []struct {
		cfg  codemode.Config
		want string
	}{
		{codemode.Config{}, "Runtime is nil"},
		{codemode.Config{Runtime: rt, Name: "run ruby"}, "must be 1 to 64"},
		{codemode.Config{Runtime: rt, Name: strings.Repeat("x", 65)}, "must be 1 to 64"},
		{codemode.Config{Runtime: rt, Session: true}, "Evaluator is nil"},
		{codemode.Config{Runtime: rt, MaxOutput: 100}, "at least 1024"},
		{codemode.Config{Runtime: rt, MaxOutput: -1}, "at least 1024"},
	} {
		if _, err := codemode.New(c.cfg); !errors.Is(err, codemode.ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%+v) = %v, want ErrInvalidConfig containing %q", c.cfg, err, c.want)
		}
	}
}

func TestOutputFits(t *testing.T) {
	big := func(s string, n int) string { return strings.Repeat(s, n) }
	manyCalls := make([]glovebox.ToolCall, 3000)
	for i := range manyCalls {
		manyCalls[i] = glovebox.ToolCall{Name: []string{"orders", "profile"}[i%2], Error: big("e", i%7)}
	}
	results := map[string]*glovebox.Result{
		"huge stdout": {Status: glovebox.StatusOK, Value: int64(1), Stdout: big("line of output\n", 20000)},
		"huge value":  {Status: glovebox.StatusOK, Value: []any{big("é", 50000), map[string]any{"k": big("\"", 30000)}}},
		"everything": {Status: glovebox.StatusError, Stdout: big("ü", 40000), Stderr: big("warn\n", 9000),
			Error:     &glovebox.GuestError{Class: "RuntimeError", Message: big("\n", 20000), Backtrace: strings.Split(big("sandbox:1,", 50), ",")},
			ToolCalls: manyCalls},
		"small": {Status: glovebox.StatusOK, Value: "fine"},
	}
	for name, res := range results {
		for _, limit := range []int{1024, 4096, 32 << 10} {
			b := codemode.Fit(res, false, limit)
			if len(b) > limit {
				t.Errorf("%s at %d: %d bytes", name, limit, len(b))
			}
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatalf("%s at %d: not JSON: %v\n%s", name, limit, err, b)
			}
			if m["status"] != string(res.Status) {
				t.Errorf("%s at %d: status %v", name, limit, m["status"])
			}
			if name == "small" {
				if string(b) != `{"status":"ok","value":"fine"}` {
					t.Errorf("small result changed: %s", b)
				}
				continue
			}
			cutFlag := m["stdout_truncated"] == true || m["value_truncated"] == true
			if !cutFlag {
				t.Errorf("%s at %d: nothing flagged as cut: %.300s", name, limit, b)
			}
			if s, ok := m["stdout"].(string); ok && strings.Contains(s, "…[cut:") && m["stdout_truncated"] != true {
				t.Errorf("%s at %d: stdout cut without its flag", name, limit)
			}
			if name == "huge value" && limit == 32<<10 {
				// What fits is used: a cut value keeps most of the room.
				if v, _ := m["value"].(string); len(v) < limit/2 {
					t.Errorf("huge value at %d kept only %d bytes of value", limit, len(v))
				}
			}
		}
	}
}

func TestApprovalVisibleToModelAndCaller(t *testing.T) {
	var ts glovebox.Toolset
	if err := ts.Func("refund", func(n int) int { return n }); err != nil {
		t.Fatal(err)
	}
	if err := ts.RequireApproval("refund"); err != nil {
		t.Fatal(err)
	}
	type who struct{}
	rt, err := glovebox.New(context.Background(), glovebox.Config{Tools: &ts, Hooks: glovebox.Hooks{
		Approver: func(ctx context.Context, _ string, args glovebox.Args) error {
			if ctx.Value(who{}) != "manager" {
				return errors.New("only a manager may refund")
			}
			return nil
		}}})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	tool, err := codemode.New(codemode.Config{Runtime: rt})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tool.Description(), "Glovebox::ToolDenied") {
		t.Fatal("the description does not say refund needs approval")
	}
	out, err := tool.Run(context.Background(), "refund(5)")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out.Output), `"approval":"denied"`) || out.Result.ToolCalls[0].Approval != "denied" {
		t.Fatalf("denied: %s", out.Output)
	}
	out, _ = tool.Run(context.WithValue(context.Background(), who{}, "manager"), "refund(5)")
	if out.Result.Status != glovebox.StatusOK || !strings.Contains(string(out.Output), `"approval":"approved"`) {
		t.Fatalf("approved: %s", out.Output)
	}
}

// A session given without Session: true is still described as one, and
// its results carry session_reset: the description says what happens.
func TestSessionEvaluatorDescribedAsSession(t *testing.T) {
	rt, _ := shopRuntime(t, glovebox.Limits{})
	gs, err := rt.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer gs.Close()
	tool, err := codemode.New(codemode.Config{Runtime: rt, Evaluator: gs})
	if err != nil {
		t.Fatal(err)
	}
	if d := tool.Description(); strings.Contains(d, "fresh Ruby VM") || !strings.Contains(d, "share one Ruby VM") {
		t.Fatalf("a session's description:\n%s", d)
	}
	if _, err := tool.Run(context.Background(), "x = 41"); err != nil {
		t.Fatal(err)
	}
	out, err := tool.Run(context.Background(), "x + 1")
	if err != nil {
		t.Fatal(err)
	}
	if string(out.Output) != `{"status":"ok","value":42,"session_reset":false}` {
		t.Fatalf("second call: %s", out.Output)
	}
	if _, err := codemode.New(codemode.Config{Runtime: rt, Evaluator: rt, Session: true}); !errors.Is(err, codemode.ErrInvalidConfig) {
		t.Fatalf("Session with a Runtime: %v", err)
	}
}

// TestSuspendedForApproval: a call the Approver suspends gives the model
// a suspended result naming the call and that it waits for approval, with
// no state in it; the Go caller continues from Result.State with
// Tool.Continue, whose Outcome the model gets next.
func TestSuspendedForApproval(t *testing.T) {
	var ts glovebox.Toolset
	if err := ts.Func("refund", func(n int) int { return n * 100 }); err != nil {
		t.Fatal(err)
	}
	ts.RequireApproval("refund")
	secret := make([]byte, 32)
	keys, _ := glovebox.NewKeyring(glovebox.StateKey{ID: "t", Secret: secret})
	rt, err := glovebox.New(context.Background(), glovebox.Config{Tools: &ts, StateKeys: keys, Hooks: glovebox.Hooks{
		Approver: func(context.Context, string, glovebox.Args) error { return glovebox.SuspendCall("a manager decides") }}})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	tool, _ := codemode.New(codemode.Config{Runtime: rt})
	out, err := tool.Run(context.Background(), `puts "asking"; refund(5) + 1`)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Status  string
		Pending struct {
			Name       string
			WaitingFor string `json:"waiting_for"`
			Args       json.RawMessage
		}
	}
	json.Unmarshal(out.Output, &m)
	if m.Status != "suspended" || !strings.Contains(m.Pending.WaitingFor, "approval") || string(m.Pending.Args) != `[[5],{}]` || !out.IsError || len(out.Result.State) == 0 {
		t.Fatalf("model sees %s", out.Output)
	}
	if bytes.Contains(out.Output, out.Result.State[:16]) || strings.Contains(string(out.Output), out.Result.Pending.ID) {
		t.Fatalf("the state or its id reached the model: %s", out.Output)
	}
	out, err = tool.Continue(context.Background(), out.Result.State, glovebox.Answer{Approved: true})
	if err != nil || out.Result.Status != glovebox.StatusOK || out.Result.Value != int64(501) || !strings.Contains(string(out.Output), `"approval":"approved"`) {
		t.Fatalf("continued: %v %s", err, out.Output)
	}
}
