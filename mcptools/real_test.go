package mcptools_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox"
	"github.com/gloveboxhq/glovebox/codemode"
	"github.com/gloveboxhq/glovebox/internal/npmtest"
	"github.com/gloveboxhq/glovebox/mcptools"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Two real servers nobody here wrote, over stdio, in one eval.
func TestRealServersStdio(t *testing.T) {
	everything := npmtest.Bin(t, "@modelcontextprotocol/server-everything", "mcp-server-everything")
	memory := npmtest.Bin(t, "@modelcontextprotocol/server-memory", "mcp-server-memory")
	var ts glovebox.Toolset
	b := bind(t, &ts,
		mcptools.Server{Name: "everything", Command: []string{everything, "stdio"}},
		mcptools.Server{Name: "memory", Command: []string{memory}, Env: []string{"PATH=/usr/bin:/bin", "MEMORY_FILE_PATH=" + t.TempDir() + "/m.jsonl"}})
	if b.Names()["get_sum"] != "everything/get-sum" {
		t.Fatalf("names: %v", b.Names())
	}
	var instr bool
	for _, s := range b.Notes() {
		instr = instr || (s.Name == "everything" && s.Instructions != "")
	}
	if !instr {
		t.Error("server-everything's instructions were not kept")
	}
	rt := runtime(t, &ts, glovebox.Limits{Timeout: 20 * time.Second})
	v := wantOK(t, eval(t, rt, `
		sum = get_sum(a: 2, b: 40)["text"]
		create_entities(entities: [{name: "Ada", entityType: "person", observations: ["wrote " + sum]}])
		g = read_graph
		img = get_tiny_image["content"].find { |c| c["type"] == "image" }
		[sum, g["structured"] ? g["structured"]["entities"].map { |e| e["name"] } : g["text"], img["mime_type"], echo(message: "hi")["text"]]`)).([]any)
	if !strings.Contains(v[0].(string), "42") || !strings.Contains(fmtAny(v[1]), "Ada") || v[2] != "image/png" || !strings.Contains(v[3].(string), "hi") {
		t.Fatalf("%#v", v)
	}
	res := eval(t, rt, `begin; get_sum(a: "two", b: 1); rescue Glovebox::MCPArgumentError => e; e.message; end`)
	if s, _ := wantOK(t, res).(string); !strings.Contains(s, "a") {
		t.Fatalf("%v", res.Value)
	}
}

func fmtAny(v any) string {
	switch v := v.(type) {
	case []any:
		var s []string
		for _, x := range v {
			s = append(s, fmtAny(x))
		}
		return strings.Join(s, ",")
	case string:
		return v
	}
	return ""
}

// Streamable HTTP, with a header the host supplies and the guest never sees.
func TestStreamableHTTPHeader(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "http", Version: "1"}, nil)
	s.AddTool(&mcp.Tool{Name: "whoami", InputSchema: map[string]any{"type": "object"}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return text("user-7"), nil
		})
	var bad atomic.Int32
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer secret-7" {
			bad.Add(1)
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	// Closed after the binding (cleanups run last first): the binding
	// holds the standalone stream open until it closes, and Close waits
	// for every open request.
	t.Cleanup(srv.Close)
	var ts glovebox.Toolset
	bind(t, &ts, mcptools.Server{Name: "remote", URL: srv.URL, Header: http.Header{"Authorization": {"Bearer secret-7"}}})
	rt := runtime(t, &ts, glovebox.Limits{Timeout: 5 * time.Second})
	res := eval(t, rt, `[whoami["text"], whoami.inspect.include?("Bearer")]`)
	v := wantOK(t, res).([]any)
	if v[0] != "user-7" || v[1] != false || bad.Load() != 0 {
		t.Fatalf("%v bad=%d", v, bad.Load())
	}
	// A wrong credential: the bind fails and binds nothing.
	var ts2 glovebox.Toolset
	_, err := mcptools.Bind(context.Background(), &ts2, mcptools.Config{}, mcptools.Server{Name: "remote", URL: srv.URL})
	if err == nil || len(ts2.Names()) != 0 {
		t.Fatalf("err %v names %v", err, ts2.Names())
	}
}

// What the model reads: each bound tool with its inputSchema, and the
// server's instructions under the server notes.
func TestCodemodeDescription(t *testing.T) {
	var ts glovebox.Toolset
	b := bind(t, &ts, edge(t, "edge"))
	rt := runtime(t, &ts, glovebox.Limits{})
	tool, err := codemode.New(codemode.Config{Runtime: rt, Servers: b.Notes()})
	if err != nil {
		t.Fatal(err)
	}
	d := tool.Description()
	for _, want := range []string{
		"### get_weather_v2(arguments)", `MCP tool "get-Weather.v2" of server "edge"`, `"city"`,
		"## Server notes", "### Server edge", "Edge-case server edge.", "Functions: big, crash, echo, get_weather_v2,",
		`get_weather_v2(city: "...")`,
	} {
		if !strings.Contains(d, want) {
			t.Errorf("description lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(d)
	}
}

// descendants lists every live process below pid.
func descendants(pid int) []int {
	var out []int
	for _, c := range children(pid) {
		out = append(append(out, c), descendants(c)...)
	}
	return out
}

// A server behind a wrapper (npx, sh) runs as a grandchild; Close stops the
// whole tree.
func TestCloseStopsGrandchildren(t *testing.T) {
	memory := npmtest.Bin(t, "@modelcontextprotocol/server-memory", "mcp-server-memory")
	before := len(descendants(os.Getpid()))
	var ts glovebox.Toolset
	b, err := mcptools.Bind(context.Background(), &ts, mcptools.Config{},
		mcptools.Server{Name: "mem", Command: []string{"sh", "-c", `"$0"; echo exited >&2`, memory},
			Env: append(os.Environ(), "MEMORY_FILE_PATH="+t.TempDir()+"/m.jsonl")})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(descendants(os.Getpid())); n < before+2 {
		t.Fatalf("%d descendants, want the shell and node (%d before)", n, before)
	}
	b.Close()
	for i := 0; len(descendants(os.Getpid())) > before; i++ {
		if i > 200 {
			t.Fatalf("left after Close: %v", descendants(os.Getpid()))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// server-everything over Streamable HTTP. Its streamableHttp mode listens
// on every interface and has no host option, so a preloaded module pins
// its listen calls to 127.0.0.1: the test server stays on loopback.
func TestRealServerStreamableHTTP(t *testing.T) {
	url := everythingHTTP(t)
	var ts glovebox.Toolset
	b := bind(t, &ts, mcptools.Server{Name: "everything", URL: url, Header: http.Header{"X-Tenant": {"t1"}}})
	if b.Names()["get_sum"] == "" {
		t.Fatalf("names %v", b.Names())
	}
	rt := runtime(t, &ts, glovebox.Limits{Timeout: 20 * time.Second})
	v := wantOK(t, eval(t, rt, `[get_sum(a: 20, b: 22)["text"], get_structured_content(location: "New York")["structured"]]`)).([]any)
	if !strings.Contains(v[0].(string), "42") || v[1] == nil {
		t.Fatalf("%#v", v)
	}
}

// A server's requests to the client are answered over HTTP as over
// stdio: server-everything asks for the roots on the standalone stream
// (get_roots_list hung until the eval's deadline when glovebox never
// opened it), and for elicitation and sampling on the call's own stream.
// Asked for the newest revision (server/discover first), it falls back
// to the initialize handshake, and it is bound at an older revision on
// request too.
func TestServerRequestsOverHTTP(t *testing.T) {
	url := everythingHTTP(t)
	for _, rev := range []string{"", "2025-06-18"} {
		t.Run("revision="+rev, func(t *testing.T) {
			var asked, sampled atomic.Int32
			cfg := mcptools.Config{
				Roots: []mcptools.Root{{URI: "file:///srv/project", Name: "project-root"}},
				Elicit: func(ctx context.Context, server string, req *mcp.ElicitParams) (*mcp.ElicitResult, error) {
					asked.Add(1)
					if server != "ev" {
						return nil, fmt.Errorf("asked by %q", server)
					}
					return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada Lovelace"}}, nil
				},
				Sample: func(ctx context.Context, server string, req *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error) {
					sampled.Add(1)
					return &mcp.CreateMessageResult{Role: "assistant", Model: "host-model", Content: &mcp.TextContent{Text: "a sampled answer"}}, nil
				},
			}
			var ts glovebox.Toolset
			b, err := mcptools.Bind(context.Background(), &ts, cfg, mcptools.Server{Name: "ev", URL: url, ProtocolVersion: rev})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			spoke := b.ProtocolVersions()["ev"]
			if want := map[string]string{"": "2025-11-25", "2025-06-18": "2025-06-18"}[rev]; spoke != want {
				t.Errorf("spoke %q, want %q", spoke, want)
			}
			rt := runtime(t, &ts, glovebox.Limits{Timeout: 60 * time.Second})
			v := wantOK(t, eval(t, rt, `[get_roots_list["text"], trigger_elicitation_request["text"], trigger_sampling_request(prompt: "hi")["text"]]`)).([]any)
			if !strings.Contains(v[0].(string), "project-root") || !strings.Contains(v[0].(string), "file:///srv/project") {
				t.Errorf("roots: %v", v[0])
			}
			if !strings.Contains(fmt.Sprint(v[1]), "Ada Lovelace") || asked.Load() != 1 {
				t.Errorf("elicitation (asked %d): %v", asked.Load(), v[1])
			}
			if !strings.Contains(fmt.Sprint(v[2]), "a sampled answer") || sampled.Load() != 1 {
				t.Errorf("sampling (asked %d): %v", sampled.Load(), v[2])
			}
		})
	}
}

// everythingHTTP starts server-everything's Streamable HTTP mode and
// returns its endpoint.
func everythingHTTP(t *testing.T) string {
	everything := npmtest.Bin(t, "@modelcontextprotocol/server-everything", "mcp-server-everything")
	dir := t.TempDir()
	preload := filepath.Join(dir, "loopback.cjs")
	if err := os.WriteFile(preload, []byte(`const net = require("net");
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (port, ...rest) {
  if (typeof port === "number" || typeof port === "string") {
    if (typeof rest[0] === "function" || rest.length === 0) rest.unshift("127.0.0.1");
    else rest[0] = "127.0.0.1";
  }
  return listen.call(this, port, ...rest);
};
`), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(everything, "streamableHttp")
	cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(port), "NODE_OPTIONS=--require "+preload)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	})
	for i := 0; ; i++ {
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			c.Close()
			break
		}
		if i > 200 {
			t.Fatalf("server-everything did not listen: %s", stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
}

// A stdio server gets a minimal environment, not the host's: a token in
// glovebox's environment stays out of reach of guest code calling a
// server that reports its environment (server-everything's get-env),
// while the variables the host names do reach it.
func TestServerEnvironmentDefaultDeny(t *testing.T) {
	everything := npmtest.Bin(t, "@modelcontextprotocol/server-everything", "mcp-server-everything")
	t.Setenv("GLOVEBOX_MCP_TOKEN", "canary-token")
	t.Setenv("SOME_API_KEY", "canary-key")
	t.Setenv("MCPTOOLS_PASSED", "passed-value")
	var ts glovebox.Toolset
	bind(t, &ts, mcptools.Server{Name: "ev", Command: []string{everything, "stdio"},
		PassEnv: []string{"MCPTOOLS_PASSED"}, Env: []string{"MCPTOOLS_SET=set-value"}})
	rt := runtime(t, &ts, glovebox.Limits{Timeout: 20 * time.Second})
	env := wantOK(t, eval(t, rt, `get_env["text"]`)).(string)
	for _, bad := range []string{"canary-token", "canary-key", "GLOVEBOX_MCP_TOKEN"} {
		if strings.Contains(env, bad) {
			t.Errorf("the server's environment holds %q:\n%s", bad, env)
		}
	}
	for _, want := range []string{"passed-value", "set-value", `"PATH"`} {
		if !strings.Contains(env, want) {
			t.Errorf("the server's environment lacks %q:\n%s", want, env)
		}
	}
}

// binder is the host the kill test kills: it binds server-everything
// and server-memory through npx (which runs node below a shell:
// grandchildren), the second with a helper process of its own that does
// not read stdin (as a server that starts a worker would), prints the
// pids of every process below it, and waits to be killed.
func binder() {
	var ts glovebox.Toolset
	dir := os.Getenv("MCPTOOLS_TEST_DIR")
	b, err := mcptools.Bind(context.Background(), &ts, mcptools.Config{StartTimeout: 2 * time.Minute},
		mcptools.Server{Name: "ev", Command: []string{"npx", "-y", "@modelcontextprotocol/server-everything"}, Dir: dir},
		mcptools.Server{Name: "mem", Command: []string{"sh", "-c", `sleep 3600 </dev/null & exec npx -y @modelcontextprotocol/server-memory`},
			Dir: dir, Env: []string{"MEMORY_FILE_PATH=" + dir + "/m.jsonl"}})
	if err != nil {
		fmt.Println("bind:", err)
		os.Exit(1)
	}
	defer b.Close()
	fmt.Println("pids", strings.Trim(fmt.Sprint(descendants(os.Getpid())), "[]"))
	select {}
}

// After kill -9 of the host, no process of a bound server lives on: not
// npx, not the node it runs, not a helper that never sees stdin close.
func TestKillNineStopsServers(t *testing.T) {
	if _, err := exec.LookPath("npx"); err != nil {
		t.Skip("npx is not installed")
	}
	dir := npmtest.Dir(t, "@modelcontextprotocol/server-everything", "@modelcontextprotocol/server-memory")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), "MCPTOOLS_TEST_SERVER=binder", "MCPTOOLS_TEST_DIR="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	pids := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "pids"))
	if !strings.HasPrefix(line, "pids ") || len(pids) < 5 {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("want the watchdog, npx and node below the host, got %q", line)
	}
	var cmdlines string
	for _, p := range pids {
		b, _ := os.ReadFile("/proc/" + p + "/cmdline")
		cmdlines += string(b) + "\n"
	}
	if !strings.Contains(cmdlines, "server-memory") || !strings.Contains(cmdlines, "server-everything") || !strings.Contains(cmdlines, "sleep") {
		t.Fatalf("not both servers among %v:\n%s", pids, cmdlines)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	var alive []string
	for i := 0; i < 600; i++ { // a generous bound for the kernel to deliver the kills: not a timing under test
		alive = alive[:0]
		for _, p := range pids {
			if b, err := os.ReadFile("/proc/" + p + "/stat"); err == nil && !strings.Contains(string(b), ") Z ") {
				alive = append(alive, p)
			}
		}
		if len(alive) == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, p := range alive {
		b, _ := os.ReadFile("/proc/" + p + "/cmdline")
		t.Errorf("pid %s outlived the host: %q", p, b)
		if n, _ := strconv.Atoi(p); n > 0 {
			syscall.Kill(n, syscall.SIGKILL)
		}
	}
}

// Binary content from a real server reaches the guest exactly: the tiny
// image's PNG signature, and a gzip resource that inflates to what went
// in (both came out with U+FFFD in place of every byte above 0x7f); a
// binary String argument reaches the server as its base64 text.
func TestBinaryContentExact(t *testing.T) {
	everything := npmtest.Bin(t, "@modelcontextprotocol/server-everything", "mcp-server-everything")
	var ts glovebox.Toolset
	bind(t, &ts, mcptools.Server{Name: "ev", Command: []string{everything, "stdio"}})
	rt := runtime(t, &ts, glovebox.Limits{Timeout: 20 * time.Second})
	v := wantOK(t, eval(t, rt, `
		require "zlib"
		img = get_tiny_image["content"].find { _1["type"] == "image" }
		png = img["data"].unpack1("m")
		src = "héllo \xff binary".b
		r = gzip_file_as_resource(name: "x.gz", data: "data:application/octet-stream;base64,#{[src].pack("m0")}", outputType: "resource")
		gz = r["content"].find { _1["type"] == "resource" }
		[img["encoding"], png.bytesize == img["size"], png[0, 8].bytes, Zlib.gunzip(gz["data"].unpack1("m")) == src,
		 img["bytes"] == png, img["bytes"].encoding.to_s, Zlib.gunzip(gz["bytes"]) == src,
		 echo(message: "\xff\x00".b)["text"]]`)).([]any)
	want := "[base64 true [137 80 78 71 13 10 26 10] true true ASCII-8BIT true Echo: /wA=]"
	if got := fmt.Sprint(v); got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}

// A server that asks for elicitation or sampling anyway, when the host
// offers neither, gets a refusal at once, over HTTP as over stdio: the
// call ends with the server's answer, not at the eval's deadline.
func TestUnofferedRequestsRefused(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "asker", Version: "1"}, nil)
	s.AddTool(&mcp.Tool{Name: "ask", InputSchema: map[string]any{"type": "object"}},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			_, eerr := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: "name?", RequestedSchema: map[string]any{"type": "object"}})
			_, serr := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{MaxTokens: 5, Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "hi"}}}})
			r, err := req.Session.ListRoots(ctx, nil)
			return text(fmt.Sprintf("elicit refused: %v; sample refused: %v; roots: %d %v", eerr != nil, serr != nil, len(r.Roots), err)), nil
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	var ts glovebox.Toolset
	bind(t, &ts, mcptools.Server{Name: "asker", URL: srv.URL})
	rt := runtime(t, &ts, glovebox.Limits{Timeout: time.Minute})
	v := wantOK(t, eval(t, rt, `ask["text"]`))
	if v != "elicit refused: true; sample refused: true; roots: 0 <nil>" {
		t.Fatalf("%v", v)
	}
}
