package mcpserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/mcpserver"
)

// transfers counts runs of the "transfer" tool, which needs approval.
var transfers atomic.Int32

// stateKeys seal the test Runtimes' states: one key, as processes that
// serve one client share.
var stateKeys = func() *glovebox.Keyring {
	k, err := glovebox.NewKeyring(glovebox.StateKey{ID: "test", Secret: make([]byte, 32)})
	if err != nil {
		panic(err)
	}
	return k
}()

// newRuntime makes a Runtime with a tool that needs approval, one that
// does not, a mount, and limits.
func newRuntime(t testing.TB, limits glovebox.Limits) (*glovebox.Runtime, string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("hello from the mount\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var ts glovebox.Toolset
	if err := ts.Func("transfer", func(n int) int { transfers.Add(1); return n }); err != nil {
		t.Fatal(err)
	}
	if err := ts.Func("balance", func() int { return 10 }); err != nil {
		t.Fatal(err)
	}
	if err := ts.RequireApproval("transfer"); err != nil {
		t.Fatal(err)
	}
	if err := mcpserver.ClientTools(&ts); err != nil {
		t.Fatal(err)
	}
	rt, err := glovebox.New(context.Background(), glovebox.Config{Limits: limits, Tools: &ts, PoolSize: -1, StateKeys: stateKeys,
		Mounts: []glovebox.Mount{{HostPath: dir, GuestPath: "/data"}}, Hooks: glovebox.Hooks{Approver: mcpserver.Approve}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt, dir
}

func newServer(t testing.TB, limits glovebox.Limits, opts mcpserver.Options) (*mcpserver.Server, string) {
	t.Helper()
	rt, dir := newRuntime(t, limits)
	opts.Runtime = rt
	s, err := mcpserver.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, dir
}

// legacy makes a go-sdk client connect with the initialize handshake of
// MCP 2025-11-25 (a session, elicitation during a call) instead of the
// SDK's default, the stateless 2026-07-28.
var legacy = &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"}

// connect connects a go-sdk client to s in memory, at 2025-11-25.
func connect(t testing.TB, s *mcpserver.Server, copts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	ct, st := mcp.NewInMemoryTransports()
	ctx := context.Background()
	if _, err := s.MCP().Connect(ctx, st, nil); err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, copts).Connect(ctx, ct, legacy)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func call(t testing.TB, cs *mcp.ClientSession, tool, code string) *mcp.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"code": code}})
	if err != nil {
		t.Fatalf("%s %q: protocol error %v", tool, code, err)
	}
	return res
}

func text(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func structured(t testing.TB, r *mcp.CallToolResult) map[string]any {
	t.Helper()
	m, ok := r.StructuredContent.(map[string]any)
	if !ok {
		t.Fatalf("structuredContent is %T: %v", r.StructuredContent, r.StructuredContent)
	}
	return m
}

// outputSchema returns run_ruby's outputSchema as the client listed it.
func outputSchema(t testing.TB, cs *mcp.ClientSession) *jsonschema.Resolved {
	t.Helper()
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools.Tools {
		if tool.Name == mcpserver.ToolRun {
			b, _ := json.Marshal(tool.OutputSchema)
			var s jsonschema.Schema
			if err := json.Unmarshal(b, &s); err != nil {
				t.Fatal(err)
			}
			r, err := s.Resolve(nil)
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
	}
	t.Fatal("run_ruby not listed")
	return nil
}

func TestToolsListed(t *testing.T) {
	s, _ := newServer(t, glovebox.Limits{}, mcpserver.Options{})
	cs := connect(t, s, nil)
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
	}
	if strings.Join(names, ",") != "ruby_session,ruby_session_reset,run_ruby" {
		t.Fatalf("tools %v", names)
	}
	for _, tool := range tools.Tools {
		if tool.Name == mcpserver.ToolRun && !strings.Contains(tool.Description, "transfer") {
			t.Fatalf("run_ruby's description does not name the functions: %s", tool.Description)
		}
		if tool.Name == mcpserver.ToolSession && !strings.Contains(tool.Description, "keeps state") {
			t.Fatalf("ruby_session's description does not say it keeps state")
		}
	}
	if ins := cs.InitializeResult().Instructions; !strings.Contains(ins, "sandbox") {
		t.Fatalf("instructions %q", ins)
	}
}

// Every status is a tool result, flagged isError unless ok, and its
// structuredContent validates against the outputSchema.
func TestEveryStatusIsAResult(t *testing.T) {
	s, _ := newServer(t, glovebox.Limits{Timeout: time.Second, Fuel: 2e8, ToolCalls: 3}, mcpserver.Options{})
	cs := connect(t, s, nil)
	schema := outputSchema(t, cs)
	for _, tc := range []struct{ code, status, class string }{
		{"puts 'hi'; 6*7", "ok", ""},
		{`raise ArgumentError, "boom"`, "error", "ArgumentError"},
		{"sleep 5", "timeout", "Glovebox::Timeout"},
		{"loop {}", "fuel_exhausted", "Glovebox::FuelExhausted"},
		{`"a" * (1 << 30)`, "memory_limit", ""},
		{"5.times { balance }", "tool_budget_exceeded", "Glovebox::ToolBudgetExceeded"},
		// sandbox_error, the engine's own failure, has no program that
		// causes it on purpose; the schema test above covers its shape.
		{"exit!", "error", "SystemExit"},
		{"  ", "invalid_input", "InvalidInput"},
	} {
		res := call(t, cs, mcpserver.ToolRun, tc.code)
		m := structured(t, res)
		if m["status"] != tc.status || res.IsError != (tc.status != "ok") {
			t.Errorf("%q: status %v isError %v, want %s\n%s", tc.code, m["status"], res.IsError, tc.status, text(res))
			continue
		}
		if tc.class != "" && m["error"].(map[string]any)["class"] != tc.class {
			t.Errorf("%q: class %v, want %s", tc.code, m["error"], tc.class)
		}
		if err := schema.Validate(m); err != nil {
			t.Errorf("%q: structuredContent does not validate against the outputSchema: %v", tc.code, err)
		}
		if text(res) == "" {
			t.Errorf("%q: no text content", tc.code)
		}
	}
}

// The text rendering carries integers exactly (the raw structuredContent
// is checked over HTTP in TestBigIntegersExactOnTheWire).
func TestBigIntegersExactInText(t *testing.T) {
	s, _ := newServer(t, glovebox.Limits{}, mcpserver.Options{})
	cs := connect(t, s, nil)
	res := call(t, cs, mcpserver.ToolRun, "[2**64, -2**63, 2**100]")
	if got := text(res); got != "=> [18446744073709551616,-9223372036854775808,1267650600228229401496703205376]" {
		t.Fatalf("text %q", got)
	}
}

func TestCancelStopsLoop(t *testing.T) {
	s, _ := newServer(t, glovebox.Limits{Timeout: time.Minute}, mcpserver.Options{})
	cs := connect(t, s, nil)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: mcpserver.ToolSession, Arguments: map[string]any{"code": "loop {}"}})
		errc <- err
	}()
	time.Sleep(300 * time.Millisecond) // let the loop start
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("the canceled call returned %v", err)
	}
	// The session's VM is free again: the next call runs (it would wait
	// behind the loop otherwise, until the minute-long timeout).
	start := time.Now()
	res := call(t, cs, mcpserver.ToolSession, "1")
	t.Logf("next call answered %v after the cancel", time.Since(start))
	if m := structured(t, res); m["status"] != "ok" || time.Since(start) > 10*time.Second {
		t.Fatalf("after cancel: %v", text(res))
	}
}

func TestProgressAndLogging(t *testing.T) {
	s, _ := newServer(t, glovebox.Limits{}, mcpserver.Options{ProgressInterval: 50 * time.Millisecond})
	var got, logged atomic.Int32
	cs := connect(t, s, &mcp.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
		if r.Params.ProgressToken == "tok" {
			got.Add(1)
		}
	}, LoggingMessageHandler: func(_ context.Context, r *mcp.LoggingMessageRequest) {
		if m, ok := r.Params.Data.(map[string]any); ok && m["status"] == "ok" && m["tool"] == mcpserver.ToolRun {
			logged.Add(1)
		}
	}})
	if err := cs.SetLoggingLevel(context.Background(), &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
		t.Fatal(err)
	}
	p := &mcp.CallToolParams{Name: mcpserver.ToolRun, Arguments: map[string]any{"code": "sleep 0.5; 1"}}
	p.SetProgressToken("tok")
	if _, err := cs.CallTool(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	for i := 0; got.Load() == 0; i++ {
		if i == 500 {
			t.Fatal("no progress notification arrived")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The client handles notifications on its own goroutine: wait for it.
	for i := 0; logged.Load() == 0; i++ {
		if i == 500 {
			t.Fatal("no log message about the call arrived")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := logged.Load(); n != 1 {
		t.Fatalf("%d log messages about the call, want 1", n)
	}
}

func TestSessionsAreSeparate(t *testing.T) {
	s, _ := newServer(t, glovebox.Limits{}, mcpserver.Options{})
	a, b := connect(t, s, nil), connect(t, s, nil)
	call(t, a, mcpserver.ToolSession, `$secret = "A"; x = 41`)
	call(t, b, mcpserver.ToolSession, `$secret = "B"`)
	if got := text(call(t, a, mcpserver.ToolSession, `[$secret, x + 1]`)); got != `=> ["A",42]` {
		t.Fatalf("a sees %s", got)
	}
	if got := text(call(t, b, mcpserver.ToolSession, `[$secret, defined?(x)]`)); got != `=> ["B",null]` {
		t.Fatalf("b sees %s", got)
	}
	if got := text(call(t, a, mcpserver.ToolRun, `$secret`)); got != "=> null" {
		t.Fatalf("run_ruby sees session state: %s", got)
	}
	if _, err := a.CallTool(context.Background(), &mcp.CallToolParams{Name: mcpserver.ToolSessionReset}); err != nil {
		t.Fatal(err)
	}
	res := call(t, a, mcpserver.ToolSession, `$secret`)
	if got := text(res); !strings.HasSuffix(got, "=> null") {
		t.Fatalf("after reset a sees %s", got)
	}
	if m := structured(t, res); m["session_reset"] != true || !strings.Contains(m["session_reset_reason"].(string), mcpserver.ToolSessionReset) {
		t.Fatalf("the call after a reset does not report it: %v", m)
	}
}

func TestSessionEndFreesVM(t *testing.T) {
	s, _ := newServer(t, glovebox.Limits{}, mcpserver.Options{})
	cs := connect(t, s, nil)
	call(t, cs, mcpserver.ToolSession, "x = 1")
	if n := s.LiveSessions(); n != 1 {
		t.Fatalf("%d live sessions, want 1", n)
	}
	cs.Close()
	for i := 0; s.LiveSessions() != 0; i++ {
		if i == 500 {
			t.Fatal("the session's VM was not freed after the MCP session ended")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// An idle session's VM is suspended, not held: its state comes back at
// the next call. One that cannot be suspended (a file kept open) is
// freed, and the next result says its state was lost.
func TestSessionIdleFreesVM(t *testing.T) {
	s, _ := newServer(t, glovebox.Limits{}, mcpserver.Options{SessionIdle: 200 * time.Millisecond})
	waitFreed := func() {
		t.Helper()
		for i := 0; s.LiveSessions() != 0; i++ {
			if i == 500 {
				t.Fatal("the idle session's VM was not freed")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	cs := connect(t, s, nil)
	call(t, cs, mcpserver.ToolSession, "x = 41")
	waitFreed()
	if got := text(call(t, cs, mcpserver.ToolSession, "x + 1")); got != "=> 42" {
		t.Fatalf("after idle suspension: %q", got)
	}
	open := connect(t, s, nil)
	call(t, open, mcpserver.ToolSession, `y = 1; $f = File.open("/data/notes.txt")`)
	waitFreed()
	if got := text(call(t, open, mcpserver.ToolSession, "defined?(y)")); !strings.Contains(got, "fresh one") || !strings.HasSuffix(got, "=> null") {
		t.Fatalf("after idle expiry with a file open: %q", got)
	}
}

func TestApprovalThroughElicitation(t *testing.T) {
	s, _ := newServer(t, glovebox.Limits{}, mcpserver.Options{})
	var asked atomic.Value
	yes := connect(t, s, &mcp.ClientOptions{ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		asked.Store(r.Params.Message)
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}, nil
	}})
	no := connect(t, s, &mcp.ClientOptions{ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		return &mcp.ElicitResult{Action: "decline"}, nil
	}})
	none := connect(t, s, nil)
	before := transfers.Load()
	if got := text(call(t, yes, mcpserver.ToolRun, "transfer(5)")); got != "=> 5\ncalled transfer" {
		t.Fatalf("approved: %q", got)
	}
	if msg, _ := asked.Load().(string); !strings.Contains(msg, "transfer") || !strings.Contains(msg, "[5]") {
		t.Fatalf("the request shown was %q", msg)
	}
	res := call(t, no, mcpserver.ToolRun, "begin; transfer(5); rescue Glovebox::ToolDenied => e; e.message; end")
	if got := text(res); !strings.HasPrefix(got, `=> "the user declined the call"`) {
		t.Fatalf("declined: %q", got)
	}
	res = call(t, none, mcpserver.ToolRun, "transfer(5)")
	m := structured(t, res)
	if !res.IsError || m["error"].(map[string]any)["class"] != "Glovebox::ToolDenied" || !strings.Contains(text(res), "does not support elicitation") {
		t.Fatalf("without elicitation: %s", text(res))
	}
	if n := transfers.Load() - before; n != 1 {
		t.Fatalf("transfer ran %d times, want 1", n)
	}
}

func TestMountResources(t *testing.T) {
	s, dir := newServer(t, glovebox.Limits{}, mcpserver.Options{})
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "escape")); err != nil {
		t.Fatal(err)
	}
	cs := connect(t, s, nil)
	ctx := context.Background()
	list, err := cs.ListResources(ctx, nil)
	if err != nil || len(list.Resources) != 1 || list.Resources[0].URI != "file:///data/" {
		t.Fatalf("resources %+v %v", list, err)
	}
	r, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "file:///data/"})
	if err != nil || !strings.Contains(r.Contents[0].Text, "notes.txt") {
		t.Fatalf("listing %+v %v", r, err)
	}
	r, err = cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "file:///data/notes.txt"})
	if err != nil || r.Contents[0].Text != "hello from the mount\n" {
		t.Fatalf("read %+v %v", r, err)
	}
	for _, uri := range []string{"file:///data/escape", "file:///data/../etc/passwd", "file:///data/nope.txt"} {
		if r, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri}); err == nil {
			t.Errorf("%s was readable: %+v", uri, r.Contents[0])
		}
	}
	big := make([]byte, mcpserver.MaxResourceBytes+1)
	if err := os.WriteFile(filepath.Join(dir, "big.bin"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "file:///data/big.bin"}); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("an oversized file: %v", err)
	}
}

func TestHTTPClient(t *testing.T) {
	s, _ := newServer(t, glovebox.Limits{}, mcpserver.Options{})
	url, _ := serveHTTP(t, s, "secret")
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: url, HTTPClient: bearer("secret")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if got := text(call(t, cs, mcpserver.ToolRun, "6*7")); got != "=> 42" {
		t.Fatalf("over HTTP: %q", got)
	}
}

// One more session than MaxSessions gets an error result, not a VM; when
// a session ends its slot is free again. run_ruby keeps working.
func TestMaxSessions(t *testing.T) {
	s, _ := newServer(t, glovebox.Limits{}, mcpserver.Options{MaxSessions: 1})
	a, b := connect(t, s, nil), connect(t, s, nil)
	call(t, a, mcpserver.ToolSession, "x = 1")
	if res := call(t, b, mcpserver.ToolSession, "1"); !res.IsError || !strings.Contains(text(res), "--max-sessions") {
		t.Fatalf("a second session was served: %s", text(res))
	}
	if got := text(call(t, b, mcpserver.ToolRun, "1 + 1")); got != "=> 2" {
		t.Fatalf("run_ruby: %s", got)
	}
	a.Close()
	for i := 0; ; i++ {
		res := call(t, b, mcpserver.ToolSession, "41 + 1")
		if !res.IsError {
			break
		}
		if i == 500 {
			t.Fatalf("the slot was not freed after the first session ended: %s", text(res))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestApprovalAnsweredTooLateNeverRuns: a person who accepts after the
// approval's time is up (Limits.ApprovalTimeout), or after the client
// canceled the call, does not make the tool run: the call is recorded as
// not run and the program sees why.
func TestApprovalAnsweredTooLateNeverRuns(t *testing.T) {
	s, _ := newServer(t, glovebox.Limits{ApprovalTimeout: 300 * time.Millisecond}, mcpserver.Options{})
	asking, answered := make(chan struct{}, 2), make(chan struct{}, 2)
	slow := connect(t, s, &mcp.ClientOptions{ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		asking <- struct{}{}
		defer func() { answered <- struct{}{} }()
		time.Sleep(time.Second) // the person takes their time, whatever the server says
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"approve": true}}, nil
	}})
	before := transfers.Load()
	res := call(t, slow, mcpserver.ToolRun, "begin; transfer(5); rescue Glovebox::ToolDenied => e; e.message; end")
	if got := text(res); !strings.Contains(got, "no decision within 300ms") {
		t.Fatalf("approval after its time: %q", got)
	}
	<-asking
	<-answered
	// The client cancels the call while the person decides.
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := slow.CallTool(ctx, &mcp.CallToolParams{Name: mcpserver.ToolRun, Arguments: map[string]any{"code": "transfer(6)"}})
		errc <- err
	}()
	<-asking
	cancel()
	<-errc
	<-answered
	time.Sleep(200 * time.Millisecond) // anything the late answer set off has happened by now
	if n := transfers.Load() - before; n != 0 {
		t.Fatalf("transfer ran %d times on an answer that came too late", n)
	}
}
