package main

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gloveboxhq/glovebox/internal/npmtest"
	"github.com/gloveboxhq/glovebox/internal/spawn"
)

// Two `glovebox mcp --http` processes sharing one state key and one state
// directory serve a client on the TypeScript SDK at 2026-07-28 that sends
// each request to the other process: tools, an approval accepted,
// declined and cancelled (each question answered and retried in the
// process that did not ask it) and denied for a client without
// elicitation, and a ruby_session whose handle made by one process is
// taken back by the other.
func TestMCP2026TwoProcesses(t *testing.T) {
	node := npmtest.Node(t)
	nm := filepath.Join(npmtest.Dir(t, "@modelcontextprotocol/client"), "node_modules")
	dir := t.TempDir()
	key := filepath.Join(dir, "state.key")
	if err := os.WriteFile(key, []byte(strings.Repeat("c4", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--state-key", key, "--state-dir", filepath.Join(dir, "states"), "--approve", "http_get", "--http-allow", "example.com"}
	a, b := startMCPHTTP(t, args...), startMCPHTTP(t, args...)
	// The script resolves the SDK from a node_modules beside it.
	script, err := os.ReadFile("testdata/mcp2026client.mjs")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "client.mjs"), script, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(nm, filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	code := `begin; http_get("https://example.com/x"); "ran"; rescue Glovebox::ToolDenied => e; "denied: #{e.message}"; rescue Glovebox::ToolError; "ran"; end`
	out, err := spawn.CombinedOutput(exec.Command(node, filepath.Join(dir, "client.mjs"), a, b, "--approve-code", code))
	if err != nil {
		t.Fatalf("client: %v\n%s", err, out)
	}
	steps := map[string]json.RawMessage{}
	asked := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var s struct {
			Step   string          `json:"step"`
			Result json.RawMessage `json:"result"`
			Asked  int             `json:"asked"`
		}
		if json.Unmarshal(sc.Bytes(), &s) == nil && s.Step != "" {
			steps[s.Step], asked[s.Step] = s.Result, s.Asked
		}
	}
	want := map[string]string{
		"tools":           `"ruby_session"`,
		"run":             `"value":42`,
		"approve-accept":  `"value":"ran"`,
		"approve-decline": `"value":"denied: the user declined the call"`,
		"approve-cancel":  `"value":"denied: the user dismissed the approval request"`,
		"session-2":       `"value":42`,
	}
	for step, w := range want {
		if !strings.Contains(string(steps[step]), w) {
			t.Errorf("%s: want %s in %s", step, w, steps[step])
		}
	}
	for _, s := range []string{"approve-accept", "approve-decline", "approve-cancel"} {
		if asked[s] != 1 {
			t.Errorf("%s: the client was asked %d times, want 1", s, asked[s])
		}
	}
	var hits []int
	if json.Unmarshal(steps["hits"], &hits) != nil || len(hits) != 2 || hits[0] == 0 || hits[1] == 0 {
		t.Errorf("requests per process: %s", steps["hits"])
	}
	if t.Failed() {
		t.Logf("client output:\n%s", out)
	}
}
