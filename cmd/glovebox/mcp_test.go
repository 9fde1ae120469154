package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gloveboxhq/glovebox/internal/npmtest"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// inspector runs @modelcontextprotocol/inspector-cli with args and
// returns its JSON output. The CLI finds its own package.json relative to
// the working directory, so it runs from its build directory.
func inspector(t *testing.T, args ...string) map[string]any {
	t.Helper()
	bin := npmtest.Bin(t, "@modelcontextprotocol/inspector-cli", "mcp-inspector-cli")
	dir := filepath.Join(npmtest.Dir(t, "@modelcontextprotocol/inspector-cli"), "node_modules", "@modelcontextprotocol", "inspector-cli", "build")
	cmd := exec.Command(bin, append([]string{"--cli"}, args...)...)
	cmd.Dir = dir
	var errb strings.Builder
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("inspector %v: %v\n%s\n%s", args, err, out, errb.String())
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("inspector output: %v\n%s", err, out)
	}
	return m
}

func checkInspector(t *testing.T, target ...string) {
	t.Helper()
	list := inspector(t, append(target, "--method", "tools/list")...)
	var names []string
	for _, tool := range list["tools"].([]any) {
		names = append(names, tool.(map[string]any)["name"].(string))
	}
	if strings.Join(names, ",") != "ruby_session,ruby_session_reset,run_ruby" {
		t.Fatalf("tools/list: %v", names)
	}
	res := inspector(t, append(target, "--method", "tools/call", "--tool-name", "run_ruby", "--tool-arg", "code=puts 'hi'; 6*7")...)
	sc := res["structuredContent"].(map[string]any)
	if sc["status"] != "ok" || sc["value"] != 42.0 || sc["stdout"] != "hi\n" {
		t.Fatalf("tools/call: %v", res)
	}
	res = inspector(t, append(target, "--method", "tools/call", "--tool-name", "run_ruby", "--tool-arg", "code=raise 'no'")...)
	if res["isError"] != true {
		t.Fatalf("a failing program: %v", res)
	}
}

func TestMCPInspectorStdio(t *testing.T) {
	checkInspector(t, bin, "mcp")
}

// startMCPHTTP starts `glovebox mcp --http` on a free loopback port and
// returns its endpoint; the server is stopped when t ends.
func startMCPHTTP(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"mcp", "--http", "127.0.0.1:0"}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		if u, ok := strings.CutPrefix(sc.Text(), "glovebox mcp: serving "); ok {
			go io.Copy(io.Discard, stderr)
			return u
		}
	}
	t.Fatal("glovebox mcp --http did not say where it serves")
	return ""
}

func TestMCPInspectorHTTP(t *testing.T) {
	url := startMCPHTTP(t, "--token", "s3cret")
	checkInspector(t, url, "--transport", "http", "--header", "Authorization: Bearer s3cret")
}

func TestMCPNonLoopbackNeedsToken(t *testing.T) {
	_, errOut, code := run(t, "", "mcp", "--http", "0.0.0.0:0")
	if code != exitUsage || !strings.Contains(errOut, "--token") {
		t.Fatalf("code %d: %s", code, errOut)
	}
}

// The official conformance suite, server mode, against `glovebox mcp
// --http`, with the scenarios each protocol revision requires (a subtest
// per revision; `make mcp-conformance` runs this test and prints the
// suite's summaries). Scenarios that cannot apply to a code sandbox are
// listed, with reasons, in mcpserver/testdata/conformance/
// expected-failures-REVISION.yaml; the suite fails on any other failure
// and on a listed scenario that passes.
func TestMCPConformance(t *testing.T) {
	node := npmtest.Node(t) // the suite needs Node 22 or newer
	dir := npmtest.Dir(t, "@modelcontextprotocol/conformance")
	suite := filepath.Join(dir, "node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js")
	td, err := filepath.Abs("../../mcpserver/testdata/conformance")
	if err != nil {
		t.Fatal(err)
	}
	url := startMCPHTTP(t, conformanceArgs(t, td)...)
	for _, rev := range []string{"2026-07-28", "2025-11-25"} {
		t.Run(rev, func(t *testing.T) {
			cmd := exec.Command(node, suite, "server", "--url", url, "--requirements", rev,
				"--expected-failures", filepath.Join(td, "expected-failures-"+rev+".yaml"), "-o", t.TempDir())
			out, err := cmd.CombinedOutput()
			summary := string(out)
			if i := strings.Index(summary, "=== SUMMARY ==="); i >= 0 {
				summary = summary[i:]
			}
			if err != nil {
				t.Fatalf("conformance at %s: %v\n%s", rev, err, summary)
			}
			t.Logf("conformance at %s:\n%s", rev, summary)
		})
	}
	// The tasks extension's scenarios are in no revision's requirements
	// (extensions have their own track): each runs on its own, with
	// expected-failures-tasks.yaml.
	t.Run("tasks", func(t *testing.T) {
		list, err := exec.Command(node, suite, "list").CombinedOutput()
		if err != nil {
			t.Fatalf("conformance list: %v\n%s", err, list)
		}
		var scenarios []string
		for _, l := range strings.Split(string(list), "\n") {
			if name, ok := strings.CutSuffix(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "- ")), " [extension]"); ok && strings.HasPrefix(name, "tasks-") {
				scenarios = append(scenarios, name)
			}
		}
		if len(scenarios) == 0 {
			t.Fatalf("the suite lists no tasks scenarios:\n%s", list)
		}
		for _, sc := range scenarios {
			out, err := exec.Command(node, suite, "server", "--url", url, "--scenario", sc,
				"--expected-failures", filepath.Join(td, "expected-failures-tasks.yaml"), "-o", t.TempDir()).CombinedOutput()
			passed := "?"
			if i := strings.LastIndex(string(out), "Passed: "); i >= 0 {
				passed, _, _ = strings.Cut(string(out[i:]), "\n")
			}
			if err != nil {
				t.Errorf("conformance scenario %s: %v\n%s", sc, err, out)
				continue
			}
			t.Logf("conformance scenario %s: %s", sc, passed)
		}
	})
}

// Over stdio, a line that is not JSON-RPC gets a parse error and the
// server goes on serving the same client.
func TestMCPStdioMalformed(t *testing.T) {
	cmd := exec.Command(bin, "mcp")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outPipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	watchdog := time.AfterFunc(2*time.Minute, func() { cmd.Process.Kill() }) // a hung server fails, never hangs the suite
	defer watchdog.Stop()
	defer func() {
		in.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("glovebox mcp exited with %v after stdin closed", err)
		}
	}()
	out := bufio.NewScanner(outPipe)
	out.Buffer(nil, 1<<20)
	next := func() map[string]any {
		t.Helper()
		if !out.Scan() {
			t.Fatalf("glovebox mcp closed its output: %v", out.Err())
		}
		var m map[string]any
		if err := json.Unmarshal(out.Bytes(), &m); err != nil {
			t.Fatalf("not JSON: %s", out.Bytes())
		}
		return m
	}
	io.WriteString(in, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`+"\n")
	if m := next(); m["result"] == nil {
		t.Fatalf("initialize: %v", m)
	}
	io.WriteString(in, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n")
	io.WriteString(in, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run_ruby","arguments":{"code":"1+1"}}`+"\n") // one brace short
	if m := next(); m["error"] == nil || m["error"].(map[string]any)["code"] != -32700.0 {
		t.Fatalf("malformed line: %v", m)
	}
	io.WriteString(in, `{"foo":1}`+"\n")
	if m := next(); m["error"] == nil || m["error"].(map[string]any)["code"] != -32600.0 {
		t.Fatalf("not JSON-RPC: %v", m)
	}
	io.WriteString(in, strings.Repeat(" ", 5<<20)+"\n")
	if m := next(); m["error"] == nil || m["error"].(map[string]any)["code"] != -32600.0 {
		t.Fatalf("oversized line: %v", m)
	}
	io.WriteString(in, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"run_ruby","arguments":{"code":"1+1"}}}`+"\n")
	m := next()
	if sc, _ := m["result"].(map[string]any)["structuredContent"].(map[string]any); sc["value"] != 2.0 {
		t.Fatalf("after the malformed line: %v", m)
	}
}

// `glovebox mcp --mcp-server` is code mode over MCP: run_ruby's
// description lists the bound server and its functions.
func TestMCPDescribesBoundServers(t *testing.T) {
	mem := npmtest.Bin(t, "@modelcontextprotocol/server-memory", "mcp-server-memory")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.Command(bin, "mcp", "--mcp-server", "mem="+mem, "--mcp-env", "mem:MEMORY_FILE_PATH="+filepath.Join(t.TempDir(), "mem.jsonl"))
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "0"}, nil)
	cs, err := c.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range res.Tools {
		if tool.Name == "run_ruby" {
			if !strings.Contains(tool.Description, "### Server mem") || !strings.Contains(tool.Description, "create_entities") {
				t.Fatalf("run_ruby's description does not list the bound server:\n%s", tool.Description)
			}
			return
		}
	}
	t.Fatal("no run_ruby tool")
}

// The ids JSON-RPC does not allow (a boolean, an object, an array, a
// fraction) are refused with id null, never echoed rewritten, and the
// server goes on: the lines of the acceptance example.
func TestMCPStdioBadIDs(t *testing.T) {
	cmd := exec.Command(bin, "mcp")
	cmd.Stdin = strings.NewReader(strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":true,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`,
		`{"jsonrpc":"2.0","id":[1],"method":"ping"}`,
		`{"jsonrpc":"2.0","id":1.5,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":77,"method":"tools/list"}`,
	}, "\n") + "\n")
	watchdog := time.AfterFunc(2*time.Minute, func() { cmd.Process.Kill() })
	defer watchdog.Stop()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("glovebox mcp: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 6 {
		t.Fatalf("%d answers, want 6:\n%s", len(lines), out)
	}
	// The refusals are written as each line is read, the SDK's answers
	// when it has them: the order between the two is not fixed.
	refused, listed := 0, false
	for _, l := range lines {
		var m struct {
			ID    any `json:"id"`
			Error struct {
				Code int `json:"code"`
			} `json:"error"`
		}
		switch {
		case json.Unmarshal([]byte(l), &m) != nil:
			t.Errorf("not JSON: %s", l)
		case m.ID == nil && m.Error.Code == -32600:
			refused++
		case m.ID == float64(77):
			listed = strings.Contains(l, "run_ruby")
		case m.ID != float64(1):
			t.Errorf("unexpected answer: %.200s", l)
		}
	}
	if refused != 4 || !listed {
		t.Fatalf("%d bad ids refused with id null (want 4), tools/list answered: %v\n%s", refused, listed, out)
	}
}

// conformanceArgs are the extra `glovebox mcp` flags the conformance
// suite's server needs: its fixture tools, prompts and resources, as
// named programs in Ruby.
func conformanceArgs(t *testing.T, testdata string) []string {
	return []string{"--programs", filepath.Join(testdata, "programs")}
}
