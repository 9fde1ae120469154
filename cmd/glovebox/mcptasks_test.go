package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gloveboxhq/glovebox/internal/npmtest"
)

// A real client nobody here wrote drives tasks: testdata/tasks_client.mjs
// on the TypeScript SDK 1.x, whose experimental tasks speak MCP
// 2025-11-25 (its 2.x line, for 2026-07-28, has no tasks runtime: it
// refuses to send tasks/get to a 2026-07-28 server, so the 2026-07-28
// tasks are driven in raw JSON-RPC by mcpserver's tests). A task started
// before the client drops its connection is polled after it reconnects,
// and tasks/cancel stops a program that loops forever: with one sandbox,
// the next call runs.
func TestMCPTasksTypeScriptSDK(t *testing.T) {
	node := npmtest.Node(t)
	sdk := filepath.Join(npmtest.Dir(t, "@modelcontextprotocol/sdk"), "node_modules", "@modelcontextprotocol", "sdk", "dist", "esm")
	data := t.TempDir()
	url := startMCPHTTP(t, "--mount", data+":/data", "--max-concurrent", "1", "--timeout", "10m")
	script, err := filepath.Abs("testdata/tasks_client.mjs")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, script)
	cmd.Env = append(os.Environ(), "SDK="+sdk, "URL="+url, "GATE="+filepath.Join(data, "go"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("tasks_client.mjs: %v\n%s", err, out)
	}
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var m map[string]json.RawMessage
		if json.Unmarshal([]byte(l), &m) != nil {
			t.Fatalf("not a finding: %s\n%s", l, out)
		}
		for k, v := range m {
			got[k] = string(v)
		}
	}
	want := map[string]string{
		"protocolVersion": `"2025-11-25"`,
		"capability":      `{"list":{},"cancel":{},"requests":{"tools":{"call":{}}}}`,
		"execution":       `{"taskSupport":"optional"}`,
		"created":         `"working"`,
		"afterReconnect":  `"working"`,
		"ended":           `"completed"`,
		"value":           `42`,
		"listed":          `true`,
		"cancel":          `"cancelled"`,
		"afterCancel":     `"cancelled"`,
		"cancelAgain":     `-32602`,
		"next":            `2`,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: got %s, want %s\n%s", k, got[k], v, out)
		}
	}
}
