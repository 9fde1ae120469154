package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gloveboxhq/glovebox/internal/npmtest"
	"github.com/gloveboxhq/glovebox/mcptools"
)

func TestMCPFlagsParse(t *testing.T) {
	dir := t.TempDir()
	prof := filepath.Join(dir, "p.yaml")
	os.WriteFile(prof, []byte(`limits: {timeout: 5s}
mcp_servers:
  mem:
    command: [npx, -y, "@modelcontextprotocol/server-memory"]
    env: {MEMORY_FILE_PATH: /tmp/m.jsonl}
  remote:
    url: http://127.0.0.1:9/mcp
    headers: {Authorization: "Bearer ${MCPFLAGS_TEST_TOKEN}"}
`), 0o600)
	t.Setenv("MCPFLAGS_TEST_TOKEN", "tok")
	m := mcpFlags{servers: []string{"mem=my-memory --flag", "fs=srv /tmp"}}
	got, err := m.parse(prof)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range got {
		names = append(names, s.Name)
	}
	if strings.Join(names, ",") != "mem,remote,fs" {
		t.Fatalf("order %v", names)
	}
	if strings.Join(got[0].Command, " ") != "my-memory --flag" || got[0].Env != nil {
		t.Fatalf("a flag replaces the profile's server of the same name: %+v", got[0])
	}
	if got[1].Header.Get("Authorization") != "Bearer tok" {
		t.Fatalf("header %v", got[1].Header)
	}
	// The whole profile still loads with the section in it.
	if _, _, err := loadProfile(prof); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []mcpFlags{{servers: []string{"nocommand"}}, {servers: []string{"x="}}, {urls: []string{"x"}}} {
		if _, err := bad.parse(""); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}

// --mcp-env NAME passes glovebox's value, NAME=VALUE sets one, and a
// "SERVER:" prefix limits either to one stdio server; the profile's env
// and pass_env do the same per server, with nothing of glovebox's
// environment added.
func TestMCPEnvFlags(t *testing.T) {
	dir := t.TempDir()
	prof := filepath.Join(dir, "p.yaml")
	os.WriteFile(prof, []byte(`mcp_servers:
  mem:
    command: [mem-server]
    env: {B: "2", A: "1"}
    pass_env: [HOME]
`), 0o600)
	m := mcpFlags{servers: []string{"fs=srv /tmp"}, urls: []string{"web=http://127.0.0.1:9/mcp"},
		env: []string{"TOKEN", "fs:KEY=v=w", "mem:ONLY"}}
	got, err := m.parse(prof)
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]mcptools.Server{}
	for _, s := range got {
		by[s.Name] = s
	}
	if e, p := strings.Join(by["mem"].Env, " "), strings.Join(by["mem"].PassEnv, " "); e != "A=1 B=2" || p != "HOME TOKEN ONLY" {
		t.Errorf("mem: Env %q PassEnv %q", e, p)
	}
	if e, p := strings.Join(by["fs"].Env, " "), strings.Join(by["fs"].PassEnv, " "); e != "KEY=v=w" || p != "TOKEN" {
		t.Errorf("fs: Env %q PassEnv %q", e, p)
	}
	if by["web"].Env != nil || by["web"].PassEnv != nil {
		t.Errorf("an HTTP server has no environment: %+v", by["web"])
	}
	for _, bad := range [][]string{{"web:X"}, {"nosuch:X"}, {"=v"}, {"fs:"}} {
		m := mcpFlags{servers: []string{"fs=srv"}, urls: []string{"web=http://127.0.0.1:9/mcp"}, env: bad}
		if _, err := m.parse(""); err == nil {
			t.Errorf("--mcp-env %q: no error", bad)
		}
	}
}

// The example of the issue: a token guarding glovebox does not reach a
// bound server that reports its environment, and a variable passed with
// --mcp-env does.
func TestMCPServerEnvironmentCLI(t *testing.T) {
	ev := npmtest.Bin(t, "@modelcontextprotocol/server-everything", "mcp-server-everything")
	cmd := exec.Command(bin, "eval", "--json", "--mcp-server", "ev="+ev+" stdio", "--mcp-env", "ev:PASSED_ON",
		"-e", `get_env["text"]`)
	cmd.Env = append(os.Environ(), "GLOVEBOX_MCP_TOKEN=canary-tok", "SOME_API_KEY=canary-key", "PASSED_ON=passed-value")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if s := string(out); strings.Contains(s, "canary-") || !strings.Contains(s, "passed-value") {
		t.Fatalf("%s", out)
	}
}

// --mcp-root takes URIs as they are and makes paths file:// URIs.
func TestMCPRoots(t *testing.T) {
	got, err := mcpRoots([]string{"file:///srv/a", "https://x.example/repo", "/tmp/my dir"})
	if err != nil {
		t.Fatal(err)
	}
	want := []mcptools.Root{{URI: "file:///srv/a"}, {URI: "https://x.example/repo"}, {URI: "file:///tmp/my%20dir", Name: "my dir"}}
	if len(got) != len(want) {
		t.Fatalf("%v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	if _, err := mcpRoots([]string{""}); err == nil {
		t.Error("an empty root: no error")
	}
}

// A bound stdio server asking for the roots gets those of --mcp-root.
func TestMCPRootsCLI(t *testing.T) {
	ev := npmtest.Bin(t, "@modelcontextprotocol/server-everything", "mcp-server-everything")
	out, err := exec.Command(bin, "eval", "--json", "--mcp-server", "ev="+ev+" stdio", "--mcp-root", "/srv/project-x",
		"-e", `get_roots_list["text"]`).Output()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !strings.Contains(string(out), "file:///srv/project-x") {
		t.Fatalf("%s", out)
	}
}

// --mcp-label and --mcp-sink set a bound server's data-flow policy: the
// addresses in server-memory's graph reach the output only as tokens,
// add_observations refuses one, and search_nodes, allowed emails, finds
// the person by it.
func TestMCPLabelsCLI(t *testing.T) {
	const email = "dorothy.vaughan@example.net"
	mem := npmtest.Bin(t, "@modelcontextprotocol/server-memory", "mcp-server-memory")
	file := filepath.Join(t.TempDir(), "m.jsonl")
	if err := os.WriteFile(file, []byte(`{"type":"entity","name":"Dorothy","entityType":"person","observations":["email `+email+`"]}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "eval", "--json", "--mcp-server", "mem="+mem, "--mcp-env", "mem:MEMORY_FILE_PATH="+file,
		"--mcp-label", "mem=email:emails", "--mcp-sink", "mem/search_nodes=email",
		"-e", `g = read_graph["text"]; e = g[/[\w.]+@[\w.]+\w/]
			[g, search_nodes(query: e)["text"].include?("Dorothy"), (add_observations(observations: [{entityName: "Dorothy", contents: [e.upcase]}]) rescue $!.class.name)]`).Output()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	s := string(out)
	if strings.Contains(strings.ToLower(s), "dorothy.vaughan") || !strings.Contains(s, "[[email:") || !strings.Contains(s, "true") || !strings.Contains(s, "Glovebox::ToolDenied") {
		t.Fatalf("%s", out)
	}
	for _, bad := range [][]string{{"--mcp-label", "nosuch=email:emails"}, {"--mcp-label", "mem=email"}, {"--mcp-sink", "mem=email"}} {
		m := mcpFlags{servers: []string{"mem=x"}}
		if bad[0] == "--mcp-label" {
			m.labels = bad[1:]
		} else {
			m.sinks = bad[1:]
		}
		if _, err := m.parse(""); err == nil {
			t.Errorf("%s %s: no error", bad[0], bad[1])
		}
	}
}
