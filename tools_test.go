package glovebox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox"
)

// newRuntime makes a Runtime with its own tools and hooks; it shares the
// test process's engine.
func newRuntime(t *testing.T, cfg glovebox.Config) *glovebox.Runtime {
	t.Helper()
	r, err := glovebox.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

type account struct{ plan string }

func (a *account) UserInfo() map[string]any { return map[string]any{"plan": a.plan, "id": 7} }
func (a *account) ChangePlan(p string) (map[string]any, error) {
	if p == "" {
		return nil, errors.New("plan must not be empty")
	}
	a.plan = p
	return map[string]any{"success": true, "plan": p}, nil
}
func (a *account) HTTPGet(url string) string  { return "GET " + url }
func (a *account) Reset()                     { a.plan = "" }
func (a *account) Internal(ch chan int)       {} // not exposable: a chan parameter
func (a *account) TooMany() (int, int, error) { return 0, 0, nil }

type ceilinged struct{ account }

func (c *ceilinged) ToolMethods() []string { return []string{"UserInfo", "change_plan"} }

func TestObjectSurface(t *testing.T) {
	cases := []struct {
		name string
		obj  any
		opts []glovebox.ObjectOption
		want []string
		err  string
	}{
		{"all", &account{}, nil, []string{"change_plan", "http_get", "reset", "user_info"}, ""},
		{"only", &account{}, []glovebox.ObjectOption{glovebox.Only("user_info", "ChangePlan")}, []string{"change_plan", "user_info"}, ""},
		{"except", &account{}, []glovebox.ObjectOption{glovebox.Except("reset")}, []string{"change_plan", "http_get", "user_info"}, ""},
		{"only typo", &account{}, []glovebox.ObjectOption{glovebox.Only("user_inf")}, nil, `Only names "user_inf"`},
		{"except typo", &account{}, []glovebox.ObjectOption{glovebox.Except("rest")}, nil, `Except names "rest"`},
		{"unexposable named", &account{}, []glovebox.ObjectOption{glovebox.Only("internal")}, nil, `not an exposable method`},
		{"ceiling", &ceilinged{}, nil, []string{"change_plan", "user_info"}, ""},
		{"ceiling beats except", &ceilinged{}, []glovebox.ObjectOption{glovebox.Except("user_info")}, []string{"change_plan"}, ""},
		{"ceiling beats only", &ceilinged{}, []glovebox.ObjectOption{glovebox.Only("reset")}, nil, "ceiling does not allow"},
		{"except outside ceiling", &ceilinged{}, []glovebox.ObjectOption{glovebox.Except("reset")}, []string{"change_plan", "user_info"}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var ts glovebox.Toolset
			err := ts.Object(c.obj, c.opts...)
			if c.err != "" {
				if err == nil || !errors.Is(err, glovebox.ErrInvalidTool) || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want one containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := ts.Names(); !reflect.DeepEqual(got, c.want) {
				t.Fatalf("names %v, want %v", got, c.want)
			}
		})
	}
	// The guest sees exactly that surface: the ceiling's hidden method is
	// not callable, and nor is anything else.
	var ts glovebox.Toolset
	if err := ts.Object(&ceilinged{}); err != nil {
		t.Fatal(err)
	}
	r := newRuntime(t, glovebox.Config{Tools: &ts})
	if got := r.Tools(); !reflect.DeepEqual(got, []string{"change_plan", "user_info"}) {
		t.Fatalf("Tools() = %v", got)
	}
	res := eval(t, r, `[respond_to?(:user_info, true), respond_to?(:reset, true), (reset rescue $!.class.name), (Glovebox.call("reset") rescue $!.class.name)]`)
	wantStatus(t, res, glovebox.StatusOK)
	if !equalValue(res.Value, []any{true, false, "NameError", "Glovebox::UnknownToolError"}) {
		t.Fatalf("got %v", res.Value)
	}
}

func TestToolNames(t *testing.T) {
	var ts glovebox.Toolset
	f := func() int { return 1 }
	for _, bad := range []string{"", "Orders", "9lives", "has-dash", "sp ace", "puts", "require", "send", "class", "def", "__x", "a??", "é",
		"to_str", "to_ary", "to_s", "include", "private", "using", "define_method", "each", "call", "coerce",
		"exception", "dig", "_dump", "_load", "succ", "_1", "_9", "it"} {
		if err := ts.Func(bad, f); !errors.Is(err, glovebox.ErrInvalidTool) {
			t.Errorf("name %q accepted (err %v)", bad, err)
		}
	}
	for _, good := range []string{"orders", "valid?", "save!", "_private", "getX2"} {
		if err := ts.Func(good, f); err != nil {
			t.Errorf("name %q refused: %v", good, err)
		}
	}
	if err := ts.Func("orders", f); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("duplicate accepted: %v", err)
	}
	var other glovebox.Toolset
	other.Func("orders", f)
	if err := ts.Merge(&other); !errors.Is(err, glovebox.ErrInvalidTool) {
		t.Errorf("merge duplicate: %v", err)
	}
	if err := ts.Func("bad_sig", func() (int, int) { return 1, 2 }); !errors.Is(err, glovebox.ErrInvalidTool) {
		t.Errorf("bad signature accepted: %v", err)
	}
	if err := ts.Func("not_func", 3); !errors.Is(err, glovebox.ErrInvalidTool) {
		t.Errorf("non-function accepted: %v", err)
	}
	for in, want := range map[string]string{"UserInfo": "user_info", "HTTPGet": "http_get", "GetURLs": "get_urls", "ID": "id", "Search2": "search2", "UserID": "user_id"} {
		if got := glovebox.SnakeCase(in); got != want {
			t.Errorf("SnakeCase(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestToolDataCrossing(t *testing.T) {
	var ts glovebox.Toolset
	var got glovebox.Args
	ts.Add("echo", func(ctx context.Context, a glovebox.Args) (any, error) {
		got = a
		return a.Positional, nil
	})
	huge, _ := new(big.Int).SetString("123456789012345678901234567890", 10)
	ts.Func("big", func() *big.Int { return huge })
	ts.Func("add", func(a, b int) int { return a + b })
	ts.Func("scale", func(x float64, by int8) float64 { return x * float64(by) })
	type item struct {
		Name string   `json:"name"`
		Tags []string `json:"tags,omitempty"`
	}
	ts.Func("items", func(filter item) []item { return []item{filter, {Name: "b"}} })
	ts.Func("chan_result", func() chan int { return make(chan int) })
	ts.Func("func_result", func() any { return func() {} })
	ts.Func("cyclic", func() any { m := map[string]any{}; m["self"] = m; return m })
	ts.Func("nan", func() []float64 { return []float64{0.5, 2} })
	r := newRuntime(t, glovebox.Config{Tools: &ts})

	res := eval(t, r, `echo(:sym, [:a, {b: :c}], 2**80, 1.5, nil, "é", k: {nested: [:x]})`)
	wantStatus(t, res, glovebox.StatusOK)
	b80 := new(big.Int).Lsh(big.NewInt(1), 80)
	wantArgs := []any{"sym", []any{"a", map[string]any{"b": "c"}}, b80, 1.5, nil, "é"}
	if !reflect.DeepEqual(got.Positional[:2], wantArgs[:2]) || got.Positional[2].(*big.Int).Cmp(b80) != 0 ||
		!reflect.DeepEqual(got.Positional[3:], wantArgs[3:]) {
		t.Fatalf("positional %#v", got.Positional)
	}
	if !reflect.DeepEqual(got.Keyword, map[string]any{"k": map[string]any{"nested": []any{"x"}}}) {
		t.Fatalf("keyword %#v", got.Keyword)
	}

	res = eval(t, r, `[big == 123456789012345678901234567890, big.class.name, add(2, 3), scale(1.5, 4), items({"name" => "a", "tags" => ["x"]})]`)
	wantStatus(t, res, glovebox.StatusOK)
	want := []any{true, "Integer", int64(5), 6.0, []any{map[string]any{"name": "a", "tags": []any{"x"}}, map[string]any{"name": "b"}}}
	if !reflect.DeepEqual(res.Value, want) {
		t.Fatalf("got %#v", res.Value)
	}

	for code, wantMsg := range map[string]string{
		`chan_result`:      "chan int",
		`func_result`:      "func()",
		`cyclic`:           "cyclic",
		`add(1)`:           "wrong number of arguments (given 1, expected 2)",
		`add("x", 1)`:      "cannot use a String as int",
		`scale(1.0, 1000)`: "1000 overflows int8",
	} {
		res := eval(t, r, `begin; `+code+`; rescue TypeError, ArgumentError => e; [e.class.name, e.message]; end`)
		wantStatus(t, res, glovebox.StatusOK)
		v, _ := res.Value.([]any)
		if len(v) != 2 || !strings.Contains(v[1].(string), wantMsg) {
			t.Errorf("%s: got %v, want a message containing %q", code, res.Value, wantMsg)
		}
	}
}

func TestToolErrorsAndPanics(t *testing.T) {
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	var ts glovebox.Toolset
	ts.Func("fails", func() error { return errors.New("db password=hunter2 rejected") })
	ts.Func("panics", func() int { panic("kaboom in tool") })
	ts.Func("ok", func() string { return "fine" })
	r := newRuntime(t, glovebox.Config{Tools: &ts, Logger: logger})

	res := eval(t, r, `
		a = begin; fails; rescue Glovebox::ToolError => e; e.message; end
		b = begin; panics; rescue Glovebox::ToolError => e; e.message; end
		c = begin; Glovebox.call("nope"); rescue Glovebox::UnknownToolError => e; e.message; end
		[a, b, c, ok, Glovebox::ToolError.ancestors.include?(StandardError)]`)
	wantStatus(t, res, glovebox.StatusOK)
	v := res.Value.([]any)
	if v[0] != "db password=hunter2 rejected" || v[1] != "tool call failed" || !strings.Contains(v[2].(string), `no tool named "nope"`) || v[3] != "fine" || v[4] != true {
		t.Fatalf("got %#v", v)
	}
	if !strings.Contains(logs.String(), "kaboom in tool") || !strings.Contains(logs.String(), "tools_test.go") {
		t.Fatalf("the host log lacks the panic and its stack: %s", logs.String())
	}
	if strings.Contains(res.Stdout+res.Stderr, "kaboom") {
		t.Fatal("the panic value reached the guest")
	}
}

func TestOptionsBagMayBeOmitted(t *testing.T) {
	type query struct {
		Status string `json:"status"`
		Limit  int    `json:"limit"`
	}
	var ts glovebox.Toolset
	must(t, ts.Func("orders", func(q query) string { return fmt.Sprintf("%s/%d", q.Status, q.Limit) }))
	must(t, ts.Func("pick", func(n int, opts map[string]any) int { return n + len(opts) }))
	must(t, ts.Func("two", func(a, b string) string { return a + b }))
	r := newRuntime(t, glovebox.Config{Tools: &ts})
	res := eval(t, r, `[orders, orders(status: "shipped", limit: 2), pick(1), pick(1, a: 1), (two("x") rescue $!.class.name)]`)
	wantStatus(t, res, glovebox.StatusOK)
	if !equalValue(res.Value, []any{"/0", "shipped/2", int64(1), int64(2), "ArgumentError"}) {
		t.Fatalf("got %v", res.Value)
	}
}

func TestToolErrorClasses(t *testing.T) {
	var ts glovebox.Toolset
	ts.Func("blocked", func() error {
		return fmt.Errorf("dial: %w", &glovebox.ToolError{Class: "BlockedError", Message: "10.0.0.1 is private"})
	})
	ts.Func("odd", func(class string) error { return &glovebox.ToolError{Class: class, Message: "odd class"} })
	r := newRuntime(t, glovebox.Config{Tools: &ts, Hooks: glovebox.Hooks{SanitizeError: func(string, error) string { return "sanitized" }}})
	res := eval(t, r, `
		z = begin; ok_never_raises = 1; rescue Glovebox::NeverRaisedError; 2; end
		n = (Glovebox::NotAnErrorName rescue $!.class.name)
		a = begin; blocked; rescue Glovebox::BlockedError => e; [e.class.name, e.message, e.is_a?(Glovebox::ToolError)]; end
		b = begin; blocked; rescue Glovebox::ToolError => e; e.class.name; end
		module Glovebox; Taken = 5; end
		c = ["lower", "TypeError", "Taken", "A" * 65, "Bad-Name", "ToolError"].map { |k| begin; odd(k); rescue Glovebox::ToolError => e; e.class.name; end }
		[a, b, c, z, n, Glovebox::NeverRaisedError.superclass.name]`)
	wantStatus(t, res, glovebox.StatusOK)
	want := []any{
		[]any{"Glovebox::BlockedError", "10.0.0.1 is private", true},
		"Glovebox::BlockedError",
		[]any{"Glovebox::ToolError", "Glovebox::ToolError", "Glovebox::ToolError", "Glovebox::ToolError", "Glovebox::ToolError", "Glovebox::ToolError"},
		int64(1), "NameError", "Glovebox::ToolError",
	}
	if !reflect.DeepEqual(res.Value, want) {
		t.Fatalf("got %#v", res.Value)
	}
	if res.ToolCalls[0].Error != "10.0.0.1 is private" {
		t.Fatalf("transcript error %q", res.ToolCalls[0].Error)
	}
}

func TestHooks(t *testing.T) {
	var ts glovebox.Toolset
	ts.Func("secret_op", func(n int) (int, error) {
		if n < 0 {
			return 0, errors.New("internal: /srv/db.sqlite locked")
		}
		return n * 2, nil
	})
	var mu sync.Mutex
	var seen []glovebox.ToolCall
	sanitize := func(tool string, err error) string { return tool + " failed" }
	hooks := glovebox.Hooks{
		BeforeCall: func(ctx context.Context, tool string, args glovebox.Args) error {
			if n, _ := args.Positional[0].(int64); n == 13 {
				return errors.New("13 is vetoed: unlucky (path /srv/x)")
			}
			return nil
		},
		AfterCall: func(ctx context.Context, c glovebox.ToolCall) {
			mu.Lock()
			seen = append(seen, c)
			mu.Unlock()
		},
		SanitizeError: sanitize,
	}
	r := newRuntime(t, glovebox.Config{Tools: &ts, Hooks: hooks})
	res := eval(t, r, `
		r = []
		r << secret_op(2)
		r << (secret_op(13) rescue $!.message)
		r << (secret_op(-1) rescue $!.message)
		r`)
	wantStatus(t, res, glovebox.StatusOK)
	want := []any{int64(4), "13 is vetoed: unlucky (path /srv/x)", "secret_op failed"}
	if !reflect.DeepEqual(res.Value, want) {
		t.Fatalf("got %#v", res.Value)
	}
	if len(seen) != 3 || seen[0].Result != 4 || seen[1].Error == "" || seen[2].Error != "secret_op failed" || seen[0].Duration <= 0 {
		t.Fatalf("AfterCall saw %+v", seen)
	}
	if !reflect.DeepEqual(res.ToolCalls, seen) {
		t.Fatalf("transcript %+v differs from AfterCall's %+v", res.ToolCalls, seen)
	}

	// Sanitizer fallbacks: a panicking or empty sanitizer gives the generic message.
	for name, s := range map[string]func(string, error) string{
		"panics": func(string, error) string { panic("sanitizer bug") },
		"empty":  func(string, error) string { return "" },
	} {
		r := newRuntime(t, glovebox.Config{Tools: &ts, Hooks: glovebox.Hooks{SanitizeError: s},
			Logger: slog.New(slog.DiscardHandler)})
		res := eval(t, r, `secret_op(-1) rescue $!.message`)
		if res.Value != "tool call failed" {
			t.Errorf("%s sanitizer: guest saw %v", name, res.Value)
		}
	}
}

func TestToolBudgets(t *testing.T) {
	var ts glovebox.Toolset
	ts.Func("ping", func() int { return 1 })
	ts.Func("slow", func(ctx context.Context) string {
		select {
		case <-time.After(300 * time.Millisecond):
			return "done"
		case <-ctx.Done():
			return "cancelled"
		}
	})
	ts.Func("big_result", func(n int) string { return strings.Repeat("x", n) })
	ts.Func("take", func(s string) int { return len(s) })
	r := newRuntime(t, glovebox.Config{Tools: &ts, Limits: glovebox.Limits{
		ToolCalls: 10, ToolTime: 500 * time.Millisecond, ToolPayload: 10_000,
	}})
	cases := []struct{ name, code, msg string }{
		{"calls", `begin; 11.times { ping }; rescue Exception; :rescued; end`, "more than 10 tool calls"},
		{"time", `begin; 3.times { slow }; rescue Exception; :rescued; end`, "tool-time budget"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := eval(t, r, c.code)
			wantStatus(t, res, glovebox.StatusToolBudgetExceeded)
			if res.Error.Class != "Glovebox::ToolBudgetExceeded" || !strings.Contains(res.Error.Message, c.msg) {
				t.Fatalf("error %+v", res.Error)
			}
		})
	}
	res := eval(t, r, `10.times.map { ping }.sum`)
	wantStatus(t, res, glovebox.StatusOK)
	if len(res.ToolCalls) != 10 {
		t.Fatalf("transcript has %d calls", len(res.ToolCalls))
	}
	// One call's payload over ToolPayload is that call's error, which the
	// guest rescues; the eval goes on (TestOversizedPayloadIsRescuable).
	res = eval(t, r, `[(big_result(20_000) rescue $!.class), (take("y" * 20_000) rescue $!.class), take("y")].inspect`)
	wantStatus(t, res, glovebox.StatusOK)
	if res.Value != "[Glovebox::ToolPayloadError, Glovebox::ToolPayloadError, 1]" {
		t.Fatalf("value %v", res.Value)
	}
}

func TestToolSeesCancellation(t *testing.T) {
	var ts glovebox.Toolset
	observed := make(chan error, 1)
	ts.Func("wait", func(ctx context.Context) string {
		<-ctx.Done()
		observed <- ctx.Err()
		return "late"
	})
	r := newRuntime(t, glovebox.Config{Tools: &ts, Limits: glovebox.Limits{Timeout: 300 * time.Millisecond}})
	res := eval(t, r, `wait`)
	wantStatus(t, res, glovebox.StatusTimeout)
	if err := <-observed; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("tool saw %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	res, _ = r.Eval(ctx, `wait`)
	wantStatus(t, res, glovebox.StatusCanceled)
	if err := <-observed; !errors.Is(err, context.Canceled) {
		t.Fatalf("tool saw %v", err)
	}
}

func TestTranscriptJSON(t *testing.T) {
	var ts glovebox.Toolset
	ts.Func("double", func(n int) int { return n * 2 })
	r := newRuntime(t, glovebox.Config{Tools: &ts})
	res := eval(t, r, `double(21) + (double("x") rescue 0)`)
	wantStatus(t, res, glovebox.StatusOK)
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		ToolCalls []struct {
			Name       string         `json:"name"`
			Args       []any          `json:"args"`
			Kwargs     map[string]any `json:"kwargs"`
			Result     any            `json:"result"`
			Error      string         `json:"error"`
			DurationMS *float64       `json:"duration_ms"`
		} `json:"tool_calls"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	c := out.ToolCalls
	if len(c) != 2 || c[0].Name != "double" || c[0].Result != 42.0 || c[0].Args[0] != 21.0 || c[0].DurationMS == nil ||
		c[1].Error == "" || c[1].Result != nil {
		t.Fatalf("tool_calls %s", b)
	}
}
