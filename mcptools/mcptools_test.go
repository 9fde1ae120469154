package mcptools_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/mcptools"
)

// edge returns a Server running this test binary as the go-sdk edge server.
func edge(t *testing.T, name string, env ...string) mcptools.Server {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return mcptools.Server{Name: name, Command: []string{exe}, Env: append(os.Environ(), append([]string{"MCPTOOLS_TEST_SERVER=" + name}, env...)...)}
}

func bind(t *testing.T, ts *glovebox.Toolset, servers ...mcptools.Server) *mcptools.Binding {
	t.Helper()
	b, err := mcptools.Bind(context.Background(), ts, mcptools.Config{RestartBackoff: 10 * time.Millisecond}, servers...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func runtime(t *testing.T, ts *glovebox.Toolset, l glovebox.Limits) *glovebox.Runtime {
	t.Helper()
	rt, err := glovebox.New(context.Background(), glovebox.Config{Tools: ts, Limits: l, PoolSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt
}

func eval(t *testing.T, rt *glovebox.Runtime, code string) *glovebox.Result {
	t.Helper()
	res, err := rt.Eval(context.Background(), code)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func wantOK(t *testing.T, res *glovebox.Result) any {
	t.Helper()
	if res.Status != glovebox.StatusOK {
		t.Fatalf("status %v: %+v\nstdout: %s", res.Status, res.Error, res.Stdout)
	}
	return res.Value
}

func TestEdges(t *testing.T) {
	var ts glovebox.Toolset
	b := bind(t, &ts, edge(t, "edge"))
	names := b.Names()
	if names["get_weather_v2"] != "edge/get-Weather.v2" || names["echo"] != "edge/echo" {
		t.Fatalf("names: %v", names)
	}
	rt := runtime(t, &ts, glovebox.Limits{Timeout: 5 * time.Second})

	t.Run("big integers exact both ways", func(t *testing.T) {
		v := wantOK(t, eval(t, rt, `r = echo(n: 123456789012345678901234567890, s: "héllo"); [r["text"], r["structured"], r["error"]]`))
		got := v.([]any)
		if got[0] != "123456789012345678901234567891" {
			t.Fatalf("text %v", got[0])
		}
		if m := got[1].(map[string]any); m["s"] != "héllo" || m["len"] != int64(6) || fmt.Sprint(m["n"]) != "123456789012345678901234567891" {
			t.Fatalf("structured %#v", got[1])
		}
		if got[2] != false {
			t.Fatalf("error %v", got[2])
		}
	})
	t.Run("non-Ruby name", func(t *testing.T) {
		if v := wantOK(t, eval(t, rt, `get_weather_v2(city: "Oslo")["text"]`)); v != "sunny in Oslo" {
			t.Fatalf("%v", v)
		}
	})
	t.Run("schema violation names the field", func(t *testing.T) {
		v := wantOK(t, eval(t, rt, `begin; echo(n: "seven"); rescue Glovebox::MCPArgumentError => e; [e.class.superclass.name, e.message]; end`))
		got := v.([]any)
		if got[0] != "Glovebox::ToolError" || !strings.Contains(got[1].(string), "n") || !strings.Contains(got[1].(string), "inputSchema") {
			t.Fatalf("%v", got)
		}
		v = wantOK(t, eval(t, rt, `begin; echo(s: "x"); rescue Glovebox::MCPArgumentError => e; e.message; end`))
		if !strings.Contains(v.(string), "n") {
			t.Fatalf("missing required: %v", v)
		}
	})
	t.Run("a positional argument is named by its Ruby class", func(t *testing.T) {
		v := wantOK(t, eval(t, rt, `begin; echo(7); rescue Glovebox::MCPArgumentError => e; e.message; end`))
		if msg := v.(string); !strings.Contains(msg, "got a positional Integer") || strings.Contains(msg, "int64") {
			t.Fatalf("%v", v)
		}
	})
	t.Run("isError is data", func(t *testing.T) {
		v := wantOK(t, eval(t, rt, `r = refuse; [r["error"], r["text"]]`)).([]any)
		if v[0] != true || v[1] != "no such order" {
			t.Fatalf("%v", v)
		}
	})
	t.Run("other content described", func(t *testing.T) {
		v := wantOK(t, eval(t, rt, `image["content"].map { |c| [c["type"], c["mime_type"], c["size"], c["data"]] }`)).([]any)
		a, b := v[0].([]any), v[1].([]any)
		if a[0] != "image" || a[1] != "image/png" || a[2] != int64(4) || a[3] != "UE5HMQ==" {
			t.Fatalf("small: %v", a)
		}
		if b[2] != int64(1<<20) || b[3] != nil {
			t.Fatalf("large: %v", b[:3])
		}
	})
	t.Run("10 MiB result capped by the payload limit", func(t *testing.T) {
		res := eval(t, rt, `big; :unreachable`)
		if res.Status == glovebox.StatusOK {
			t.Fatalf("a 10 MiB result passed the 1 MiB payload limit: %v", res.Value)
		}
		t.Logf("status %v: %+v", res.Status, res.Error)
	})
}

// A call that never gets an answer ends before the eval's deadline with
// an error the guest can rescue, and the server is told to cancel it.
func TestSlowToolCancelledOnTimeout(t *testing.T) {
	mark := filepath.Join(t.TempDir(), "mark")
	var ts glovebox.Toolset
	bind(t, &ts, edge(t, "edge", "MCPTOOLS_TEST_MARK="+mark))
	rt := runtime(t, &ts, glovebox.Limits{Timeout: 1 * time.Second})
	v := wantOK(t, eval(t, rt, `begin; slow; rescue Glovebox::MCPTimeoutError => e; e.message; end`))
	if s, _ := v.(string); !strings.Contains(s, "deadline") || !strings.Contains(s, "in doubt") {
		t.Fatalf("%v", v)
	}
	// The server saw notifications/cancelled: its handler's context ended.
	for i := 0; ; i++ {
		if b, _ := os.ReadFile(mark); string(b) == "cancelled" {
			break
		}
		if i > 100 {
			t.Fatal("the server never saw the cancellation")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestCrashMidCallAndRestart(t *testing.T) {
	var ts glovebox.Toolset
	bind(t, &ts, edge(t, "edge"))
	rt := runtime(t, &ts, glovebox.Limits{Timeout: 10 * time.Second})
	pid1 := wantOK(t, eval(t, rt, `pid["text"]`))
	v := wantOK(t, eval(t, rt, `begin; crash; rescue Glovebox::MCPServerCrashError => e; e.message; end`))
	if s, _ := v.(string); !strings.Contains(s, "in doubt") {
		t.Fatalf("crash: %v", v)
	}
	// The next call restarts the server (after the backoff).
	var pid2 any
	for i := 0; i < 50; i++ {
		res := eval(t, rt, `pid["text"]`)
		if res.Status == glovebox.StatusOK {
			pid2 = res.Value
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if pid2 == nil || pid2 == pid1 {
		t.Fatalf("no restart: before %v after %v", pid1, pid2)
	}
}

func TestCollisions(t *testing.T) {
	var ts glovebox.Toolset
	if err := ts.Func("pid", func() int { return 1 }); err != nil {
		t.Fatal(err)
	}
	b := bind(t, &ts, edge(t, "one"), edge(t, "two"))
	n := b.Names()
	if n["pid"] != "" || n["one_pid"] != "one/pid" || n["echo"] != "one/echo" || n["two_echo"] != "two/echo" {
		t.Fatalf("%v", n)
	}
	// A third server whose prefixed names are taken too: nothing binds.
	var ts2 glovebox.Toolset
	ts2.Func("three_echo", func() int { return 1 })
	ts2.Func("echo", func() int { return 1 })
	before := ts2.Names()
	_, err := mcptools.Bind(context.Background(), &ts2, mcptools.Config{}, edge(t, "three"))
	if !errors.Is(err, mcptools.ErrBind) || !strings.Contains(err.Error(), "both taken") {
		t.Fatalf("err %v", err)
	}
	if strings.Join(ts2.Names(), ",") != strings.Join(before, ",") {
		t.Fatalf("a failed bind changed the set: %v", ts2.Names())
	}
}

func TestMalformedListings(t *testing.T) {
	exe, _ := os.Executable()
	for _, listing := range []string{
		`{"tools":[null]}`,
		`{"tools":[{"name":"a","inputSchema":{"type":"object"}},{"name":"a","inputSchema":{"type":"object"}}]}`,
		`{"tools":[{"name":"","inputSchema":{"type":"object"}}]}`,
		`{"tools":[{"name":"x","inputSchema":{"type":"object","properties":{"a":{"$ref":"#/nope"}}}}]}`,
		`{"tools":[{"name":"puts","inputSchema":{"type":"object"}}],"nextCursor":"again"}`,
		`{"tools":"nope"}`,
		`[]`,
	} {
		var ts glovebox.Toolset
		_, err := mcptools.Bind(context.Background(), &ts, mcptools.Config{StartTimeout: 10 * time.Second},
			mcptools.Server{Name: "raw", Command: []string{exe}, Env: append(os.Environ(), "MCPTOOLS_TEST_SERVER=raw", "MCPTOOLS_TEST_LISTING="+listing)})
		if !errors.Is(err, mcptools.ErrBind) || len(ts.Names()) != 0 {
			t.Errorf("%s: err %v, names %v", listing, err, ts.Names())
			continue
		}
		t.Logf("%s: %v", listing, err)
	}
}

// children lists the pids whose parent is pid (from /proc).
func children(pid int) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) && f[0] != "Z" {
			out = append(out, p)
		}
	}
	return out
}

func TestCloseLeavesNoChildren(t *testing.T) {
	before := len(children(os.Getpid()))
	var ts glovebox.Toolset
	b, err := mcptools.Bind(context.Background(), &ts, mcptools.Config{}, edge(t, "a"), edge(t, "b"))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(children(os.Getpid())); n < before+2 {
		t.Fatalf("%d children after bind, %d before", n, before)
	}
	b.Close()
	for i := 0; len(children(os.Getpid())) > before; i++ {
		if i > 100 {
			t.Fatalf("children left after Close: %v", children(os.Getpid()))
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Calls after Close are refused, not hung.
	_ = syscall.Getpid
}

// A JSON-RPC error answer raises MCPProtocolError: the server refused the
// request, so it is not in doubt.
func TestProtocolError(t *testing.T) {
	exe, _ := os.Executable()
	var ts glovebox.Toolset
	bind(t, &ts, mcptools.Server{Name: "raw", Command: []string{exe}, Env: append(os.Environ(), "MCPTOOLS_TEST_SERVER=raw",
		`MCPTOOLS_TEST_LISTING={"tools":[{"name":"x","inputSchema":{"type":"object"}}]}`)})
	rt := runtime(t, &ts, glovebox.Limits{Timeout: 5 * time.Second})
	v := wantOK(t, eval(t, rt, `begin; x; rescue Glovebox::MCPProtocolError => e; e.message; end`))
	if s, _ := v.(string); !strings.Contains(s, "answered with an error") || strings.Contains(s, "in doubt") {
		t.Fatalf("%v", v)
	}
}

// The child's stderr reaches the host logger a line at a time, cut to
// MaxStderrLine bytes.
func TestStderrToLogger(t *testing.T) {
	var buf syncBuf
	log := slog.New(slog.NewTextHandler(&buf, nil))
	var ts glovebox.Toolset
	b, err := mcptools.Bind(context.Background(), &ts, mcptools.Config{Logger: log, MaxStderrLine: 12}, edge(t, "edge"))
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	out := buf.String()
	if !strings.Contains(out, `server=edge line="edge server "`) || strings.Contains(out, "ready") {
		t.Fatalf("log: %s", out)
	}
}

type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A server that offers no tools (prompts only) binds none and fails
// nothing: the other servers are bound, and the Logger says why it gave
// no functions.
func TestServerWithNoTools(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var ts glovebox.Toolset
	var logged syncBuf
	log := slog.New(slog.NewTextHandler(&logged, nil))
	b, err := mcptools.Bind(context.Background(), &ts, mcptools.Config{Logger: log},
		mcptools.Server{Name: "empty", Command: []string{exe}, Env: []string{"MCPTOOLS_TEST_SERVER=notools"}}, edge(t, "edge"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.Names()["echo"] != "edge/echo" || len(b.Notes()) != 2 {
		t.Fatalf("names %v notes %v", b.Names(), b.Notes())
	}
	if !strings.Contains(logged.String(), "offers no tools") || !strings.Contains(logged.String(), "empty") {
		t.Fatalf("log: %s", logged.String())
	}
}

// Config.CallTimeout bounds each call well inside a long eval.
func TestCallTimeout(t *testing.T) {
	var ts glovebox.Toolset
	b, err := mcptools.Bind(context.Background(), &ts, mcptools.Config{CallTimeout: 100 * time.Millisecond}, edge(t, "edge"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	rt := runtime(t, &ts, glovebox.Limits{Timeout: time.Minute})
	v := wantOK(t, eval(t, rt, `begin; slow; rescue Glovebox::MCPTimeoutError => e; [e.message, echo(n: 1)["text"]]; end`)).([]any)
	if s, _ := v[0].(string); !strings.Contains(s, "CallTimeout") || v[1] == nil {
		t.Fatalf("%v", v)
	}
}
